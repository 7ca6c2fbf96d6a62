"""Faults across the boundary: a service killed mid-call, restarted, and clients that die."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import numpy as np
import pytest

import nnapi
from nnapi.hal import (BufferDesc, BufferRole, DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming,
                       MemoryPool, NnError, Priority, Request, RequestArgument, ResultCode)
from nnapi.memory import allocate_ashmem, close_handle
from nnapi.service import ENV, connect, default_socket
from nnapi.service.cli import start

from conftest import add_relu_model

pytestmark = pytest.mark.timing

X = np.array([1, -2, 3, -4], np.float32)
Y = np.array([10, 20, -30, 40], np.float32)


@pytest.fixture
def service_dir():
    directory = tempfile.mkdtemp(prefix="nnapi-test-faults-")
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _serve(directory: str):
    return start("reference", default_socket("reference", directory), os.path.join(directory, "state"))


def _hal_request(n: int = 4) -> tuple[Request, list]:
    pool = allocate_ashmem(12 * n)
    request = Request([RequestArgument(False, DataLocation(0, 0, 4 * n)),
                       RequestArgument(False, DataLocation(0, 4 * n, 4 * n))],
                      [RequestArgument(False, DataLocation(0, 8 * n, 4 * n))], [MemoryPool(handle=pool)])
    return request, [pool]


def test_killed_service_fails_pending_calls_and_recovers(service_dir, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, service_dir)
    served = _serve(service_dir)
    try:
        model = add_relu_model()
        token = nnapi.model_token(model)
        c = nnapi.Compilation(model, devices=["reference"], cache_dir=tmp_path, token=token).finish()
        assert c.cache_outcomes[0].outcome == "miss"  # written by the service before it dies
        device = c.steps[0].device
        assert device.location == "service" and device.pid == served.pid

        # Two calls left pending inside the service: both wait on a sync fence nobody signals.
        gate = os.eventfd(0, os.EFD_CLOEXEC)
        request, handles = _hal_request()
        errors: dict[str, tuple[NnError | None, float]] = {}

        def hal_call() -> None:
            try:
                c.steps[0].prepared.execute_fenced(request, [gate], MeasureTiming.NO, None, None, None)
                errors["hal"] = (None, time.monotonic())
            except NnError as e:
                errors["hal"] = (e, time.monotonic())

        worker = threading.Thread(target=hal_call)
        worker.start()
        mem = nnapi.Memory.ashmem(16)
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, mem, 0, 16)
        e.set_input_from_memory(1, mem, 0, 16)
        e.set_output_from_memory(0, nnapi.Memory.ashmem(16), 0, 16)
        event = e.start_compute_with_dependencies([nnapi.Event.create_from_sync_fence_fd(gate)])
        time.sleep(0.3)
        assert worker.is_alive() and not event.is_done()

        killed = time.monotonic()
        served.kill()
        worker.join(5)
        with pytest.raises(NnError) as err:
            event.wait(5)
        event_done = time.monotonic()
        error, when = errors["hal"]
        assert error is not None and error.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert err.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert when - killed < 1.0 and event_done - killed < 1.0
        assert device.dead and device.where.endswith("(dead)")
        os.close(gate)
        for h in handles:
            close_handle(h)

        # Later calls on the dead device fail at once; default devices fall back in-process.
        with pytest.raises(NnError) as err:
            c.execute([X, Y])
        assert err.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        reference = [d for d in nnapi.devices() if d.name == "reference"]
        assert len(reference) == 1 and reference[0].location == "in-process"
        fallback = nnapi.Compilation(model).finish()
        assert all(not s.device.dead and s.device.location == "in-process" for s in fallback.steps)
        np.testing.assert_array_equal(fallback.execute([X, Y])[0], np.maximum(X + Y, 0))
        with pytest.raises(NnError) as err:  # an explicit device list gets the error
            nnapi.Compilation(model, devices=["reference"]).finish()
        assert err.value.code == ResultCode.UNAVAILABLE_DEVICE

        # Restarted (same socket, same state directory): reconnected, and the cache is a hit.
        served = _serve(service_dir)
        again = nnapi.Compilation(model, devices=["reference"], cache_dir=tmp_path, token=token).finish()
        assert again.steps[0].device.pid == served.pid and not again.steps[0].device.dead
        assert again.cache_outcomes[0].outcome == "hit"
        np.testing.assert_array_equal(again.execute([X, Y])[0], np.maximum(X + Y, 0))
    finally:
        served.stop()


def _figures(path: str, expected_fds: int | None = None) -> tuple[int, int, dict]:
    """The service's open descriptors and resident memory (as root sees them), from a fresh connection,
    once only that connection is left (and, given `expected_fds`, once the count settles there: a
    dropped connection's socket closes just after it leaves the service's table)."""
    device = connect(path)
    try:
        for _ in range(200):
            status = device.status()
            if status["connections"] == 1 and expected_fds in (None, status["fds"]):
                break
            time.sleep(0.02)
    finally:
        device.close()
    return status["fds"], status["rss_bytes"], status


def _cycle(path: str, hal_model) -> None:
    """Connect, prepare, execute (numpy staging, a burst, a driver buffer), disconnect without releasing."""
    device = connect(path)
    prepared = device.prepare_model(hal_model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None,
                                    None)
    out = np.zeros(64, np.float32)
    x = np.ones(64, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 256)), RequestArgument(False, DataLocation(1, 0, 256))],
                      [RequestArgument(False, DataLocation(2, 0, 256))],
                      [MemoryPool(pointer=x), MemoryPool(pointer=x), MemoryPool(pointer=out)])
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    burst = prepared.configure_execution_burst()
    burst.execute_synchronously(request, [-1, -1, -1], MeasureTiming.NO, None, None)
    device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    assert out[0] == 2 + 0  # RELU(1 + 1) + constant 0
    device.close()


@pytest.mark.filterwarnings("ignore:os.fork")  # the child only connects, then dies
def test_client_death_frees_everything(service_dir):
    served = _serve(service_dir)
    try:
        model = add_relu_model(64, large_constant=True)  # keeps the constants' shared memory open
        hal_model = model.to_hal()
        for _ in range(20):  # warm up: worker threads, the driver's first-use state
            _cycle(served.socket, hal_model)
        fds, rss, _ = _figures(served.socket)
        for _ in range(200):
            _cycle(served.socket, hal_model)
        fds_after, rss_after, status = _figures(served.socket, fds)
        assert status["connections"] == 1  # only the one asking
        assert fds_after == fds
        assert rss_after - rss < 16 << 20

        # A client process that dies holding a prepared model, a buffer, a burst, a reusable execution (with
        # the shared memory of its request): all freed.
        pid = os.fork()
        if pid == 0:
            try:
                device = connect(served.socket)
                prepared = device.prepare_model(hal_model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                                None, None, None)
                x = np.ones(64, np.float32)
                request = Request([RequestArgument(location=DataLocation(k, 0, 256)) for k in (0, 1)],
                                  [RequestArgument(location=DataLocation(2, 0, 256))],
                                  [MemoryPool(pointer=x), MemoryPool(pointer=x.copy()),
                                   MemoryPool(pointer=np.zeros(64, np.float32))])
                kept = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], []), \
                    prepared.configure_execution_burst(), \
                    prepared.create_reusable_execution(request, MeasureTiming.NO, None)
                kept[2].compute()
                counts = device.status()["objects"]
                os._exit(0 if kept and counts == {"prepared model": 1, "buffer": 1, "burst": 1,
                                                  "fenced execution callback": 0, "reusable execution": 1} else 3)
            except BaseException:
                os._exit(4)
        _, code = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(code) == 0
        assert _figures(served.socket, fds)[0] == fds
    finally:
        assert served.stop() == 0  # SIGTERM: a clean exit
