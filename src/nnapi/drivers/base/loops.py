"""WHILE loops in compiled code: runs with an iteration budget, sized so that no run outlasts the
loop timeout or the deadline.

A compiled loop cannot be stopped mid-run, so a driver that compiles WHILE (xla, openvino) gives
each loop an iteration budget per entry into it and runs the program again with a larger budget
when a loop ran out of it (runs are pure functions of their inputs). One run's cost grows with the
budget as a polynomial of degree at most the loops' nesting depth (`loop_depth`), so the first
budget is small enough that nested loops run about 1024 iterations in all, and each next budget is
the one whose predicted run time (the growth seen between the runs so far, at most that degree)
fits in what is left of the loop timeout and the deadline. When even one more iteration cannot
fit, the execution fails at once with MISSED_DEADLINE_TRANSIENT instead of running past them.
"""
from __future__ import annotations

import math
import time
from typing import Callable, TypeVar

from ...hal import ErrorStatus, Model, NnError, OperandLifeTime, OperationType, Subgraph
from ...qos import current as current_ticket
from .binding import Binding

T = TypeVar("T")

#: Iterations all nested loops together may run in the first run of a program.
FIRST_LOOP_ITERATIONS = 1 << 10
#: A budget that ran out grows by at most this factor per run (by default).
LOOP_BUDGET_GROWTH = 4.0
#: Runs shorter than this say little about how run time grows: call overhead, timer noise and first-run
#: costs dominate them, so growth measured from them understates the exponent (a 1-5 ms run of 32
#: iterations of a nested loop made the next openvino run 2-3x longer than predicted, past its deadline).
RELIABLE_RUN_NS = 10_000_000
#: The next run aims to end by this fraction of the time left (the margin of the growth estimate).
AIM = 0.9


def loop_depth(model: Model) -> int:
    """The deepest nesting of WHILE loops in `model` (0: none), through IF branches and loop bodies."""
    memo: dict[int, int] = {}

    def depth(sub: Subgraph, path: frozenset[int]) -> int:
        deepest = 0
        for op in sub.operations:
            inner = 0
            for i in op.inputs:
                operand = sub.operands[i] if 0 <= i < len(sub.operands) else None
                if operand is None or operand.lifetime != OperandLifeTime.SUBGRAPH:
                    continue
                ref = operand.location.offset
                if ref in path or not 0 <= ref < len(model.referenced):
                    continue  # (validation refuses cycles and bad references; never recurse forever)
                if ref not in memo:
                    memo[ref] = depth(model.referenced[ref], path | {ref})
                inner = max(inner, memo[ref])
            deepest = max(deepest, inner + (op.type == OperationType.WHILE))
        return deepest

    return depth(model.main, frozenset())


class IterationBudget:
    """The iteration budget of one compiled program with loops, kept between its executions: each
    execution starts from the budget that sufficed last (steady-state executions run once). (The
    xla driver's `control_flow.LoopBudget` is the traced side: the budget argument inside a program.)"""

    def __init__(self, depth: int, maximum: int, growth: float = LOOP_BUDGET_GROWTH) -> None:
        self.depth = max(1, depth)
        self.maximum = maximum
        self.growth = growth
        self.first = max(2, min(maximum, round(FIRST_LOOP_ITERATIONS ** (1 / self.depth))))
        self._kept: tuple[int, int] | None = None  # (budget, ns its run took) that sufficed last

    @property
    def kept(self) -> int | None:
        """The budget that sufficed last (where the next execution starts), None before any did."""
        return None if self._kept is None else self._kept[0]

    def run(self, attempt: Callable[[int], tuple[bool, T]], binding: Binding) -> T:
        """`attempt(budget)` -> (a loop ran out, result); the result of the first run in which no loop
        ran out. MISSED_DEADLINE_TRANSIENT once the loop timeout has passed, or as soon as a run large
        enough to get further could not end before the loop timeout or the deadline."""
        timeout = binding.loop_timeout_ns
        ticket = current_ticket()  # the loop timeout counts running time: pauses for preemption don't count
        clock = ticket.running_ns if ticket is not None else time.monotonic_ns
        start = clock()
        budget = self._start(self._left(binding, timeout, 0)[0])
        runs: list[tuple[int, int]] = []
        while True:
            run_start = time.monotonic_ns()
            ran_out, result = attempt(budget)
            took = time.monotonic_ns() - run_start
            if not ran_out:
                self._kept = (budget, took)
                return result
            runs.append((budget, took))
            if clock() - start >= timeout or budget >= self.maximum:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              f"WHILE: loop ran longer than its timeout of {timeout / 1e9:g} s ({budget} iterations)")
            binding.checkpoint("WHILE loop")  # preemption and the deadline (QoS) between runs
            left, limit = self._left(binding, timeout, clock() - start)
            budget = self._next(runs, left)
            if budget is None:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              f"WHILE: loops still running after {runs[-1][0]} iterations ({took / 1e6:.1f} ms "
                              f"for that run); a run that gets further would end after {limit}")

    @staticmethod
    def _left(binding: Binding, timeout: int, ran: int) -> tuple[int, str]:
        """Nanoseconds left before the loop timeout or the deadline, whichever comes first, and which."""
        left = timeout - ran
        if binding.deadline is not None:
            to_deadline = binding.deadline - time.monotonic_ns()
            if to_deadline < left:
                return to_deadline, "the deadline"
        return left, f"the loop timeout of {timeout / 1e9:g} s"

    def _start(self, left: int) -> int:
        """The first budget: the one that sufficed last, smaller if its run would not fit in `left`."""
        if self._kept is None:
            return self.first
        budget, took = self._kept
        if took <= left * AIM or budget <= self.first:
            return budget
        return max(self.first, int(budget * (max(left, 0) * AIM / took) ** (1 / self.depth)))

    def _exponent(self, runs: list[tuple[int, int]]) -> float:
        """How run time grows with the budget (time ~ budget^p): the steepest growth seen between
        reliable runs, the nesting depth when none is, within [1, depth]."""
        seen = [math.log(t2 / t1) / math.log(b2 / b1) for (b1, t1), (b2, t2) in zip(runs, runs[1:])
                if t1 >= RELIABLE_RUN_NS and t2 > 0 and b2 > b1]
        return min(float(self.depth), max(1.0, max(seen, default=float(self.depth))))

    def _next(self, runs: list[tuple[int, int]], left: int) -> int | None:
        """The largest budget whose predicted run ends within `left` (at most `growth` times the last);
        None when even one more iteration would not."""
        budget, took = runs[-1]
        took = max(took, 1)
        p = self._exponent(runs)
        aim = left * AIM
        if took * ((budget + 1) / budget) ** p > aim:
            return None
        factor = min(self.growth, (aim / took) ** (1 / p))
        return min(self.maximum, max(budget + 1, int(budget * factor)))


__all__ = ["AIM", "FIRST_LOOP_ITERATIONS", "LOOP_BUDGET_GROWTH", "IterationBudget", "loop_depth"]
