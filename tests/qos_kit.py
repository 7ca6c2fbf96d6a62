"""Test fixtures of the reference driver's scheduling tests (not checks: the quality-of-service checks every
driver must pass live in the certification kit, `nnapi.conformance.vts.qos`).

- `FakeClock`: a monotonic clock that moves only when told (schedulers take it as `clock`).
- `chain_model`: the kit's float32 ADD / MUL chain, optionally with one ABS (the "gate") at a chosen place,
  so a test can hold an execution at a known operation.
- `Gate` / `patch_abs`: ABS runs a test hook first (block until released, move a fake clock, count).
- `hal_request` / `run_sync` / `run_async` / `run_fenced`: one HAL execution called straight on the driver
  from the calling thread (the tests run several at once), returning (status, shapes, timing).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

import numpy as np

from nnapi import OperationType as Op
from nnapi.conformance.vts.models import alternating_chain as chain_model  # noqa: F401  (used by the tests)
from nnapi.hal import (DataLocation, ErrorStatus, MeasureTiming, MemoryPool, NnError, Request, RequestArgument,
                       Timing)
from nnapi.ops import numpy_dtype, registry

WAIT = 30.0  # seconds any test waits for an event at most (a hang fails instead of blocking the suite)


class FakeClock:
    """Nanoseconds that advance only through `advance` (thread-safe)."""

    def __init__(self, start: int | None = None) -> None:
        self._now = time.monotonic_ns() if start is None else start  # near real time: deadlines make sense to both
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ns: int) -> None:
        with self._lock:
            self._now += ns


class Gate:
    """What ABS does before its kernel: counts, optionally signals `entered` and blocks until
    `release`, and moves a fake clock."""

    def __init__(self, block: bool = False, clock: FakeClock | None = None, advance_ns: int = 0,
                 hook: Callable[[], None] | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        if not block:
            self.release.set()
        self.clock = clock
        self.advance_ns = advance_ns
        self.hook = hook
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(WAIT), "gate never released"
        if self.clock is not None:
            self.clock.advance(self.advance_ns)
        if self.hook is not None:
            self.hook()


def patch_kernel(monkeypatch, op: Op, before: Callable[[], None]) -> None:
    """Make `op` call `before()` ahead of its kernel (plans built afterwards pick it up)."""
    reg = registry.find_operation(op)

    def execute(ctx):
        before()
        return reg.execute(ctx)

    monkeypatch.setitem(registry._REGISTRY, op, dataclasses.replace(reg, execute=execute))


def patch_abs(monkeypatch, gate: Gate) -> Gate:
    patch_kernel(monkeypatch, Op.ABS, gate)
    return gate


# --- HAL executions on numpy data ----------------------------------------------------------------
def hal_request(hal_model, inputs: list[np.ndarray | None], output_dims: list[tuple[int, ...]]
                ) -> tuple[Request, list[np.ndarray]]:
    """A request with every argument in place (pointer pools); returns it and the output buffers."""
    main = hal_model.main
    pools, args_in, outs, args_out = [], [], [], []
    for x in inputs:
        if x is None:
            args_in.append(RequestArgument(has_no_value=True))
            continue
        flat = np.ascontiguousarray(x).reshape(-1)
        pools.append(MemoryPool(pointer=flat))
        args_in.append(RequestArgument(False, DataLocation(len(pools) - 1, 0, flat.nbytes), tuple(np.shape(x))))
    for index, dims in zip(main.output_indexes, output_dims):
        operand = main.operands[index]
        n = int(np.prod(dims)) if dims else 1
        buf = np.zeros(max(n, 1), numpy_dtype(operand.type))
        outs.append(buf)
        pools.append(MemoryPool(pointer=buf))
        args_out.append(RequestArgument(False, DataLocation(len(pools) - 1, 0, n * buf.itemsize), tuple(dims)))
    return Request(args_in, args_out, pools), outs


def run_sync(prepared, request, deadline=None, loop_timeout_ns=None, measure=MeasureTiming.NO, **kw):
    try:
        shapes, timing = prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns, **kw)
        return ErrorStatus.NONE, shapes, timing
    except NnError as e:
        return e.status, e.output_shapes or [], Timing()


def run_async(prepared, request, deadline=None, loop_timeout_ns=None, measure=MeasureTiming.NO, **kw):
    """Launch (which must return normally) and wait for the callback."""
    done = threading.Event()
    got = []

    def callback(status, shapes, timing):
        got.append((status, shapes, timing))
        done.set()

    prepared.execute(request, measure, deadline, loop_timeout_ns, callback, **kw)
    assert done.wait(WAIT), "callback never came"
    assert len(got) == 1
    return got[0]


def run_fenced(prepared, request, deadline=None, loop_timeout_ns=None, measure=MeasureTiming.NO, **kw):
    try:
        fd, callback = prepared.execute_fenced(request, [], measure, deadline, loop_timeout_ns, None, **kw)
    except NnError as e:
        return e.status, [], Timing()
    status, launched, _ = callback.get_execution_info()
    assert fd == -1
    return status, [], launched


EXECUTORS = {"sync": run_sync, "async": run_async, "fenced": run_fenced}
