"""The OS's own priority for LOW work in native code (Q2, Q4).

A native call (an XLA executable) reaches no checkpoint, so higher-priority work that arrives while it
runs shares the CPUs with it, and with the native library's worker threads, until it ends. While LOW
work runs native code, its thread and the library's workers (found by thread name) run at the lowest
OS priority (nice 19): higher-priority work of any thread or process gets the CPUs first, and LOW
work still takes whatever is idle. The previous priorities come back when no LOW native call runs.

Raising a priority again needs CAP_SYS_NICE or a high enough RLIMIT_NICE: where this process has
neither, nothing is changed (a thread lowered for good would slow every later execution).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from typing import Iterator, Sequence

from ..hal import Priority

#: The nice value LOW native work runs at.
BACKGROUND_NICE = 19

_lock = threading.Lock()
_running: dict[tuple[str, ...], tuple[int, list[int]]] = {}  # worker names -> (LOW calls running, workers)
_lowered: dict[int, int] = {}                                 # thread id -> the nice value it had


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether this process may lower a thread's priority and raise it back (tried on a thread of its own)."""
    result: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(before + 1, BACKGROUND_NICE))
            os.setpriority(os.PRIO_PROCESS, tid, before)
            result.append(True)
        except (OSError, AttributeError):
            result.append(False)

    thread = threading.Thread(target=probe, name="nnapi-nice-probe", daemon=True)
    thread.start()
    thread.join()
    return bool(result and result[0])


def _threads_named(names: Sequence[str]) -> list[int]:
    tids = []
    try:
        entries = os.listdir("/proc/self/task")
    except OSError:
        return tids
    for entry in entries:
        try:
            with open(f"/proc/self/task/{entry}/comm") as f:
                if f.read().strip() in names:
                    tids.append(int(entry))
        except (OSError, ValueError):
            pass
    return tids


def _lower(tids: Sequence[int]) -> None:
    for tid in tids:
        if tid in _lowered:
            continue
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            if before < BACKGROUND_NICE:
                os.setpriority(os.PRIO_PROCESS, tid, BACKGROUND_NICE)
                _lowered[tid] = before
        except OSError:  # (the thread has ended)
            pass


def _restore(tids: Sequence[int]) -> None:
    for tid in tids:
        before = _lowered.pop(tid, None)
        if before is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, before)
            except OSError:
                pass


class Lowered:
    """One LOW native call's hold on the OS's priorities (`native_call`); `restore` gives them back before
    the call ends (from any thread: the scheduler, when the work gets its turn), once."""

    __slots__ = ("tid", "key", "held")

    def __init__(self, tid: int, key: tuple[str, ...]) -> None:
        self.tid, self.key, self.held = tid, key, True

    def restore(self) -> None:
        with _lock:
            if not self.held:
                return
            self.held = False
            _restore([self.tid])
            count, pool = _running.pop(self.key)
            if count > 1:
                _running[self.key] = (count - 1, pool)
            else:
                _restore(pool)


def lower(priority: Priority, workers: Sequence[str] = ()) -> Lowered | None:
    """For a native call of LOW work about to start: this thread and the threads named `workers` (the
    library's pool) run at the lowest OS priority until no LOW native call runs; the call's hold, which
    it `restore`s when it ends (None: nothing was lowered, other priorities or no permission)."""
    if priority != Priority.LOW or not available():
        return None
    key = tuple(workers)
    tid = threading.get_native_id()
    with _lock:
        _lower([tid])
        count, pool = _running.get(key, (0, []))
        if not count and key:
            pool = _threads_named(key)
            _lower(pool)
        _running[key] = (count + 1, pool)
    return Lowered(tid, key)


@contextlib.contextmanager
def native_call(priority: Priority, workers: Sequence[str] = ()) -> Iterator[Lowered | None]:
    """Around one native call of work of `priority` (`lower`); yields its hold (None: nothing lowered)."""
    held = lower(priority, workers)
    try:
        yield held
    finally:
        if held is not None:
            held.restore()
