"""Threads that run driver code, and the one rule by which they end when the process exits.

A thread in a native call (an XLA compile, an OpenVINO inference) that is still running while the
interpreter finalizes aborts the process (`terminate called ... FATAL: exception not rethrown`, rc
134, or a segfault): Ctrl-C during `nnapi bench --device xla` did, 2 times in 6. A plain non-daemon
thread would instead keep the process alive as long as its work lasts, a wait on a fence that never
signals for ever. So every such thread is started here (`start`): a daemon thread, which is told to
stop (its `stop` callback, once `exiting()` is true) and waited for, at most `EXIT_WAIT_S` in all,
when the process exits: before the interpreter finalizes, and before the exit handlers of the backends
(registered earlier: each start registers ours again, so it runs first).

Short work (an execution started asynchronously, a bounded call into a driver) goes to `submit`, which hands
it to an idle thread of a pool when one waits and else starts one; a pooled thread waits `IDLE_S` for more
before it ends. A new thread cost 0.3-1 ms on a 2-core VM, more than a small model's whole execution. Each
piece of work runs in a fresh context (as on a new thread); the exit waits for it from its hand-over to its end,
on a pooled thread as on a new one, and not for a thread that waits for work.
"""
from __future__ import annotations

import atexit
import contextvars
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

log = logging.getLogger("nnapi.qos")
#: How long the process's exit waits, in all, for threads running driver code to end.
EXIT_WAIT_S = 30.0

_lock = threading.Lock()
_live: dict[threading.Thread, tuple[Callable[[], None] | None, float]] = {}
_exiting = threading.Event()
#: How long an idle pooled thread waits for more work (`submit`) before it ends.
IDLE_S = 2.0
#: The name of a pooled thread while it waits.
IDLE_NAME = "nnapi-idle"


class ProcessExiting(RuntimeError):
    """Driver work asked to start once the process is exiting (its threads would not be waited for)."""


def exiting() -> bool:
    """Whether the process is exiting: long waits of driver threads should end now."""
    return _exiting.is_set()


def start(target: Callable[..., Any], *args: Any, name: str, stop: Callable[[], None] | None = None,
          exit_wait_s: float = EXIT_WAIT_S) -> threading.Thread:
    """Start `target(*args)` on a thread that runs driver code; `stop()` (if given) asks it to end
    early when the process exits, and the exit waits for it at most `exit_wait_s` (see the module doc)."""
    def run() -> None:
        try:
            target(*args)
        finally:
            with _lock:
                _live.pop(threading.current_thread(), None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _lock:
        _exit_first(name)
        _live[thread] = (stop, exit_wait_s)
    thread.start()
    return thread


def submit(target: Callable[..., Any], *args: Any, name: str, stop: Callable[[], None] | None = None,
           exit_wait_s: float = EXIT_WAIT_S) -> None:
    """Run `target(*args)` as `start` does, on an idle pooled thread when one waits (see the module doc).
    An exception it raises is logged; work that must report one catches it itself."""
    work = _Work(target, args, name, stop, exit_wait_s)
    with _lock:
        _exit_first(name)
    if not _pool.give(work):  # (a list the thread empties: `start` keeps its arguments for the thread's life)
        start(_pooled, [work], name=name, stop=stop, exit_wait_s=exit_wait_s)


def _exit_first(name: str) -> None:
    """Refuse work once the process exits; else have our exit handler run before the backends' (the lock
    is held). Exit handlers run last registered first: ours must run before those of the backends a
    thread may use (JAX's `clean_up` destroys its client: a compile still running on it then crashes)."""
    if _exiting.is_set():
        raise ProcessExiting(f"{name}: the process is exiting: driver work is not started")
    try:
        atexit.unregister(_end_all)
        atexit.register(_end_all)
    except RuntimeError:  # the interpreter is finalizing: nothing would wait for the thread
        raise ProcessExiting(f"{name}: the process is exiting: driver work is not started") from None


@dataclass(frozen=True, slots=True)
class _Work:
    """One piece of work given to `submit`."""

    target: Callable[..., Any]
    args: tuple
    name: str
    stop: Callable[[], None] | None
    exit_wait_s: float


class _Idle:
    """A pooled thread waiting for work: `give` sets `work` and then `event`."""

    __slots__ = ("thread", "work", "event")

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.work: _Work | None = None
        self.event = threading.Event()


class _Pool:
    """The idle pooled threads and the work handed to them (`submit`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []

    def give(self, work: _Work) -> bool:
        """Hand `work` to an idle thread, which the exit waits for from now on; False when none waits."""
        with _lock:  # (registered before it runs, as `start` registers a new thread: no exit between)
            if _exiting.is_set():
                raise ProcessExiting(f"{work.name}: the process is exiting: driver work is not started")
            with self._lock:
                if not self._idle:
                    return False
                idle = self._idle.pop()  # (the one that waited least: its caches are the warmest)
            _live[idle.thread] = (work.stop, work.exit_wait_s)
        idle.work = work
        idle.event.set()
        return True

    def next(self, idle: _Idle) -> _Work | None:
        """(a pooled thread, its work done) The next work, waiting for it at most `IDLE_S`; None: end."""
        idle.event.clear()
        with self._lock:
            self._idle.append(idle)
        if not idle.event.wait(IDLE_S):
            with self._lock:
                if idle in self._idle:  # (else `give` took it just now: its work is on the way)
                    self._idle.remove(idle)
                    return None
            idle.event.wait()
        work, idle.work = idle.work, None
        return work


def _pooled(first_work: list[_Work]) -> None:
    """A pooled thread: its first work (registered with the exit by `start`), then what `next` gives
    (registered by `give`). No work is referred to while the thread waits (what it holds, an
    execution's memory, goes at once)."""
    me = threading.current_thread()
    idle = _Idle(me)
    work: _Work | None = first_work.pop()
    while work is not None:
        me.name = work.name
        try:
            contextvars.Context().run(work.target, *work.args)
        except Exception:
            log.exception("%s: driver work failed", work.name)
        finally:
            with _lock:
                _live.pop(me, None)
        me.name = IDLE_NAME
        work = None
        work = _pool.next(idle)


class Batch:
    """Calls running side by side on driver threads (`run_all`); `results()` waits for them."""

    def __init__(self, calls: Sequence[Callable[[], Any]], name: str, workers: int) -> None:
        self._calls = list(calls)
        self._results: list[Any] = [None] * len(self._calls)
        self._errors: list[BaseException | None] = [None] * len(self._calls)
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [start(self._work, name=f"{name}-{k}") for k in range(max(1, min(workers, len(self._calls))))]

    def _work(self) -> None:
        while not exiting():
            with self._lock:
                k, self._next = self._next, self._next + 1
            if k >= len(self._calls):
                return
            try:
                self._results[k] = self._calls[k]()
            except BaseException as e:  # handed to whoever waits, in `results`
                self._errors[k] = e

    def results(self) -> list[Any]:
        """Every call's result, in order, once all have ended; the first call's error that failed."""
        for thread in self._threads:
            thread.join()
        for error in self._errors:
            if error is not None:
                raise error
        if self._next < len(self._calls):
            raise RuntimeError("the process is exiting: driver work was not started")
        return self._results


def run_all(calls: Sequence[Callable[[], Any]], *, name: str, workers: int | None = None) -> Batch:
    """Run `calls` side by side on at most `workers` (default: the CPUs) threads started by `start`,
    so the process's exit waits for them as for every thread that runs driver code."""
    return Batch(calls, name, workers if workers is not None else (os.cpu_count() or 1))


def _end_all() -> None:
    """At exit: ask every live driver thread to stop, then wait for them (EXIT_WAIT_S in all, and each
    at most its own `exit_wait_s`)."""
    _exiting.set()
    with _lock:
        live = list(_live.items())
    for _, (stop, _) in live:
        if stop is not None:
            try:
                stop()
            except Exception:
                log.debug("a driver thread's stop failed", exc_info=True)
    start = time.monotonic()
    for thread, (_, wait_s) in live:
        thread.join(max(0.0, min(start + wait_s, start + EXIT_WAIT_S) - time.monotonic()))
        if thread.is_alive():
            log.warning("exit: %s still runs driver code after %g s; the process may not exit cleanly",
                        thread.name, min(wait_s, EXIT_WAIT_S))


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = _Pool()
    _live.clear()
    _exiting.clear()


_pool = _Pool()
atexit.register(_end_all)
os.register_at_fork(after_in_child=_forget_in_child)
