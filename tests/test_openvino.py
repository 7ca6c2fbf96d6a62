"""The OpenVINO driver: lowering table, claims, graph building, float / relaxed / quantized results
against the reference driver, execution (shared memory in place, async, deadlines cancelling the
inference request), preferences, and the exported-model cache."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import ErrorStatus, ExecutionPreference, MeasureTiming, NnError
from nnapi.drivers.openvino import analysis, cache, graph
from nnapi.drivers.openvino.device import OpenVinoDevice
from nnapi.drivers.openvino.lowering import LOWERINGS
from nnapi.validation import ConstantReader

from conftest import SHARED

RNG = np.random.default_rng(1234)


@pytest.fixture(scope="module")
def device() -> OpenVinoDevice:
    return OpenVinoDevice()


# --- models built with the public API ----------------------------------------------------------
def _scalar(m: nnapi.Model, value, kind=T.INT32) -> int:
    i = m.add_operand(kind)
    m.set_operand_value(i, value)
    return i


def _tensor(m: nnapi.Model, kind: T, dims, value=None, scale: float = 0.0, zero_point: int = 0) -> int:
    i = m.add_operand(kind, dims, scale, zero_point)
    if value is not None:
        m.set_operand_value(i, value)
    return i


def conv_net(relaxed: bool = False) -> nnapi.Model:
    """NHWC float: CONV_2D 3x3 (RELU6) -> DEPTHWISE 3x3 -> CONV_2D 1x1 -> ADD (residual) ->
    AVERAGE_POOL -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX."""
    m = nnapi.Model()
    f = T.TENSOR_FLOAT32
    x = _tensor(m, f, (1, 12, 12, 3))
    w1 = _tensor(m, f, (8, 3, 3, 3), RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3)
    b1 = _tensor(m, f, (8,), RNG.standard_normal(8).astype(np.float32) * 0.1)
    c1 = _tensor(m, f, (1, 12, 12, 8))
    m.add_operation(Op.CONV_2D, [x, w1, b1, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 3)], [c1])
    wd = _tensor(m, f, (1, 3, 3, 8), RNG.standard_normal((1, 3, 3, 8)).astype(np.float32) * 0.3)
    bd = _tensor(m, f, (8,), RNG.standard_normal(8).astype(np.float32) * 0.1)
    d = _tensor(m, f, (1, 12, 12, 8))
    m.add_operation(Op.DEPTHWISE_CONV_2D, [c1, wd, bd, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 1),
                                           _scalar(m, 1)], [d])
    w2 = _tensor(m, f, (8, 1, 1, 8), RNG.standard_normal((8, 1, 1, 8)).astype(np.float32) * 0.3)
    b2 = _tensor(m, f, (8,), np.zeros(8, np.float32))
    c2 = _tensor(m, f, (1, 12, 12, 8))
    m.add_operation(Op.CONV_2D, [d, w2, b2, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 0)], [c2])
    s = _tensor(m, f, (1, 12, 12, 8))
    m.add_operation(Op.ADD, [c1, c2, _scalar(m, 0)], [s])
    p = _tensor(m, f, (1, 4, 4, 8))
    m.add_operation(Op.AVERAGE_POOL_2D, [s, _scalar(m, 2), _scalar(m, 3), _scalar(m, 3), _scalar(m, 3),
                                         _scalar(m, 3), _scalar(m, 0)], [p])
    r = _tensor(m, f, (1, 128))
    m.add_operation(Op.RESHAPE, [p, _tensor(m, T.TENSOR_INT32, (2,), np.array([1, 128], np.int32))], [r])
    wf = _tensor(m, f, (10, 128), RNG.standard_normal((10, 128)).astype(np.float32) * 0.1)
    bf = _tensor(m, f, (10,), RNG.standard_normal(10).astype(np.float32) * 0.1)
    fc = _tensor(m, f, (1, 10))
    m.add_operation(Op.FULLY_CONNECTED, [r, wf, bf, _scalar(m, 0)], [fc])
    out = _tensor(m, f, (1, 10))
    m.add_operation(Op.SOFTMAX, [fc, _scalar(m, 1.0, T.FLOAT32)], [out])
    m.identify_inputs_and_outputs([x], [out, s])
    if relaxed:
        m.relax_computation_float32_to_float16(True)
    m.finish()
    return m


def quant_net(kind: T = T.TENSOR_QUANT8_ASYMM_SIGNED, per_channel: bool = True,
              rng: np.random.Generator | None = None, logits: bool = False) -> nnapi.Model:
    """Quantized: CONV_2D (per-channel weights) RELU -> DEPTHWISE -> ADD -> MAX_POOL ->
    RESHAPE -> FULLY_CONNECTED -> SOFTMAX, the shape of a real int8 classifier. Outputs: the
    softmax, the ADD (and with `logits`, the FULLY_CONNECTED output, scale 0.1). Without `rng`, its own
    generator of a fixed seed: the same model whichever tests ran before."""
    RNG = rng if rng is not None else np.random.default_rng(1234)  # noqa: N806
    m = nnapi.Model()
    lo = -128 if kind == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    zp = lo + 3
    sx = 0.05
    x = _tensor(m, kind, (1, 8, 8, 4), scale=sx, zero_point=zp)
    if per_channel:
        scales = [0.01, 0.02, 0.015, 0.03, 0.01, 0.025, 0.02, 0.012]
        w1 = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (8, 3, 3, 4))
        m.set_operand_symm_per_channel_quant_params(w1, scales, 0)
        m.set_operand_value(w1, RNG.integers(-127, 128, (8, 3, 3, 4), dtype=np.int8))
        b1 = _tensor(m, T.TENSOR_INT32, (8,), RNG.integers(-500, 500, 8, dtype=np.int32))
    else:
        w1 = _tensor(m, kind, (8, 3, 3, 4), RNG.integers(lo, lo + 256, (8, 3, 3, 4)).astype(
            np.int8 if lo else np.uint8), scale=0.02, zero_point=lo + 128)
        b1 = _tensor(m, T.TENSOR_INT32, (8,), RNG.integers(-500, 500, 8, dtype=np.int32), scale=sx * 0.02)
    c1 = _tensor(m, kind, (1, 8, 8, 8), scale=0.04, zero_point=lo)
    m.add_operation(Op.CONV_2D, [x, w1, b1, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 1)], [c1])
    wd = _tensor(m, kind, (1, 3, 3, 8), RNG.integers(lo, lo + 256, (1, 3, 3, 8)).astype(np.int8 if lo else np.uint8),
                 scale=0.01, zero_point=lo + 128)
    bd = _tensor(m, T.TENSOR_INT32, (8,), RNG.integers(-200, 200, 8, dtype=np.int32), scale=0.04 * 0.01)
    d = _tensor(m, kind, (1, 8, 8, 8), scale=0.03, zero_point=lo + 120)
    m.add_operation(Op.DEPTHWISE_CONV_2D, [c1, wd, bd, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 1),
                                           _scalar(m, 0)], [d])
    s = _tensor(m, kind, (1, 8, 8, 8), scale=0.06, zero_point=lo + 100)
    m.add_operation(Op.ADD, [c1, d, _scalar(m, 0)], [s])
    p = _tensor(m, kind, (1, 4, 4, 8), scale=0.06, zero_point=lo + 100)
    m.add_operation(Op.MAX_POOL_2D, [s, _scalar(m, 2), _scalar(m, 2), _scalar(m, 2), _scalar(m, 2), _scalar(m, 2),
                                     _scalar(m, 0)], [p])
    r = _tensor(m, kind, (1, 128), scale=0.06, zero_point=lo + 100)
    m.add_operation(Op.RESHAPE, [p, _tensor(m, T.TENSOR_INT32, (2,), np.array([1, 128], np.int32))], [r])
    wf = _tensor(m, kind, (10, 128), RNG.integers(lo, lo + 256, (10, 128)).astype(np.int8 if lo else np.uint8),
                 scale=0.005, zero_point=lo + 128)
    bf = _tensor(m, T.TENSOR_INT32, (10,), RNG.integers(-300, 300, 10, dtype=np.int32), scale=0.06 * 0.005)
    fc = _tensor(m, kind, (1, 10), scale=0.1, zero_point=lo + 128)
    m.add_operation(Op.FULLY_CONNECTED, [r, wf, bf, _scalar(m, 0)], [fc])
    out = _tensor(m, kind, (1, 10), scale=1.0 / 256, zero_point=lo)
    m.add_operation(Op.SOFTMAX, [fc, _scalar(m, 1.0, T.FLOAT32)], [out])
    m.identify_inputs_and_outputs([x], [out, s, fc] if logits else [out, s])
    m.finish()
    return m


def _run(model: nnapi.Model, device: str, inputs):
    return nnapi.Compilation(model, devices=[device]).finish().execute(inputs)


# --- the lowering table ------------------------------------------------------------------------
def test_rules_register_themselves_and_the_table_imports_none_back():
    graph.table()
    assert {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.ADD, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D,
            Op.SOFTMAX, Op.QUANTIZE, Op.DEQUANTIZE} <= set(LOWERINGS)
    code = ("import sys; import nnapi.drivers.openvino.lowering as l; "
            "print(len(l.LOWERINGS), any(m.startswith('nnapi.drivers.openvino.rules.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"]


def test_claims_only_what_lowers(device):
    m = nnapi.Model()
    x = _tensor(m, T.TENSOR_FLOAT32, (1, 4))
    y = _tensor(m, T.TENSOR_FLOAT32, (1, 4))
    m.add_operation(Op.RELU, [x], [y])
    # LSH_PROJECTION has no rule; a non-constant scalar parameter cannot be compiled in.
    h = _tensor(m, T.TENSOR_FLOAT32, (4, 2), RNG.standard_normal((4, 2)).astype(np.float32))
    w = _tensor(m, T.TENSOR_FLOAT32, (1,), np.ones(1, np.float32))
    lsh = _tensor(m, T.TENSOR_INT32, (8,))
    m.add_operation(Op.LSH_PROJECTION, [h, y, w, _scalar(m, 2)], [lsh])
    act = m.add_operand(T.INT32)
    z = _tensor(m, T.TENSOR_FLOAT32, (1, 4))
    m.add_operation(Op.ADD, [y, y, act], [z])
    m.identify_inputs_and_outputs([x, act], [lsh, z])
    m.finish()
    assert device.get_supported_operations(m.to_hal()) == [True, False, False]
    hal = m.to_hal()
    dims = [tuple(o.dimensions) for o in hal.main.operands]
    reader = ConstantReader(hal)
    assert analysis.refusal(hal, hal.main, hal.main.operations[1], dims, reader) == "no lowering rule"
    assert "scalar operand" in analysis.refusal(hal, hal.main, hal.main.operations[2], dims, reader)


def test_layouts_fold_no_transpose_between_channel_first_operations():
    """NHWC convolutions, the depthwise, the residual ADD and the pool stay channel-first: the built
    graph transposes only at its input and where RESHAPE needs the logical layout."""
    m = conv_net()  # keeps the constants' memory alive
    built = graph.build(m.to_hal())
    kinds = [op.get_type_name() for op in built.model.get_ordered_ops()]
    assert kinds.count("Convolution") == 2 and kinds.count("GroupConvolution") == 1
    assert kinds.count("Transpose") == 3  # input -> NCHW; pool -> NHWC for RESHAPE; ADD output -> NHWC


def pad_conv_resize_net(align: bool, half: bool, nearest: bool) -> nnapi.Model:
    """NHWC float: PAD (spatial) -> CONV_2D 3x3 VALID -> RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR 5x5 -> 11x7."""
    m = nnapi.Model()
    f = T.TENSOR_FLOAT32
    x = _tensor(m, f, (1, 5, 5, 3))
    pads = _tensor(m, T.TENSOR_INT32, (4, 2), np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    p = _tensor(m, f, (1, 7, 7, 3))
    m.add_operation(Op.PAD, [x, pads], [p])
    w = _tensor(m, f, (4, 3, 3, 3), RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3)
    b = _tensor(m, f, (4,), RNG.standard_normal(4).astype(np.float32) * 0.1)
    c = _tensor(m, f, (1, 5, 5, 4))
    m.add_operation(Op.CONV_2D, [p, w, b, _scalar(m, 2), _scalar(m, 1), _scalar(m, 1), _scalar(m, 0)],
                    [c])
    y = _tensor(m, f, (1, 11, 7, 4))
    flags = [_scalar(m, False, T.BOOL), _scalar(m, align, T.BOOL), _scalar(m, half, T.BOOL)]
    op = Op.RESIZE_NEAREST_NEIGHBOR if nearest else Op.RESIZE_BILINEAR
    m.add_operation(op, [c, _scalar(m, 7), _scalar(m, 11), *flags], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)])
def test_resize_is_one_interpolate_and_a_pad_folds_into_its_convolution(device, align, half, nearest):
    """RESIZE_* runs as one Interpolate kernel (not Gathers and weighted sums) in the coordinate mode
    of Android's sampling positions, and a spatial PAD of an NHWC tensor folds into the convolution
    that reads it (no Pad kernel of its own): outputs as the reference driver's."""
    m = pad_conv_resize_net(align, half, nearest)
    prepared = device.prepare_model(m.to_hal())
    runtime = prepared.compiled.get_runtime_model()
    kinds = [op.get_rt_info()["layerType"].astype(str) for op in runtime.get_ordered_ops()]
    assert kinds.count("Interpolate") == 1 and "Gather" not in kinds and "Pad" not in kinds, kinds
    x = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    (got,), (want,) = _run(m, "openvino", [x]), _run(m, "reference", [x])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def gather_net() -> nnapi.Model:
    """GATHER of rows of a constant table (10 x 3) by indices the app gives at run time."""
    m = nnapi.Model()
    table = _tensor(m, T.TENSOR_FLOAT32, (10, 3), np.arange(30, dtype=np.float32).reshape(10, 3))
    idx = _tensor(m, T.TENSOR_INT32, (4,))
    y = _tensor(m, T.TENSOR_FLOAT32, (4, 3))
    m.add_operation(Op.GATHER, [table, _scalar(m, 0), idx], [y])
    m.identify_inputs_and_outputs([idx], [y])
    m.finish()
    return m


def test_gather_fails_on_an_index_out_of_range_as_the_reference_driver_does(tmp_path):
    """OpenVINO's Gather gives zeros for an index out of range; NNAPI fails the execution. The graph
    checks the indices as it runs (also when loaded from the cache) and the execution fails with the
    reference driver's status, naming the operation."""
    m = gather_net()
    good, bad = np.array([0, 9, 3, 3], np.int32), np.array([0, 10, 3, 3], np.int32)
    failures = {}
    for device in ("reference", "openvino"):
        np.testing.assert_array_equal(_run(m, device, [good])[0], np.arange(30, dtype=np.float32).reshape(10, 3)[good])
        with pytest.raises(nnapi.NnError) as e:
            _run(m, device, [bad])
        failures[device] = e.value
    assert failures["openvino"].code == failures["reference"].code
    assert "GATHER" in failures["openvino"].message and "out of range [0, 10)" in failures["openvino"].message
    outcomes = []
    for _ in range(2):  # a miss that writes the cache, then a hit that imports the exported graph
        c = nnapi.Compilation(m, devices=["openvino"], cache_dir=str(tmp_path), token=nnapi.model_token(m)).finish()
        outcomes.append(c.cache_outcomes[0].outcome)
        with pytest.raises(nnapi.NnError, match="GATHER: input 2"):
            c.execute([np.array([-1, 0, 0, 0], np.int32)])
        np.testing.assert_array_equal(c.execute([good])[0], np.arange(30, dtype=np.float32).reshape(10, 3)[good])
    assert outcomes == ["miss", "hit"]


# --- results against the reference driver ---------------------------------------------------
def test_float_model_matches_reference():
    m = conv_net()
    x = RNG.standard_normal((1, 12, 12, 3)).astype(np.float32)
    got, want = _run(m, "openvino", [x]), _run(m, "reference", [x])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=5 * 2**-23 * 4)


def test_relaxed_model_is_computed_in_float16_or_float32_never_bf16():
    """OpenVINO's CPU default would be bf16 (8 mantissa bits): a relaxed model needs float16's
    precision at least. The driver compiles it in f16 where the CPU computes float16 natively, else in
    f32, so it agrees with the reference within the CTS's relaxed tolerance (5 * 2^-10), or far closer,
    where bf16 could not (its errors on these values are around 1e-2)."""
    from nnapi.drivers.openvino.device import native_float16
    m = conv_net(relaxed=True)
    x = RNG.standard_normal((1, 12, 12, 3)).astype(np.float32)
    got, want = _run(m, "openvino", [x]), _run(m, "reference", [x])
    bound = 5 * 2**-10 if native_float16() else 1e-4
    assert np.abs(got[1] - want[1]).max() < bound * max(1.0, np.abs(want[1]).max())


@pytest.mark.parametrize("kind", [T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_ASYMM])
@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_quantized_model_within_one_lsb_of_reference(kind, per_channel, seed):
    """The quantized chain agrees with the reference driver within what one step per operation
    compounds to: each operation rounds within one step (the conformance vectors check each alone;
    a FULLY_CONNECTED alone agrees exactly), so the ADD after two convolutions may be two steps off,
    the logits after 128 such inputs a few (at most 4 in 160 draws), and one step of a logit (0.1)
    moves a probability by up to six steps of 1/256: the softmax is checked against the softmax of
    openvino's own logits, within one step."""
    rng = np.random.default_rng(100 + seed)
    m = quant_net(kind, per_channel, rng=rng, logits=True)
    lo = -128 if kind == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    x = rng.integers(lo, lo + 256, (1, 8, 8, 4)).astype(np.int8 if lo else np.uint8)
    got, want = _run(m, "openvino", [x]), _run(m, "reference", [x])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
    steps = [int(np.abs(g.astype(np.int32) - w.astype(np.int32)).max()) for g, w in zip(got, want)]
    assert steps[1] <= 2 and steps[2] <= 4, steps
    logits = (got[2].astype(np.float64) - (lo + 128)) * 0.1
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    expected = np.clip(np.round(p * 256) + lo, lo, lo + 255)
    assert np.abs(got[0].astype(np.int32) - expected).max() <= 1


def test_quantized_convolutions_run_int8_kernels_where_the_cpu_has_int8_dot_products(device):
    """The FakeQuantize / dequantized-weights pattern reaches OpenVINO's low-precision pipeline: the
    convolutions and the fully connected layer execute in int8 on a CPU with VNNI. Without it (AVX2
    only), OpenVINO's int8 products saturate, so the driver lowers the model with plain rounding and they
    run in float (the agreement with the reference is test_quantized_model_within_one_lsb_of_reference)."""
    from nnapi.drivers.openvino.device import native_int8
    m = quant_net()
    prepared = device.prepare_model(m.to_hal())
    runtime = prepared.compiled.get_runtime_model()
    precisions = {}
    for op in runtime.get_ordered_ops():
        info = op.get_rt_info()
        kind = info["layerType"].astype(str)
        if kind in ("Convolution", "FullyConnected"):
            precisions.setdefault(kind, set()).add(info["runtimePrecision"].astype(str))
    expected = {"i8", "u8"} if native_int8() else {"f32"}
    assert precisions["Convolution"] <= expected, precisions
    assert precisions["FullyConnected"] <= expected, precisions


# --- execution -------------------------------------------------------------------------------
def test_shared_memory_inputs_and_outputs_are_used_in_place():
    m = conv_net()
    x = RNG.standard_normal((1, 12, 12, 3)).astype(np.float32)
    c = nnapi.Compilation(m, devices=["openvino"]).finish()
    want = c.execute([x])
    mem_in = nnapi.Memory.ashmem(x.nbytes)
    mem_in.array(np.float32, x.shape)[...] = x
    outs = [nnapi.Memory.ashmem(w.nbytes) for w in want]
    for _ in range(2):  # the second execution reuses the request and its tensors
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, mem_in, 0, x.nbytes)
        for k, (mem, w) in enumerate(zip(outs, want)):
            e.set_output_from_memory(k, mem, 0, w.nbytes)
        e.compute()
        for mem, w in zip(outs, want):
            np.testing.assert_array_equal(mem.array(np.float32, w.shape), w)


def test_async_execution_and_bursts():
    m = conv_net()
    x = RNG.standard_normal((1, 12, 12, 3)).astype(np.float32)
    c = nnapi.Compilation(m, devices=["openvino"]).finish()
    want = c.execute([x])
    e = nnapi.Execution(c)
    e.set_input(0, x)
    y = np.zeros((1, 10), np.float32)
    s = np.zeros((1, 12, 12, 8), np.float32)
    e.set_output(0, y)
    e.set_output(1, s)
    e.start_compute().wait()
    np.testing.assert_array_equal(y, want[0])
    np.testing.assert_array_equal(s, want[1])


def _heavy_model() -> nnapi.Model:
    """A chain of 3x3 convolutions on 1x128x128x64: hundreds of milliseconds per execution."""
    m = nnapi.Model()
    f = T.TENSOR_FLOAT32
    x = _tensor(m, f, (1, 128, 128, 64))
    cur = x
    for _ in range(12):
        w = _tensor(m, f, (64, 3, 3, 64), RNG.standard_normal((64, 3, 3, 64)).astype(np.float32) * 0.05)
        b = _tensor(m, f, (64,), np.zeros(64, np.float32))
        y = _tensor(m, f, (1, 128, 128, 64))
        m.add_operation(Op.CONV_2D, [cur, w, b, _scalar(m, 1), _scalar(m, 1), _scalar(m, 1), _scalar(m, 1)], [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


@pytest.mark.timing
def test_deadline_cancels_the_running_request(device):
    """A deadline that passes while the inference runs cancels its request: MISSED_DEADLINE_TRANSIENT
    long before the inference could have finished; the prepared model keeps working afterwards."""
    from nnapi.hal import DataLocation, MemoryPool, Request, RequestArgument
    m = _heavy_model()
    prepared = device.prepare_model(m.to_hal())
    n_in, n_out = 128 * 128 * 64 * 4, 128 * 128 * 64 * 4
    request = Request([RequestArgument(location=DataLocation(0, 0, n_in))],
                      [RequestArgument(location=DataLocation(0, n_in, n_out))],
                      [MemoryPool(pointer=bytearray(n_in + n_out))])
    start = time.monotonic_ns()
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    full_ns = time.monotonic_ns() - start
    prepared.stats = None  # forget the measured duration: admission must not refuse up front
    start = time.monotonic_ns()
    with pytest.raises(NnError) as e:
        prepared.execute_synchronously(request, MeasureTiming.NO, start + full_ns // 20, None)
    assert e.value.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
    assert time.monotonic_ns() - start < full_ns // 2
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)


def test_preferences_map_to_performance_hints():
    d = OpenVinoDevice(threads=2)
    assert d.config(ExecutionPreference.FAST_SINGLE_ANSWER)["PERFORMANCE_HINT"] == "LATENCY"
    assert d.config(ExecutionPreference.SUSTAINED_SPEED)["PERFORMANCE_HINT"] == "THROUGHPUT"
    low = d.config(ExecutionPreference.LOW_POWER)
    assert low["INFERENCE_NUM_THREADS"] == 1 and low["PERFORMANCE_HINT"] == "LATENCY"
    for p in ExecutionPreference:
        assert d.config(p)["INFERENCE_PRECISION_HINT"] == "f32"


@pytest.mark.parametrize("preference", list(ExecutionPreference))
def test_every_preference_computes_the_same(preference):
    m = conv_net()
    x = RNG.standard_normal((1, 12, 12, 3)).astype(np.float32)
    c = nnapi.Compilation(m, devices=["openvino"], preference=preference).finish()
    for g, w in zip(c.execute([x]), _run(m, "reference", [x])):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


# --- caching ---------------------------------------------------------------------------------
def test_cache_hit_imports_the_exported_model(tmp_path):
    m = quant_net()
    x = RNG.integers(-128, 128, (1, 8, 8, 4)).astype(np.int8)
    outcomes, results = [], []
    for _ in range(2):
        c = nnapi.Compilation(m, devices=["openvino"], cache_dir=tmp_path, token=b"t" * 32).finish()
        outcomes.append([o.outcome for o in c.cache_outcomes])
        results.append(c.execute([x]))
    assert outcomes == [["miss"], ["hit"]]
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


_NEW_PROCESS = """
import sys, numpy as np, nnapi
sys.path.insert(0, {tests!r})
from test_openvino import quant_net
m = quant_net(rng=np.random.default_rng(7))
c = nnapi.Compilation(m, devices=["openvino"], cache_dir={cache!r}, token=b"p" * 32).finish()
print(c.cache_outcomes[0].outcome)
np.save({out!r}, c.execute([np.arange(256, dtype=np.int64).astype(np.int8).reshape(1, 8, 8, 4)])[0])
"""


def test_cache_hit_in_a_new_process_imports_the_exported_model(tmp_path):
    """After an app restart nothing of the compilation is in memory: the verified export is imported."""
    import os
    m = quant_net(rng=np.random.default_rng(7))
    c = nnapi.Compilation(m, devices=["openvino"], cache_dir=tmp_path, token=b"p" * 32).finish()
    assert c.cache_outcomes[0].outcome == "miss"
    want = c.execute([np.arange(256, dtype=np.int64).astype(np.int8).reshape(1, 8, 8, 4)])[0]
    code = _NEW_PROCESS.format(tests=os.path.dirname(__file__), cache=str(tmp_path), out=str(tmp_path / "y.npy"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ}).stdout.split()
    assert out == ["hit"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_cache_blob_from_another_openvino_is_refused():
    m = quant_net().to_hal()
    blob = bytearray(cache.to_blob(m, ExecutionPreference.FAST_SINGLE_ANSWER, nnapi.Priority.MEDIUM, b"xyz"))
    model, pref, prio, export = cache.from_blob(memoryview(bytes(blob)))
    assert bytes(export) == b"xyz" and pref == ExecutionPreference.FAST_SINGLE_ANSWER
    assert len(model.main.operations) == len(m.main.operations)
    blob[20:28] = b"0000.0.0"  # inside the OpenVINO version field
    with pytest.raises(NnError, match="written by OpenVINO"):
        cache.from_blob(memoryview(bytes(blob)))
    with pytest.raises(NnError):
        cache.from_blob(memoryview(b"NNOV" + b"\0" * 10))


def test_driver_version_names_openvino_cpu_and_code(device):
    version = device.get_info().version
    import openvino as ov
    assert f"+ov{ov.get_version().split('-')[0]}+cpu" in version and "+src" in version


def test_openvino_telemetry_stays_off():
    """The driver imports OpenVINO without its conversion tool, so the tool's telemetry is never imported;
    an app that then asks for `openvino.convert_model` gets the real function, its telemetry declined,
    and the process environment is left as it was."""
    code = ("import os, sys, numpy as np, nnapi; from nnapi import OperandType as T, OperationType as Op\n"
            "m = nnapi.Model(); a = m.add_operand(T.TENSOR_FLOAT32, (2,)); o = m.add_operand(T.TENSOR_FLOAT32, (2,))\n"
            "m.add_operation(Op.RELU, [a], [o]); m.identify_inputs_and_outputs([a], [o]); m.finish()\n"
            "print(nnapi.Compilation(m, devices=['openvino']).finish().execute([np.ones(2, np.float32)])[0].sum())\n"
            "print('openvino' in sys.modules, 'openvino_telemetry' in sys.modules, 'openvino.tools.ovc' in sys.modules)\n"
            "import openvino\n"
            "convert = openvino.convert_model\n"
            "import openvino.tools.ovc, openvino_telemetry\n"
            "print(convert is openvino.tools.ovc.convert_model, openvino_telemetry.Telemetry().consent,"
            " os.environ.get('CI'))\n"
            "try:\n    openvino.no_such_name\nexcept AttributeError as e:\n    print('AttributeError', e)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env).stdout.split("\n")
    assert out[0] == "2.0"
    assert out[1] == "True False False"
    assert out[2] == "True False None"
    assert out[3].startswith("AttributeError") and "no_such_name" in out[3]


def test_convert_model_still_converts_after_the_driver_imported_openvino():
    """`openvino.convert_model`, left for first use by the driver, converts a `.tflite` file for an app
    that uses OpenVINO beside nnapi, to what it converts to in a process without nnapi."""
    model = os.path.join(SHARED, "models", "keras", "resnet_mini_f32.tflite")
    convert = ("import openvino as ov\n"
               f"converted = ov.convert_model({model!r})\n"
               "out = ov.Core().compile_model(converted, 'CPU')([x])[0]\n"
               "print(type(converted).__name__, out.shape, out.tobytes().hex())\n")
    feed = "import numpy as np\nx = np.random.default_rng(0).random((1, 128, 128, 3)).astype(np.float32)\n"
    beside = ("import sys, nnapi\n"
              f"session = nnapi.load({model!r}, devices=['openvino'])\n"
              "session.run({session.inputs[0].name: x})\n"
              "assert 'openvino.tools.ovc' not in sys.modules\n")
    alone = subprocess.run([sys.executable, "-c", feed + convert], capture_output=True, text=True, check=True)
    after = subprocess.run([sys.executable, "-c", feed + beside + convert], capture_output=True, text=True,
                           check=True)
    assert alone.stdout.startswith("Model (1, 100) ") and after.stdout == alone.stdout


def test_plain_rounding_fallback_matches_reference():
    """The graph OpenVINO gets when its low-precision pipeline fails on a quantized pattern: Round /
    Clamp instead of FakeQuantize, no int8 rewrite. Each operation rounds within one step of the reference's,
    so the ADD, three requantizations deep, is within two steps; the softmax after the FULLY_CONNECTED
    (logits of scale 0.1) moves by at most p(1-p)*0.1 <= 0.025 per logit step, 6.4 of its 1/256 steps, plus
    its own rounding: within 8. Models and inputs of several seeds, each the test's own (not the module's
    generator, whose draws depend on which tests ran before)."""
    import openvino as ov
    for seed in range(3):
        m = quant_net(rng=np.random.default_rng(seed))
        built = graph.build(m.to_hal(), rounding="plain")
        assert "FakeQuantize" not in {op.get_type_name() for op in built.model.get_ordered_ops()}
        compiled = ov.Core().compile_model(built.model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        rng = np.random.default_rng(100 + seed)
        for _ in range(4):
            x = rng.integers(-128, 128, (1, 8, 8, 4)).astype(np.int8)
            result = request.infer([x])
            softmax, added = _run(m, "reference", [x])
            for k, (want, steps) in enumerate([(softmax, 8), (added, 2)]):
                got = result[compiled.output(k)]
                assert got.dtype == want.dtype
                assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= steps, (seed, k)


# --- control flow ------------------------------------------------------------------------------
def test_while_and_if_lower_into_loop_and_if_nodes():
    from test_control_flow import _while_model
    c = nnapi.Compilation(_while_model(), devices=["openvino"]).finish()
    assert [s.device.name for s in c.steps] == ["openvino"]
    assert c.execute([np.array([3], np.int32), np.array([10], np.int32)])[0].tolist() == [10]
    assert c.execute([np.array([12], np.int32), np.array([10], np.int32)])[0].tolist() == [12]  # body never runs


def test_loop_budget_grows_until_the_loop_ends_and_is_kept():
    """More iterations than the first budget: the graph runs again with a larger budget (the same
    result as one long run), and the next execution starts from the budget that sufficed."""
    from test_control_flow import _while_model
    from nnapi.drivers.base.loops import FIRST_LOOP_ITERATIONS
    c = nnapi.Compilation(_while_model(), devices=["openvino"]).finish()
    prepared = c.steps[0].prepared
    n = 10 * FIRST_LOOP_ITERATIONS + 7
    assert c.execute([np.array([0], np.int32), np.array([n], np.int32)])[0].tolist() == [n]
    kept = prepared._loop_budget.kept
    assert kept >= n
    assert c.execute([np.array([5], np.int32), np.array([n], np.int32)])[0].tolist() == [n]
    assert prepared._loop_budget.kept == kept


@pytest.mark.timing
def test_endless_loop_is_a_transient_deadline_miss_at_the_loop_timeout():
    from test_control_flow import _while_model
    c = nnapi.Compilation(_while_model(), devices=["openvino"]).finish()
    e = nnapi.Execution(c)
    e.set_loop_timeout(0.05)
    e.set_input(0, np.array([0], np.int32))
    e.set_input(1, np.array([2**31 - 1], np.int32))  # effectively endless
    e.set_output(0, np.zeros(1, np.int32))
    start = time.monotonic()
    with pytest.raises(nnapi.NnError) as err:
        e.compute()
    assert err.value.status == nnapi.ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert time.monotonic() - start < 5


@pytest.mark.timing
def test_running_low_priority_inference_is_stopped_for_high_priority_work_and_restarts(monkeypatch):
    """Native inference has no checkpoints: the scheduler stops it (InferRequest.cancel) when
    higher-priority work of the app arrives, and it runs again from scratch afterwards (Q4), with the
    results of an uninterrupted run."""
    import threading
    import time as _time

    from nnapi.drivers.openvino.device import OpenVinoDevice
    from nnapi.hal import DataLocation, MeasureTiming, MemoryPool, Priority, Request, RequestArgument
    rng = np.random.default_rng(5)

    def fc_chain(layers: int, units: int) -> nnapi.Model:
        m = nnapi.Model()
        x = m.add_operand(T.TENSOR_FLOAT32, (1, units))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        cur = x
        for _ in range(layers):
            w = m.add_operand(T.TENSOR_FLOAT32, (units, units))
            m.set_operand_value(w, (rng.standard_normal((units, units)) / np.sqrt(units)).astype(np.float32))
            b = m.add_operand(T.TENSOR_FLOAT32, (units,))
            m.set_operand_value(b, np.zeros(units, np.float32))
            y = m.add_operand(T.TENSOR_FLOAT32, (1, units))
            m.add_operation(Op.FULLY_CONNECTED, [cur, w, b, act], [y])
            cur = y
        m.identify_inputs_and_outputs([x], [cur])
        m.finish()
        return m

    from nnapi.drivers.base import NativeCall
    from nnapi.drivers.openvino import prepared_model
    stops = []

    def counted(call, start=None, wait=None, cancel=None, **kwargs):
        """The driver's native call, its cancellations counted (whichever way the scheduler then resumes it:
        on its own slot, or beside the HIGH work that borrowed it)."""
        return NativeCall(call, start, wait, cancel and (lambda: (stops.append(1), cancel())[1]), **kwargs)
    monkeypatch.setattr(prepared_model, "NativeCall", counted)

    device = OpenVinoDevice(workers=1)
    low_model, high_model = fc_chain(60, 2048), fc_chain(2, 64)
    low = device.prepare_model(low_model.to_hal(), priority=Priority.LOW)
    high = device.prepare_model(high_model.to_hal(), priority=Priority.HIGH)

    def request(units: int):
        x = rng.standard_normal((1, units)).astype(np.float32)
        y = np.zeros((1, units), np.float32)
        return Request([RequestArgument(location=DataLocation(0, 0, x.nbytes))],
                       [RequestArgument(location=DataLocation(1, 0, y.nbytes))],
                       [MemoryPool(pointer=x), MemoryPool(pointer=y)]), y

    low_req, low_out = request(2048)
    low.execute_synchronously(low_req, MeasureTiming.NO, None, None)
    uninterrupted = low_out.copy()
    low_out[...] = 0
    done = {}

    def run_low():
        low.execute_synchronously(low_req, MeasureTiming.NO, None, None)
        done["low"] = _time.monotonic()

    thread = threading.Thread(target=run_low)
    thread.start()
    _time.sleep(0.01)                                   # the LOW inference is under way
    high_req, _ = request(64)
    high.execute_synchronously(high_req, MeasureTiming.NO, None, None)
    done["high"] = _time.monotonic()
    thread.join(60)
    assert done["high"] < done["low"]
    assert stops, "the LOW inference was never stopped for the HIGH one"
    np.testing.assert_array_equal(low_out, uninterrupted)


def _counted_loop(trips: int, start_input: bool = False, w: np.ndarray | None = None,
                  scaled_first: bool = False) -> nnapi.Model:
    """i = 0 (constant, or input 1); acc = x (with `scaled_first`: x * w, the main graph's own copy of w);
    while i < trips: acc = acc * w + x; i += 1; return acc, i. `w`: 4 floats unless given."""
    w_value = np.array([0.5, -1, 1.5, 0.25], np.float32) if w is None else np.asarray(w, np.float32)
    width = w_value.size

    def operands(g: nnapi.Model) -> tuple[int, int, int]:
        return (g.add_operand(T.TENSOR_INT32, (1,)), g.add_operand(T.TENSOR_FLOAT32, (1, width)),
                g.add_operand(T.TENSOR_FLOAT32, (1, width)))

    def body_graph() -> nnapi.Model:
        g = nnapi.Model()
        i, acc, x = operands(g)
        act = g.add_operand(T.INT32)
        g.set_operand_value(act, 0)
        one = g.add_operand(T.TENSOR_INT32, (1,))
        g.set_operand_value(one, np.array([1], np.int32))
        w = g.add_operand(T.TENSOR_FLOAT32, (width,))
        g.set_operand_value(w, w_value.copy())
        i2, scaled, acc2 = operands(g)
        g.add_operation(Op.ADD, [i, one, act], [i2])
        g.add_operation(Op.MUL, [acc, w, act], [scaled])
        g.add_operation(Op.ADD, [scaled, x, act], [acc2])
        g.identify_inputs_and_outputs([i, acc, x], [i2, acc2])
        g.finish()
        return g

    def cond_graph() -> nnapi.Model:
        g = nnapi.Model()
        i, acc, x = operands(g)
        bound = g.add_operand(T.TENSOR_INT32, (1,))
        g.set_operand_value(bound, np.array([trips], np.int32))
        go = g.add_operand(T.TENSOR_BOOL8, (1,))
        g.add_operation(Op.LESS, [i, bound], [go])
        g.identify_inputs_and_outputs([i, acc, x], [go])
        g.finish()
        return g

    m = nnapi.Model()
    c, b = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, cond_graph())
    m.set_operand_value_from_model(b, body_graph())
    x = m.add_operand(T.TENSOR_FLOAT32, (1, width))
    first = x
    if scaled_first:
        w, act, first = (m.add_operand(T.TENSOR_FLOAT32, (width,)), m.add_operand(T.INT32),
                         m.add_operand(T.TENSOR_FLOAT32, (1, width)))
        m.set_operand_value(w, w_value.copy())
        m.set_operand_value(act, 0)
        m.add_operation(Op.MUL, [x, w, act], [first])
    i0 = m.add_operand(T.TENSOR_INT32, (1,))
    if not start_input:
        m.set_operand_value(i0, np.array([0], np.int32))
    i_out, acc_out = m.add_operand(T.TENSOR_INT32, (1,)), m.add_operand(T.TENSOR_FLOAT32, (1, width))
    m.add_operation(Op.WHILE, [c, b, i0, first, x], [i_out, acc_out])
    m.identify_inputs_and_outputs([x, i0] if start_input else [x], [acc_out, i_out])
    m.finish()
    return m


@pytest.mark.parametrize("trips,loops,block", [(1, "compact", 0), (7, "compact", 0), (13, "compact", 0),
                                               (40, "compact", 10), (32, "compact", 16), (40, "unrolled", 0)])
def test_a_loop_of_a_count_known_at_compile_time_runs_unrolled_or_in_blocks(trips, loops, block):
    """A counter from a constant against a constant bound: the WHILE becomes that many copies of its body
    (a valid model, no Loop node); a long one, unless SUSTAINED_SPEED unrolls it (`loops`), a WHILE of
    a body of `block` copies, half the count or near it (a Loop of a few iterations: few nodes to import).
    The results are the loop's own."""
    from nnapi.drivers.openvino import graph, lowering
    from nnapi.drivers.openvino.unroll import unroll_loops
    from nnapi.hal import ExecutionPreference
    from nnapi.validation import validate_model
    m = _counted_loop(trips)
    hal_model = m.to_hal()
    token = lowering.LOOPS.set(loops)
    try:
        unrolled = unroll_loops(hal_model)
    finally:
        lowering.LOOPS.reset(token)
    validate_model(unrolled)
    types = [op.type for op in unrolled.main.operations]
    if block:
        assert types == [Op.WHILE] and len(unrolled.referenced) == len(hal_model.referenced) + 1
        assert len(unrolled.referenced[-1].operations) == 3 * block
    else:
        assert Op.WHILE not in types and len(types) == 3 * trips
    built = graph.build(hal_model, loops=loops).model
    assert ("Loop" in {op.get_type_name() for op in built.get_ordered_ops()}) == bool(block)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    preference = ExecutionPreference.SUSTAINED_SPEED if loops == "unrolled" else ExecutionPreference.FAST_SINGLE_ANSWER
    c = nnapi.Compilation(m, devices=["openvino"])
    c.set_preference(preference)
    got = c.finish().execute([x])
    want = _run(m, "reference", [x])
    assert got[1].tolist() == want[1].tolist() == [trips]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["count from an input", "too many trips", "never runs"])
def test_loops_whose_count_is_not_known_or_too_large_stay_loops(case):
    from nnapi.drivers.openvino import graph
    from nnapi.drivers.openvino.unroll import MAX_TRIPS, unroll_loops
    m = {"count from an input": lambda: _counted_loop(5, start_input=True),
         "too many trips": lambda: _counted_loop(MAX_TRIPS + 1),
         "never runs": lambda: _counted_loop(0)}[case]()
    hal_model = m.to_hal()
    assert unroll_loops(hal_model) is hal_model
    if case == "never runs":
        return  # (nothing to unroll: the loop's outputs are its inputs)
    assert "Loop" in {op.get_type_name() for op in graph.build(hal_model).model.get_ordered_ops()}
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    args = [x, np.array([2], np.int32)] if case == "count from an input" else [x]
    got = nnapi.Compilation(m, devices=["openvino"]).finish().execute(args)
    want = _run(m, "reference", args)
    assert got[1].tolist() == want[1].tolist()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_a_small_model_runs_on_one_thread_a_large_one_on_all():
    from nnapi.drivers.openvino.device import SMALL_MODEL_WORK, OpenVinoDevice, model_work
    d = OpenVinoDevice(threads=2)
    small, large = _counted_loop(3).to_hal(), conv_net().to_hal()
    assert model_work(small) < SMALL_MODEL_WORK
    assert d.config(ExecutionPreference.FAST_SINGLE_ANSWER, small)["INFERENCE_NUM_THREADS"] == 1
    big = d.config(ExecutionPreference.FAST_SINGLE_ANSWER, large)
    assert big["INFERENCE_NUM_THREADS"] == (1 if model_work(large) < SMALL_MODEL_WORK else 2)


@pytest.mark.parametrize("n", [16, 20000])  # copied into the request's own tensor / a tensor over the array
def test_inputs_changed_in_place_or_replaced_are_always_read_afresh(n):
    """Small inputs are copied into the request's tensors and an array passed twice in a row gets a
    tensor over it: an array the app changes in place between executions, or a new one, is read anew."""
    from conftest import add_relu_model
    c = nnapi.Compilation(add_relu_model(n), devices=["openvino"]).finish()
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    for step in range(6):
        if step % 2:
            a[:] = RNG.standard_normal(n)  # the same array, new values
        else:
            b = RNG.standard_normal(n).astype(np.float32)  # a new array
        (y,) = c.execute([a, b])
        np.testing.assert_allclose(y, np.maximum(a + b, 0), rtol=1e-6, atol=1e-6)
    e = nnapi.Execution(c)  # an output of the app's own, small or large, written in place
    out = np.full(n, -1, np.float32)
    e.set_input(0, a)
    e.set_input(1, b)
    e.set_output(0, out)
    e.compute()
    np.testing.assert_allclose(out, np.maximum(a + b, 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("trips", [7, None])
def test_equal_large_constants_are_one_node_of_each_graph(trips):
    """A weight that recurs (here in the main graph and in each of 7 unrolled copies of a loop's body) is
    one Constant of the built graph, not one per use; a loop that stays a Loop keeps its body's own
    (a body is a graph of its own). Results are the reference driver's either way."""
    from nnapi.drivers.openvino import graph
    m = _counted_loop(7 if trips is None else trips, start_input=trips is None,
                      w=np.linspace(-1.0, 1.0, 1024, dtype=np.float32), scaled_first=True)
    built = graph.build(m.to_hal()).model
    large = [op for op in built.get_ordered_ops()
             if op.get_type_name() == "Constant" and list(op.get_output_shape(0)) in ([1024], [1, 1024])]
    assert len(large) == 1
    if trips is None:
        loop = next(op for op in built.get_ordered_ops() if op.get_type_name() == "Loop")
        body = loop.get_function()
        assert [op for op in body.get_ordered_ops() if op.get_type_name() == "Constant"
                and list(op.get_output_shape(0)) in ([1024], [1, 1024])]
    x = RNG.standard_normal((1, 1024)).astype(np.float32)
    args = [x] if trips is not None else [x, np.array([0], np.int32)]
    got = nnapi.Compilation(m, devices=["openvino"]).finish().execute(args)
    want = _run(m, "reference", args)
    assert got[1].tolist() == want[1].tolist()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


# --- recurrent sequences in blocks -----------------------------------------------------------------
def _sequence_lstm(steps: int, *, cifg: bool, peephole: bool, norm: bool, projection: bool,
                   cell_clip: float, batch_major: bool) -> nnapi.Model:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM of `steps` time steps (batch 2, 5 inputs, 6 cells, 4 or 6
    outputs), random constant weights, the state given as inputs; outputs: the sequence, h and c."""
    b, n_in, n_cell = 2, 5, 6
    n_out = 4 if projection else n_cell
    m = nnapi.Model()

    def weights(*shape: int) -> int:
        i = m.add_operand(T.TENSOR_FLOAT32, shape)
        m.set_operand_value(i, (RNG.standard_normal(shape) * 0.5).astype(np.float32))
        return i

    def omitted() -> int:
        i = m.add_operand(T.TENSOR_FLOAT32, (0,))
        m.set_operand_value(i, None)
        return i

    def scalar(t: T, v) -> int:
        i = m.add_operand(t)
        m.set_operand_value(i, v)
        return i

    x = m.add_operand(T.TENSOR_FLOAT32, (b, steps, n_in) if batch_major else (steps, b, n_in))
    ins = [x]
    ins += [omitted() if cifg and g == 0 else weights(n_cell, n_in) for g in range(4)]
    ins += [omitted() if cifg and g == 0 else weights(n_cell, n_out) for g in range(4)]
    ins += [omitted() if not peephole or (cifg and g == 0) else weights(n_cell) for g in range(3)]
    ins += [omitted() if cifg and g == 0 else weights(n_cell) for g in range(4)]
    ins += [weights(n_out, n_cell) if projection else omitted(), weights(n_out) if projection else omitted()]
    h0, c0 = m.add_operand(T.TENSOR_FLOAT32, (b, n_out)), m.add_operand(T.TENSOR_FLOAT32, (b, n_cell))
    ins += [h0, c0, scalar(T.INT32, 4), scalar(T.FLOAT32, cell_clip), scalar(T.FLOAT32, 0.0),
            scalar(T.BOOL, not batch_major)]
    ins += [omitted() if not norm or (cifg and g == 0) else weights(n_cell) for g in range(4)]
    seq = m.add_operand(T.TENSOR_FLOAT32, (b, steps, n_out) if batch_major else (steps, b, n_out))
    h, c = m.add_operand(T.TENSOR_FLOAT32, (b, n_out)), m.add_operand(T.TENSOR_FLOAT32, (b, n_cell))
    m.add_operation(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [seq, h, c])
    m.identify_inputs_and_outputs([x, h0, c0], [seq, h, c])
    m.finish()
    return m


def _tensor_iterators(model: nnapi.Model, loops: str = "compact") -> int:
    built = graph.build(model.to_hal(), loops=loops).model
    return sum(op.get_type_name() == "TensorIterator" for op in built.get_ordered_ops())


@pytest.mark.parametrize("steps,features", [
    (37, dict(cifg=False, peephole=True, norm=True, projection=True, cell_clip=3.0, batch_major=True)),
    (32, dict(cifg=True, peephole=True, norm=False, projection=False, cell_clip=0.0, batch_major=False)),
    (18, dict(cifg=False, peephole=False, norm=False, projection=True, cell_clip=0.0, batch_major=True)),
    (12, dict(cifg=False, peephole=False, norm=False, projection=False, cell_clip=0.0, batch_major=False)),
])
def test_a_long_sequence_lstm_runs_in_blocks_of_steps(steps, features):
    """A sequence of two blocks of 8 steps or more is a TensorIterator over blocks of steps (the leftover
    steps unrolled after it), a shorter one is unrolled whole, and so is every one under SUSTAINED_SPEED
    (`loops` "unrolled"): fewer nodes for a cached start to import. Every feature of the cell (CIFG,
    peepholes, layer normalization, projection, cell clip, both layouts) computes what the reference
    driver does, the final state included."""
    m = _sequence_lstm(steps, **features)
    assert _tensor_iterators(m) == (1 if steps >= 16 else 0)
    assert _tensor_iterators(m, "unrolled") == 0
    b, n_out, n_cell = 2, (4 if features["projection"] else 6), 6
    x = RNG.standard_normal((b, steps, 5) if features["batch_major"] else (steps, b, 5)).astype(np.float32)
    args = [x, RNG.standard_normal((b, n_out)).astype(np.float32), RNG.standard_normal((b, n_cell)).astype(np.float32)]
    got, want = _run(m, "openvino", args), _run(m, "reference", args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_long_bidirectional_rnn_runs_both_directions_in_blocks():
    """BIDIRECTIONAL_SEQUENCE_RNN of 21 steps: each direction a TensorIterator (the backward one over
    the sequence reversed), outputs and final states as the reference driver's."""
    steps, b, n_in, n_units = 21, 2, 3, 4
    m = nnapi.Model()

    def operand(shape, value=None, t: T = T.TENSOR_FLOAT32) -> int:
        i = m.add_operand(t, shape)
        if value is not None:
            m.set_operand_value(i, value)
        return i

    def w(*shape: int) -> int:
        return operand(shape, (RNG.standard_normal(shape) * 0.5).astype(np.float32))

    x = operand((steps, b, n_in))
    fw_h, bw_h = operand((b, n_units)), operand((b, n_units))
    none = [operand((0,), None) for _ in range(3)]
    for i in none:
        m.set_operand_value(i, None)
    ins = [x, w(n_units, n_in), w(n_units, n_units), w(n_units), fw_h,
           w(n_units, n_in), w(n_units, n_units), w(n_units), bw_h, *none,
           operand((), np.int32(4), T.INT32), operand((), True, T.BOOL), operand((), False, T.BOOL)]
    fw, bw = operand((steps, b, n_units)), operand((steps, b, n_units))
    fw_last, bw_last = operand((b, n_units)), operand((b, n_units))
    m.add_operation(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [fw, bw, fw_last, bw_last])
    m.identify_inputs_and_outputs([x, fw_h, bw_h], [fw, bw, fw_last, bw_last])
    m.finish()
    assert _tensor_iterators(m) == 2
    args = [RNG.standard_normal((steps, b, n_in)).astype(np.float32),
            RNG.standard_normal((b, n_units)).astype(np.float32), RNG.standard_normal((b, n_units)).astype(np.float32)]
    got, want = _run(m, "openvino", args), _run(m, "reference", args)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-4, atol=1e-5)


def test_an_unrolled_int8_sequence_lstm_is_lowered_as_one_sequence():
    """lstm_text_int8's two int8 sequence LSTMs reach the driver as chains of 32 QUANTIZED_LSTM steps
    (`sequences`): each is lowered as one sequence, a TensorIterator over blocks of steps, not 32
    copies of the cell (2975 nodes to import at every cached start); under SUSTAINED_SPEED (`loops`
    "unrolled") step by step. Both layers' every time step agree with the reference driver as closely
    as the step-by-step lowering does."""
    from nnapi.importers import load_tflite
    from nnapi.drivers.openvino import backend
    layers = ["tfl.unidirectional_sequence_lstm", "tfl.unidirectional_sequence_lstm1"]
    imported = load_tflite(os.path.join(SHARED, "models", "keras", "lstm_text_int8.tflite"), outputs=layers)
    x = np.load(os.path.join(SHARED, "models", "reference", "lstm_text_int8.npz"))["input_0"]
    rng = np.random.default_rng(7)
    inputs = [x] + [rng.integers(0, 5000, size=x.shape).astype(x.dtype) for _ in range(2)]
    want = [_run(imported.model, "reference", [xi]) for xi in inputs]

    def outputs(built: graph.BuiltGraph) -> list[list[np.ndarray]]:
        request = backend.ov.Core().compile_model(built.model, "CPU").create_infer_request()
        got = []
        for xi in inputs:
            request.infer({0: xi})
            got.append([request.get_output_tensor(k).data.copy() for k in range(2)])
        return got

    chained = graph.build(imported.model.to_hal())
    kinds = [op.get_type_name() for op in chained.model.get_ordered_ops()]
    assert kinds.count("TensorIterator") == 2 and len(kinds) < 200, len(kinds)
    plain = graph.build(imported.model.to_hal(), loops="unrolled")
    assert "TensorIterator" not in [op.get_type_name() for op in plain.model.get_ordered_ops()]
    for got_c, got_p, w in zip(outputs(chained), outputs(plain), want):
        for c, p, r in zip(got_c, got_p, w):
            assert c.shape == r.shape and c.dtype == r.dtype
            assert np.abs(c.astype(int) - r.astype(int)).max() <= 1
            assert (c == r).mean() >= (p == r).mean() - 0.02, ((c == r).mean(), (p == r).mean())
