"""Guaranteed shares between the priority levels of one app: lower-priority work is never starved.

Within an app, higher priority runs first (Q1). Left at that, LOW work never runs while HIGH work is
continuous, and LOW work that a driver can only restart (a cancelled native call, Q4) never finishes
while HIGH work keeps arriving. So each app keeps a ledger of its levels (`Levels`):
- while a level has work (waiting, or running beside them: paused soon, or in a native call that
  may be stopped) and higher levels of the app run, it is *owed* `share / (1 - share)` of their
  running time (all their slots counted): with share 1/3, a third of the running time when both
  saturate; and the time it gave way to its host's calls (`Scheduler.give_way`), in full: a courtesy
  to the latency of calls in flight, not a share for higher-priority work;
- its own useful running time pays the debt back: running while no higher level runs (beside them it
  pauses at its next checkpoint, or runs native code in the OS's background) or on its turn, and not
  while it gives way to its host's calls; in a native call that may be stopped, only once the call
  has completed (a stopped call's time was wasted, not given);
- outside a turn the ledger never goes below zero (running while the higher levels idle banks
  nothing), and what a level is owed is cleared when it has no work left (no credit for a past backlog).
Once a level is owed `turn_ns`, its oldest waiting work gets a *turn* (or, when all its work runs
beside higher-priority work in native calls, the oldest of those, where it is: back at the normal OS
priority, no longer stopped): the scheduler grants it the app's next slot ahead of the higher levels,
and while it runs the app's own higher-priority work neither takes its slot nor stops its native
call; it runs until what was owed is paid, or to the end of the native call it is in (the overshoot
is a debt that the next turn waits for). One ticket per app holds a turn at a time; where work
fights for the interpreter lock the app's higher-priority work pauses during a turn
(`Scheduler.alone_turns`), elsewhere it keeps the device's other slots.

The ledger counts exact integer nanoseconds, scaled by the denominator of the owed ratio.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from ..hal import Priority

if TYPE_CHECKING:
    from .ticket import Ticket

#: The ranks the queues order by (a Priority's value; 0 for everything under FIFO).
RANKS = len(Priority)


def owed_ratio(share: float) -> tuple[int, int]:
    """`share / (1 - share)` as a fraction (numerator, denominator) of small integers: what a waiting level
    is owed per ns of higher-priority running time."""
    ratio = Fraction(share).limit_denominator(1000)
    return ratio.numerator, ratio.denominator - ratio.numerator


class Levels:
    """One app's ledger of what each priority level is owed (see the module doc). The scheduler keeps
    it up to date under its lock: `account` before any change to the app's queued or running work."""

    __slots__ = ("waiting", "accounted", "turn", "_owed", "_num", "_den")

    def __init__(self, now: int, ratio: tuple[int, int] = (1, 2)) -> None:
        self.waiting = [0] * RANKS          # queued tickets per rank
        self.accounted = now                # the ledger is exact up to this time
        self.turn: "Ticket | None" = None   # the ticket on a turn, if any
        self._num, self._den = ratio
        self._owed = [0] * RANKS            # per rank: ns owed (negative: a debt), times `_den`

    def owed(self, rank: int) -> int:
        """Nanoseconds of running time level `rank` is owed (rounded up; negative: its debt)."""
        return -(-self._owed[rank] // self._den)

    def account(self, running: Sequence["Ticket"], now: int) -> None:
        """Bring the ledger up to `now`: the app's queued and running work was as it is since
        `accounted` (the scheduler calls this before each change). A turn paid for ends."""
        dt = now - self.accounted
        self.accounted = now
        if dt > 0 and not running and not any(self.waiting):
            # Nothing queued or running (an idle app's next work starts): no level has a backlog left.
            owed = self._owed
            if max(owed) > 0:
                for rank, o in enumerate(owed):
                    if o > 0:
                        owed[rank] = 0
        elif dt > 0 and len(running) == 1 and self.turn is None and not running[0].pausing \
                and not any(self.waiting) and max(self._owed) <= 0:
            # One execution alone in the app (the common case, accounted at each of its steps): no level
            # is owed anything, so nothing changes but what a native call would pay on completion.
            if running[0].native_since is not None:
                running[0].native_useful += dt
        elif dt > 0:
            # (one pass over the running work, then one per level: this runs twice per execution)
            owed, waiting = self._owed, self.waiting
            counts, pausing, higher = [0] * RANKS, [0] * RANKS, [0] * RANKS
            for t in running:
                counts[t.rank] += 1
                if t.pausing:
                    pausing[t.rank] += 1
            above = 0
            for rank in range(RANKS - 1, -1, -1):
                higher[rank] = above
                if waiting[rank] or counts[rank]:
                    owed[rank] += dt * (above * self._num + pausing[rank] * self._den)
                elif owed[rank] > 0:
                    owed[rank] = 0  # the level has no work left: its backlog is over
                above += counts[rank]
            # Useful running: alone at the top of the app, or on the turn (beside higher work, other
            # work pauses soon or runs native code in the OS's background: little progress); a
            # native call that may be stopped keeps what it would pay until it completes.
            paying = [0] * RANKS if running else None
            for t in running:
                if not t.pausing and (not higher[t.rank] or t is self.turn):
                    if t.native_since is None:
                        paying[t.rank] += 1
                    else:
                        t.native_useful += dt
            for rank, n in enumerate(paying or ()):
                if n:
                    self.pay(rank, dt * n)
        turn = self.turn
        if turn is not None and turn.native_since is None and self._owed[turn.rank] <= 0:
            self.turn = None  # paid: the app's priorities hold again

    def pay(self, rank: int, ns: int) -> None:
        """Useful running time of level `rank`: below zero only on a turn (the overshoot of a native
        call), and an existing debt is never forgiven."""
        owed = self._owed[rank]
        turn = self.turn
        if turn is not None and turn.rank == rank:
            self._owed[rank] = owed - ns * self._den
        else:
            self._owed[rank] = max(owed - ns * self._den, min(owed, 0))

    def completed(self, ticket: "Ticket") -> bool:
        """`ticket`'s native call completed: its level is paid its useful time; whether that ended its turn."""
        self.pay(ticket.rank, ticket.native_useful)
        if self.turn is ticket and self._owed[ticket.rank] <= 0:
            self.turn = None
            return True
        return False

    def release(self, ticket: "Ticket") -> None:
        """`ticket` ended: its turn, if it had one, is over."""
        if self.turn is ticket:
            self.turn = None

    def due(self, running: Sequence["Ticket"], top_rank: int, turn_ns: int) -> int | None:
        """The rank that should get a turn now (the most owed of those owed `turn_ns` with work below
        other work of the app, `top_rank` being the highest queued), or None."""
        if self.turn is not None:
            return None
        best = None
        top = max(top_rank, max((t.rank for t in running), default=-1))
        for rank in range(top):
            owed = self._owed[rank]
            has_work = self.waiting[rank] or any(t.rank == rank for t in running)
            if has_work and owed >= turn_ns * self._den and (best is None or owed > self._owed[best]):
                best = rank
        return best

    def due_in(self, running: Sequence["Ticket"], turn_ns: int) -> int | None:
        """Nanoseconds until a level comes due for a turn at the present rates (None: none will)."""
        if self.turn is not None or not self._num:
            return None
        soonest = None
        for rank in range(RANKS):
            if not (self.waiting[rank] or any(t.rank == rank for t in running)):
                continue
            higher = sum(1 for t in running if t.rank > rank)
            if not higher:
                continue
            left = max(0, -(-(turn_ns * self._den - self._owed[rank]) // (higher * self._num)))  # (rounded up)
            soonest = left if soonest is None else min(soonest, left)
        return soonest
