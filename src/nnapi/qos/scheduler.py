"""The QoS scheduler: per-app queues, priorities, fair shares, preemption at checkpoints, deadlines.

Every piece of driver work (a preparation, an execution) is a `Ticket`:

    ticket = scheduler.submit(client=uid, priority=p, deadline=d, stats=s, label="execution")
    result = ticket.run(fn)          # waits for a worker slot, runs fn on this thread, frees the slot

`submit` is admission control and answers at once (well under a millisecond):
- the deadline had passed at the call, or even an idle device could not finish in time
  (the estimate's lower bound is longer than the time left): MISSED_DEADLINE_PERSISTENT;
- the queue holds `capacity` waiting tickets already: RESOURCE_EXHAUSTED_TRANSIENT;
- the work ahead of it would make it miss: MISSED_DEADLINE_TRANSIENT.
A ticket still waiting when it can no longer finish in time (deadline minus its lower bound) gives
up with MISSED_DEADLINE_TRANSIENT.

Granting (a bounded number of `workers` slots): apps are identified by the caller's uid (Q5). Within an app,
higher priority first and first-come first-served within a priority; between apps, the app that has used the
least running time so far (start-time fair queuing: an app that becomes active starts at the least virtual time
of the active apps, so idling banks no credit); short work of an app that is behind starts on a slot lent by an
app ahead of it, which is held while that work runs (`holds`).

Running work calls `checkpoint()` between units of work (operations in the reference interpreter,
sub-models in a compiling driver). Work that outranks running work of its own app does not wait
for a slot: it starts at once on a slot *lent* by that work. A checkpoint
- raises MISSED_DEADLINE_TRANSIENT once the deadline has passed (abort in flight);
- yields the slot when it was lent, or higher-priority work of the same app is waiting, or
  (`exclusive`, the default) running: lower-priority work of an app pauses while its
  higher-priority work runs (Q1);
- yields after `quantum_ns` of running when another app waits and no slot is free (fair shares
  for long work).
A yielding task keeps its whole context on its thread's stack (next operation, live operands), goes back to its
queue with its original place and resumes from the same point when granted again (Q4): results are those of an
uninterrupted run. `policy="fifo"` turns priorities, fairness and preemption off (the baseline the QoS benchmark
compares with).

No priority starves (`shares`): while an app's higher-priority work runs, its waiting lower-priority work is
owed `share` of the running time (a third by default); once owed `turn_ns` it gets a turn: the app's next slot
ahead of its higher priorities, kept (not lent, its native call not stopped) until what it was owed is paid. A
native call that was stopped pays nothing, so work that can only restart still finishes, on a turn.

The host's calls (`Scheduler.foreground`): a host whose calls Python threads must read, handle and answer (the
driver service) sets a probe `foreground(priority)` saying whether running work of that priority should give way
now (the service: LOW work, while a call waits to be read or is being read, and while a synchronous execution of
other work is handled). Work that should pauses at its checkpoints, in short sleeps that release the interpreter
lock (at most `BACKGROUND_PAUSE_NS` each time; never under FIFO, and never once the scheduler wants the work to
yield its slot). Without this a call's thread waited for the lock behind the Python of running work before the
scheduler ever saw the call: the lock goes to whichever thread wins the race, and two threads of work handing it
to each other starved a third for 10 ms and more.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Callable, TypeVar

from .. import tracing as trace
from ..hal import ClientId, ErrorStatus, NnError, Priority
from .estimate import DurationStats
from .holds import Holds
from .shares import owed_ratio
from .ticket import (DONE, QUEUED, RUNNING, AppQueue, Ticket, checkpoint, current, format_ms,  # noqa: F401
                     normalize_deadline)

T = TypeVar("T")

#: Longest pause of running work at one checkpoint while `Scheduler.foreground` says yes, and the
#: sleep it pauses in.
BACKGROUND_PAUSE_NS = 2_000_000
BACKGROUND_SLEEP_S = 0.0002


class Scheduler:
    """Admission, per-app priority queues, fair shares and preemption for one device's work.

    workers: slots, i.e. tasks running at once (default: the CPU count). capacity: waiting tasks
    admitted at most (then RESOURCE_EXHAUSTED_TRANSIENT). clock: monotonic nanoseconds, the clock
    deadlines are on (injectable for tests). quantum_ns: running time after which a task yields to
    another app that waits (None: never). exclusive: an app's lower-priority work pauses while its
    higher-priority work runs. policy: "priority" (all of the above) or "fifo" (arrival order only).
    share, turn_ns: what a lower priority keeps of the running time, and the turns it gets (`shares`).
    alone_turns: its app's higher-priority work pauses during a turn (default: where work started on a
    lent slot waits for the lender, `handoff_ns`: beside the turn's work, it would take most of the
    interpreter lock); else it runs beside the turn on the other slots.
    """

    def __init__(self, workers: int | None = None, capacity: int = 256, *,
                 clock: Callable[[], int] = time.monotonic_ns, quantum_ns: int | None = 20_000_000,
                 exclusive: bool = True, policy: str = "priority", name: str = "driver",
                 handoff_ns: int = 2_000_000, share: float = 1 / 3, turn_ns: int = 50_000_000,
                 alone_turns: bool | None = None) -> None:
        if policy not in ("priority", "fifo"):
            raise ValueError(f"unknown scheduling policy {policy!r}")
        self.workers = max(1, int(workers if workers is not None else (os.cpu_count() or 1)))
        self.capacity = max(1, int(capacity))
        self.clock = clock
        #: The device whose work this is (the track of its trace events).
        self.name = name
        self.fifo = policy == "fifo"
        self.policy = policy
        self.quantum_ns = None if self.fifo else quantum_ns
        #: The head start an app gets when it becomes active (off without a quantum).
        self.wake_credit_ns = (self.quantum_ns or 0) // 2
        self.exclusive = exclusive and not self.fifo
        if not 0 <= share < 1:
            raise ValueError(f"a lower priority's share must be in [0, 1), not {share}")
        #: The share of running time a lower priority level of an app keeps while higher levels saturate,
        #: and how much it is owed before it gets a turn (`shares`; 0: strict priorities).
        self.share = 0.0 if self.fifo else float(share)
        self.share_ratio = owed_ratio(self.share)
        self.turn_ns = max(1, int(turn_ns))
        self.alone_turns = bool(handoff_ns) if alone_turns is None else alone_turns
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)  # a running ticket stopped (finished or paused)
        self._handing_off = 0  # threads waiting on `_changed` (`await_handoff`)
        #: How long work started on a lent slot waits for the lender to pause (0: never waits; for
        #: drivers whose checkpoints are far apart, such as compiled sub-models).
        self.handoff_ns = handoff_ns
        #: The host's probe: should running work of a priority give way now (see the module doc)?
        #: None: no host sets one.
        self.foreground: Callable[[Priority], bool] | None = None
        self._free = self.workers
        self._apps: dict[int, AppQueue] = {}
        self._running: list[Ticket] = []
        #: Cross-app lending and holds (`holds`): how far ahead another app must be, and how long the apps
        #: an app that is behind paused stay paused after its work; off without a quantum.
        self._holds = Holds(self.lock, self._running, (self.quantum_ns or 0) // 4, (self.quantum_ns or 0) // 20,
                            name, self._regrant)
        self._queued = 0
        self._seq = itertools.count()
        self._grants = itertools.count(1)
        self.counters = {k: 0 for k in ("admitted", "completed", "refused_persistent", "refused_transient",
                                        "gave_up_waiting", "aborted", "exhausted", "preemptions", "turns")}

    # --- admission ------------------------------------------------------------------------------
    def submit(self, *, client: "int | ClientId | None" = None, priority: Priority | int = Priority.MEDIUM,
               deadline: int | None = None, stats: DurationStats | None = None, lower_ns: int | None = None,
               label: str = "work") -> Ticket:
        """Admit work or refuse it at once (see the module doc). `client` is the app's uid (default:
        this process's); `stats` the prepared model's past runs; `lower_ns` overrides their bound."""
        uid = os.getuid() if client is None else client if type(client) is int else int(getattr(client, "uid", client))
        key = 0 if self.fifo else uid  # FIFO: one queue for everybody, in arrival order
        priority = priority if type(priority) is Priority else Priority(priority)
        rank = 0 if self.fifo else int(priority)
        if deadline is not None:
            deadline = normalize_deadline(deadline)
        lower = int(lower_ns) if lower_ns is not None else stats.lower_ns() if stats is not None else 0
        now = self.clock()
        if deadline is not None and (now >= deadline or now + lower > deadline):
            self._count("refused_persistent")
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                          f"{label}: the deadline had passed {format_ms(now - deadline)} before the call"
                          if now >= deadline else f"{label}: needs at least {format_ms(lower)} even on an idle "
                          f"device, only {format_ms(deadline - now)} left before the deadline")
        with self.lock:
            if self._queued >= self.capacity:
                self.counters["exhausted"] += 1
                raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                              f"{label}: the driver's queue is full ({self.capacity} tasks waiting)")
            app = self._apps.get(key)
            if app is None:
                app = self._apps[key] = AppQueue(key, now, self.share_ratio)
            ticket = Ticket(self, app, uid, priority, rank, deadline, stats, lower, label, next(self._seq), now)
            if deadline is not None:
                wait = self._predicted_wait(ticket, now)
                if now + wait + lower > deadline:
                    self.counters["refused_transient"] += 1
                    raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                  f"{label}: the work ahead of it takes at least {format_ms(wait)} and it needs "
                                  f"{format_ms(lower)}, only {format_ms(deadline - now)} left before the deadline")
            self.counters["admitted"] += 1
            if not self._running and not self._queued:
                # Nothing running or waiting: granted at once (no queue to order, no flag to change).
                self._account(app, now)
                app.last_grant = next(self._grants)
                app.running.append(ticket)
                self._running.append(ticket)
                self._free -= 1
                ticket.state = RUNNING
                ticket.segment_start = now
                ticket.grant.set()
                return ticket
            if not app.queued and not app.running:  # it becomes active: no credit for idling, but
                # (as a waking thread gets) a little, so short work of a light app need not queue
                active = [a.vtime_at(now) for a in self._apps.values() if a is not app and (a.queued or a.running)]
                if active:
                    app.vtime = max(app.vtime, min(active) - self.wake_credit_ns)
            self._enqueue(ticket, now)
            self._dispatch(now)
            self._update_flags()
        return ticket

    def run(self, fn: Callable[[], T], **submit_args) -> T:
        """`submit(**submit_args).run(fn)`."""
        return self.submit(**submit_args).run(fn)

    def _predicted_wait(self, ticket: Ticket, now: int) -> int:
        """A lower bound of the time before `ticket` would start: the same app's work queued ahead of
        it, plus what the running tasks still need (except those it will preempt), over the slots."""
        app = ticket.app
        ahead = [t for t in app.queued_tickets() if t.rank >= ticket.rank]
        blocked = self.exclusive and app.top_running_rank() > ticket.rank
        lendable = 0 if self.fifo else sum(1 for t in app.running if t.rank < ticket.rank and not t.lent)
        if self._free + lendable > len(ahead) and not blocked:
            return 0
        work = sum(t.lower_ns for t in ahead)
        for t in self._running:
            if t.app is app and t.rank < ticket.rank:
                continue  # it will yield at its next checkpoint
            work += max(0, t.lower_ns - (t.run_ns + now - t.segment_start))
        return work // self.workers

    # --- queues and slots (the lock is held) -----------------------------------------------------
    def _account(self, app: AppQueue, now: int) -> None:
        """Bring the app's priority levels' ledger up to `now` (before any change to its work)."""
        if self.share:
            app.levels.account(app.running, now)

    def _enqueue(self, ticket: Ticket, now: int) -> None:
        self._account(ticket.app, now)
        ticket.app.push(ticket)
        self._queued += 1

    def _unqueue(self, ticket: Ticket, now: int) -> None:
        """A queued ticket leaves its queue (granted, given up or cancelled)."""
        self._account(ticket.app, now)
        ticket.app.leave(ticket)
        self._queued -= 1

    def _begin_turn(self, app: AppQueue, now: int) -> None:
        """Give a turn to the oldest waiting work of the app's level that is owed one (`shares`)."""
        self._account(app, now)
        ticket = app.due_turn(self.turn_ns)
        if ticket is not None:
            self.counters["turns"] += 1
            if trace.active():
                trace.instant("turn", "qos", device=self.name, app=ticket.uid, label=ticket.label)

    def _eligible(self, app: AppQueue) -> Ticket | None:
        if not app.queued:
            return None
        turn = app.levels.turn
        if turn is not None:
            if turn.state == QUEUED:
                return turn  # ahead of the app's other work, whatever their priorities
            if self.alone_turns:  # (and the app's higher-priority work waits for it)
                return app.top_of(turn.rank)
        top = app.top()
        if top is None or (self.exclusive and top.rank < app.top_running_rank()):
            return None
        return top

    def _dispatch(self, now: int) -> None:
        """Grant free slots (fair between apps), then let waiting work that outranks running work of
        its own app start at once on a slot lent by that work, which yields at its next checkpoint
        (work on its turn lends nothing to its own app)."""
        if self.share:
            for app in self._apps.values():
                if (app.queued or app.running) and app.levels.turn is None:
                    self._begin_turn(app, now)
        while self._free > 0:
            best: tuple[int, int, AppQueue, Ticket] | None = None
            for app in self._apps.values():
                top = self._eligible(app)
                if top is not None and self._holds.active() and self._holds.held(app, now):
                    continue
                if top is not None and (best is None or (app.vtime, app.last_grant) < best[:2]):
                    best = (app.vtime, app.last_grant, app, top)
            if best is None:
                break
            self._start(best[2], best[3], now)
        if self.fifo:
            return
        for app in self._apps.values():
            while True:
                top = self._eligible(app)
                turn = app.levels.turn
                victims = [] if top is None else [t for t in app.running
                                                  if t.rank < top.rank and not t.lent and t is not turn]
                if not victims:
                    break
                # The high-priority work need not wait for the victim's checkpoint (and for its
                # thread to be scheduled): it runs now, and the victim gives the slot back when it
                # pauses, so the slots in use exceed `workers` by at most one operation's time.
                victim = min(victims, key=lambda t: (t.rank, -t.seq))
                victim.lent = True
                top.handoff = top.borrowed = victim
                self._start(app, top, now)
        if self._free <= 0 and self._holds.lag_ns:
            self._holds.lend(list(self._apps.values()), now, self._eligible,
                             lambda app, top: self._start(app, top, now))

    def _regrant(self) -> None:
        """Grant and flag again (the holds' thread, while apps are held; the lock is held)."""
        if self._running or self._queued:
            self._dispatch(self.clock())
            self._update_flags()

    def _start(self, app: AppQueue, ticket: Ticket, now: int) -> None:
        """Grant `ticket` a slot (the lock is held)."""
        self._unqueue(ticket, now)
        app.last_grant = next(self._grants)
        if not ticket.owed:  # behind the apps running now: they pause for it
            ticket.owed = self._holds.owed(app, now)
        app.running.append(ticket)
        self._running.append(ticket)
        self._free -= 1
        ticket.state = RUNNING
        ticket.wait_ns += now - ticket.queued_since
        ticket.segment_start = now
        ticket.grant.set()

    def _stop(self, ticket: Ticket, now: int) -> None:
        """End the ticket's running segment: charge its time, free its slot (the lock is held)."""
        if self._handing_off:
            self._changed.notify_all()
        self._account(ticket.app, now)
        spent = now - ticket.segment_start
        ticket.run_ns += spent
        ticket.app.vtime += spent
        ticket.app.running.remove(ticket)
        self._running.remove(ticket)
        self._free += 1
        ticket.yield_at = None
        ticket.lent = False
        ticket.owed = False
        lender, ticket.borrowed = ticket.borrowed, None
        if lender is not None and lender.state == RUNNING and not self.handoff_ns:
            # Native work without a hand-off wait (an XLA sub-model, or an OpenVINO call being stopped,
            # whose thread may wait long for a CPU at the OS's lowest priority): the work it lent its slot
            # to stopped first, so the slots in use are back to `workers` and it need not pause any more;
            # flagged as lent, the next higher-priority work would queue behind it until its checkpoint.
            lender.lent = False

    def _update_flags(self) -> None:
        """Tell each running ticket whether (and from when) to yield at its next checkpoint."""
        if self.fifo:
            return
        waiting_apps = [a for a in self._apps.values() if self._eligible(a) is not None]
        holding = self._holds.active()
        now = self.clock()
        for t in self._running:
            app = t.app
            levels = app.levels
            self._account(app, now)  # (a turn paid for ends)
            turn = levels.turn
            if t is turn:  # its own app's priorities wait for it (`shares`)
                urgent = t.lent or (holding and self._holds.held(app, now))
            else:
                top = app.top() if app.queued else None
                # (beside its level's turn, where the app's higher-priority work waits for the turn: that
                # work cannot start before the turn ends, so it does not make this work pause; else work
                # granted beside the turn would be told to yield at once, again and again)
                beside = turn is not None and self.alone_turns and t.rank == turn.rank
                urgent = t.lent or (top is not None and top.rank > t.rank and not beside) or (
                    self.exclusive and app.top_running_rank() > t.rank) or (holding and self._holds.held(app, now))
            if urgent:
                if t.yield_at != 0 and t.preempt is not None:
                    try:  # native work without checkpoints: stop it now, it restarts when granted again
                        t.preempt()
                    except Exception:
                        pass
                t.yield_at = 0
                continue
            if turn is not None and t.rank > turn.rank and (
                    self.alone_turns or (turn.state == QUEUED and self._free <= 0)):
                t.yield_at = 0  # its app's turn waits for it: it pauses at its next checkpoint
                continue
            at = None
            if self.quantum_ns is not None and self._free == 0 and any(a is not app for a in waiting_apps):
                at = t.segment_start + self.quantum_ns
            if t is turn and t.native_since is None:
                paid = now + max(0, levels.owed(t.rank))  # the turn ends at the checkpoint after
                at = paid if at is None else min(at, paid)
            elif turn is None and self.share and app.queued and t.rank > 0:
                due = levels.due_in(app.running, self.turn_ns)
                if due is not None:  # a lower level comes due: its turn begins at this work's checkpoint
                    at = now + due if at is None else min(at, now + due)
            t.yield_at = at

    def await_handoff(self, ticket: Ticket) -> None:
        """Work that started on a slot lent by lower-priority work of its app waits (at most
        `handoff_ns`) for that work to pause at its next checkpoint, so the two never contend for the
        CPUs and the interpreter lock while the higher-priority work runs (the waiting itself releases
        the lock, which lets the lower-priority threads reach their checkpoints at once)."""
        lender, ticket.handoff = ticket.handoff, None
        if not self.handoff_ns:
            return
        limit = time.monotonic() + self.handoff_ns / 1e9
        with self._changed:
            self._handing_off += 1
            try:
                while (lender.state == RUNNING and lender.lent) or (
                        lender.app is ticket.app and any(t.rank < ticket.rank for t in ticket.app.running)) or (
                        ticket.owed and any(t.yield_at == 0 and t.app is not ticket.app for t in self._running)):
                    left = limit - time.monotonic()
                    if left <= 0:
                        return
                    self._changed.wait(left)
            finally:
                self._handing_off -= 1

    # --- called by tickets ------------------------------------------------------------------------
    def wait_for_grant(self, ticket: Ticket) -> None:
        """Block until granted; give up (MISSED_DEADLINE_TRANSIENT) once it could no longer finish."""
        while not ticket.grant.is_set():
            # What it still needs at least: its bound less what it already ran (when preempted).
            give_up = None if ticket.deadline is None else ticket.deadline - max(0, ticket.lower_ns - ticket.run_ns)
            timeout = None if give_up is None else min(threading.TIMEOUT_MAX, max(0.0, (give_up - self.clock()) / 1e9))
            if ticket.grant.wait(self.lock, timeout):
                return
            with self.lock:
                if ticket.state == RUNNING:
                    return
                now = self.clock()
                if give_up is not None and now >= give_up and ticket.state == QUEUED:
                    self._unqueue(ticket, now)
                    ticket.state = DONE   # lazily removed from the heap
                    ticket.app.levels.release(ticket)
                    ticket.wait_ns += now - ticket.queued_since
                    self.counters["gave_up_waiting"] += 1
                    self._update_flags()
                    raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                  f"{ticket.label}: waited {format_ms(now - ticket.queued_since)} behind other work "
                                  f"and can no longer finish by the deadline")

    def yield_slot(self, ticket: Ticket, where: str) -> None:
        with self.lock:
            now = self.clock()
            if ticket.state != RUNNING or ticket.yield_at is None or now < ticket.yield_at:
                return
            if ticket.yield_at:  # a flag set for a time (a quantum, a turn coming due or paid): still so?
                self._dispatch(now)
                self._update_flags()
                if ticket.state != RUNNING or ticket.yield_at is None or now < ticket.yield_at:
                    return
            self._stop(ticket, now)
            ticket.preemptions += 1
            ticket.preempted_at.append(where)
            self.counters["preemptions"] += 1
            ticket.queued_since = now
            self._enqueue(ticket, now)
            self._dispatch(now)
            self._update_flags()
        if trace.active():
            trace.instant("preempted", "qos", device=self.name, app=ticket.uid, label=ticket.label, where=where)
            paused = trace.now_us()
            self.wait_for_grant(ticket)
            trace.complete("paused", "qos", paused, trace.now_us(), device=self.name, app=ticket.uid,
                           label=ticket.label)
        else:
            self.wait_for_grant(ticket)

    def finish(self, ticket: Ticket, outcome: str) -> None:
        with self.lock:
            now = self.clock()
            if ticket.state == RUNNING:
                if ticket.owed:
                    self._holds.begin_grace(ticket.app)
                self._stop(ticket, now)
            elif ticket.state == QUEUED:
                self._unqueue(ticket, now)
            ticket.state = DONE
            ticket.app.levels.release(ticket)  # (what it ran on a turn was paid for as it ran)
            if outcome == "ok":
                self.counters["completed"] += 1
            elif outcome == "missed":
                self.counters["aborted"] += 1
            if self._running or self._queued:  # else nothing to grant and no flag to change
                self._dispatch(now)
                self._update_flags()
        if outcome == "ok" and ticket.stats is not None:
            ticket.stats.record(ticket.run_ns)

    def native_began(self, ticket: Ticket) -> None:
        """`ticket` enters a native call that may be stopped (`Ticket.preemptible`; the lock is held):
        its time counts as progress only once the call completes."""
        now = self.clock()
        self._account(ticket.app, now)
        ticket.native_since, ticket.native_useful = now, 0

    def native_ended(self, ticket: Ticket, completed: bool) -> None:
        """`ticket`'s native call ended (the lock is held): completed, its time pays its level's debt;
        stopped, it was wasted (`shares`). A turn paid for is over."""
        now = self.clock()
        app = ticket.app
        self._account(app, now)
        since, ticket.native_since = ticket.native_since, None
        if self.share and completed and since is not None and app.levels.completed(ticket):
            self._dispatch(now)  # its turn is over
            self._update_flags()

    def _count(self, counter: str) -> None:
        with self.lock:
            self.counters[counter] += 1

    # --- introspection ----------------------------------------------------------------------------
    def give_way(self, ticket: Ticket) -> None:
        """At `ticket`'s checkpoint: sleep (releasing the interpreter lock) while the host's probe says work of this priority
        should give way, for at most BACKGROUND_PAUSE_NS, and not once the scheduler wants the work
        to yield its slot (the checkpoint then yields it as usual). The pause pays nothing of what its
        level is owed (`shares`)."""
        probe, priority = self.foreground, ticket.priority
        try:
            if probe is None or not probe(priority):
                return
            self._pausing(ticket, True)
            try:
                end = time.monotonic_ns() + BACKGROUND_PAUSE_NS
                while time.monotonic_ns() < end:
                    yield_at = ticket.yield_at
                    if yield_at is not None and self.clock() >= yield_at:
                        return
                    time.sleep(BACKGROUND_SLEEP_S)
                    if not probe(priority):
                        return
            finally:
                self._pausing(ticket, False)
        except Exception:  # a broken probe never stops the work
            self.foreground = None

    def _pausing(self, ticket: Ticket, pausing: bool) -> None:
        with self.lock:
            self._account(ticket.app, self.clock())
            ticket.pausing = pausing

    def snapshot(self) -> dict:
        """Slots in use, queued tasks and per-app figures (for tests, benchmarks and tools)."""
        with self.lock:
            return {"workers": self.workers, "running": len(self._running), "queued": self._queued,
                    "apps": {a.uid: {"vtime_ns": a.vtime, "queued": a.queued, "running": len(a.running)}
                             for a in self._apps.values()},
                    **self.counters}
