"""`Burst`: consecutive executions of one compilation over reused channels (ANeuralNetworksBurst).

A burst holds one driver burst (`IPreparedModel.configure_execution_burst`) per step of the
compilation's plan, made at its first use. Each shared-memory pool an execution uses gets a memory
identifier token, the same for as long as the memory lives, so a driver (or the service proxy in
between) keeps it mapped, or sent, once for the whole burst; the token is released when the memory
goes away or the burst is closed. Executions run through it with `Execution.burst_compute(burst)`
or `burst.compute(execution)`, one at a time (a second one at once is BAD_STATE, as on Android).
"""
from __future__ import annotations

import threading
import weakref
from typing import Protocol, Sequence

from ..hal import IBurst, MeasureTiming, MemoryPool, NnError, OutputShape, Request, ResultCode, Timing
from ..memory import on_forget
from .partitioner import Step
from .plan import Compiled, ExecutionPlan


class BurstUser(Protocol):
    """What runs through a burst: an `Execution` (`Execution.burst_compute`)."""

    def burst_compute(self, burst: "Burst", timeout: float | None = None) -> None: ...


class Burst:
    """A burst of executions of one finished compilation (see the module doc); the step executor
    (`runtime.plan.StepExecutor`) of the executions that run through it."""

    def __init__(self, compilation: Compiled) -> None:
        if not isinstance(getattr(compilation, "plan", None), ExecutionPlan):
            raise NnError(ResultCode.BAD_STATE, "Burst: the compilation must be finished")
        self.compilation = compilation
        self._bursts: dict[int, IBurst] = {}
        self._tokens: dict[int, tuple[weakref.ref, int]] = {}  # id(handle) -> (weak handle, token)
        self._next_token = 0
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._closed = False
        on_forget(self._forget_memory)

    def compute(self, execution: BurstUser, timeout: float | None = None) -> None:
        """Run `execution` synchronously through this burst (`Execution.burst_compute`)."""
        execution.burst_compute(self, timeout)

    def acquire(self) -> None:
        """Take the burst for one execution: BAD_STATE when closed or already in use."""
        if self._closed:
            raise NnError(ResultCode.BAD_STATE, "Burst: the burst is closed")
        if not self._busy.acquire(blocking=False):
            raise NnError(ResultCode.BAD_STATE, "Burst: another execution is using this burst")

    def release(self) -> None:
        self._busy.release()

    def execute_step(self, index: int, step: Step, request: Request, measure: MeasureTiming, deadline: int | None,
                     loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]:
        """Step `index` of the plan through its driver burst, the request's pools under this burst's tokens."""
        return self._burst(index, step).execute_synchronously(request, self.tokens(request.pools), measure,
                                                              deadline, loop_timeout_ns)

    def _burst(self, index: int, step: Step) -> IBurst:
        with self._lock:
            burst = self._bursts.get(index)
            if burst is None:
                burst = self._bursts[index] = step.prepared.configure_execution_burst()
            return burst

    def tokens(self, pools: Sequence[MemoryPool]) -> list[int]:
        """One memory identifier token per pool: the same for the same shared memory for as long as it
        lives; -1 for driver buffers and in-place (pointer) pools, which are not cached."""
        self._release_dead()
        out = []
        with self._lock:
            for pool in pools:
                handle = pool.handle
                if handle is None:
                    out.append(-1)
                    continue
                known = self._tokens.get(id(handle))
                if known is not None and known[0]() is handle:
                    out.append(known[1])
                    continue
                token = self._next_token
                self._next_token += 1
                self._tokens[id(handle)] = (weakref.ref(handle), token)
                out.append(token)
        return out

    def _release_dead(self) -> None:
        """Release the tokens of memories that are gone, in every driver burst."""
        with self._lock:
            dead = [key for key, (ref, _) in self._tokens.items() if ref() is None]
            tokens = [self._tokens.pop(key)[1] for key in dead]
            bursts = list(self._bursts.values())
        for token in tokens:
            for burst in bursts:
                _quietly(burst.release_memory_resource, token)

    def _forget_memory(self, handle, wait: bool) -> None:
        """Memory being sealed: release its token in every driver burst at once (they keep it mapped or
        sent), so the seal is not refused for a mapping the app cannot see. (Freed memory's tokens go
        at the next execution: a finalizer may run while this burst's lock is held.)"""
        if not wait:
            return
        with self._lock:
            known = self._tokens.get(id(handle))
            if known is None or known[0]() is not handle:
                return
            del self._tokens[id(handle)]
            bursts = list(self._bursts.values())
        for burst in bursts:
            _quietly(burst.release_memory_resource, known[1])

    def close(self) -> None:
        """Release every token and the driver bursts; the burst cannot run executions any more."""
        self._closed = True
        with self._lock:
            tokens = [token for _, token in self._tokens.values()]
            bursts = list(self._bursts.values())
            self._tokens.clear()
            self._bursts.clear()
        for burst in bursts:
            for token in tokens:
                _quietly(burst.release_memory_resource, token)
            release = getattr(burst, "release", None)
            if callable(release):
                _quietly(release)

    def __enter__(self) -> "Burst":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # releasing never fails an execution (a dead service has forgotten it anyway)
        pass
