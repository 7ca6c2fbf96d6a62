"""`Event` (completion of an asynchronous or fenced execution), sync fences, and `FencedExecutor`, which
runs a plan's first step with `IPreparedModel.execute_fenced` after the fences of its dependencies.

A sync fence is an eventfd, readable once signalled. An event's own fence is made on request
(`get_sync_fence_fd`) and signalled when the event finishes, by the thread that finishes it: no
thread waits on the side.
"""
from __future__ import annotations

import os
import select
import threading
import time
from typing import Sequence

from ..hal import ErrorStatus, MeasureTiming, NnError, OutputShape, Request, ResultCode, Timing
from ..qos import threads
from .partitioner import Step


class Event:
    """Completion of an asynchronous execution; `wait` returns or raises the execution's NnError."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._error: NnError | None = None
        self._lock = threading.Lock()
        self._fence_fd: int | None = None

    def finish(self, error: NnError | None) -> None:
        """The execution ended (`error` None on success): wake the waiters and signal the sync fence."""
        with self._lock:
            self._error = error
            self._done.set()
            if self._fence_fd is not None:
                os.eventfd_write(self._fence_fd, 1)

    @property
    def error(self) -> NnError | None:
        """The execution's error once it is done (None: succeeded, or still running)."""
        return self._error

    def is_done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.wait(timeout):
            raise TimeoutError("execution still running")
        if self._error is not None:
            raise self._error

    # --- sync fences (fenced execution) -----------------------------------------------------------------
    def get_sync_fence_fd(self) -> int:
        """A sync fence (an eventfd, readable once signalled) signalled when the execution ends, for
        `Execution.start_compute_with_dependencies` and drivers (ANeuralNetworksEvent_getSyncFenceFd).
        The event owns it: dup it to keep it longer than the event."""
        with self._lock:
            if self._fence_fd is None:
                self._fence_fd = os.eventfd(0, os.EFD_CLOEXEC)
                if self._done.is_set():
                    os.eventfd_write(self._fence_fd, 1)
            return self._fence_fd

    @staticmethod
    def create_from_sync_fence_fd(fd: int) -> "Event":
        """An event that completes when sync fence `fd` is signalled (ANeuralNetworksEvent_createFromSyncFenceFd);
        the fd is duplicated."""
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            raise NnError(ResultCode.BAD_DATA, f"Event.create_from_sync_fence_fd: invalid fd {fd!r}")
        try:
            return _SyncFenceEvent(os.dup(fd))
        except OSError as e:
            raise NnError(ResultCode.BAD_DATA, f"Event.create_from_sync_fence_fd: fd {fd}: {e.strerror}") from None

    def __del__(self) -> None:
        fd = getattr(self, "_fence_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class _SyncFenceEvent(Event):
    """An event that is a sync fence (from `Event.create_from_sync_fence_fd`)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fence_fd = fd

    def get_sync_fence_fd(self) -> int:
        return self._fence_fd

    def is_done(self) -> bool:
        return self._done.is_set() or fence_signalled(self._fence_fd, 0)

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.is_set():
            if not fence_signalled(self._fence_fd, None if timeout is None else int(timeout * 1000)):
                raise TimeoutError("sync fence not signalled yet")
            self._done.set()


def fence_signalled(fd: int, timeout_ms: int | None) -> bool:
    """Whether sync fence `fd` is signalled within `timeout_ms` (None: wait for it)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_ms))


def wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Wait until every sync fence is signalled; MISSED_DEADLINE_TRANSIENT when the deadline passes first,
    GENERAL_FAILURE when the process exits meanwhile (`qos.threads`: the wait ends, nothing runs)."""
    for fd in fences:
        while True:
            left = None if deadline is None else max(0, (deadline - time.monotonic_ns()) // 1_000_000)
            if fence_signalled(fd, 200 if left is None else min(left, 200)):
                break
            if threads.exiting():
                raise NnError(ErrorStatus.GENERAL_FAILURE, "the process exited while waiting for dependencies")
            if left is not None and left <= 200:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              "the deadline passed while waiting for dependencies")


class FencedExecutor:
    """Runs the plan's first step with `execute_fenced` after `fences` (then `after_ns` bounds it), the
    others on their prepared models (an `ExecutionPlan` step executor)."""

    def __init__(self, fences: list[int], after_ns: int | None) -> None:
        self._fences = fences
        self._after_ns = after_ns

    def execute_step(self, index: int, step: Step, request: Request, measure: MeasureTiming, deadline: int | None,
                     loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]:
        if index != 0:
            return step.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns)
        fence, callback = step.prepared.execute_fenced(request, self._fences, measure, deadline, loop_timeout_ns,
                                                       self._after_ns)
        if fence is not None and fence >= 0:
            try:
                fence_signalled(fence, None)
            finally:
                os.close(fence)
        status, launched, _ = callback.get_execution_info()
        if status != ErrorStatus.NONE:
            raise NnError(status, "fenced execution failed")
        return [], launched
