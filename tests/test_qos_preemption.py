"""Preemption on the compiling drivers gives the results of an uninterrupted run (Q4), and LOW work keeps its
share under continuous HIGH work (`qos.shares`), through each driver's real run path.

- xla: a LOW execution of three sub-models pauses at the checkpoint after its first while a HIGH execution
  runs, and resumes with the intermediate values it kept;
- openvino: a LOW inference is cancelled when a HIGH execution arrives and runs again from scratch on the
  same inference request;
- both: LOW executions under back-to-back HIGH executions finish, on their turns, with the same outputs.

The moments are set by events inside the drivers' calls (no timing): each LOW call waits there until the test
has made the HIGH work it needs.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading

import numpy as np
import pytest

import nnapi
from nnapi.drivers.base import native as base_native
from nnapi.hal import ExecutionPreference, Priority
from nnapi.qos import Scheduler, current

from qos_kit import WAIT, hal_request, run_sync

pytestmark = pytest.mark.timing

FAST = ExecutionPreference.FAST_SINGLE_ANSWER


def _benchmark():
    """benchmarks/qos.py, whose FULLY_CONNECTED stacks these tests run (small ones)."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "qos.py")
    spec = importlib.util.spec_from_file_location("qos_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlp(layers: int, seed: int) -> nnapi.Model:
    """x [4, 64] -> `layers` FULLY_CONNECTED layers with RELU6."""
    return _benchmark().mlp(layers, 4, 64, seed)


def xla_device(**kw):
    from nnapi.drivers.xla import XlaDevice
    return XlaDevice(optimize_after=0, segments=3, scheduler=Scheduler(1, name="xla", handoff_ns=0, **kw))


def openvino_device(**kw):
    from nnapi.drivers.openvino.device import OpenVinoDevice
    return OpenVinoDevice(scheduler=Scheduler(1, name="openvino", handoff_ns=0, **kw))


class Work:
    """A model prepared at a priority, one request over its input, and its output alone."""

    def __init__(self, device, model: nnapi.Model, priority: Priority, seed: int) -> None:
        self.model = model
        self.prepared = device.prepare_model(model.to_hal(), FAST, priority, None, None, None)
        self.x = np.random.default_rng(seed).normal(size=(4, 64)).astype(np.float32)
        self.request, (self.out,) = hal_request(self.prepared.model, [self.x], [(4, 64)])
        assert run_sync(self.prepared, self.request)[0] == nnapi.hal.ErrorStatus.NONE
        self.alone = self.out.copy()
        self.out[...] = 0

    def start(self) -> tuple[threading.Thread, list]:
        """Run once on a thread; the list gets the status."""
        status: list = []
        thread = threading.Thread(target=lambda: status.append(run_sync(self.prepared, self.request)[0]), daemon=True)
        thread.start()
        return thread, status


def wait_for(condition, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT * 1000)):
        if condition():
            return
        done.wait(0.001)
    raise AssertionError(f"never {what}")


def test_xla_low_work_paused_between_sub_models_for_high_work_resumes_with_the_same_results(monkeypatch):
    from nnapi.drivers.xla.prepared_model import XlaPreparedModel
    device = xla_device()
    low, high = Work(device, mlp(6, 1), Priority.LOW, 2), Work(device, mlp(2, 3), Priority.HIGH, 4)
    assert len(low.prepared.segments) == 3
    real = XlaPreparedModel.call
    low_in_first, high_running, go_on = threading.Event(), threading.Event(), threading.Event()
    sub_models: list = []

    def call(seg, exe, args, binding, budget=None):
        ticket = current()
        if ticket.priority == Priority.LOW:
            sub_models.append(ticket.preemptions)
            if len(sub_models) == 1:  # in the first sub-model while the HIGH execution starts
                low_in_first.set()
                assert high_running.wait(WAIT)
        else:
            high_running.set()
            assert go_on.wait(WAIT)  # the HIGH execution runs on until the LOW one has paused
        return real(seg, exe, args, binding, budget)

    monkeypatch.setattr(XlaPreparedModel, "call", staticmethod(call))
    low_thread, low_status = low.start()
    assert low_in_first.wait(WAIT)
    high_thread, high_status = high.start()
    wait_for(lambda: device.scheduler.snapshot()["queued"] == 1, "the LOW execution paused at its checkpoint")
    go_on.set()
    for t in (low_thread, high_thread):
        t.join(WAIT)
    assert low_status == high_status == [nnapi.hal.ErrorStatus.NONE]
    assert sub_models == [0, 1, 1]                              # paused once, after the first, then resumed
    np.testing.assert_array_equal(low.out, low.alone)
    np.testing.assert_array_equal(high.out, high.alone)


def test_openvino_low_inference_cancelled_for_high_work_runs_again_with_the_same_results(monkeypatch):
    import nnapi.drivers.openvino.prepared_model as ov_prepared
    device = openvino_device()
    low, high = Work(device, mlp(6, 1), Priority.LOW, 2), Work(device, mlp(2, 3), Priority.HIGH, 4)
    in_call, stopped = threading.Event(), threading.Event()
    attempts: list = []
    real = base_native.run_native

    def run_native(binding, native):
        if current().priority != Priority.LOW:
            return real(binding, native)

        def call():
            attempts.append("run")
            if len(attempts) > 1:
                return native.call()
            native.start()  # the first inference is in flight (asynchronously) when HIGH work arrives
            in_call.set()
            assert stopped.wait(WAIT)
            try:
                native.wait(base_native.MAX_WAIT_MS)
            except RuntimeError:
                pass
            raise RuntimeError("Infer Request was canceled")  # (as OpenVINO says, whether or not it had ended)

        def cancel():
            stopped.set()
            native.cancel()

        return real(binding, dataclasses.replace(native, call=call, start=None, wait=None, cancel=cancel))

    monkeypatch.setattr(ov_prepared, "run_native", run_native)
    low_thread, low_status = low.start()
    assert in_call.wait(WAIT)
    high_thread, high_status = high.start()                     # starts on the LOW's slot, which stops
    for t in (low_thread, high_thread):
        t.join(WAIT)
    assert low_status == high_status == [nnapi.hal.ErrorStatus.NONE]
    assert stopped.is_set() and attempts == ["run", "run"]     # run again from scratch
    np.testing.assert_array_equal(low.out, low.alone)
    np.testing.assert_array_equal(high.out, high.alone)


@pytest.mark.parametrize("make", [xla_device, openvino_device], ids=["xla", "openvino"])
def test_low_work_finishes_on_its_turns_under_back_to_back_high_work(make, monkeypatch):
    """One slot, HIGH executions back to back from two threads for as long as it takes (turns of 1 ms): each
    of 3 LOW executions finishes (in what gaps there are, or on its turn) with the results of a run alone."""
    device = make(turn_ns=1_000_000)
    low, high = Work(device, mlp(6, 1), Priority.LOW, 2), Work(device, mlp(2, 3), Priority.HIGH, 4)
    stop = threading.Event()
    failures: list = []
    runs: list = []

    def high_stream() -> None:
        request, (out,) = hal_request(high.prepared.model, [high.x], [(4, 64)])
        while not stop.is_set():
            status = run_sync(high.prepared, request)[0]
            runs.append(status)
            if status != nnapi.hal.ErrorStatus.NONE or not np.array_equal(out, high.alone):
                failures.append(status)

    streams = [threading.Thread(target=high_stream, daemon=True) for _ in range(2)]
    for t in streams:
        t.start()
    wait_for(lambda: len(runs) >= 20, "HIGH work ran")
    try:
        for _ in range(3):
            low.out[...] = 0
            assert run_sync(low.prepared, low.request)[0] == nnapi.hal.ErrorStatus.NONE
            np.testing.assert_array_equal(low.out, low.alone)
    finally:
        stop.set()
        for t in streams:
            t.join(WAIT)
    assert not failures and len(runs) > 20
