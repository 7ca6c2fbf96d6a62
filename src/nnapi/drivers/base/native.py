"""One bounded native run for every driver: a call into the backend's compiled program that the deadline
bounds, higher-priority work stops and restarts, WHILE loops run under an iteration budget, and whose
run-time checks fail the execution as the reference driver's kernels do.

A driver gives the call (`NativeCall`: how to run it, and where the backend allows, how to start it
asynchronously, wait for it and cancel it) and the base does the policy:
- the deadline: a call that can be waited for is cancelled when the deadline passes
  (MISSED_DEADLINE_TRANSIENT); one that cannot runs to its end (its next checkpoint stops the execution);
- preemption: a call that can be cancelled is stopped when higher-priority work needs the device, the
  execution pauses at a checkpoint and the call runs again from scratch (runs are pure functions of
  their inputs);
- loops: `LoopBudgets` keeps one `loops.IterationBudget` per program with loops, between executions;
- checks: `raise_failed_check` turns the program's check flags into INVALID_ARGUMENT with the message.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence, TypeVar

import numpy as np

from ...hal import ErrorStatus, Model, NnError
from ...qos import current
from .binding import Binding
from .loops import LOOP_BUDGET_GROWTH, IterationBudget, loop_depth

T = TypeVar("T")
#: The longest single wait (an int32 of milliseconds, as OpenVINO's `wait_for` takes).
MAX_WAIT_MS = 2**31 - 1


@dataclass
class NativeCall:
    """How to run one call into the backend: `call()` runs it to its end; `start()` / `wait(ms) -> done`
    run it asynchronously (so the deadline can bound it), `cancel()` stops it (so it can be preempted
    and bounded); `workers`: the names of the backend's own threads (`Binding.native`)."""

    call: Callable[[], object]
    start: Callable[[], None] | None = None
    wait: Callable[[int], bool] | None = None
    cancel: Callable[[], None] | None = None
    workers: Sequence[str] = ()
    what: str = "native call"


class _Preempted(Exception):
    """The call was stopped for higher-priority work and runs again once the execution may go on."""


def run_native(binding: Binding, native: NativeCall) -> object:
    """Run `native` under the execution's deadline and preemption (see the module doc); the call's result
    (None for an asynchronous call)."""
    ticket = current()
    if ticket is None:  # outside the scheduler: nothing stops it, no priority to lower
        return _bounded(native, binding.deadline)
    while True:
        stopped: list[bool] = []

        def stop() -> None:
            stopped.append(True)
            native.cancel()

        try:
            # Preemptible where it can be cancelled; LOW work at the OS's lowest priority, except on its
            # turn (`qos.Ticket.native_section`).
            with ticket.native_section(stop if native.cancel is not None else None, native.workers):
                try:
                    return _bounded(native, binding.deadline)
                except Exception as e:
                    deadline_passed = binding.deadline is not None and time.monotonic_ns() >= binding.deadline
                    if stopped and not (isinstance(e, NnError) and deadline_passed):
                        raise _Preempted() from None
                    raise
        except _Preempted:
            binding.checkpoint(f"{native.what} stopped for higher-priority work")  # pause, then again


def _bounded(native: NativeCall, deadline: int | None) -> object:
    """The call; with a deadline and a way to wait, cancelled when the deadline passes."""
    if deadline is None or native.start is None or native.wait is None:
        return native.call()
    native.start()
    while True:
        left_ms = (deadline - time.monotonic_ns()) // 1_000_000
        if native.wait(min(max(1, int(left_ms)), MAX_WAIT_MS)):
            return None
        if time.monotonic_ns() >= deadline:
            if native.cancel is not None:
                native.cancel()
                try:
                    native.wait(MAX_WAIT_MS)
                except Exception:  # the cancelled call reports its cancellation
                    pass
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                          f"{native.what}: the deadline passed; the call was cancelled")


def raise_failed_check(messages: Sequence[str], flags) -> None:
    """INVALID_ARGUMENT with the message of the first of a program's run-time checks whose flag says it
    failed (`flags`: one boolean per message, the program's own output)."""
    failed = np.asarray(flags).reshape(-1)
    if failed.any():
        raise NnError(ErrorStatus.INVALID_ARGUMENT, messages[int(np.argmax(failed))])


class LoopBudgets:
    """The iteration budgets of a prepared model's programs with WHILE loops, one per program (`key`),
    kept between executions (`loops.IterationBudget`: steady-state executions run once)."""

    def __init__(self, model: Model, maximum: int, growth: float = LOOP_BUDGET_GROWTH) -> None:
        self._depth = loop_depth(model)
        self._maximum = maximum
        self._growth = growth
        self._budgets: dict[Hashable, IterationBudget] = {}

    def run(self, attempt: Callable[[int], tuple[bool, T]], binding: Binding, key: Hashable = 0) -> T:
        """`attempt(budget)` -> (a loop ran out, result) with budgets that grow until no loop runs out;
        MISSED_DEADLINE_TRANSIENT rather than a run past the loop timeout or the deadline."""
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets.setdefault(key, IterationBudget(self._depth, self._maximum, self._growth))
        return budget.run(attempt, binding)

    def __getitem__(self, key: Hashable) -> IterationBudget:
        """The budget of program `key` (KeyError before its first execution)."""
        return self._budgets[key]

    @property
    def kept(self) -> int | None:
        """The budget that sufficed last for the program of key 0 (a prepared model's only one), None
        before any did."""
        budget = self._budgets.get(0)
        return None if budget is None else budget.kept


__all__ = ["LoopBudgets", "MAX_WAIT_MS", "NativeCall", "raise_failed_check", "run_native"]
