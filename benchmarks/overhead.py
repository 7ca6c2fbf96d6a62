"""Benchmark: the per-execution cost of the runtime and driver path on a tiny model (issue 16, item 4).

One ADD of 4 floats, in-process, numpy arguments, on each installed device; measured side by side in
one run (rounds interleaved across devices and layers), medians in microseconds:

- execute:   `Compilation.execute([x, y])`, the app's call;
- reusable:  `Execution.compute()` of a reusable execution (`set_reusable(True)`) bound to x, y and an output
             once: its request made at the first computation, each later one only runs it;
- session:   `nnapi.load(model).run({"input_0": x, "input_1": y})`, the same shapes every run (the feed
             checked once, its request reused);
- driver:    the driver's `IPreparedModel.execute_synchronously` on a request made once (the HAL call);
- kernel:    the device's own library doing the same ADD: numpy's add (reference), the compiled XLA
             executable and its result read back (xla), an OpenVINO infer request over the same arrays (openvino).

Where the time goes (second table): the driver's HAL call less the kernel, split into validation
(the request checked against the model) and scheduling (QoS admission and a slot:
`Scheduler.submit(...).run`), each measured alone, and the rest: binding, the driver's own run around
its kernel, writing the outputs back. Each path less that driver call is the runtime's share plus
what the driver spends on arrays it has not seen (execute's fresh output buffer) and cache effects
of the longer path. "runtime alone" times the three paths over a prepared model that does nothing
(`NoDriver`): the runtime's own cost, which no driver's noise hides (execute: the arrays checked, the
pools, the output buffer and the request; reusable: the state, the deadline and the bound request
handed on; session: execute's plus the feed's form checked and the outputs named).
Goals: execute <= kernel + 50 us; a reusable execution <= kernel + 15 us (issue 36).

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
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, IPreparedModel, MeasureTiming, MemoryPool,
                       NnError, OutputShape, Priority, Request, RequestArgument, Timing)
from nnapi.qos import Scheduler
from nnapi.validation import RequestChecker

GOAL_US = 50.0
#: The goal of a reusable execution's computation above the kernel (issue 36).
GOAL_REUSABLE_US = 15.0


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


def _paths(compilation: nnapi.Compilation, session: "nnapi.session.CompiledModel", x: np.ndarray,
           y: np.ndarray) -> dict[str, Callable[[], object]]:
    """The app's three paths over one compilation and one session: execute, a reusable execution, run."""
    reusable = nnapi.Execution(compilation)
    reusable.set_reusable(True)
    reusable.set_input(0, x)
    reusable.set_input(1, y)
    reusable.set_output(0, np.zeros(4, np.float32))
    feed = {session.input_names[0]: x, session.input_names[1]: y}
    return {"execute": lambda: compilation.execute([x, y]), "reusable": reusable.compute,
            "session": lambda: session.run(feed)}


def layers(device: nnapi.Device, model: nnapi.Model, x: np.ndarray, y: np.ndarray) -> dict[str, Callable[[], object]]:
    """The calls measured for one device, each made ready once."""
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
        **_paths(nnapi.Compilation(model, devices=[device.name]).finish(), nnapi.load(model, devices=device.name),
                 x, y),
        "driver": lambda: prepared.execute_synchronously(request, MeasureTiming.NO, None, None),
        "validation": lambda: check(request),
        "scheduling": lambda: scheduler.submit(label="bench").run(lambda: None),
        "kernel": kernel(device.name, x, y),
    }


class NoDriver(IPreparedModel):
    """A prepared model that does nothing (it reports the outputs' shapes): the three paths over it time
    the runtime alone, whatever a driver costs and however noisy the machine is."""

    def __init__(self, shapes: list[OutputShape]) -> None:
        self.result = (shapes, Timing())

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns, **_) -> tuple:
        return self.result

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **_) -> None:
        callback(ErrorStatus.NONE, *self.result)

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, after_fence_ns, **_) -> tuple:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "NoDriver runs no fenced executions")


def runtime_alone(model: nnapi.Model, x: np.ndarray, y: np.ndarray) -> dict[str, Callable[[], object]]:
    """The three paths on the reference device with its prepared model replaced by `NoDriver`."""
    compilation = nnapi.Compilation(model, devices=["reference"]).finish()
    session = nnapi.load(model, devices="reference")
    for step in (*compilation.steps, *session.compilation.steps):
        step.prepared, step.observer = NoDriver([OutputShape((4,))]), None
    return _paths(compilation, session, x, y)


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
    calls[ALONE] = runtime_alone(model, x, y)
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
    med = {n: {k: statistics.median(v) / 1000 for k, v in t.items()} for n, t in times.items()}
    alone = {k: round(v, 1) for k, v in med.pop(ALONE).items()}
    figures: dict[str, dict[str, float]] = {}
    for name in wanted:
        m = med[name]
        f = {**m, **{f"above_kernel{SUFFIX[p]}": m[p] - m["kernel"] for p in PATHS},
             **{f"runtime{SUFFIX[p]}": m[p] - m["driver"] for p in PATHS},
             "driver_above_kernel": m["driver"] - m["kernel"],
             "binding_and_run": m["driver"] - m["validation"] - m["scheduling"] - m["kernel"]}
        figures[name] = {k: round(v, 1) for k, v in f.items()}
    print(f"tiny ADD of 4 floats, in-process, {per_round * args.rounds} calls per layer, medians in us "
          f"({platform.machine()}, {platform.python_version()}, {cpu_name()})")
    table("above the kernel", ["kernel", "execute", "reusable", "session", "goals met"],
          {n: [f["kernel"], f["above_kernel"], f["above_kernel_reusable"], f["above_kernel_session"],
               f"{'yes' if f['above_kernel'] <= GOAL_US else 'NO'}, "
               f"{'yes' if f['above_kernel_reusable'] <= GOAL_REUSABLE_US else 'NO'}"] for n, f in figures.items()})
    print(f"(goals: execute <= {GOAL_US:g} us above the kernel, a reusable execution <= {GOAL_REUSABLE_US:g})")
    table("where it goes", ["driver", "validation", "scheduling", "bind+run", "execute", "reusable", "session"],
          {n: [f["driver_above_kernel"], f["validation"], f["scheduling"], f["binding_and_run"], f["runtime"],
               f["runtime_reusable"], f["runtime_session"]] for n, f in figures.items()}
          | {"runtime alone": ["", "", "", "", alone["execute"], alone["reusable"], alone["session"]]})
    print("(driver: its HAL call on a request made once, less the kernel: validation, scheduling, and binding plus "
          "its own run around the kernel. execute, reusable, session: each path less that driver call, i.e. the "
          "runtime's share and what the driver spends on arrays it has not seen; runtime alone: each path over a "
          "prepared model that does nothing)")
    print(json.dumps({"benchmark": "overhead", "unit": "us", "goal_above_kernel_us": GOAL_US,
                      "goal_reusable_above_kernel_us": GOAL_REUSABLE_US, "cpu": cpu_name(), "devices": figures,
                      "runtime_alone": alone}))


#: The app's paths, and the suffix of their figures' keys in the JSON object.
PATHS = ("execute", "reusable", "session")
SUFFIX = {"execute": "", "reusable": "_reusable", "session": "_session"}
#: The group of calls over `NoDriver`.
ALONE = "runtime alone"


def table(title: str, columns: list[str], rows: dict[str, list]) -> None:
    """A table: one row per name, numbers to one decimal."""
    width = max(len(title), *(len(n) for n in rows)) + 2
    print(f"\n{title:<{width}}" + "".join(f"{c:>{max(len(c), 7) + 2}}" for c in columns))
    for name, values in rows.items():
        print(f"{name:<{width}}" + "".join(
            f"{v:>{max(len(c), 7) + 2}.1f}" if isinstance(v, float) else f"{v:>{max(len(c), 7) + 2}}"
            for c, v in zip(columns, values)))


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
