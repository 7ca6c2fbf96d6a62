"""LOW work in native code runs at the OS's lowest priority (`qos.background`): its thread and the
native library's worker threads are lowered for the call and given back their priority after, only
where the process may raise it again."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from nnapi.hal import Priority
from nnapi.qos import background

pytestmark = pytest.mark.timing


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


class _Worker:
    """A thread named like a native library's pool thread, idling until told to stop."""

    def __init__(self, name: str) -> None:
        self.tid = 0
        self._ready, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(name,), daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self, name: str) -> None:
        self.tid = threading.get_native_id()
        with open(f"/proc/self/task/{self.tid}/comm", "w") as f:
            f.write(name)
        self._ready.set()
        self._stop.wait(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_low_native_calls_run_in_the_background_and_get_their_priority_back():
    assert background.available()  # (this machine's tests run as root)
    worker = _Worker("nnapi-test-pool")
    me = threading.get_native_id()
    try:
        before = _nice(me), _nice(worker.tid)
        with background.native_call(Priority.HIGH, ["nnapi-test-pool"]):
            assert (_nice(me), _nice(worker.tid)) == before  # other priorities: nothing changes
        with background.native_call(Priority.LOW, ["nnapi-test-pool"]):
            assert (_nice(me), _nice(worker.tid)) == (background.BACKGROUND_NICE,) * 2
            inner_done = threading.Event()

            def another_low_call() -> None:  # a second LOW call ends first: the workers stay lowered
                with background.native_call(Priority.LOW, ["nnapi-test-pool"]):
                    pass
                inner_done.set()

            threading.Thread(target=another_low_call).start()
            assert inner_done.wait(5)
            assert _nice(worker.tid) == background.BACKGROUND_NICE
        assert (_nice(me), _nice(worker.tid)) == before  # the last one ended: both back
    finally:
        worker.stop()


def test_without_the_right_to_raise_priorities_again_nothing_is_lowered(monkeypatch):
    monkeypatch.setattr(background, "available", lambda: False)
    me = threading.get_native_id()
    before = _nice(me)
    with background.native_call(Priority.LOW):
        assert _nice(me) == before


def test_the_xla_driver_runs_low_work_and_its_pool_in_the_background():
    """While a LOW execution's executable runs, XLA's pool threads are at the lowest priority; a HIGH
    execution leaves them alone, and they are back once the LOW one ends."""
    import nnapi
    from nnapi.conformance.vts.models import alternating_chain
    from nnapi.drivers.xla.prepared_model import WORKER_THREADS
    model = alternating_chain(100, 1 << 18, seed=3, spread=0.1)
    x = np.ones(1 << 18, np.float32)
    low = nnapi.Compilation(model, devices=["xla"], priority=Priority.LOW).finish()
    high = nnapi.Compilation(model, devices=["xla"], priority=Priority.HIGH).finish()
    high.execute([x])
    pool = background._threads_named(WORKER_THREADS)
    assert pool, "XLA's pool threads are not where the driver looks for them"
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(_nice(t) for t in pool)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        high.execute([x])
        assert seen == {0}
        low.execute([x])
    finally:
        stop.set()
        watcher.join()
    assert background.BACKGROUND_NICE in seen
    assert {_nice(t) for t in pool} == {0}
