"""Reusable executions across the service boundary (`service.reusable`): the request crosses once and the
service keeps the driver's own reusable execution of it; each computation reads the app's memory anew,
one at a time, and memory the app frees ends it rather than staying mapped."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import nnapi
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError, Priority,
                       Request, RequestArgument)
from nnapi.service import protocol
from nnapi.service.reusable import ServiceExecution
from conftest import add_relu_model
from test_service import remote, service  # noqa: F401  (fixtures: the served reference driver)

pytestmark = pytest.mark.timing


def _prepared(remote, n: int = 4):
    return remote.prepare_model(add_relu_model(n).to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                None, None, None)


def _request(pools: list[MemoryPool], nbytes: int) -> Request:
    return Request([RequestArgument(location=DataLocation(k, 0, nbytes)) for k in (0, 1)],
                   [RequestArgument(location=DataLocation(2, 0, nbytes))], pools)


def test_a_served_reusable_execution_reads_in_process_arrays_anew_at_each_computation(remote):
    prepared = _prepared(remote)
    x, y, out = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    execution = prepared.create_reusable_execution(
        _request([MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)], 16), MeasureTiming.YES, None)
    assert isinstance(execution, ServiceExecution)
    assert remote.status()["objects"]["reusable execution"] == 1
    rng = np.random.default_rng(0)
    for _ in range(5):
        x[:], y[:] = rng.standard_normal(4), rng.standard_normal(4)
        shapes, timing = execution.compute()
        np.testing.assert_array_equal(out, np.maximum(x + y, 0))
        assert [tuple(s.dimensions) for s in shapes] == [(4,)] and timing.time_in_driver >= timing.time_on_device >= 0
    with pytest.raises(NnError) as missed:
        execution.compute(deadline=1)  # (monotonic ns 1: long past)
    assert missed.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    x[:] = 7
    execution.compute()  # (a refused computation leaves it usable)
    np.testing.assert_array_equal(out, np.maximum(x + y, 0))
    execution.release()
    assert remote.status()["objects"]["reusable execution"] == 0


def test_a_served_reusable_execution_reads_shared_memory_in_place(remote):
    prepared = _prepared(remote, 1024)
    memories = [nnapi.Memory.ashmem(4096) for _ in range(3)]
    arrays = [m.array(np.float32, (1024,)) for m in memories]
    execution = prepared.create_reusable_execution(
        _request([m.pool for m in memories], 4096), MeasureTiming.NO, None)
    for k in range(3):
        arrays[0][:], arrays[1][:] = np.arange(1024) - k * 300, k
        execution.compute()
        np.testing.assert_array_equal(arrays[2], np.maximum(arrays[0] + arrays[1], 0))


def test_a_served_reusable_execution_of_an_invalid_request_is_refused_when_made(remote):
    prepared = _prepared(remote)
    x = np.zeros(4, np.float32)
    short = Request([RequestArgument(location=DataLocation(0, 0, 16)), RequestArgument(location=DataLocation(0, 0, 8))],
                    [RequestArgument(location=DataLocation(0, 0, 16))], [MemoryPool(pointer=x)])
    with pytest.raises(NnError) as refused:
        prepared.create_reusable_execution(short, MeasureTiming.NO, None)
    assert refused.value.status == ErrorStatus.INVALID_ARGUMENT and "input 1" in refused.value.message
    assert remote.status()["objects"]["reusable execution"] == 0


def test_a_served_reusable_execution_computes_one_at_a_time(remote):
    """A second computation while one runs is refused (IExecution: one at a time), the first unharmed: by
    the app's proxy, and by the service for a client that sends them anyway (raw calls on its connection)."""
    n = 1 << 20
    prepared = _prepared(remote, n)
    x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    execution = prepared.create_reusable_execution(
        _request([MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)], 4 * n), MeasureTiming.NO,
        None)
    errors: list[NnError] = []
    done = threading.Event()

    raw: list[NnError] = []

    def hammer(proxy: bool) -> None:
        while not done.is_set():
            try:
                if proxy:
                    execution.compute()
                else:
                    remote.connection.call(protocol.EXECUTION_COMPUTE, execution.oid, [None])
            except NnError as e:
                (errors if proxy else raw).append(e)

    threads = [threading.Thread(target=hammer, args=(k == 0,)) for k in range(3)]
    for t in threads:
        t.start()
    try:  # (until both kinds of refusal were seen: on a loaded machine 20 rounds may not overlap)
        rounds, give_up = 0, time.monotonic() + 30
        while rounds < 20 or (not (errors and raw) and time.monotonic() < give_up):
            rounds += 1
            try:
                execution.compute()
            except NnError as e:
                errors.append(e)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert errors and raw and all(e.status == ErrorStatus.GENERAL_FAILURE and "one computation at a time" in e.message
                                  for e in errors + raw)
    assert any("execution_compute" in e.message for e in raw)  # (refused by the service itself)
    execution.compute()
    np.testing.assert_array_equal(out, np.full(n, 2, np.float32))


@pytest.mark.parametrize("another_call", [True, False], ids=["then-another-call", "then-the-computation"])
def test_freeing_the_memory_of_a_served_reusable_execution_ends_it(remote, another_call):
    """The app's memory is let go of, not kept mapped under an execution: computing then says why, whether
    another call on the connection told the service first or the computation on its channel comes next."""
    prepared = _prepared(remote, 1024)
    memories = [nnapi.Memory.ashmem(4096) for _ in range(3)]
    execution = prepared.create_reusable_execution(_request([m.pool for m in memories], 4096), MeasureTiming.NO,
                                                   None)
    execution.compute()
    memories[0].close()
    if another_call:
        remote.status()  # (the forget goes with the next call)
    with pytest.raises(NnError) as gone:
        execution.compute()
    assert gone.value.status == ErrorStatus.GENERAL_FAILURE and "sealed or freed" in gone.value.message


def _channels(remote) -> int:
    return remote.status()["budget"]["channels"]


def _eventually(predicate, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def _relu_execution(prepared):
    x, y, out = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    execution = prepared.create_reusable_execution(
        _request([MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)], 16), MeasureTiming.NO, None)
    return execution, x, y, out


def test_a_served_reusable_execution_computes_on_a_channel_of_its_own_ended_with_it(remote):
    prepared = _prepared(remote)
    gc.collect()  # (executions earlier tests left in reference cycles let go of their channels)
    assert _eventually(lambda: _channels(remote) == 0)
    execution, x, y, out = _relu_execution(prepared)
    assert _channels(remote) == 1
    for k in range(3):
        x[:], y[:] = np.arange(4) - k, k
        execution.compute()
        np.testing.assert_array_equal(out, np.maximum(x + y, 0))
    with pytest.raises(NnError) as missed:  # (errors come back on the channel as on the connection)
        execution.compute(deadline=1)
    assert missed.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    execution.release()
    assert _eventually(lambda: _channels(remote) == 0)
    assert remote.status()["objects"]["reusable execution"] == 0


def test_reusable_executions_past_the_services_channels_compute_over_the_connection(tmp_path):
    from nnapi.drivers.reference import ReferenceDevice
    from nnapi.service import connect
    from nnapi.service.server import Service
    service = Service(ReferenceDevice(), str(tmp_path / "two.sock"), max_burst_channels=2)
    service.start()
    threading.Thread(target=service.serve_forever, daemon=True).start()
    remote = connect(service.socket_path)
    try:
        prepared = _prepared(remote)
        executions = [_relu_execution(prepared) for _ in range(4)]
        assert _channels(remote) == 2
        for k, (execution, x, y, out) in enumerate(executions):
            x[:], y[:] = k, 1
            execution.compute()
            np.testing.assert_array_equal(out, np.full(4, k + 1, np.float32))
        for execution, *_ in executions:
            execution.release()
        assert _eventually(lambda: _channels(remote) == 0)
        assert _eventually(lambda: remote.status()["objects"]["reusable execution"] == 0)
    finally:
        remote.close()
        service.stop()
