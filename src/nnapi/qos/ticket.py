"""A ticket: one admitted piece of driver work, run once on its caller's thread (see `scheduler`).

It holds the work's priority, deadline and accounting, and the state the scheduler keeps for it
(granted, lent, yielding); `checkpoint()` between units of work reaches the scheduler through it.
The scheduler owns and changes that state, under its `lock`.
"""
from __future__ import annotations

import heapq
import sys
import threading
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from .. import tracing as trace
from ..hal import ErrorStatus, NnError, Priority
from ..hal.constants import NO_DEADLINE
from .background import Lowered, lower
from .estimate import DurationStats
from .shares import Levels

if TYPE_CHECKING:
    from .scheduler import Scheduler

T = TypeVar("T")

_local = threading.local()

QUEUED, RUNNING, DONE = "queued", "running", "done"



def normalize_deadline(deadline: int | None) -> int | None:
    """None for no deadline (None, or NO_DEADLINE and above: the largest value must not overflow)."""
    return None if deadline is None or deadline >= NO_DEADLINE else int(deadline)


def current() -> "Ticket | None":
    """The ticket the calling thread is running, if any."""
    return getattr(_local, "ticket", None)


def checkpoint(where: str = "") -> None:
    """A checkpoint for whatever ticket this thread runs (no-op outside scheduled work)."""
    ticket = getattr(_local, "ticket", None)
    if ticket is not None:
        ticket.checkpoint(where)


def format_ms(ns: float) -> str:
    """Nanoseconds as milliseconds, for messages."""
    return f"{ns / 1e6:.3f} ms"


class AppQueue:
    """One client's queue, share and priority levels (`shares.Levels`)."""

    __slots__ = ("uid", "vtime", "heap", "running", "queued", "last_grant", "levels")

    def __init__(self, uid: int, now: int = 0, ratio: tuple[int, int] = (1, 2)) -> None:
        self.uid = uid
        self.vtime = 0            # running time used, in ns (the fair-share clock)
        #: (-priority, seq, enqueue count, ticket), lazily cleaned: an entry is live while its ticket is
        #: queued and was queued by it (a ticket on a turn leaves the queue from the middle).
        self.heap: list[tuple[int, int, int, Ticket]] = []
        self.running: list[Ticket] = []
        self.queued = 0
        self.last_grant = 0
        self.levels = Levels(now, ratio)

    def vtime_at(self, now: int) -> int:
        """The fair-share clock at `now`, the running segments included."""
        return self.vtime + sum(now - t.segment_start for t in self.running)

    def push(self, ticket: "Ticket") -> None:
        """Queue `ticket` (the scheduler's lock is held)."""
        ticket.state = QUEUED
        ticket.grant.clear()
        ticket.enqueues += 1
        heapq.heappush(self.heap, (-ticket.rank, ticket.seq, ticket.enqueues, ticket))
        self.queued += 1
        self.levels.waiting[ticket.rank] += 1

    def leave(self, ticket: "Ticket") -> None:
        """`ticket` leaves the queue (granted, given up or cancelled; its entry goes lazily unless on top)."""
        if self.top() is ticket:
            heapq.heappop(self.heap)
        self.queued -= 1
        self.levels.waiting[ticket.rank] -= 1

    def top(self) -> "Ticket | None":
        heap = self.heap
        while heap and not _live(heap[0]):
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def top_of(self, rank: int) -> "Ticket | None":
        """The oldest queued ticket of rank `rank`."""
        live = [e for e in self.heap if e[0] == -rank and _live(e)]
        return min(live)[3] if live else None

    def due_turn(self, turn_ns: int) -> "Ticket | None":
        """Give a turn to the level owed one, if any (`shares`): to its oldest queued ticket, else to its
        oldest running one in a native call beside higher-priority work (one that cannot be stopped,
        an XLA sub-model, at the OS's lowest priority, goes on at the normal one; one that can is no
        longer stopped); that ticket."""
        levels = self.levels
        if levels.turn is not None:
            return None
        top = self.top() if self.queued else None
        rank = levels.due(self.running, -1 if top is None else top.rank, turn_ns)
        if rank is None:
            return None
        ticket = self.top_of(rank)
        if ticket is None:
            held = [t for t in self.running if t.rank == rank and t.in_native]
            if not held:
                return None
            ticket = min(held, key=lambda t: t.seq)
            ticket.lent = False  # (its borrower keeps running beside it until it ends)
            lowered = ticket.lowered
            if lowered is not None:
                lowered.restore()
        levels.turn = ticket
        ticket.turns += 1
        return ticket

    def queued_tickets(self) -> "list[Ticket]":
        return [e[3] for e in self.heap if _live(e)]

    def top_running_rank(self) -> int:
        return max((t.rank for t in self.running), default=-1)


def _live(entry: tuple) -> bool:
    ticket = entry[3]
    return ticket.state == QUEUED and entry[2] == ticket.enqueues


class Grant:
    """A ticket's permission to run: a flag set and cleared under the scheduler's lock, with an event
    made only when a thread has to wait for it (most work is granted at once, without one)."""

    __slots__ = ("granted", "_event")

    def __init__(self) -> None:
        self.granted = False
        self._event: threading.Event | None = None

    def set(self) -> None:
        self.granted = True
        if self._event is not None:
            self._event.set()

    def clear(self) -> None:
        self.granted = False
        if self._event is not None:
            self._event.clear()

    def is_set(self) -> bool:
        return self.granted

    def wait(self, lock: threading.Lock, timeout: float | None) -> bool:
        """Wait until granted (True) or `timeout` seconds pass (False); `lock` is the scheduler's."""
        with lock:
            if self.granted:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


class Ticket:
    """One admitted piece of work. Run it once with `run(fn)`; `fn` calls `checkpoint()` (or the
    module-level `qos.checkpoint()`) between its units of work."""

    __slots__ = ("scheduler", "app", "uid", "priority", "rank", "deadline", "stats", "lower_ns", "label", "seq",
                 "state", "submitted_ns", "run_ns", "wait_ns", "preemptions", "preempted_at", "segment_start",
                 "queued_since", "yield_at", "lent", "handoff", "borrowed", "owed", "preempt", "native_since",
                 "native_useful", "pausing", "in_native", "lowered", "enqueues", "turns", "grant", "ran",
                 "__weakref__")

    def __init__(self, scheduler: "Scheduler", app: AppQueue, uid: int, priority: Priority, rank: int,
                 deadline: int | None, stats: DurationStats | None, lower_ns: int, label: str, seq: int, now: int) -> None:
        self.scheduler = scheduler
        self.app = app
        self.uid = uid               # the client (app) it runs for
        self.priority = priority
        self.rank = rank             # the priority the queues order by (0 for all under FIFO)
        self.deadline = deadline
        self.stats = stats
        self.lower_ns = lower_ns
        self.label = label
        self.seq = seq
        self.state = QUEUED
        self.submitted_ns = now
        self.run_ns = 0              # time spent running (holding a slot), excluding waits
        self.wait_ns = 0             # time spent queued (first wait plus every preemption)
        self.preemptions = 0
        self.preempted_at: list[str] = []
        self.segment_start = now
        self.queued_since = now
        self.yield_at: int | None = None
        self.lent = False           # its slot went to higher-priority work: yield at the next checkpoint
        self.handoff: Ticket | None = None  # it started on this ticket's lent slot: let it pause first
        self.borrowed: Ticket | None = None  # the ticket whose slot it runs on, until it stops
        self.owed = False           # it runs on a slot lent by another app (see `_lend_across_apps`)
        self.preempt: Callable[[], None] | None = None  # stops native work at once (see `preemptible`)
        self.native_since: int | None = None  # in a native call that may be stopped, since (`preemptible`)
        self.native_useful = 0      # of which useful running (`shares`), paid once the call completes
        self.pausing = False        # giving way to the host's calls (`Scheduler.give_way`)
        self.in_native = False      # in a native call (`native`), at the OS's lowest priority if `lowered`
        self.lowered: Lowered | None = None
        self.enqueues = 0           # times queued (its live entry in the app's heap is the last one)
        self.turns = 0              # turns it was given (`shares`)
        self.grant = Grant()
        self.ran = False

    def running_ns(self) -> int:
        """Running time so far: a clock that stops while the ticket waits (for loop timeouts)."""
        if self.state == RUNNING:
            return self.run_ns + self.scheduler.clock() - self.segment_start
        return self.run_ns

    def run(self, fn: Callable[..., T], *args: object) -> T:
        """Wait for a slot, run `fn(*args)` on this thread with this ticket current, free the slot."""
        if self.ran:
            raise RuntimeError("a ticket runs once")
        self.ran = True
        scheduler = self.scheduler
        previous = getattr(_local, "ticket", None)
        outcome = "error"
        try:
            if not self.grant.granted:  # (most work is granted at submission)
                if trace.active():
                    queued = trace.now_us()
                    scheduler.wait_for_grant(self)
                    trace.complete("queued", "qos", queued, trace.now_us(), device=scheduler.name, app=self.uid,
                                   label=self.label, priority=self.priority.name)
                else:
                    scheduler.wait_for_grant(self)
            if self.handoff is not None:
                scheduler.await_handoff(self)
            _local.ticket = self
            result = fn(*args)
            outcome = "ok"
            return result
        except NnError as e:
            if e.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
                outcome = "missed"
            raise
        finally:
            _local.ticket = previous
            scheduler.finish(self, outcome)

    def checkpoint(self, where: str = "") -> None:
        """Abort once the deadline has passed; yield when the scheduler asks (then resume here); give
        way to the host's calls (see the module doc), also once resumed."""
        # (nor during a turn of its level: the scheduler chose to run that level now)
        turn = self.app.levels.turn
        giving_way = self.scheduler.foreground is not None and not self.scheduler.fifo and (
            turn is None or turn.rank > self.rank)
        if giving_way:
            self.scheduler.give_way(self)
        deadline, yield_at = self.deadline, self.yield_at
        if deadline is None and yield_at is None:
            return
        now = self.scheduler.clock()
        if deadline is not None and now > deadline:
            trace.instant("deadline abort", "qos", device=self.scheduler.name, app=self.uid, label=self.label,
                          where=where)
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                          f"{self.label}: deadline passed {format_ms(now - deadline)} ago, aborted"
                          + (f" before {where}" if where else ""))
        if yield_at is not None and now >= yield_at:
            self.scheduler.yield_slot(self, where)
            if giving_way:
                self.scheduler.give_way(self)

    @property
    def on_turn(self) -> bool:
        """Whether it holds its app's turn (`shares`): its app's higher-priority work waits for it."""
        return self.app.levels.turn is self

    def preemptible(self, stop: Callable[[], None]) -> "NativeSection":
        """Around one native call that reaches no checkpoint: when the scheduler wants this work to
        yield, `stop()` is called (from another thread) to end the call early; the caller then reaches
        `checkpoint()`, pauses, and runs the call again from scratch when granted again (Q4: executions
        are deterministic, so a restart gives the same result). The call's time counts as progress of
        its level (`shares`) only if it completes: a stopped call was wasted."""
        return NativeSection(self, stop, None)

    def native(self, workers: Sequence[str] = ()) -> "NativeSection":
        """Around one native call: LOW work runs it at the OS's lowest priority with the library's
        threads named `workers` (`background`), except on its turn, which it must not spend waiting
        (a turn given during the call gives the priorities back: `AppQueue.due_turn`)."""
        return NativeSection(self, None, workers)

    def native_section(self, stop: Callable[[], None] | None, workers: Sequence[str] = ()) -> "NativeSection":
        """`preemptible(stop)` (unless `stop` is None) and `native(workers)` around one call, in one step."""
        return NativeSection(self, stop, workers)

    @property
    def yield_requested(self) -> bool:
        """True when the scheduler wants this running work to pause at its next checkpoint now."""
        return self.yield_at == 0

    def cancel(self) -> None:
        """Give the ticket up without running it (frees its place or its slot)."""
        if not self.ran:
            self.ran = True
            self.scheduler.finish(self, "cancelled")


class NativeSection:
    """A ticket's native call (`Ticket.preemptible`, `Ticket.native`, or both): a context manager that
    registers it with the scheduler in one step under its lock and ends it in one (an execution's path
    pays it once per call, so it is a plain class, not a generator). Entering gives the call's
    `background.Lowered` hold, or None."""

    __slots__ = ("ticket", "stop", "workers", "lowered")

    def __init__(self, ticket: Ticket, stop: Callable[[], None] | None, workers: Sequence[str] | None) -> None:
        self.ticket, self.stop, self.workers = ticket, stop, workers
        self.lowered: Lowered | None = None

    def __enter__(self) -> Lowered | None:
        ticket, stop = self.ticket, self.stop
        scheduler = ticket.scheduler
        native = self.workers is not None
        lowered = lower(Priority.MEDIUM if ticket.on_turn else ticket.priority, self.workers) if native else None
        flagged = False
        with scheduler.lock:
            if stop is not None:
                ticket.preempt = stop
                scheduler.native_began(ticket)
                flagged = ticket.yield_at == 0
            if native:
                ticket.in_native, ticket.lowered = True, lowered
        self.lowered = lowered
        if flagged:
            try:
                stop()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise
        return lowered

    def __exit__(self, exc_type, exc, tb) -> bool:
        ticket = self.ticket
        scheduler = ticket.scheduler
        try:
            with scheduler.lock:
                if self.workers is not None:
                    ticket.in_native, ticket.lowered = False, None
                if self.stop is not None:
                    ticket.preempt = None
                    scheduler.native_ended(ticket, exc_type is None)
        finally:
            lowered, self.lowered = self.lowered, None
            if lowered is not None:
                lowered.restore()
        return False
