"""The driver base (`nnapi.drivers.base`): what every driver gets from it, checked on every driver we ship.

Regressions of the move: xla's asynchronous execute lost the caller's identity (a valid memory-domain
token was refused with INVALID_ARGUMENT), and xla's preparation ignored deadlines once started and
had no memory limit.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.drivers.xla import XlaDevice
from nnapi.hal import (BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, MemoryPool, NnError,
                       Request, RequestArgument)
from nnapi.memory import allocate_ashmem, map_handle
from nnapi.memory.domains import calling_client

pytestmark = pytest.mark.timing

DRIVERS = {"reference": lambda **kw: ReferenceDevice(**kw), "xla": lambda **kw: XlaDevice(optimize_after=0, **kw)}


def add_chain(n: int, size: int = 4, seed: int = 0) -> nnapi.Model:
    """x -> n ADDs of distinct constants -> y (float32, [size])."""
    rng = np.random.default_rng(seed)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (size,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for _ in range(n):
        c = m.add_operand(T.TENSOR_FLOAT32, (size,))
        m.set_operand_value(c, rng.standard_normal(size).astype(np.float32))
        y = m.add_operand(T.TENSOR_FLOAT32, (size,))
        m.add_operation(Op.ADD, [cur, c, act], [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


@pytest.fixture(params=sorted(DRIVERS))
def make(request):
    return DRIVERS[request.param]


def _shared(array: np.ndarray):
    handle = allocate_ashmem(max(array.nbytes, 1))
    mapped = map_handle(handle)
    mapped.write(0, array)
    return handle, mapped


def test_async_execute_keeps_the_callers_identity_for_memory_domain_tokens(make):
    device = make()
    model = add_chain(3).to_hal()
    x = np.arange(4, dtype=np.float32)
    with calling_client(4321, 77):  # as a service does for a remote app
        prepared = device.prepare_model(model)
        buffer, token = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        src, _ = _shared(x)
        buffer.copy_from(src, (4,))
        out_handle = allocate_ashmem(16)
        request = Request([RequestArgument(location=DataLocation(0, 0, 0))],
                          [RequestArgument(location=DataLocation(1, 0, 16))],
                          [MemoryPool(token=token), MemoryPool(handle=out_handle)])
        done = threading.Event()
        got = {}

        def callback(status, shapes, timing):
            got["status"] = status
            done.set()

        prepared.execute(request, MeasureTiming.NO, None, None, callback)
        assert done.wait(30)
    assert got["status"] == ErrorStatus.NONE
    expected = nnapi.Compilation(add_chain(3), devices=["reference"]).finish().execute([x])[0]
    np.testing.assert_allclose(map_handle(out_handle).array(0, 16, np.float32, (4,)), expected, rtol=1e-6)
    # Another client may not use the token, asynchronously either.
    with calling_client(999, 1):
        with pytest.raises(NnError) as err:
            prepared.execute(request, MeasureTiming.NO, None, None, callback)
    assert err.value.status == ErrorStatus.INVALID_ARGUMENT or got["status"] != ErrorStatus.NONE


def test_preparation_that_cannot_finish_by_its_deadline_returns_at_it():
    """A compile far longer than the deadline (xla: one native call of most of a second) returns
    MISSED_DEADLINE_* at about the deadline. (The reference driver's preparation is planning only.)"""
    device = DRIVERS["xla"]()
    model = add_chain(400, seed=1)
    deadline_ms = 20
    start = time.monotonic_ns()
    with pytest.raises(NnError) as err:
        device.prepare_model(model.to_hal(), deadline=start + deadline_ms * 1_000_000)
    took_ms = (time.monotonic_ns() - start) / 1e6
    assert err.value.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
    assert took_ms < deadline_ms + 500, f"returned {took_ms:.0f} ms after the call"


def test_preparation_with_a_generous_deadline_succeeds(make):
    device = make()
    prepared = device.prepare_model(add_chain(3).to_hal(), deadline=time.monotonic_ns() + 60_000_000_000)
    x = np.ones(4, np.float32)
    y = np.empty(4, np.float32)
    request = Request([RequestArgument(location=DataLocation(0, 0, 16))], [RequestArgument(location=DataLocation(1, 0, 16))],
                      [MemoryPool(pointer=x), MemoryPool(pointer=y)])
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    np.testing.assert_allclose(y, nnapi.Compilation(add_chain(3), devices=["reference"]).finish().execute([x])[0],
                               rtol=1e-6)


def test_a_model_over_the_memory_limit_is_refused_persistently(make):
    device = make(memory_limit_bytes=1000)
    model = add_chain(2, size=1024)  # 4 KB tensors and constants (kept alive: they live in its memory)
    with pytest.raises(NnError) as err:
        device.prepare_model(model.to_hal())
    assert err.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    assert "limit of 1000 bytes" in err.value.message


def test_a_plain_exception_from_a_driver_kernel_is_general_failure(make, monkeypatch):
    """Whatever a driver's `run` raises reaches the caller as NnError(GENERAL_FAILURE)."""
    device = make()
    prepared = device.prepare_model(add_chain(1).to_hal())

    def broken(binding):
        raise ValueError("kernel bug")

    monkeypatch.setattr(prepared, "run", broken)
    x, y = np.ones(4, np.float32), np.empty(4, np.float32)
    request = Request([RequestArgument(location=DataLocation(0, 0, 16))], [RequestArgument(location=DataLocation(1, 0, 16))],
                      [MemoryPool(pointer=x), MemoryPool(pointer=y)])
    with pytest.raises(NnError) as err:
        prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    assert err.value.status == ErrorStatus.GENERAL_FAILURE and "kernel bug" in err.value.message


def test_burst_keeps_pools_mapped_by_token_and_gives_the_same_results(make):
    device = make()
    prepared = device.prepare_model(add_chain(2).to_hal())
    burst = prepared.configure_execution_burst()
    expected = nnapi.Compilation(add_chain(2), devices=["reference"]).finish()
    out = allocate_ashmem(16)
    for k in range(3):
        x = np.full(4, k, np.float32)
        src, _ = _shared(x)
        request = Request([RequestArgument(location=DataLocation(0, 0, 16))],
                          [RequestArgument(location=DataLocation(1, 0, 16))],
                          [MemoryPool(handle=src), MemoryPool(handle=out)])
        burst.execute_synchronously(request, [-1, 7], MeasureTiming.NO, None, None)
        np.testing.assert_allclose(map_handle(out).array(0, 16, np.float32, (4,)), expected.execute([x])[0],
                                   rtol=1e-6)
    with pytest.raises(NnError) as err:
        burst.execute_synchronously(request, [-1], MeasureTiming.NO, None, None)
    assert err.value.status == ErrorStatus.INVALID_ARGUMENT
    burst.release_memory_resource(7)
    burst.release_memory_resource(12345)  # unknown: ignored
