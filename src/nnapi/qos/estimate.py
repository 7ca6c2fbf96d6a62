"""Duration estimates: a cost model calibrated on the device before any run, then past runs.

Estimates serve one decision, refusing work that cannot finish by its deadline, so they are
*lower bounds*: the cost model counts only what no run can avoid (a fixed cost per operation
measured on the driver's own interpreter, and numpy's best speed per element and per
multiply-accumulate), and past runs give the fastest recent run. A task is refused only when even
that bound is too long, so a refusal is never a guess (Q6).
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..hal import Model, OperandLifeTime, OperationType, Subgraph

_MAC_OPS = {OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D, OperationType.GROUPED_CONV_2D,
            OperationType.TRANSPOSE_CONV_2D, OperationType.FULLY_CONNECTED}


@dataclass(frozen=True)
class Calibration:
    """What the device costs, in nanoseconds."""

    #: Fixed cost of one operation in the driver (dispatch, checks, output bookkeeping).
    op_ns: float
    #: Per element read or written by a kernel.
    element_ns: float
    #: Per multiply-accumulate of a convolution or matrix product.
    mac_ns: float
    #: Fixed cost of one execution (request mapping, output write-back).
    run_ns: float


def calibrate(op_probe: Callable[[], None] | None = None, probe_ops: int = 1, *, repeats: int = 7) -> Calibration:
    """Measure the device: `op_probe` runs `probe_ops` trivial operations through the driver's own
    interpreter (its minimum time over `repeats` gives the per-operation cost); numpy primitives give
    the element and multiply-accumulate speeds. Takes a few milliseconds."""
    def fastest(fn: Callable[[], object]) -> float:
        fn()  # warm up (thread pools, first-call caches)
        best = math.inf
        for _ in range(repeats):
            start = time.perf_counter_ns()
            fn()
            best = min(best, time.perf_counter_ns() - start)
        return best

    n = 1 << 16
    a = np.ones(n, np.float32)
    out = np.empty_like(a)
    element_ns = fastest(lambda: np.add(a, a, out=out)) / (3 * n)
    k = 64
    m = np.ones((k, k), np.float32)
    # A multiply-accumulate in a matrix product never costs more than a streamed element (caps a
    # measurement spoiled by BLAS threads fighting a busy machine).
    mac_ns = min(fastest(lambda: m @ m) / k ** 3, element_ns)
    op_ns = 2_000.0
    if op_probe is not None:
        op_ns = fastest(op_probe) / max(probe_ops, 1)
    return Calibration(op_ns=op_ns, element_ns=element_ns, mac_ns=mac_ns, run_ns=2 * op_ns)


def _elements(sub: Subgraph, index: int) -> int:
    operand = sub.operands[index]
    if operand.type.is_scalar or not operand.dimensions or 0 in operand.dimensions:
        return 0  # a scalar, or unknown until run time: count nothing (a lower bound)
    return math.prod(operand.dimensions)


def _macs(sub: Subgraph, op) -> int:
    """Multiply-accumulates of a convolution or fully-connected operation (0 when unknown)."""
    if op.type not in _MAC_OPS or len(op.inputs) < 2 or not op.outputs:
        return 0
    weights = sub.operands[op.inputs[1]].dimensions
    out = _elements(sub, op.outputs[0])
    if not weights or 0 in weights or not out:
        return 0
    if op.type == OperationType.FULLY_CONNECTED:
        return out * weights[-1]                      # [units, input size]
    if op.type == OperationType.DEPTHWISE_CONV_2D:
        return out * weights[1] * weights[2]          # [1, h, w, channels]
    if op.type == OperationType.TRANSPOSE_CONV_2D:
        return _elements(sub, op.inputs[0]) * weights[0] * weights[1] * weights[2]
    return out * weights[1] * weights[2] * weights[3]  # [out, h, w, in (per group)]


def operation_work(sub: Subgraph, op) -> int:
    """A size of one operation's work: its multiply-accumulates plus the elements it reads and
    writes (what a driver balances sub-models by)."""
    return _macs(sub, op) + sum(_elements(sub, i) for i in (*op.inputs, *op.outputs))


def subgraph_cost_ns(model: Model, sub: Subgraph, cal: Calibration, depth: int = 0) -> float:
    """Lower bound of one run of `sub`: IF counts its cheaper branch, WHILE its condition once."""
    total = 0.0
    for op in sub.operations:
        total += cal.op_ns
        if op.type in (OperationType.IF, OperationType.WHILE) and depth < 8:
            refs = [sub.operands[i].location.offset for i in op.inputs
                    if sub.operands[i].lifetime == OperandLifeTime.SUBGRAPH]
            refs = [r for r in refs if 0 <= r < len(model.referenced)]
            if refs:
                costs = [subgraph_cost_ns(model, model.referenced[r], cal, depth + 1) for r in refs]
                total += min(costs[1:]) if op.type == OperationType.IF and len(costs) > 1 else costs[0]
            continue
        elements = sum(_elements(sub, i) for i in (*op.inputs, *op.outputs))
        total += elements * cal.element_ns + _macs(sub, op) * cal.mac_ns
    return total


def model_cost_ns(model: Model, cal: Calibration) -> int:
    """Lower bound of one execution of `model` on the calibrated device, in nanoseconds."""
    return int(cal.run_ns + subgraph_cost_ns(model, model.main, cal))


class DurationStats:
    """Durations of past runs of one prepared model, with the cost-model estimate as a start.

    Thread-safe; kept by the prepared model, so it goes away with it.
    """

    def __init__(self, prior_ns: int = 0, window: int = 32) -> None:
        self.prior_ns = int(prior_ns)
        self._window = max(1, int(window))
        #: The window's ascending minima, (run number, ns): the first is the fastest of the last `window`
        #: runs (a sliding-window minimum, a few steps per run whatever the window).
        self._minima: deque[tuple[int, int]] = deque()
        self._lowest: int | None = None
        self._lock = threading.Lock()
        self.runs = 0
        self.mean_ns = 0.0

    def record(self, ns: int) -> None:
        """One completed run's running time (time spent waiting or preempted excluded)."""
        ns = int(ns)
        with self._lock:
            run = self.runs = self.runs + 1
            minima = self._minima
            while minima and minima[-1][1] >= ns:
                minima.pop()
            minima.append((run, ns))
            if minima[0][0] <= run - self._window:
                minima.popleft()
            self._lowest = minima[0][1]
            self.mean_ns += (ns - self.mean_ns) / (run if run < 16 else 16)  # a running mean that follows drift

    def lower_ns(self) -> int:
        """The least a run can take: the fastest recent run, else half the cost model's bound. (A
        refusal on a wrong guess would never be corrected: a refused model never runs, so it never
        gets a history. Halving covers a calibration taken while the machine was busy.)"""
        lowest = self._lowest  # (the fastest recent run, kept by `record`: one read, no lock)
        return lowest if lowest is not None else self.prior_ns // 2

    def typical_ns(self) -> int:
        """What a run usually takes: the running mean, else the cost model."""
        return int(self.mean_ns) if self.runs else self.prior_ns
