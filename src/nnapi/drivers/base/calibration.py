"""Measured performance for `get_capabilities`: a short calibration at first use, shared by every
compiling driver.

A device's performance numbers are ratios to the reference driver (lower is better), as the HAL
defines them. At first use the calibration runs one small convolutional workload (CONV_2D 3x3 + RELU,
CONV_2D 1x1, ADD, on a 1x32x32x16 input: typical float work, per-call overheads included) on the
device's steady twin and on the baseline's (`DriverDevice.calibration_twin`, the baseline found by its
entry point: this module imports no driver), float32 and float16, in interleaved rounds until the rounds agree
(a confidence bound, not one sample), and stores the median ratio in the driver's state directory
(`calibration-<driver>-<version>-<variant>.json`), so later processes read it back; `forget` drops it
(`nnapi devices --calibrate`).
`NNAPI_<DRIVER>_PERFORMANCE=<ratio>` overrides the measurement (for reproducible partitioning).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from typing import Callable

import numpy as np

from ...caching import state_dir
from ...qos import threads
from ...hal import (Capabilities, DataLocation, MeasureTiming, MemoryPool, Model, Operand, OperandLifeTime,
                    OperandPerformance, OperandType as T, Operation, OperationType as Op, PerformanceInfo,
                    Request, RequestArgument, Subgraph)

#: Used when the calibration cannot run: slower than the reference, so nothing moves to the device.
FALLBACK = 2.0
_FLOAT_TYPES = {T.TENSOR_FLOAT32: "float32", T.FLOAT32: "float32", T.TENSOR_FLOAT16: "float16",
                T.FLOAT16: "float16", T.TENSOR_INT32: "float32", T.INT32: "float32",
                T.TENSOR_BOOL8: "float32", T.BOOL: "float32"}


def calibration_model(dtype: np.dtype, size: int = 32, channels: int = 16) -> Model:
    """CONV_2D 3x3 (+RELU) -> CONV_2D 1x1 -> ADD with the first result, as a HAL model."""
    rng = np.random.default_rng(7)
    ft = T.TENSOR_FLOAT32 if dtype == np.float32 else T.TENSOR_FLOAT16
    values = bytearray()
    blob = bytearray()
    operands: list[Operand] = []

    def scalar(v: int) -> int:
        values.extend(np.int32(v).tobytes())
        operands.append(Operand(T.INT32, (), lifetime=OperandLifeTime.CONSTANT_COPY,
                                location=DataLocation(0, len(values) - 4, 4)))
        return len(operands) - 1

    def weights(shape: tuple[int, ...]) -> int:
        data = (rng.standard_normal(shape) * 0.1).astype(dtype).tobytes()
        blob.extend(b"\0" * (-len(blob) % 64))
        operands.append(Operand(ft, shape, lifetime=OperandLifeTime.CONSTANT_REFERENCE,
                                location=DataLocation(0, len(blob), len(data))))
        blob.extend(data)
        return len(operands) - 1

    def tensor(lifetime=OperandLifeTime.TEMPORARY_VARIABLE) -> int:
        operands.append(Operand(ft, (1, size, size, channels), lifetime=lifetime))
        return len(operands) - 1

    x = tensor(OperandLifeTime.SUBGRAPH_INPUT)
    same, one, relu, none = scalar(1), scalar(1), scalar(1), scalar(0)
    w1, b1 = weights((channels, 3, 3, channels)), weights((channels,))
    w2, b2 = weights((channels, 1, 1, channels)), weights((channels,))
    h1, h2, out = tensor(), tensor(), tensor(OperandLifeTime.SUBGRAPH_OUTPUT)
    ops = [Operation(Op.CONV_2D, (x, w1, b1, same, one, one, relu), (h1,)),
           Operation(Op.CONV_2D, (h1, w2, b2, same, one, one, none), (h2,)),
           Operation(Op.ADD, (h1, h2, none), (out,))]
    for op in ops:
        for i in op.inputs:
            operands[i].number_of_consumers += 1
    return Model(Subgraph(operands, ops, (x,), (out,)), [], bytes(values), [MemoryPool(pointer=bytes(blob))])


#: Calibration rounds: at least MIN_ROUNDS, until the middle half of the rounds' ratios lies within
#: SPREAD of their median, at most MAX_ROUNDS or MAX_S seconds in all.
MIN_ROUNDS, MAX_ROUNDS, SPREAD, MAX_S = 5, 15, 0.25, 1.5
#: Executions timed per device in one round (their median is the round's figure).
RUNS_PER_ROUND = 3


class _Timed:
    """One prepared calibration model with its request: `median_s(n)` times n executions."""

    def __init__(self, prepared, model: Model) -> None:
        x_op = model.main.operands[model.main.input_indexes[0]]
        dtype = np.float32 if x_op.type == T.TENSOR_FLOAT32 else np.float16
        self.x = np.random.default_rng(1).standard_normal(x_op.dimensions).astype(dtype)
        self.y = np.empty_like(self.x)
        self.request = Request([RequestArgument(location=DataLocation(0, 0, self.x.nbytes))],
                               [RequestArgument(location=DataLocation(1, 0, self.y.nbytes))],
                               [MemoryPool(pointer=self.x), MemoryPool(pointer=self.y)])
        self.prepared = prepared
        self.run()  # (first-run costs are not the steady state's)

    def run(self) -> None:
        self.prepared.execute_synchronously(self.request, MeasureTiming.NO, None, None)

    def median_s(self, n: int) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            self.run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def _ratio(device: _Timed, reference: _Timed) -> dict:
    """device / reference time, in interleaved rounds (a load that comes and goes hits both alike) until
    the rounds agree (see MIN_ROUNDS): one sample on a busy machine flipped placements between runs."""
    ratios, device_s, reference_s = [], [], []
    start = time.monotonic()
    while len(ratios) < MAX_ROUNDS:
        _stop_if_exiting()
        reference_s.append(reference.median_s(RUNS_PER_ROUND))
        device_s.append(device.median_s(RUNS_PER_ROUND))
        ratios.append(device_s[-1] / reference_s[-1])
        if len(ratios) >= MIN_ROUNDS:
            q1, median, q3 = statistics.quantiles(ratios, n=4)
            if q3 - q1 <= SPREAD * median or time.monotonic() - start > MAX_S:
                break
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    return {"reference_s": statistics.median(reference_s), "device_s": statistics.median(device_s),
            "ratio": min(max(median, 0.001), 10.0), "rounds": len(ratios), "spread": (q3 - q1) / median}


def measure(device, steady, baseline) -> dict:
    """Ratios device / baseline on the calibration workload, per float type; `steady` is the device as
    it runs in the steady state (for XLA: the optimised executable at once, no caching engine), and
    `baseline` the baseline driver's (the reference interpreter, planned at preparation)."""
    result = {}
    for name, dtype in (("float32", np.float32), ("float16", np.float16)):
        model = calibration_model(np.dtype(dtype))
        _stop_if_exiting()
        timed = _Timed(steady.prepare_model(model), model)
        _stop_if_exiting()
        result[name] = _ratio(timed, _Timed(baseline.prepare_model(model), model))
    return result


def _stop_if_exiting() -> None:
    """Between the calibration's steps: once the process exits, it stops (nothing is stored, and the
    device gets the fallback figures), so the exit does not wait for it inside native code."""
    if threads.exiting():
        raise RuntimeError("the process is exiting: calibration stopped")


def _path(device, variant: str) -> str:
    return os.path.join(state_dir(), f"calibration-{device.NAME}-{device.version}-{variant}.json")


def load_or_measure(device, steady, baseline, variant: str = "cpu") -> dict:
    """The stored calibration of this driver version and backend, else a new one (stored when the
    state directory is usable); `steady` and `baseline` make the devices it measures (only then)."""
    try:
        path = _path(device, variant)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if all(data.get(k, {}).get("ratio", 0) > 0 for k in ("float32", "float16")):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    data = measure(device, steady(), baseline())
    try:
        path = _path(device, variant)
    except OSError:
        return data
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass
    return data


def forget() -> int:
    """Drop every stored calibration of the state directory (the next discovery measures again);
    returns how many were dropped."""
    dropped = 0
    for name in os.listdir(state_dir()):
        if name.startswith("calibration-") and name.endswith(".json"):
            try:
                os.unlink(os.path.join(state_dir(), name))
                dropped += 1
            except OSError:
                pass
    return dropped


def capabilities(device, steady: Callable[[], object], baseline: Callable[[], object], *, variant: str = "cpu",
                 types=None) -> Capabilities:
    """Capabilities from the calibration (or the NNAPI_<DRIVER>_PERFORMANCE override) for the operand
    types `types` (default: float, int32 and bool ones; a type maps to the float32 or float16 ratio);
    IF / WHILE run their subgraphs inside the same compiled program: float speed."""
    override = os.environ.get(f"NNAPI_{device.NAME.upper()}_PERFORMANCE", "").strip()
    try:
        if override:
            ratios = {"float32": float(override), "float16": float(override)}
        else:
            data = load_or_measure(device, steady, baseline, variant)
            ratios = {k: float(data[k]["ratio"]) for k in ("float32", "float16")}
    except Exception:  # never fail discovery over a calibration
        ratios = {"float32": FALLBACK, "float16": FALLBACK}
    info = {k: PerformanceInfo(v, v) for k, v in ratios.items()}
    kinds = _FLOAT_TYPES if types is None else {t: ("float16" if "FLOAT16" in t.name else "float32") for t in types}
    entries = tuple(OperandPerformance(t, info[kinds[t]]) for t in sorted(kinds))
    return Capabilities(info["float32"], info["float32"], entries, info["float32"], info["float32"])
