"""Sync fences for fenced execution, shared by every driver: waiting on them under a deadline, and
the callback that reports a finished fenced execution."""
from __future__ import annotations

import select
import time
from typing import Sequence

from ..hal import ErrorStatus, IFencedExecutionCallback, NnError, Timing


class FencedCallback(IFencedExecutionCallback):
    """The status and timings of a fenced execution that has already finished."""

    def __init__(self, status: ErrorStatus, launched: Timing, fenced: Timing) -> None:
        self._info = (status, launched, fenced)

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self._info


def wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Block until every sync fence fd is readable (signalled); INVALID_ARGUMENT for a bad fd."""
    for fd in fences:
        if not isinstance(fd, int) or fd < 0:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"wait_for holds an invalid sync fence {fd!r}")
        timeout_ms = None if deadline is None else min(2**31 - 1, max(0, -((time.monotonic_ns() - deadline) // 1_000_000)))
        poller = select.poll()  # poll, not select: any fd number (select stops at FD_SETSIZE, 1024)
        try:
            poller.register(fd, select.POLLIN)
            ready = poller.poll(timeout_ms)
        except (OSError, ValueError) as e:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"sync fence {fd} cannot be waited on: {e}") from None
        if any(events & select.POLLNVAL for _, events in ready):
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"sync fence {fd} is not an open file descriptor")
        if not ready:
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "deadline passed while waiting for fences")
