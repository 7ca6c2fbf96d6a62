"""The QoS scheduler on its own (`nnapi.qos`): admission, priorities, fair shares, preemption, deadlines.

Work here is plain Python functions that call `checkpoint()`; a fake clock makes time move only
when a test says so, and events order the threads, so nothing depends on the machine's speed.
"""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from nnapi.hal import NO_DEADLINE, ErrorStatus, NnError, Priority
from nnapi.qos import DurationStats, Scheduler, checkpoint, current, normalize_deadline

from qos_kit import WAIT, FakeClock

pytestmark = pytest.mark.timing

LOW, MEDIUM, HIGH = Priority.LOW, Priority.MEDIUM, Priority.HIGH
MS = 1_000_000


class Blocker:
    """A task that holds a slot until released: `started` once it runs."""

    def __init__(self, scheduler: Scheduler, **submit) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.ticket = scheduler.submit(**submit)
        self.error: NnError | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.started.wait(WAIT)

    def _run(self) -> None:
        def work() -> None:
            self.started.set()
            assert self.release.wait(WAIT)
            checkpoint("after the blocker")
        try:
            self.ticket.run(work)
        except NnError as e:
            self.error = e

    def finish(self) -> None:
        self.release.set()
        self.thread.join(WAIT)


def launch(scheduler: Scheduler, fn, order: list, name: str, **submit) -> threading.Thread:
    """Submit now (admission on this thread), run on a new thread, append `name` to `order` when done."""
    ticket = scheduler.submit(**submit)

    def run() -> None:
        try:
            ticket.run(fn)
            order.append(name)
        except NnError as e:
            order.append((name, e.status))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_queued(scheduler: Scheduler, n: int) -> None:
    end = time.monotonic() + WAIT
    while scheduler.snapshot()["queued"] != n:
        assert time.monotonic() < end, f"never {n} queued: {scheduler.snapshot()}"
        time.sleep(0.001)


def join(threads) -> None:
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()


# --- admission -----------------------------------------------------------------------------------
def test_no_deadline_values_and_overflow():
    assert normalize_deadline(None) is None
    assert normalize_deadline(NO_DEADLINE) is None
    assert normalize_deadline(2**70) is None                 # beyond the largest value: still none
    assert normalize_deadline(5) == 5
    s = Scheduler(workers=1)
    assert s.run(lambda: 42, deadline=NO_DEADLINE, lower_ns=10**18) == 42


def test_passed_deadline_is_refused_persistent():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    for deadline in (clock(), clock() - 1, 0):
        with pytest.raises(NnError) as e:
            s.submit(deadline=deadline)
        assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert s.snapshot()["refused_persistent"] == 3 and s.snapshot()["queued"] == 0


def test_work_even_an_idle_device_cannot_finish_is_refused_persistent():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    stats = DurationStats()
    stats.record(50 * MS)
    stats.record(40 * MS)
    assert stats.lower_ns() == 40 * MS and stats.typical_ns() > 0
    with pytest.raises(NnError) as e:
        s.submit(deadline=clock() + 30 * MS, stats=stats)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT and "idle device" in e.value.message
    assert s.run(lambda: "ok", deadline=clock() + 41 * MS, stats=stats) == "ok"


def test_the_cost_model_prior_is_halved_before_any_run():
    stats = DurationStats(prior_ns=10 * MS)
    assert stats.lower_ns() == 5 * MS
    stats.record(8 * MS)
    assert stats.lower_ns() == 8 * MS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=120), st.integers(1, 8))
def test_the_fastest_recent_run_is_the_least_of_the_window(durations, window):
    stats = DurationStats(window=window)
    for k, ns in enumerate(durations):
        stats.record(ns)
        assert stats.lower_ns() == min(durations[max(0, k + 1 - window):k + 1])


def test_work_that_waiting_work_makes_miss_is_refused_transient():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    blocker = Blocker(s, lower_ns=100 * MS)                    # needs 100 ms more, holds the only slot
    with pytest.raises(NnError) as e:
        s.submit(deadline=clock() + 50 * MS, lower_ns=1 * MS)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "ahead" in e.value.message
    clock.advance(99 * MS)                                      # the blocker is nearly done: now it fits
    order: list = []
    t = launch(s, lambda: None, order, "fits", deadline=clock() + 50 * MS, lower_ns=1 * MS)
    blocker.finish()
    join([t])
    assert order == ["fits"]


def test_a_full_queue_is_resource_exhausted_transient():
    s = Scheduler(workers=1, capacity=2)
    blocker = Blocker(s)
    order: list = []
    threads = [launch(s, lambda: None, order, k) for k in range(2)]
    with pytest.raises(NnError) as e:
        s.submit()
    assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert s.snapshot()["exhausted"] == 1
    blocker.finish()
    join(threads)
    assert sorted(order) == [0, 1]
    s.run(lambda: None)                                         # room again


def test_waiting_work_gives_up_once_it_can_no_longer_finish():
    s = Scheduler(workers=1)
    blocker = Blocker(s)
    start = time.monotonic()
    with pytest.raises(NnError) as e:
        s.run(lambda: None, deadline=time.monotonic_ns() + 30 * MS)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "waited" in e.value.message
    assert time.monotonic() - start < WAIT
    assert s.snapshot()["queued"] == 0 and s.snapshot()["gave_up_waiting"] == 1
    blocker.finish()
    assert blocker.error is None


# --- order ---------------------------------------------------------------------------------------
def test_within_an_app_higher_priority_first_then_arrival_order():
    s = Scheduler(workers=1)
    blocker = Blocker(s, priority=HIGH)
    order: list = []
    threads = [launch(s, lambda: None, order, name, priority=p)
               for name, p in [("low", LOW), ("medium-1", MEDIUM), ("high-1", HIGH), ("medium-2", MEDIUM),
                               ("high-2", HIGH)]]
    wait_queued(s, 5)
    blocker.finish()
    join(threads)
    assert order == ["high-1", "high-2", "medium-1", "medium-2", "low"]


def test_fifo_policy_ignores_priorities_and_apps():
    s = Scheduler(workers=1, policy="fifo")
    blocker = Blocker(s)
    order: list = []
    threads = [launch(s, lambda: None, order, name, priority=p, client=uid)
               for name, p, uid in [("a-low", LOW, 1), ("b-high", HIGH, 2), ("a-high", HIGH, 1)]]
    wait_queued(s, 3)
    blocker.finish()
    join(threads)
    assert order == ["a-low", "b-high", "a-high"]


def test_apps_share_by_running_time_not_by_count():
    """App A's tasks cost 3 time units, app B's 1: while both wait, B runs about three tasks per A task."""
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, quantum_ns=None)
    blocker = Blocker(s, client=99)
    order: list = []

    def cost(units):
        return lambda: clock.advance(units * MS)

    threads = [launch(s, cost(3), order, f"a{k}", client=1) for k in range(4)]
    threads += [launch(s, cost(1), order, f"b{k}", client=2) for k in range(12)]
    wait_queued(s, 16)
    blocker.finish()
    join(threads)
    # Neither app starves: each prefix of the order holds both apps in proportion to their time.
    a_done = [k for k, name in enumerate(order) if name.startswith("a")]
    assert a_done == sorted(a_done) and len(a_done) == 4
    for k in range(1, 4):
        gap = a_done[k] - a_done[k - 1] - 1                    # B tasks between two A tasks
        assert 2 <= gap <= 4, order


def test_no_app_starves_another_when_one_floods_the_queue():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    blocker = Blocker(s, client=1)
    order: list = []
    step = lambda: clock.advance(MS)                           # noqa: E731
    threads = [launch(s, step, order, f"flood{k}", client=1) for k in range(30)]
    threads += [launch(s, step, order, f"other{k}", client=2) for k in range(3)]
    wait_queued(s, 33)
    blocker.finish()
    join(threads)
    # The late app's work interleaves with the flood instead of waiting behind all 30 tasks.
    assert max(order.index(f"other{k}") for k in range(3)) <= 6, order


# --- checkpoints ---------------------------------------------------------------------------------
def test_deadline_passing_mid_run_aborts_at_the_next_checkpoint():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    done = []

    def work():
        for k in range(10):
            checkpoint(f"step {k}")
            done.append(k)
            if k == 3:
                clock.advance(20 * MS)                          # the deadline passes during step 3

    with pytest.raises(NnError) as e:
        s.run(work, deadline=clock() + 10 * MS)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "before step 4" in e.value.message
    assert done == [0, 1, 2, 3]
    assert s.snapshot()["aborted"] == 1 and s.snapshot()["running"] == 0
    assert current() is None


def test_higher_priority_work_of_the_same_app_preempts_at_a_checkpoint():
    """The first high task starts at once on the slot the low task lends it; the low task yields at
    its next checkpoint, the other high tasks run, and the low task resumes where it was."""
    s = Scheduler(workers=1)
    at_step = threading.Event()
    go_on = threading.Event()
    progress: list = []
    order: list = []

    def low():
        total = 0
        for k in range(8):
            checkpoint(f"step {k}")
            total += k                                         # live state kept across the pause
            progress.append(k)
            if k == 2:
                at_step.set()
                assert go_on.wait(WAIT)
        return total

    results = []
    ticket = s.submit(priority=LOW)
    t = threading.Thread(target=lambda: (results.append(ticket.run(low)), order.append("low")), daemon=True)
    t.start()
    assert at_step.wait(WAIT)
    first_ran = threading.Event()
    highs = [launch(s, lambda: (order.append(f"ran with low at {progress[-1]}"), first_ran.set()), order, "high0",
                    priority=HIGH)]
    assert first_ran.wait(WAIT)                                 # did not wait for the low task's checkpoint
    highs += [launch(s, lambda: order.append(f"ran with low at {progress[-1]}"), order, f"high{k}", priority=HIGH)
              for k in (1, 2)]
    wait_queued(s, 2)
    go_on.set()
    join([t, *highs])
    assert results == [sum(range(8))] and progress == list(range(8))   # resumed, not restarted
    assert ticket.preemptions == 1 and ticket.preempted_at == ["step 3"]
    assert order[-1] == "low" and order.count("ran with low at 2") == 3
    assert s.snapshot()["running"] == 0 and s._free == s.workers      # the lent slot came back


def test_native_work_that_reaches_no_checkpoint_lends_its_slot_again_once_the_borrower_ends():
    """Without a hand-off wait (drivers whose running sub-model has no checkpoint), each higher-priority
    task starts at once on the low task's slot, one after another, instead of queueing behind it until
    its next checkpoint; the slots in use never exceed the workers by more than the one lent."""
    s = Scheduler(workers=1, handoff_ns=0)
    running, release = threading.Event(), threading.Event()
    progress: list = []

    def low():
        running.set()
        assert release.wait(WAIT)  # one long native call: no checkpoint meanwhile
        checkpoint("after the call")
        progress.append("low done")

    ticket = s.submit(priority=LOW)
    t = threading.Thread(target=lambda: ticket.run(low), daemon=True)
    t.start()
    assert running.wait(WAIT)
    for k in range(3):
        done = threading.Event()
        high = launch(s, lambda: (progress.append(f"high {k}"), done.set()), [], f"high{k}", priority=HIGH)
        assert done.wait(WAIT)  # started at once, though the low task is still in its call
        join([high])
        assert s.snapshot()["running"] == 1 and s._free == 0
    release.set()
    join([t])
    assert progress == ["high 0", "high 1", "high 2", "low done"] and ticket.preemptions == 0
    assert s.snapshot()["running"] == 0 and s._free == s.workers


def test_exclusive_lower_priority_work_pauses_while_higher_priority_work_runs():
    s = Scheduler(workers=2)
    high_running = threading.Event()
    high_release = threading.Event()
    low_steps_during_high = []

    def high():
        high_running.set()
        assert high_release.wait(WAIT)

    def low():
        for k in range(200):
            checkpoint()
            if high_running.is_set() and not high_release.is_set():
                low_steps_during_high.append(k)
            time.sleep(0.0005)

    order: list = []
    low_thread = launch(s, low, order, "low", priority=LOW)
    time.sleep(0.01)
    high_thread = launch(s, high, order, "high", priority=HIGH)
    assert high_running.wait(WAIT)
    time.sleep(0.05)                                           # the low task would run ~100 steps here
    high_release.set()
    join([low_thread, high_thread])
    assert len(low_steps_during_high) <= 1                     # at most the step it was in
    assert order == ["high", "low"]


def test_priority_is_relative_to_the_app_other_apps_do_not_preempt():
    s = Scheduler(workers=1, quantum_ns=None)
    go_on = threading.Event()
    started = threading.Event()
    order: list = []

    def low():
        started.set()
        for _ in range(5):
            checkpoint()
            assert go_on.wait(WAIT)

    a = launch(s, low, order, "a-low", priority=LOW, client=1)
    assert started.wait(WAIT)
    b = launch(s, lambda: None, order, "b-high", priority=HIGH, client=2)
    wait_queued(s, 1)
    go_on.set()
    join([a, b])
    assert order == ["a-low", "b-high"]


def _long_work_meets_another_app(arrives_at_step: int) -> tuple[list, object]:
    """App 1 runs 100 steps of 1 ms; app 2's short work arrives after `arrives_at_step` steps."""
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock, quantum_ns=20 * MS)
    order: list = []
    steps = []
    threads: list = []
    b_done = threading.Event()

    def long():
        for k in range(100):
            checkpoint(f"step {k}")
            steps.append(k)
            clock.advance(MS)
            if k == arrives_at_step:
                threads.append(launch(s, b_done.set, order, "b", client=2))  # admitted on return

    ticket = s.submit(client=1)
    t = threading.Thread(target=lambda: (ticket.run(long), order.append("a")), daemon=True)
    t.start()
    t.join(WAIT)
    join(threads)
    assert b_done.is_set() and steps == list(range(100))
    return order, ticket


def test_long_work_yields_to_another_app_after_its_quantum():
    # App 2 arrives while app 1 is hardly ahead (2 ms of 5): it waits for app 1's quantum.
    order, ticket = _long_work_meets_another_app(arrives_at_step=1)
    assert order == ["b", "a"]
    assert ticket.preemptions == 1 and ticket.preempted_at == ["step 20"]


def test_a_light_app_gets_a_lent_slot_from_an_app_far_ahead():
    # App 2 arrives when app 1 has run 11 ms (more than the 5 ms lag ahead of it): app 1 lends its
    # slot and pauses at its very next checkpoint, so app 2's short work does not wait a quantum.
    order, ticket = _long_work_meets_another_app(arrives_at_step=10)
    assert order == ["b", "a"]
    assert ticket.preemptions == 1 and ticket.preempted_at == ["step 11"]


class BusyApp:
    """App 1 running two long tasks on both slots of a two-slot scheduler (fake clock), 40 ms of
    running time ahead of anyone else once started; `finish()` ends its tasks."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.scheduler = Scheduler(workers=2, clock=self.clock, quantum_ns=20 * MS, handoff_ns=int(WAIT * 1e9))
        self.stop = threading.Event()
        running = threading.Barrier(3)
        self.tickets = [self.scheduler.submit(client=1) for _ in range(2)]

        def long() -> None:
            running.wait(WAIT)
            while not self.stop.is_set():
                checkpoint("loop")
                time.sleep(0.0005)

        self.threads = [threading.Thread(target=t.run, args=(long,), daemon=True) for t in self.tickets]
        for t in self.threads:
            t.start()
        running.wait(WAIT)
        self.clock.advance(20 * MS)  # app 1 has run 40 ms on its two slots

    def running(self) -> int:
        return self.scheduler.snapshot()["apps"][1]["running"]

    def finish(self) -> None:
        self.stop.set()
        join(self.threads)


def test_a_light_apps_work_pauses_every_running_task_of_the_app_far_ahead():
    # Two slots, both busy with app 1 (far ahead in running time). App 2's short work starts on a
    # lent slot, and both of app 1's tasks pause until it is done (and a grace after), so the apps
    # do not contend for the CPUs and the interpreter lock meanwhile; then app 1 resumes.
    busy = BusyApp()
    seen = {}

    def short() -> None:
        seen["app 1 running"] = busy.running()

    order: list = []
    join([launch(busy.scheduler, short, order, "b", client=2)])
    assert order == ["b"] and seen["app 1 running"] == 0
    wait_until = time.monotonic() + WAIT
    while busy.running() != 2:  # resumed once the grace is over
        assert time.monotonic() < wait_until
        time.sleep(0.001)
    busy.finish()
    assert [t.preemptions for t in busy.tickets] == [1, 1]


def test_running_time_stops_while_preempted():
    clock = FakeClock()
    s = Scheduler(workers=1, clock=clock)
    seen = []

    def work():
        clock.advance(5 * MS)
        seen.append(current().running_ns())

    s.run(work)
    assert seen == [5 * MS]


def test_a_preempted_task_whose_deadline_passes_while_paused_ends_transient():
    s = Scheduler(workers=1)
    low_paused = threading.Event()
    release_high = threading.Event()
    order: list = []
    progress = []

    def low():
        for k in range(100):
            checkpoint(f"step {k}")
            progress.append(k)
            if k == 1:
                launch(s, lambda: release_high.wait(WAIT), order, "high", priority=HIGH)
                low_paused.set()

    low_thread = launch(s, low, order, "low", priority=LOW, deadline=time.monotonic_ns() + 50 * MS)
    assert low_paused.wait(WAIT)
    low_thread.join(WAIT)                                       # gives up while the high task runs
    assert order == [("low", ErrorStatus.MISSED_DEADLINE_TRANSIENT)] and progress == [0, 1]
    release_high.set()
    deadline = time.monotonic() + WAIT
    while order[-1] != "high":
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert s.snapshot()["running"] == 0 and s.snapshot()["queued"] == 0 and s._free == s.workers


def test_a_hold_never_outlasts_the_fair_share_it_makes_up_for():
    # App 1 has run 40 ms on both slots when app 2's work arrives and holds it; app 2's work runs
    # long, and once app 2 has caught up (about 10 ms of running) app 1 gets a slot again while it
    # still runs: no app is starved by another's long work.
    busy = BusyApp()
    seen: dict = {}

    def light_but_long() -> None:
        seen["held"] = busy.running() == 0
        for step in range(2000):  # 1 ms of running per step
            checkpoint("step")
            busy.clock.advance(MS)
            time.sleep(0.001)
            if busy.running():
                seen["app 1 back after ms"] = step + 1
                return

    order: list = []
    join([launch(busy.scheduler, light_but_long, order, "b", client=2)])
    busy.finish()
    assert order == ["b"] and seen["held"]
    assert 5 <= seen["app 1 back after ms"] <= 40, seen


# --- the host's calls: work gives way when the host's probe says so ------------------------------------------
class Probe:
    """A host's probe: says yes for LOW work while `busy` is set (as the driver service does); counts
    the questions per priority (and can fail)."""

    def __init__(self, busy: bool = False, fail: bool = False) -> None:
        self.busy = threading.Event()
        if busy:
            self.busy.set()
        self.fail = fail
        self.calls = 0
        self.asked: set = set()

    def __call__(self, priority: Priority) -> bool:
        self.calls += 1
        self.asked.add(Priority(priority))
        if self.fail:
            raise RuntimeError("probe broken")
        return priority == LOW and self.busy.is_set()


def test_work_pauses_at_its_checkpoints_while_the_hosts_probe_says_so(monkeypatch):
    """While the host's probe says yes for its priority, a task's checkpoint does not return (it
    sleeps, releasing the interpreter lock); it goes on once the probe says no. Work the probe
    answers no for passes its checkpoints meanwhile."""
    from nnapi.qos import scheduler as sched
    monkeypatch.setattr(sched, "BACKGROUND_PAUSE_NS", 3600 * 10**9)  # (the bound has its own test)
    s = Scheduler(workers=2)
    s.foreground = probe = Probe(busy=True)
    entered, passed = threading.Event(), threading.Event()

    def low() -> None:
        entered.set()
        checkpoint("first")
        passed.set()

    t = launch(s, low, [], "low", priority=LOW)
    assert entered.wait(WAIT)
    while probe.calls < 3:            # it keeps asking: paused at the checkpoint
        time.sleep(0.001)
    assert not passed.is_set()
    probe.busy.clear()
    assert passed.wait(WAIT)
    join([t])
    # Work the probe answers no for passes its checkpoints while it says yes to LOW work.
    other = Scheduler(workers=2)
    other.foreground = probe = Probe(busy=True)
    order: list = []
    join([launch(other, lambda: [checkpoint(f"{k}") for k in range(3)], order, p.name, priority=p)
          for p in (MEDIUM, HIGH)])
    assert sorted(order) == ["HIGH", "MEDIUM"] and probe.busy.is_set()
    assert probe.asked == {MEDIUM, HIGH}


def test_giving_way_is_bounded_never_under_fifo_and_a_broken_probe_is_dropped():
    """A probe that always says yes delays a LOW checkpoint by at most BACKGROUND_PAUSE_NS each time
    (the work still finishes); the FIFO baseline never asks; a probe that fails is dropped."""
    from nnapi.qos import scheduler as sched
    s = Scheduler(workers=1)
    s.foreground = Probe(busy=True)
    start = time.monotonic_ns()
    join([launch(s, lambda: [checkpoint(f"{k}") for k in range(3)], [], "low", priority=LOW)])
    assert time.monotonic_ns() - start >= 3 * sched.BACKGROUND_PAUSE_NS   # paused at each of the three
    fifo = Scheduler(workers=1, policy="fifo")
    fifo.foreground = probe = Probe(busy=True)
    join([launch(fifo, lambda: checkpoint("x"), [], "low", priority=LOW)])
    assert probe.calls == 0
    s.foreground = broken = Probe(fail=True)
    order: list = []
    join([launch(s, lambda: checkpoint("x"), order, "low", priority=LOW)])
    assert order == ["low"] and broken.calls == 1 and s.foreground is None


def test_low_work_giving_way_still_yields_its_slot_to_higher_priority_work(monkeypatch):
    """A LOW task paused for foreground input whose slot the scheduler lends to HIGH work of its app
    leaves the pause at once and yields: the HIGH task (which waits for the lender to pause before it
    starts) runs, although the foreground input lasts until it has."""
    from nnapi.qos import scheduler as sched
    monkeypatch.setattr(sched, "BACKGROUND_PAUSE_NS", 3600 * 10**9)  # only the yield can end the pause
    s = Scheduler(workers=1, handoff_ns=3600 * 10**9)                 # the HIGH task waits for the yield
    s.foreground = probe = Probe(busy=True)
    at_step = threading.Event()
    order: list = []

    def low() -> None:
        at_step.set()
        for k in range(3):
            checkpoint(f"step {k}")
        order.append("low body done")

    t = launch(s, low, order, "low", priority=LOW)
    assert at_step.wait(WAIT)
    while probe.calls < 2:            # paused for the foreground input
        time.sleep(0.001)
    high = launch(s, lambda: (order.append("high ran"), probe.busy.clear()), order, "high", priority=HIGH)
    join([t, high])
    assert order.index("high") < order.index("low body done")
