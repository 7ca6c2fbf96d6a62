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
from typing import TYPE_CHECKING, Sequence

from ..hal import IBurst, MeasureTiming, MemoryPool, NnError, OutputShape, Request, ResultCode, Timing
from ..memory import on_forget

if TYPE_CHECKING:
    from .compilation import Compilation
    from .execution import Execution


class Burst:
    """A burst of executions of one finished compilation (see the module doc)."""

    def __init__(self, compilation: "Compilation") -> None:
        from .compilation import Compilation
        if not isinstance(compilation, Compilation) or not compilation.finished:
            raise NnError(ResultCode.BAD_STATE, "Burst: the compilation must be finished")
        self.compilation = compilation
        self._bursts: dict[int, IBurst] = {}
        self._tokens: dict[int, tuple[weakref.ref, int]] = {}  # id(handle) -> (weak handle, token)
        self._next_token = 0
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._closed = False
        self._plan = None
        on_forget(self._forget_memory)

    def compute(self, execution: "Execution", timeout: float | None = None) -> None:
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

    def plan(self):
        """The compilation's plan with each step executing through its driver burst (made once)."""
        if self._plan is None:
            from .execution import plan_through
            self._plan = plan_through(self.compilation, self.executor)
        return self._plan

    def executor(self, index: int, step) -> "_BurstStep":
        """What step `index` of the plan executes through: its driver burst with this burst's tokens."""
        return _BurstStep(self, index, step)

    def _burst(self, index: int, step) -> IBurst:
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


class _BurstStep:
    """Stands for a step's prepared model while an execution runs through a burst."""

    def __init__(self, burst: Burst, index: int, step) -> None:
        self._burst = burst
        self._index = index
        self._step = step

    def execute_synchronously(self, request: Request, measure: MeasureTiming, deadline: int | None,
                              loop_timeout_ns: int | None) -> tuple[list[OutputShape], Timing]:
        burst = self._burst._burst(self._index, self._step)
        return burst.execute_synchronously(request, self._burst.tokens(request.pools), measure, deadline,
                                           loop_timeout_ns)
