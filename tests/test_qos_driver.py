"""Quality of service of the reference driver: preemption, fair shares, aborts in flight, refusals and
resource limits, and the strict answers it gives where the VTS allows a choice.

Priorities, the deadline matrix and loop timeouts as the VTS drives any driver (VTS-BEHAVIOURS section 4)
are checks of the certification kit (`nnapi.conformance.vts.qos`), run on the reference driver by
test_vts_reference.py."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (NO_DEADLINE, ClientId, ErrorStatus, ExecutionPreference, MeasureTiming, NnError,
                       OperationType, Priority)
from nnapi.qos import Scheduler, estimate_peak_bytes

from conftest import add_relu_model
from qos_kit import (EXECUTORS, WAIT, FakeClock, Gate, chain_model, hal_request, patch_abs, patch_kernel,
                     run_async, run_fenced, run_sync)

pytestmark = pytest.mark.timing

FAST = ExecutionPreference.FAST_SINGLE_ANSWER
NO_TIMING = 2**64 - 1
MS = 1_000_000


def prepare(device, model, priority=Priority.MEDIUM, deadline=None, **kw):
    return device.prepare_model(model.to_hal(), FAST, priority, deadline, None, None, **kw)


def chain_request(prepared, x):
    return hal_request(prepared.model, [x], [tuple(x.shape)])


# --- what the reference driver answers more strictly than the kit requires ---------------------
def test_a_passed_deadline_is_refused_persistent_at_once():
    """The sample driver's answer (VTS-BEHAVIOURS 4.2): MISSED_DEADLINE_PERSISTENT from preparation and every
    executor (the kit accepts either MISSED status); an asynchronous launch reports it through its callback
    before the launch returns."""
    device = ReferenceDevice()
    with pytest.raises(NnError) as e:
        prepare(device, add_relu_model(), deadline=time.monotonic_ns() - 1)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    prepared = prepare(device, add_relu_model())
    x = np.ones(4, np.float32)
    request, _ = hal_request(prepared.model, [x, x], [(4,)])
    for executor, run in EXECUTORS.items():
        assert run(prepared, request, time.monotonic_ns() - 1)[0] == ErrorStatus.MISSED_DEADLINE_PERSISTENT, executor
    got = []
    prepared.execute(request, MeasureTiming.NO, time.monotonic_ns() - 1, None, lambda *a: got.append(a))
    assert got and got[0][0] == ErrorStatus.MISSED_DEADLINE_PERSISTENT      # called before the launch returned


def test_measured_timing_splits_device_and_driver_time():
    """The kit checks time on device <= time in driver when both are reported; the reference reports both."""
    prepared = prepare(ReferenceDevice(), chain_model(10))
    x = np.ones(16, np.float32)
    request, _ = chain_request(prepared, x)
    for run in (run_sync, run_async):
        status, _, timing = run(prepared, request, measure=MeasureTiming.YES)
        assert status == ErrorStatus.NONE and 0 < timing.time_on_device <= timing.time_in_driver < NO_TIMING


# --- preemption (Q4) -----------------------------------------------------------------------------
def test_low_priority_model_preempted_by_many_high_priority_runs_gives_the_same_outputs(monkeypatch):
    """One worker. A long LOW execution is held at its ABS gate while 12 HIGH executions arrive (the
    first runs at once on the slot the LOW execution lends it, the others queue); once released the
    LOW execution yields at its next checkpoint, every HIGH run completes first, and it resumes from
    the same operation (the gate runs once) with outputs bit-identical to a run alone."""
    gate = patch_abs(monkeypatch, Gate(block=True))
    device = ReferenceDevice(workers=1)
    low_model = chain_model(60, size=256, gate_at=5, seed=1)
    x = np.random.default_rng(2).normal(size=256).astype(np.float32)
    alone = ReferenceDevice(workers=1)
    gate.release.set()
    expected_prepared = prepare(alone, low_model)
    request, (expected,) = chain_request(expected_prepared, x)
    assert run_sync(expected_prepared, request)[0] == ErrorStatus.NONE
    gate.release.clear()
    gate.entered.clear()
    gate.calls = 0

    low = prepare(device, low_model, Priority.LOW)
    high = prepare(device, chain_model(4, seed=3), Priority.HIGH)
    order: list = []
    low_request, (low_out,) = chain_request(low, x)
    low_done = threading.Event()
    low.execute(low_request, MeasureTiming.NO, None, None,
                lambda status, *_: (order.append(("low", status)), low_done.set()))
    assert gate.entered.wait(WAIT)
    high_events = []
    high_outputs = []
    for k in range(12):
        request, (out,) = chain_request(high, np.full(16, k, np.float32))
        high_outputs.append(out)
        ev = threading.Event()
        high_events.append(ev)
        high.execute(request, MeasureTiming.NO, None, None,
                     lambda status, *_, k=k, ev=ev: (order.append((f"high{k}", status)), ev.set()))
    deadline = time.monotonic() + WAIT
    while device.scheduler.snapshot()["queued"] < 11:                  # the first started on the low's slot
        assert time.monotonic() < deadline
        time.sleep(0.001)
    gate.release.set()
    assert low_done.wait(WAIT) and all(ev.wait(WAIT) for ev in high_events)
    assert order[-1] == ("low", ErrorStatus.NONE)
    assert all(status == ErrorStatus.NONE for _, status in order)
    assert gate.calls == 1                                             # resumed, never restarted
    assert device.scheduler.snapshot()["preemptions"] >= 1
    np.testing.assert_array_equal(low_out, expected)                   # bit-identical
    reference_high = prepare(alone, chain_model(4, seed=3))
    for k, out in enumerate(high_outputs):
        request, (want,) = chain_request(reference_high, np.full(16, k, np.float32))
        run_sync(reference_high, request)
        np.testing.assert_array_equal(out, want)


def test_no_starvation_across_two_apps(monkeypatch):
    """One worker, a fake clock moved only by the ABS gate (1 ms per run): app 1001 floods the queue
    with 20 executions, app 1002 sends 4 later; app 1002's work interleaves with the flood."""
    clock = FakeClock()
    gate = patch_abs(monkeypatch, Gate(clock=clock, advance_ns=MS))
    device = ReferenceDevice(scheduler=Scheduler(workers=1, clock=clock))
    model = chain_model(2, gate_at=0)
    a = prepare(device, model, client=ClientId(1001))
    b = prepare(device, model, client=ClientId(1002))
    hold = Gate(block=True)
    blocker = prepare(device, chain_model(2, gate_at=0), client=ClientId(1001))
    monkeypatch.setattr(gate, "hook", lambda: hold() if threading.current_thread().name == "blocker" else None)
    order: list = []
    done = threading.Semaphore(0)
    x = np.ones(16, np.float32)

    def launch(prepared, name):
        request, _ = chain_request(prepared, x)
        prepared.execute(request, MeasureTiming.NO, None, None,
                         lambda status, *_: (order.append((name, status)), done.release()))

    t = threading.Thread(target=lambda: run_sync(blocker, chain_request(blocker, x)[0]), name="blocker")
    t.start()
    assert hold.entered.wait(WAIT)
    for k in range(20):
        launch(a, f"a{k}")
    for k in range(4):
        launch(b, f"b{k}")
    snapshot = device.scheduler.snapshot()
    assert snapshot["queued"] == 24 and set(snapshot["apps"]) == {1001, 1002}
    hold.release.set()
    t.join(WAIT)
    for _ in range(24):
        assert done.acquire(timeout=WAIT)
    names = [name for name, status in order]
    assert all(status == ErrorStatus.NONE for _, status in order)
    assert max(names.index(f"b{k}") for k in range(4)) <= 8, names


# --- deadlines: abort in flight, refuse before start --------------------------------------------
@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_deadline_passing_mid_run_aborts_at_the_next_checkpoint(monkeypatch, executor):
    """The ABS gate (after operation 3 of 40) moves the scheduler's clock past the deadline; the
    interpreter's next checkpoint aborts with MISSED_DEADLINE_TRANSIENT and no later operation runs."""
    clock = FakeClock()
    after_gate = []
    gate = patch_abs(monkeypatch, Gate(clock=clock, advance_ns=3_000 * MS))
    patch_kernel(monkeypatch, OperationType.MUL, lambda: after_gate.append(gate.calls))
    device = ReferenceDevice(scheduler=Scheduler(workers=1, clock=clock))
    prepared = prepare(device, chain_model(40, gate_at=3))
    request, _ = chain_request(prepared, np.ones(16, np.float32))
    status, _, _ = EXECUTORS[executor](prepared, request, clock() + 2_000 * MS)
    assert status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert gate.calls == 1 and after_gate and all(calls == 0 for calls in after_gate)  # nothing ran after it
    assert device.scheduler.snapshot()["aborted"] == 1


def test_a_task_that_cannot_finish_even_alone_is_refused_persistent_at_once():
    device = ReferenceDevice()
    prepared = prepare(device, chain_model(10))
    request, _ = chain_request(prepared, np.ones(16, np.float32))
    prepared.stats.record(10_000 * MS)                                 # past runs took 10 s
    for executor, run in EXECUTORS.items():
        start = time.monotonic()
        status, _, _ = run(prepared, request, time.monotonic_ns() + 1_000 * MS)
        assert status == ErrorStatus.MISSED_DEADLINE_PERSISTENT, executor
        assert time.monotonic() - start < 0.5
    assert run_sync(prepared, request, NO_DEADLINE)[0] == ErrorStatus.NONE


def test_a_task_that_waiting_work_would_make_miss_is_refused_transient(monkeypatch):
    gate = patch_abs(monkeypatch, Gate(block=True))
    device = ReferenceDevice(workers=1)
    slow = prepare(device, chain_model(4, gate_at=0))
    slow.stats.record(60_000 * MS)                                     # it usually takes a minute
    quick = prepare(device, chain_model(4))
    x = np.ones(16, np.float32)
    slow_result = []
    t = threading.Thread(target=lambda: slow_result.append(run_sync(slow, chain_request(slow, x)[0])[0]))
    t.start()
    assert gate.entered.wait(WAIT)
    request, _ = chain_request(quick, x)
    for executor, run in EXECUTORS.items():
        status, _, _ = run(quick, request, time.monotonic_ns() + 5_000 * MS)
        assert status == ErrorStatus.MISSED_DEADLINE_TRANSIENT, executor
    gate.release.set()
    t.join(WAIT)
    assert slow_result == [ErrorStatus.NONE]
    assert run_sync(quick, request, time.monotonic_ns() + 5_000 * MS)[0] == ErrorStatus.NONE


def test_a_full_driver_queue_is_resource_exhausted_transient(monkeypatch):
    gate = patch_abs(monkeypatch, Gate(block=True))
    device = ReferenceDevice(workers=1, queue_capacity=2)
    blocked = prepare(device, chain_model(2, gate_at=0))
    prepared = prepare(device, chain_model(2))
    x = np.ones(16, np.float32)
    t = threading.Thread(target=lambda: run_sync(blocked, chain_request(blocked, x)[0]))
    t.start()
    assert gate.entered.wait(WAIT)
    queued = []
    for _ in range(2):
        ev = threading.Event()
        queued.append(ev)
        prepared.execute(chain_request(prepared, x)[0], MeasureTiming.NO, None, None,
                         lambda *a, ev=ev: ev.set())
    request, _ = chain_request(prepared, x)
    for executor, run in EXECUTORS.items():
        assert run(prepared, request)[0] == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, executor
    with pytest.raises(NnError) as e:
        prepare(device, chain_model(2))
    assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    gate.release.set()
    t.join(WAIT)
    assert all(ev.wait(WAIT) for ev in queued)
    assert run_sync(prepared, request)[0] == ErrorStatus.NONE


# --- memory limit -------------------------------------------------------------------------------
def test_model_over_the_memory_limit_is_resource_exhausted_persistent(tmp_path):
    model = chain_model(8, size=1024)                                  # 4 KiB tensors, 8 constants
    hal = model.to_hal()
    peak = estimate_peak_bytes(hal)
    assert 8 * 4096 + 2 * 4096 <= peak <= 8 * 4096 + 4 * 4096 + 4096   # constants + about two live tensors
    with pytest.raises(NnError) as e:
        ReferenceDevice(memory_limit_bytes=peak - 1).prepare_model(hal, FAST, Priority.MEDIUM, None, None, None)
    assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT and str(peak) in e.value.message
    prepared = ReferenceDevice(memory_limit_bytes=peak).prepare_model(hal, FAST, Priority.MEDIUM, None, None, None)
    request, _ = chain_request(prepared, np.ones(1024, np.float32))
    assert run_sync(prepared, request)[0] == ErrorStatus.NONE


def test_memory_limit_applies_to_models_prepared_from_cache(tmp_path):
    from nnapi.hal import CacheHandles
    model = chain_model(8, size=1024)                                  # keeps the constants' shared memory open
    hal = model.to_hal()
    device = ReferenceDevice()
    n_model, n_data = device.get_number_of_cache_files_needed()
    paths = [tmp_path / f"{kind}{k}" for kind, n in (("m", n_model), ("d", n_data)) for k in range(n)]
    import os
    fds = [os.open(p, os.O_RDWR | os.O_CREAT) for p in paths]
    try:
        handles = CacheHandles(tuple(fds[:n_model]), tuple(fds[n_model:]))
        token = bytes(range(32))
        device.prepare_model(hal, FAST, Priority.MEDIUM, None, handles, token)
        small = ReferenceDevice(memory_limit_bytes=1000)
        small.registry = device.registry
        with pytest.raises(NnError) as e:
            small.prepare_model_from_cache(None, handles, token)
        assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    finally:
        for fd in fds:
            os.close(fd)


# --- client identity ------------------------------------------------------------------------------
def test_executions_run_for_the_client_that_prepared_the_model_unless_a_call_names_another():
    device = ReferenceDevice()
    prepared = prepare(device, chain_model(2), client=ClientId(4242))
    assert prepared.client_uid == 4242
    seen = []
    original = device.scheduler.submit

    def spy(**kw):
        seen.append(kw["client"])
        return original(**kw)

    device.scheduler.submit = spy
    request, _ = chain_request(prepared, np.ones(16, np.float32))
    run_sync(prepared, request)
    run_async(prepared, request, client=ClientId(7))
    run_fenced(prepared, request)
    assert seen == [4242, 7, 4242]
