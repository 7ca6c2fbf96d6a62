"""Benchmark: the per-execution cost of the runtime and driver path on a tiny model (issue 16, item 4).

One ADD of 4 floats, in-process, numpy arguments, on each installed device; measured side by side in
one run (rounds interleaved across devices and layers), medians in microseconds:

- execute:   `Compilation.execute([x, y])`, the app's call;
- driver:    the driver's `IPreparedModel.execute_synchronously` on a request made once (the HAL call);
- kernel:    the device's own library doing the same ADD: numpy's add (reference), the compiled XLA
             executable and its result read back (xla), an OpenVINO infer request over the same arrays (openvino).

Where the time goes: runtime = execute - driver (binding the app's arrays, the request, output
buffers); in the driver, validation (the request checked against the model) and scheduling (QoS
admission and a slot: `Scheduler.submit(...).run`) are measured alone, and the rest is binding, the
driver's own run around its kernel, and writing the outputs back. Goal: execute <= kernel + 50 us.

usage: python benchmarks/overhead.py [--devices reference,xla,openvino] [--runs N] [--rounds N]
The last line printed is one JSON object holding every figure. On a shared, noisy machine the figures
are indicative; compare them within one run.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Callable

import numpy as np

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import (DataLocation, ExecutionPreference, MeasureTiming, MemoryPool, Priority, Request,
                       RequestArgument)
from nnapi.qos import Scheduler
from nnapi.validation import RequestChecker

GOAL_US = 50.0


def tiny_model() -> nnapi.Model:
    """out = a + b, 4 floats (the model of `../shared/tools/tiny_overhead.py`)."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, dimensions=(4,))
    b = m.add_operand(T.TENSOR_FLOAT32, dimensions=(4,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, dimensions=(4,))
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def kernel(device: str, x: np.ndarray, y: np.ndarray) -> Callable[[], object]:
    """The same ADD done by the device's own library, called directly."""
    if device == "xla":
        import jax
        exe = jax.jit(lambda a, b: a + b).lower(x, y).compile()
        return lambda: np.asarray(exe(x, y))
    if device == "openvino":
        import openvino as ov
        import openvino.opset13 as ops
        a, b = ops.parameter([4], ov.Type.f32), ops.parameter([4], ov.Type.f32)
        compiled = ov.Core().compile_model(ov.Model([ops.add(a, b)], [a, b]), "CPU",
                                           {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"})
        request = compiled.create_infer_request()
        out = np.empty(4, np.float32)
        request.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        request.set_input_tensor(1, ov.Tensor(y, shared_memory=True))
        request.set_output_tensor(0, ov.Tensor(out, shared_memory=True))
        return request.infer
    return lambda: np.add(x, y)


def layers(device: nnapi.Device, model: nnapi.Model, x: np.ndarray, y: np.ndarray) -> dict[str, Callable[[], object]]:
    """The calls measured for one device, each made ready once."""
    compilation = nnapi.Compilation(model, devices=[device.name]).finish()
    hal_model = model.to_hal()
    prepared = device.driver.prepare_model(hal_model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                           None, None, None)
    out = np.zeros(4, np.float32)
    request = Request([RequestArgument(location=DataLocation(k, 0, 16)) for k in (0, 1)],
                      [RequestArgument(location=DataLocation(2, 0, 16))],
                      [MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)])
    check = RequestChecker(hal_model)
    scheduler = Scheduler(name="bench")
    return {
        "execute": lambda: compilation.execute([x, y]),
        "driver": lambda: prepared.execute_synchronously(request, MeasureTiming.NO, None, None),
        "validation": lambda: check(request),
        "scheduling": lambda: scheduler.submit(label="bench").run(lambda: None),
        "kernel": kernel(device.name, x, y),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="reference,xla,openvino")
    parser.add_argument("--runs", type=int, default=4000, help="timed calls of each layer per device")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds the runs are spread over")
    args = parser.parse_args()
    installed = {d.name: d for d in nnapi.devices()}
    wanted = [n for n in args.devices.split(",") if n in installed and installed[n].location == "in-process"]
    model = tiny_model()
    x, y = np.ones(4, np.float32), np.full(4, 2, np.float32)
    calls = {name: layers(installed[name], model, x, y) for name in wanted}
    times: dict[str, dict[str, list[int]]] = {n: {k: [] for k in c} for n, c in calls.items()}
    per_round = max(1, args.runs // args.rounds)
    for name, layer in calls.items():  # warm up every path first
        for fn in layer.values():
            for _ in range(300):
                fn()
    for _ in range(args.rounds):
        for name, layer in calls.items():
            for key, fn in layer.items():
                samples = times[name][key]
                for _ in range(per_round):
                    start = time.perf_counter_ns()
                    fn()
                    samples.append(time.perf_counter_ns() - start)
    figures: dict[str, dict[str, float]] = {}
    print(f"tiny ADD of 4 floats, in-process, {per_round * args.rounds} calls per layer, medians in us "
          f"({platform.machine()}, {platform.python_version()})")
    print(f"{'device':<10}{'execute':>9}{'kernel':>8}{'above':>8}{'runtime':>9}{'validation':>12}"
          f"{'scheduling':>12}{'bind+run':>10}  goal: above <= {GOAL_US:g}")
    for name in wanted:
        med = {k: statistics.median(v) / 1000 for k, v in times[name].items()}
        f = {**med, "above_kernel": med["execute"] - med["kernel"], "runtime": med["execute"] - med["driver"],
             "binding_and_run": med["driver"] - med["validation"] - med["scheduling"] - med["kernel"]}
        figures[name] = {k: round(v, 1) for k, v in f.items()}
        print(f"{name:<10}{f['execute']:>9.1f}{f['kernel']:>8.1f}{f['above_kernel']:>8.1f}{f['runtime']:>9.1f}"
              f"{f['validation']:>12.1f}{f['scheduling']:>12.1f}{f['binding_and_run']:>10.1f}  "
              f"{'met' if f['above_kernel'] <= GOAL_US else 'NOT met'}")
    print(json.dumps({"benchmark": "overhead", "unit": "us", "goal_above_kernel_us": GOAL_US,
                      "devices": figures}))


if __name__ == "__main__":
    main()
