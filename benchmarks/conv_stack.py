"""Benchmark: a MobileNetV2-sized stack of float32 convolutions on the reference device, against a
plain numpy matmul of the same floating-point work.

The model (built with the public API) is a stem CONV_2D 3x3 stride 2 followed by inverted-residual
blocks (CONV_2D 1x1 expand + RELU6, DEPTHWISE_CONV_2D 3x3 + RELU6, CONV_2D 1x1 project), with
the sizes of MobileNetV2's first stages at a 224x224 input (112x112 after the stem). It is compiled
for device "reference" and executed `--runs` times; the median is reported.

FLOPs count 2 per multiply-accumulate of the convolutions (bias and activations are not counted).
The numpy baseline multiplies two square float32 matrices of size n with 2*n^3 ~= the stack's
FLOPs (median of `--runs` too); `ratio` = reference_ms / numpy_matmul_ms. A float64 matmul of the
same size is also timed, since the reference kernels accumulate in float64.

usage: python benchmarks/conv_stack.py [--runs N] [--warmup N]
The last line printed is one JSON object holding every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass

import numpy as np

import nnapi
from nnapi import OperandType as T, OperationType as Op

RELU6 = int(nnapi.FusedActivationFunc.RELU6)
SAME = int(nnapi.PaddingScheme.SAME)

#: (expand channels, output channels, depthwise stride) of each inverted-residual block.
BLOCKS = [(16 * 1, 16, 1),     # MobileNetV2 stage 1 (expansion 1: the 1x1 expand still runs here)
          (16 * 6, 24, 2),     # stage 2
          (24 * 6, 24, 1),
          (24 * 6, 32, 2),     # stage 3
          (32 * 6, 32, 1)]
INPUT_HW = 224
STEM_CHANNELS = 16


@dataclass
class Layer:
    """One operation of the stack, for the table: kind, output shape and multiply-accumulates."""

    name: str
    out_shape: tuple[int, int, int, int]
    macs: int


def build_model() -> tuple[nnapi.Model, list[Layer], tuple[int, ...], tuple[int, ...]]:
    """The model, its layers, and its input and output shapes (NHWC, batch 1)."""
    rng = np.random.default_rng(0)
    m = nnapi.Model()
    layers: list[Layer] = []

    def scalar(v: int) -> int:
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        return i

    def const(a: np.ndarray) -> int:
        i = m.add_operand(T.TENSOR_FLOAT32, a.shape)
        m.set_operand_value(i, a.astype(np.float32))
        return i

    def conv(x: int, shape: tuple[int, ...], out_c: int, k: int, stride: int, act: int,
             name: str) -> tuple[int, tuple]:
        n, h, w, c = shape
        oh, ow = -(-h // stride), -(-w // stride)  # SAME padding
        out_shape = (n, oh, ow, out_c)
        y = m.add_operand(T.TENSOR_FLOAT32, out_shape)
        weights = rng.normal(0, np.sqrt(2.0 / (k * k * c)), (out_c, k, k, c))
        m.add_operation(Op.CONV_2D, [x, const(weights), const(np.zeros(out_c)), scalar(SAME),
                                     scalar(stride), scalar(stride), scalar(act)], [y])
        layers.append(Layer(name, out_shape, n * oh * ow * out_c * k * k * c))
        return y, out_shape

    def depthwise(x: int, shape: tuple[int, ...], stride: int, name: str) -> tuple[int, tuple]:
        n, h, w, c = shape
        oh, ow = -(-h // stride), -(-w // stride)
        out_shape = (n, oh, ow, c)
        y = m.add_operand(T.TENSOR_FLOAT32, out_shape)
        weights = rng.normal(0, np.sqrt(2.0 / 9), (1, 3, 3, c))
        m.add_operation(Op.DEPTHWISE_CONV_2D, [x, const(weights), const(np.zeros(c)), scalar(SAME),
                                               scalar(stride), scalar(stride), scalar(1), scalar(RELU6)], [y])
        layers.append(Layer(name, out_shape, n * oh * ow * c * 9))
        return y, out_shape

    in_shape = (1, INPUT_HW, INPUT_HW, 3)
    x = m.add_operand(T.TENSOR_FLOAT32, in_shape)
    h, shape = conv(x, in_shape, STEM_CHANNELS, 3, 2, RELU6, "stem conv 3x3 s2")
    for b, (expand, out_c, stride) in enumerate(BLOCKS, 1):
        h, shape = conv(h, shape, expand, 1, 1, RELU6, f"block{b} expand 1x1")
        h, shape = depthwise(h, shape, stride, f"block{b} depthwise 3x3 s{stride}")
        h, shape = conv(h, shape, out_c, 1, 1, 0, f"block{b} project 1x1")
    m.identify_inputs_and_outputs([x], [h])
    m.finish()
    return m, layers, in_shape, shape


def median_ms(fn, runs: int, warmup: int) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed executions (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed executions first")
    args = parser.parse_args()

    model, layers, in_shape, out_shape = build_model()
    start = time.perf_counter()
    compilation = nnapi.Compilation(model, devices=["reference"]).finish()
    compile_ms = (time.perf_counter() - start) * 1000
    x = np.random.default_rng(1).normal(size=in_shape).astype(np.float32)
    (y,) = compilation.execute([x])
    assert y.shape == out_shape and np.isfinite(y).all()

    ref_ms, ref_times = median_ms(lambda: compilation.execute([x]), args.runs, args.warmup)

    macs = sum(layer.macs for layer in layers)
    flops = 2 * macs
    n = max(1, round((flops / 2) ** (1 / 3)))
    rng = np.random.default_rng(2)
    a32, b32 = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    a64, b64 = a32.astype(np.float64), b32.astype(np.float64)
    mm32_ms, _ = median_ms(lambda: a32 @ b32, args.runs, args.warmup)
    mm64_ms, _ = median_ms(lambda: a64 @ b64, args.runs, args.warmup)
    matmul_flops = 2 * n ** 3

    print(f"MobileNetV2-sized float32 conv stack on device 'reference' "
          f"(input {'x'.join(map(str, in_shape))}, {len(layers)} operations)")
    print(f"{'layer':<28} {'output (NHWC)':>18} {'MFLOPs':>9}")
    for layer in layers:
        print(f"{layer.name:<28} {'x'.join(map(str, layer.out_shape)):>18} {2 * layer.macs / 1e6:9.2f}")
    print(f"{'total':<28} {'':>18} {flops / 1e6:9.2f}")
    print()
    rows = [("reference execution", ref_ms, flops),
            (f"numpy matmul f32 {n}x{n}", mm32_ms, matmul_flops),
            (f"numpy matmul f64 {n}x{n}", mm64_ms, matmul_flops)]
    print(f"{'timing (median of ' + str(args.runs) + ')':<28} {'ms':>10} {'GFLOP/s':>9}")
    for name, ms, fl in rows:
        print(f"{name:<28} {ms:10.2f} {fl / ms / 1e6:9.2f}")
    print(f"{'ratio reference / f32 matmul':<28} {ref_ms / mm32_ms:10.2f}")
    print(f"{'compile':<28} {compile_ms:10.2f}")

    result = {
        "benchmark": "conv_stack",
        "device": "reference",
        "input_shape": list(in_shape),
        "output_shape": list(out_shape),
        "operations": len(layers),
        "runs": args.runs,
        "warmup": args.warmup,
        "flops": flops,
        "gflops": flops / 1e9,
        "reference_ms": ref_ms,
        "reference_ms_min": min(ref_times),
        "reference_ms_max": max(ref_times),
        "reference_gflops_per_s": flops / ref_ms / 1e6,
        "numpy_matmul_n": n,
        "numpy_matmul_flops": matmul_flops,
        "numpy_matmul_ms": mm32_ms,
        "numpy_matmul_gflops_per_s": matmul_flops / mm32_ms / 1e6,
        "numpy_matmul_f64_ms": mm64_ms,
        "ratio": ref_ms / mm32_ms,
        "ratio_f64": ref_ms / mm64_ms,
        "compile_ms": compile_ms,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
