"""Threads that run driver code, and the one rule by which they end when the process exits.

A thread in a native call (an XLA compile, an OpenVINO inference) that is still running while the
interpreter finalizes aborts the process (`terminate called ... FATAL: exception not rethrown`, rc
134, or a segfault): Ctrl-C during `nnapi bench --device xla` did, 2 times in 6. A plain non-daemon
thread would instead keep the process alive as long as its work lasts, a wait on a fence that never
signals for ever. So every such thread is started here (`start`): a daemon thread, which is told to
stop (its `stop` callback, once `exiting()` is true) and waited for, at most `EXIT_WAIT_S` in all,
when the process exits: before the interpreter finalizes, and before the exit handlers of the backends
(registered earlier: each start registers ours again, so it runs first).
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

log = logging.getLogger("nnapi.qos")
#: How long the process's exit waits, in all, for threads running driver code to end.
EXIT_WAIT_S = 30.0

_lock = threading.Lock()
_live: dict[threading.Thread, tuple[Callable[[], None] | None, float]] = {}
_exiting = threading.Event()


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

    if _exiting.is_set():
        raise ProcessExiting(f"{name}: the process is exiting: driver work is not started")
    thread = threading.Thread(target=run, name=name, daemon=True)
    with _lock:
        # Exit handlers run last registered first: ours must run before those of the backends this thread
        # may use (JAX's `clean_up` destroys its client: a compile still running on it then crashes).
        try:
            atexit.unregister(_end_all)
            atexit.register(_end_all)
        except RuntimeError:  # the interpreter is finalizing: nothing would wait for the thread
            raise ProcessExiting(f"{name}: the process is exiting: driver work is not started") from None
        _live[thread] = (stop, exit_wait_s)
    thread.start()
    return thread


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
    global _lock
    _lock = threading.Lock()
    _live.clear()
    _exiting.clear()


atexit.register(_end_all)
os.register_at_fork(after_in_child=_forget_in_child)
