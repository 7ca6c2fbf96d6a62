"""Timeouts and deadlines of compilations and executions: seconds in, one absolute monotonic deadline out."""
from __future__ import annotations

import time

from ..hal import NO_DEADLINE, NnError, ResultCode


def timeout_ns(seconds: float | None, what: str) -> int | None:
    """A timeout in seconds as nanoseconds; None for none (None, 0 or infinity). BAD_DATA when negative
    or not a number."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise NnError(ResultCode.BAD_DATA, f"{what}: invalid timeout {seconds!r} (seconds, >= 0)")
    if seconds == 0 or seconds >= NO_DEADLINE / 1e9:  # none, or beyond any clock: none (never overflows)
        return None
    return int(seconds * 1e9)


def deadline_after(ns: int | None) -> int | None:
    """The absolute deadline `ns` from now on the monotonic clock; None when there is no timeout or the
    sum would reach the largest value (clamped, as Android's makeDeadline does, so it cannot overflow)."""
    if ns is None:
        return None
    deadline = time.monotonic_ns() + ns
    return None if deadline >= NO_DEADLINE else deadline
