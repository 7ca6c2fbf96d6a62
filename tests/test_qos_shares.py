"""Lower priorities keep a share (`nnapi.qos.shares`): under continuous higher-priority work of its app, LOW
work gets turns worth its share of the running time (a quarter here), a HIGH execution that arrives during a
turn starts at the checkpoint where the turn is paid, and LOW work that can only restart (a cancelled native
call) finishes.

A fake clock moves only inside the work (1 ms per step), and with one slot only one task steps at a time,
so every figure here is exact, not timed."""
from __future__ import annotations

import threading

import pytest

from nnapi.hal import Priority
from nnapi.qos import Scheduler, checkpoint, current
from nnapi.qos.shares import Levels, owed_ratio

from qos_kit import WAIT, FakeClock

pytestmark = pytest.mark.timing

LOW, MEDIUM, HIGH = Priority.LOW, Priority.MEDIUM, Priority.HIGH
MS = 1_000_000


class Stub:
    """What the ledger reads of a ticket."""

    def __init__(self, rank: int, native: bool = False) -> None:
        self.rank = int(rank)
        self.native_since = 0 if native else None
        self.native_useful = 0
        self.pausing = False


# --- the ledger -----------------------------------------------------------------------------------
def test_a_waiting_level_is_owed_a_third_of_the_higher_levels_running_time_and_pays_it_back():
    levels = Levels(0, owed_ratio(0.25))
    levels.waiting[LOW] = 1
    levels.account([Stub(HIGH), Stub(HIGH)], 30 * MS)           # two HIGH slots for 30 ms
    assert levels.owed(LOW) == 20 * MS
    assert levels.owed(HIGH) == 0                               # nothing waits above HIGH
    levels.waiting[LOW] = 0
    levels.account([Stub(LOW)], 35 * MS)                        # it runs 5 ms
    assert levels.owed(LOW) == 15 * MS
    levels.account([Stub(LOW)], 60 * MS)                        # outside a turn: never below zero
    assert levels.owed(LOW) == 0


def test_work_beside_higher_priority_work_pays_only_on_its_turn():
    """Beside HIGH work, LOW work pauses at its next checkpoint or runs native code in the OS's background:
    it makes little progress, is owed more, and pays nothing; on its turn it pays as it runs."""
    levels = Levels(0, owed_ratio(0.25))
    low = Stub(LOW)
    levels.account([Stub(HIGH), low], 30 * MS)
    assert levels.owed(LOW) == 10 * MS
    levels.turn = low
    levels.account([Stub(HIGH), low], 36 * MS)                  # owed 2 ms more, paid 6
    assert levels.owed(LOW) == 6 * MS and levels.turn is low
    levels.account([Stub(HIGH), low], 45 * MS)                  # paid: the turn is over
    assert levels.owed(LOW) == 0 and levels.turn is None


def test_the_time_work_gives_way_to_its_hosts_calls_is_owed_back_in_full():
    levels = Levels(0, owed_ratio(0.25))
    low = Stub(LOW)
    low.pausing = True
    levels.account([low], 7 * MS)
    assert levels.owed(LOW) == 7 * MS
    low.pausing = False
    levels.account([low], 10 * MS)                              # then it runs: paid 3 ms
    assert levels.owed(LOW) == 4 * MS


def test_a_native_call_pays_its_useful_time_once_completed_and_a_level_without_work_is_cleared():
    levels = Levels(0, owed_ratio(0.25))
    levels.waiting[LOW] = 1
    levels.account([Stub(HIGH)], 90 * MS)
    assert levels.owed(LOW) == 30 * MS
    levels.waiting[LOW] = 0
    call = Stub(LOW, native=True)
    levels.account([call, Stub(HIGH)], 120 * MS)                # beside HIGH (in the OS's background): owed 10
    levels.account([call], 135 * MS)                            # alone: 15 ms of useful time, kept for now
    assert levels.owed(LOW) == 40 * MS and call.native_useful == 15 * MS
    assert not levels.completed(call)                           # (the scheduler, when it completes)
    assert levels.owed(LOW) == 25 * MS
    levels.account([], 151 * MS)                                # no LOW work left: no credit kept
    assert levels.owed(LOW) == 0


def test_a_turn_may_overshoot_into_a_debt_that_running_outside_a_turn_never_forgives():
    levels = Levels(0, owed_ratio(0.25))
    low = Stub(LOW)
    levels.waiting[LOW] = 1
    levels.account([Stub(HIGH)], 30 * MS)
    assert levels.due([], HIGH, 10 * MS) == LOW
    levels.turn = low
    levels.waiting[LOW] = 0
    levels.pay(LOW, 25 * MS)                                    # a native call longer than the turn
    assert levels.owed(LOW) == -15 * MS
    levels.turn = None
    levels.account([low], 35 * MS)
    levels.account([], 40 * MS)                                 # (idle: a debt is kept)
    assert levels.owed(LOW) == -15 * MS
    levels.waiting[LOW] = 1
    assert levels.due([], HIGH, 1) is None
    assert levels.due_in([Stub(HIGH)], 10 * MS) == 75 * MS      # the debt first, then a turn's worth


def test_the_most_owed_level_below_other_work_comes_due():
    levels = Levels(0, owed_ratio(0.25))
    levels.waiting[LOW] = levels.waiting[MEDIUM] = 1
    levels.account([Stub(HIGH)], 120 * MS)                      # both owed 40 ms
    levels.waiting[MEDIUM] = 0
    levels.account([Stub(MEDIUM)], 135 * MS)                    # MEDIUM alone pays 15 ms, LOW is owed 5 more
    assert (levels.owed(LOW), levels.owed(MEDIUM)) == (45 * MS, 25 * MS)
    levels.waiting[MEDIUM] = 1
    assert levels.due([], HIGH, 20 * MS) == LOW
    assert levels.due([Stub(MEDIUM)], MEDIUM, 20 * MS) == LOW
    assert levels.due([], LOW, 20 * MS) is None                 # nothing above it: no turn needed
    assert levels.due_in([Stub(HIGH)], 40 * MS) == 0            # LOW is due already
    assert Levels(0, owed_ratio(0.25)).due_in([Stub(HIGH)], 40 * MS) is None   # nothing waits


# --- the scheduler -------------------------------------------------------------------------------
class Steps:
    """A task of `steps` units of 1 ms of fake time, each after a checkpoint, logged as (name, step)."""

    def __init__(self, clock: FakeClock, log: list, name: str, steps: int) -> None:
        self.clock, self.log, self.name, self.steps = clock, log, name, steps

    def __call__(self) -> None:
        for k in range(self.steps):
            checkpoint(f"{self.name} step {k}")
            self.clock.advance(MS)
            self.log.append((self.name, k))


def run_on_thread(ticket, fn) -> threading.Thread:
    t = threading.Thread(target=ticket.run, args=(fn,), daemon=True)
    t.start()
    return t


def test_a_high_execution_arriving_during_a_low_turn_starts_at_the_checkpoint_where_the_turn_is_paid():
    """HIGH runs 40 steps while LOW waits: at 30 ms LOW is owed 10 ms (a third) and gets its turn at HIGH's
    checkpoint; HIGH waits through the 10 steps of the turn (not preempting it) and takes the slot back at the
    LOW checkpoint after them; LOW finishes after HIGH."""
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, turn_ns=10 * MS, share=0.25)
    log: list = []
    high = s.submit(priority=HIGH)
    low = s.submit(priority=LOW)
    threads = [run_on_thread(high, Steps(clock, log, "high", 40)), run_on_thread(low, Steps(clock, log, "low", 20))]
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert log == ([("high", k) for k in range(30)] + [("low", k) for k in range(10)]
                   + [("high", k) for k in range(30, 40)] + [("low", k) for k in range(10, 20)])
    assert low.turns == 1 and low.preempted_at == ["low step 10"]
    assert high.preempted_at == ["high step 30"]
    assert s.snapshot()["turns"] == 1 and s.snapshot()["running"] == 0 and s._free == s.workers


@pytest.mark.parametrize("alone", [True, False])
def test_with_a_free_slot_a_turn_runs_alone_or_beside_the_higher_priority_work(alone):
    """Two slots, HIGH work running on one and LOW work waiting (Q1: it pauses while HIGH work runs). Once
    owed its turn, LOW starts on the free slot; its app's HIGH work pauses at its next checkpoint where the
    two would fight for the interpreter lock (`alone_turns`, the default with a hand-off wait), and runs on
    beside the turn otherwise."""
    clock = FakeClock()
    s = Scheduler(workers=2, clock=clock, turn_ns=10 * MS, share=0.25, alone_turns=alone)
    log: list = []
    high = s.submit(priority=HIGH)
    low = s.submit(priority=LOW)
    assert s.snapshot()["queued"] == 1                          # a slot is free, but LOW waits for HIGH
    threads = [run_on_thread(high, Steps(clock, log, "high", 40)), run_on_thread(low, Steps(clock, log, "low", 20))]
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert log[:30] == [("high", k) for k in range(30)] and low.turns == 1
    if alone:
        assert log[30:] == ([("low", k) for k in range(10)] + [("high", k) for k in range(30, 40)]
                            + [("low", k) for k in range(10, 20)])
        assert high.preempted_at == ["high step 30"]
    else:
        assert high.preemptions == 0 and sorted(log) == sorted(set(log))


class HighStream:
    """Continuous HIGH work: each task of `steps` submits the next before it starts, so one always waits.
    The first task steps once `go` is set."""

    def __init__(self, s: Scheduler, clock: FakeClock, log: list, steps: int, go: bool = True) -> None:
        self.s, self.clock, self.log, self.steps = s, clock, log, steps
        self.go = threading.Event()
        if go:
            self.go.set()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.tickets = []
        self._next()

    def _next(self) -> None:
        ticket = self.s.submit(priority=HIGH)
        self.tickets.append(ticket)
        self.threads.append(run_on_thread(ticket, self._task))

    def _task(self) -> None:
        if not self.stop.is_set():
            self._next()
        assert self.go.wait(WAIT)
        Steps(self.clock, self.log, "high", self.steps)()

    def end(self) -> None:
        self.stop.set()
        k = 0
        while k < len(self.threads):  # (a task submits the next before it ends: joined in order)
            self.threads[k].join(WAIT)
            assert not self.threads[k].is_alive()
            k += 1


def test_low_work_keeps_a_quarter_of_the_running_time_under_continuous_high_work():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, share=0.25, turn_ns=40 * MS)
    log: list = []
    stream = HighStream(s, clock, log, steps=5, go=False)
    low = s.submit(priority=LOW)
    stream.go.set()
    done = threading.Event()
    t = threading.Thread(target=lambda: (low.run(Steps(clock, log, "low", 120)), done.set()), daemon=True)
    t.start()
    assert done.wait(WAIT)
    stream.end()
    t.join(WAIT)
    until_done = log[:max(k for k, (name, _) in enumerate(log) if name == "low") + 1]
    low_share = sum(1 for name, _ in until_done if name == "low") / len(until_done)
    assert low.turns == 3 and low_share == 0.25
    # Turns of 40 steps (a turn's worth), each after 120 steps of HIGH work, never interleaved with them.
    assert _run_lengths(until_done) == [("high", 120), ("low", 40)] * 3


def test_low_work_beside_its_levels_turn_is_not_told_to_yield_for_the_high_work_that_waits_for_the_turn():
    """Two slots: HIGH work runs, two LOW tasks wait. Once LOW is owed its turn, the first LOW task starts on
    the free slot and the HIGH work pauses for the turn (`alone_turns`), so the second LOW task takes its
    slot beside the turn. The HIGH work that waits cannot start before the turn ends, so it does not tell
    that task to yield (it was: granted, told to yield at its first checkpoint, granted again, a thread woken
    for every step, which left LOW a tenth of its share in-process)."""
    clock = FakeClock()
    s = Scheduler(workers=2, clock=clock, share=0.25, turn_ns=10 * MS, alone_turns=True)
    high = s.submit(priority=HIGH)
    lows = [s.submit(priority=LOW) for _ in range(2)]
    assert [t.state for t in lows] == ["queued", "queued"]       # (LOW waits while its app's HIGH work runs)
    at_checkpoint, resume = threading.Event(), threading.Event()

    def high_work() -> None:
        clock.advance(40 * MS)                                   # LOW is owed its turn (40 ms / 3 > 10 ms)
        s.submit(priority=HIGH).cancel()                         # (the scheduler looks again: the turn begins)
        at_checkpoint.set()
        checkpoint("high")                                       # pauses for the turn
        assert resume.wait(WAIT)

    t = run_on_thread(high, high_work)
    assert at_checkpoint.wait(WAIT)
    waiting = s.submit(priority=HIGH)                            # HIGH work waiting for the turn
    deadline = threading.Event()
    for _ in range(1000):                                        # (until the HIGH work has paused)
        if all(low.state == "running" for low in lows):
            break
        deadline.wait(0.002)
    assert [low.state for low in lows] == ["running", "running"] and sum(low.on_turn for low in lows) == 1
    assert not any(low.yield_requested for low in lows), [(low.on_turn, low.yield_at) for low in lows]
    assert waiting.state == "queued"
    for ticket in (*lows, waiting):
        ticket.cancel()
    resume.set()
    t.join(WAIT)
    assert not t.is_alive()


def _run_lengths(log: list) -> list[tuple[str, int]]:
    runs: list[tuple[str, int]] = []
    for name, _ in log:
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1] + 1)
        else:
            runs.append((name, 1))
    return runs


def test_without_a_share_low_work_waits_for_the_high_work_to_end():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, share=0)
    log: list = []
    stream = HighStream(s, clock, log, steps=5)
    low = s.submit(priority=LOW)
    t = run_on_thread(low, Steps(clock, log, "low", 5))
    while len(stream.tickets) < 60:                             # 300 ms of HIGH work
        assert t.is_alive()
        threading.Event().wait(0.001)
    assert not any(name == "low" for name, _ in log)
    stream.end()
    t.join(WAIT)
    assert low.turns == 0 and log[-5:] == [("low", k) for k in range(5)]


class Cancelled(Exception):
    """A fake native call that was stopped."""


def restartable(clock: FakeClock, calls: list, in_call: threading.Event, steps: int):
    """LOW work that is one native call of `steps` ms, stopped by the scheduler and then run again from the
    start (as `base.native.run_native` does): `calls` logs (turn?, stopped?) per attempt. The first call
    sets `in_call` and waits to be stopped."""
    def work() -> None:
        ticket = current()
        while True:
            stopped = threading.Event()
            on_turn = ticket.on_turn
            try:
                with ticket.preemptible(stopped.set):
                    if not calls:  # the first call is in flight when HIGH work arrives
                        in_call.set()
                        assert stopped.wait(WAIT)
                    for _ in range(steps):
                        if stopped.is_set():
                            raise Cancelled()
                        clock.advance(MS)
                calls.append((on_turn, False))
                return
            except Cancelled:
                calls.append((on_turn, True))
                checkpoint("call stopped")
    return work


def test_low_work_that_can_only_restart_finishes_on_a_turn_that_nothing_stops():
    """A LOW native call of 60 ms is stopped when HIGH work arrives (its time was wasted, not paid); HIGH work
    then never ends, and the call runs again on a turn, which HIGH work neither stops nor preempts though it
    runs longer than the turn. The overshoot is a debt: the next LOW work waits longer for its turn."""
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, handoff_ns=0, share=0.25, turn_ns=40 * MS)
    calls: list = []
    in_call = threading.Event()
    low = s.submit(priority=LOW)
    done = threading.Event()
    t = threading.Thread(target=lambda: (low.run(restartable(clock, calls, in_call, 60)), done.set()), daemon=True)
    t.start()
    assert in_call.wait(WAIT)
    log: list = []
    stream = HighStream(s, clock, log, steps=5)
    assert done.wait(WAIT)
    assert calls == [(False, True), (True, False)] and low.turns == 1
    assert -20 * MS <= low.app.levels.owed(LOW) <= -19 * MS     # the turn's 40 ms less the 60 ms call
    stream.end()
    t.join(WAIT)
    assert s.snapshot()["running"] == 0 and s._free == s.workers


def test_low_work_held_in_a_native_call_beside_high_work_gets_its_turn_where_it_is():
    """A LOW native call that cannot be stopped (an XLA sub-model) lends its slot to each HIGH execution and
    runs on beside them at the OS's lowest priority, where continuous HIGH work would starve it. Once owed
    its turn, it gets the turn in the call: its OS priority comes back and HIGH work waits for it (the HIGH
    execution on its slot ends first), until the turn is paid at the checkpoint 40 ms of work later."""
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, handoff_ns=0, share=0.25, turn_ns=40 * MS)
    in_call, release = threading.Event(), threading.Event()
    seen: dict = {}
    log: list = []

    def low_work() -> None:
        ticket = current()
        with ticket.native():
            seen["lowered"] = ticket.lowered
            in_call.set()
            assert release.wait(WAIT)                           # (the call, going nowhere meanwhile)
        Steps(clock, log, "low", 60)()

    low = s.submit(priority=LOW)
    t = run_on_thread(low, low_work)
    assert in_call.wait(WAIT)
    stream = HighStream(s, clock, log, steps=5)
    idle = threading.Event()
    while not (low.on_turn and s.snapshot()["running"] == 1):  # 120 ms of HIGH work: owed 40 ms
        assert not idle.wait(0.001) and len(log) < 10_000
    assert low.turns == 1 and not low.lent and low.preemptions == 0
    assert seen["lowered"] is None or not seen["lowered"].held  # its OS priority given back
    high_steps = len(log)
    assert high_steps >= 120 and all(name == "high" for name, _ in log)
    release.set()
    t.join(WAIT)
    assert not t.is_alive()
    assert log[high_steps:high_steps + 41] == [("low", k) for k in range(40)] + [("high", 0)]
    assert low.preempted_at == ["low step 40"]
    stream.end()
    assert s.snapshot()["running"] == 0 and s._free == s.workers


def _account_as_specified(levels: Levels, running: list, now: int) -> None:
    """The ledger's rules as the module doc states them, level by level (no shortcut): what `account`
    must do in every state."""
    dt = now - levels.accounted
    levels.accounted = now
    owed, num, den = levels._owed, *owed_ratio(1 / 3)
    if dt > 0:
        for rank in range(len(owed)):
            higher = sum(1 for t in running if t.rank > rank)
            if levels.waiting[rank] or any(t.rank == rank for t in running):
                pausing = sum(1 for t in running if t.rank == rank and t.pausing)
                owed[rank] += dt * (higher * num + pausing * den)
            elif owed[rank] > 0:
                owed[rank] = 0
            paying = 0
            for t in running:
                if t.rank == rank and not t.pausing and (not higher or t is levels.turn):
                    if t.native_since is None:
                        paying += 1
                    else:
                        t.native_useful += dt
            if paying:
                levels.pay(rank, dt * paying)
    turn = levels.turn
    if turn is not None and turn.native_since is None and owed[turn.rank] <= 0:
        levels.turn = None


def test_the_ledger_accounts_every_state_as_its_rules_say():
    """Random ledgers (levels owed, in debt or even, waiting and running work, pausing, native calls and
    turns), each accounted by `account` and by the rules written out: the same ledger afterwards."""
    import copy
    import random
    rng = random.Random(7)
    for case in range(3000):
        levels = Levels(0, owed_ratio(1 / 3))
        running = []
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            t = Stub(rng.randrange(3), native=rng.random() < 0.4)
            t.pausing = rng.random() < 0.2
            running.append(t)
        levels.waiting = [rng.choice([0, 0, 0, 1, 2]) for _ in range(3)]
        levels._owed = [rng.choice([0, 0, 0, 5_000_000, -3_000_000]) for _ in range(3)]
        levels.turn = rng.choice([None, None, *running]) if running else None
        twin, twin_running = copy.deepcopy((levels, running))
        twin.turn = None if levels.turn is None else twin_running[running.index(levels.turn)]
        now = rng.choice([0, 1, 1_000, 2_000_000])
        levels.account(running, now)
        _account_as_specified(twin, twin_running, now)
        assert levels._owed == twin._owed, case
        assert (levels.turn is None) == (twin.turn is None), case
        assert [t.native_useful for t in running] == [t.native_useful for t in twin_running], case
