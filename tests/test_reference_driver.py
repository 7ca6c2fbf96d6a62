"""The reference driver through the HAL, as Android's VTS drives a vendor driver."""
from __future__ import annotations

import dataclasses
import os
import threading
import time

import numpy as np
import pytest

from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError,
                       OperandType, Operation, OperationType, Priority, Request, RequestArgument)
from nnapi.memory import allocate_ashmem, map_handle

from conftest import add_relu_model

pytestmark = pytest.mark.timing


@pytest.fixture
def device() -> ReferenceDevice:
    return ReferenceDevice()


@pytest.fixture
def model():
    return add_relu_model().to_hal()


def _request(a: np.ndarray, b: np.ndarray):
    """Inputs in pool 0 and outputs in pool 1, as the VTS lays requests out."""
    inp = allocate_ashmem(32)
    out = allocate_ashmem(16)
    map_handle(inp).array(0, 32, np.float32, (8,))[:] = np.concatenate([a, b])
    req = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(0, 16, 16))],
                  [RequestArgument(False, DataLocation(1, 0, 16))],
                  [MemoryPool(handle=inp), MemoryPool(handle=out)])
    return req, map_handle(out)


def test_capabilities_are_positive_and_sorted(device):
    caps = device.get_capabilities()
    types = [p.type for p in caps.operand_performance]
    assert types == sorted(types) and OperandType.SUBGRAPH not in types
    assert all(p.info.exec_time > 0 and p.info.power_usage > 0 for p in caps.operand_performance)
    assert caps.if_performance.exec_time > 0 and caps.while_performance.exec_time > 0


def test_execute_synchronously_with_timing(device, model):
    prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
    req, out = _request(np.array([1, 2, -3, 4], np.float32), np.ones(4, np.float32))
    shapes, timing = prepared.execute_synchronously(req, MeasureTiming.YES, None, None)
    np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), [2, 3, 0, 5])
    assert shapes[0].dimensions == (4,) and shapes[0].is_sufficient
    assert timing.time_on_device <= timing.time_in_driver < 2**64 - 1
    _, no_timing = prepared.execute_synchronously(req, MeasureTiming.NO, None, None)
    assert no_timing.time_on_device == no_timing.time_in_driver == 2**64 - 1


@pytest.mark.parametrize("mutation", ["remove_input", "remove_output", "bad_pool", "out_of_bounds"])
def test_invalid_requests_are_rejected_on_every_path(device, model, mutation):
    prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
    req, _ = _request(np.ones(4, np.float32), np.ones(4, np.float32))
    if mutation == "remove_input":
        req.inputs.pop(1)
    elif mutation == "remove_output":
        req.outputs.pop(0)
    elif mutation == "bad_pool":
        req.inputs[0] = RequestArgument(False, DataLocation(7, 0, 16))
    else:
        req.inputs[1] = RequestArgument(False, DataLocation(0, 2**64 - 8, 16))
    with pytest.raises(NnError) as e:
        prepared.execute_synchronously(req, MeasureTiming.NO, None, None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(NnError) as e:
        prepared.execute(req, MeasureTiming.NO, None, None, lambda *a: None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(NnError) as e:
        prepared.execute_fenced(req, [], MeasureTiming.NO, None, None, None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_async_execute_reports_through_callback(device, model):
    prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
    req, out = _request(np.ones(4, np.float32), np.ones(4, np.float32))
    done = threading.Event()
    got = []
    prepared.execute(req, MeasureTiming.NO, None, None, lambda status, shapes, timing: (got.append(status), done.set()))
    assert done.wait(5)
    assert got == [ErrorStatus.NONE]
    np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), [2, 2, 2, 2])


def test_fenced_execution_waits_for_its_fence(device, model):
    prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
    req, out = _request(np.ones(4, np.float32), np.ones(4, np.float32))
    fence = os.eventfd(0)
    threading.Timer(0.05, lambda: os.eventfd_write(fence, 1)).start()
    start = time.monotonic()
    sync_fd, callback = prepared.execute_fenced(req, [fence], MeasureTiming.YES, None, None, None)
    assert time.monotonic() - start >= 0.04
    status, launched, fenced = callback.get_execution_info()
    assert sync_fd == -1 and status == ErrorStatus.NONE
    assert launched.time_on_device <= launched.time_in_driver
    np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), [2, 2, 2, 2])
    with pytest.raises(NnError) as e:
        prepared.execute_fenced(req, [-1], MeasureTiming.NO, None, None, None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    os.close(fence)


def test_passed_deadlines_are_persistent_misses(device, model):
    past = time.monotonic_ns() - 1
    with pytest.raises(NnError) as e:
        device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, past, None, None)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
    req, _ = _request(np.ones(4, np.float32), np.ones(4, np.float32))
    with pytest.raises(NnError) as e:
        prepared.execute_synchronously(req, MeasureTiming.NO, past, None)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    prepared.execute_synchronously(req, MeasureTiming.NO, 2**64 - 1, None)  # the largest value means none


@pytest.mark.parametrize("preference, priority", [(-1, Priority.MEDIUM), (3, Priority.MEDIUM),
                                                  (ExecutionPreference.LOW_POWER, -1),
                                                  (ExecutionPreference.LOW_POWER, 3)])
def test_bad_preference_or_priority_is_invalid(device, model, preference, priority):
    with pytest.raises(NnError) as e:
        device.prepare_model(model, preference, priority, None, None, None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_cycle_is_invalid_for_supported_operations_and_prepare(device, model):
    main = model.main
    # Feed RELU's output back into ADD's first input: a cycle.
    add, relu = main.operations
    cyclic = dataclasses.replace(main, operations=[Operation(OperationType.ADD, (relu.outputs[0],) + add.inputs[1:],
                                                             add.outputs), relu])
    bad = dataclasses.replace(model, main=cyclic)
    with pytest.raises(NnError) as e:
        device.get_supported_operations(bad)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(NnError):
        device.prepare_model(bad, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None)
