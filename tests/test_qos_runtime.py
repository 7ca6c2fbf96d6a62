"""Quality of service in the app-facing runtime: priorities, timeouts (also on partitioned
compilations), loop timeouts, error-code mapping and no fallback on a missed deadline (VTS-BEHAVIOURS 4)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import nnapi
from nnapi.conformance.vectors import build, load_vectors
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, ErrorStatus, IPreparedModel, NnError,
                       ResultCode, Timing, result_code_for)
from nnapi.ops import numpy_dtype
from nnapi.runtime import compilation as compilation_module
from nnapi.runtime.devices import _make

from conftest import CTS, add_relu_model
from test_partitioner import AddOnlyDevice

pytestmark = pytest.mark.timing

MISSED_CODES = (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)


class Recorder(IPreparedModel):
    """Wraps a prepared model: records the deadline and loop timeout of every execution, and can be
    told to fail with a given status."""

    def __init__(self, inner, log: list, fail: ErrorStatus | None = None) -> None:
        self.inner, self.log, self.fail = inner, log, fail

    def _record(self, deadline, loop_timeout_ns):
        self.log.append(("execute", deadline, loop_timeout_ns))
        if self.fail is not None:
            raise NnError(self.fail, f"forced {self.fail.name}")

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns, **kw):
        self._record(deadline, loop_timeout_ns)
        return self.inner.execute_synchronously(request, measure, deadline, loop_timeout_ns)

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        self._record(deadline, loop_timeout_ns)
        return self.inner.execute(request, measure, deadline, loop_timeout_ns, callback)

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns, **kw):
        self._record(deadline, loop_timeout_ns)
        return self.inner.execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns,
                                         timeout_after_fence_ns)


def recording(base: type, log: list, fail_prepare: ErrorStatus | None = None,
              fail_execute: ErrorStatus | None = None):
    """A device of class `base` whose preparations and executions are logged (and can fail)."""

    class Recording(base):
        def prepare_model(self, model, preference, priority, deadline, cache, token, **kw):
            log.append(("prepare", self.get_info().name, deadline))
            if fail_prepare is not None:
                raise NnError(fail_prepare, f"forced {fail_prepare.name}")
            return Recorder(super().prepare_model(model, preference, priority, deadline, cache, token), log,
                            fail_execute)

    return Recording()


# --- priority (4.1) ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 89, 91, 99, 101, 109, 111, -1, None, "HIGH"])
def test_ndk_priority_values_other_than_90_100_110_are_bad_data(add_relu, value):
    with pytest.raises(NnError) as e:
        nnapi.Compilation(add_relu, priority=value)
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("value, hal", [(90, nnapi.Priority.LOW), (100, nnapi.Priority.MEDIUM),
                                        (110, nnapi.Priority.HIGH), (nnapi.Priority.HIGH, nnapi.Priority.HIGH)])
def test_ndk_priorities_map_to_hal_priorities(add_relu, value, hal):
    c = nnapi.Compilation(add_relu, devices=["reference"], priority=value).finish()
    assert c.priority == hal and c.steps[0].prepared.priority == hal
    with pytest.raises(NnError) as e:
        c.set_priority(100)
    assert e.value.code == ResultCode.BAD_STATE


# --- timeouts (4.4) ------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds", [-1, float("nan"), "1", True])
def test_invalid_timeouts_are_bad_data(add_relu, seconds):
    with pytest.raises(NnError) as e:
        nnapi.Compilation(add_relu, timeout=seconds)
    assert e.value.code == ResultCode.BAD_DATA
    c = nnapi.Compilation(add_relu).finish()
    with pytest.raises(NnError) as e:
        nnapi.Execution(c).set_timeout(seconds)
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("seconds", [(2**64 - 1) / 1e9, 1e30, float("inf")])
def test_the_largest_timeouts_mean_no_deadline_and_do_not_overflow(add_relu, seconds):
    log: list = []
    dev = _make(recording(ReferenceDevice, log))
    c = nnapi.Compilation(add_relu, devices=[dev], timeout=seconds).finish()
    x = np.ones(4, np.float32)
    (y,) = c.execute([x, x], timeout=seconds)
    np.testing.assert_array_equal(y, [2, 2, 2, 2])
    assert [entry[-1] for entry in log if entry[0] == "prepare"] == [None]
    assert [entry[1] for entry in log if entry[0] == "execute"] == [None]


def test_compute_timeout_reaches_the_driver_as_one_absolute_deadline(add_relu):
    log: list = []
    dev = _make(recording(ReferenceDevice, log))
    c = nnapi.Compilation(add_relu, devices=[dev]).finish()
    e = nnapi.Execution(c)
    x = np.ones(4, np.float32)
    e.set_input(0, x)
    e.set_input(1, x)
    e.set_output(0, np.zeros(4, np.float32))
    before = time.monotonic_ns()
    e.compute(timeout=30)
    (_, deadline, loop_timeout), = [entry for entry in log if entry[0] == "execute"]
    assert before + 30_000_000_000 <= deadline <= time.monotonic_ns() + 30_000_000_000
    assert loop_timeout == LOOP_TIMEOUT_DEFAULT_NS                       # always sent: 2 s unless set
    with pytest.raises(NnError) as err:
        e.set_timeout(1)
    assert err.value.code == ResultCode.BAD_STATE


def test_partitioned_compilations_take_timeouts_every_step_the_same_deadline(android_partitioning):
    """Unlike Android, timeouts work with several devices: each partition is prepared, and each step
    executed, against one absolute deadline."""
    log: list = []
    devices = [_make(recording(AddOnlyDevice, log)), _make(recording(ReferenceDevice, log))]
    m = add_relu_model(64, large_constant=True)                          # ADD, ADD | RELU
    c = nnapi.Compilation(m, devices=devices, timeout=60).finish()
    assert [s.device.name for s in c.steps] == ["add-only", "reference"]
    prepares = [entry for entry in log if entry[0] == "prepare"]
    assert [p[1] for p in prepares] == ["add-only", "reference"]
    assert prepares[0][2] is not None and prepares[0][2] == prepares[1][2]
    a = np.linspace(-50, 50, 64).astype(np.float32)
    (y,) = c.execute([a, np.ones(64, np.float32)], timeout=60)
    np.testing.assert_allclose(y, np.maximum(a + 1 + np.arange(64), 0))
    executes = [entry for entry in log if entry[0] == "execute"]
    assert len(executes) == 2 and executes[0][1] is not None and executes[0][1] == executes[1][1]


def test_a_short_timeout_gives_success_or_a_missed_deadline(add_relu):
    c = nnapi.Compilation(add_relu, devices=["reference"], timeout=1e-9)
    try:
        c.finish()
    except NnError as e:
        assert e.code in MISSED_CODES
        return
    for mode in ("compute", "start_compute"):
        e = nnapi.Execution(c)
        x = np.ones(4, np.float32)
        e.set_input(0, x)
        e.set_input(1, x)
        e.set_output(0, np.zeros(4, np.float32))
        try:
            e.compute(timeout=1e-9) if mode == "compute" else e.start_compute(timeout=1e-9).wait()
        except NnError as err:
            assert err.code in MISSED_CODES


def test_a_passed_compile_deadline_is_a_persistent_miss_without_fallback(add_relu, monkeypatch, android_partitioning):
    log: list = []
    fake = _make(recording(AddOnlyDevice, log, fail_prepare=ErrorStatus.MISSED_DEADLINE_TRANSIENT))
    reference = _make(recording(ReferenceDevice, log))
    monkeypatch.setattr(compilation_module, "all_devices", lambda: [fake, reference])
    # Not an explicit device list, so fallback would be allowed: a missed deadline still never falls back.
    with pytest.raises(NnError) as e:
        nnapi.Compilation(add_relu, timeout=60).finish()
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert [entry[1] for entry in log if entry[0] == "prepare"] == ["add-only"]
    # GENERAL_FAILURE, by contrast, falls back to the reference device.
    log.clear()
    fake = _make(recording(AddOnlyDevice, log, fail_prepare=ErrorStatus.GENERAL_FAILURE))
    monkeypatch.setattr(compilation_module, "all_devices", lambda: [fake, reference])
    nnapi.Compilation(add_relu).finish()
    assert [entry[1] for entry in log if entry[0] == "prepare"] == ["add-only", "reference"]


def test_a_missed_deadline_in_execution_is_reported_as_is_and_never_retried_elsewhere(android_partitioning):
    log: list = []
    devices = [_make(recording(AddOnlyDevice, log, fail_execute=ErrorStatus.MISSED_DEADLINE_TRANSIENT)),
               _make(recording(ReferenceDevice, log))]
    c = nnapi.Compilation(add_relu_model(64, large_constant=True), devices=devices).finish()
    log.clear()
    x = np.ones(64, np.float32)
    with pytest.raises(NnError) as e:
        c.execute([x, x], timeout=60)
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert len([entry for entry in log if entry[0] == "execute"]) == 1 and not [
        entry for entry in log if entry[0] == "prepare"]


def test_a_passed_deadline_on_the_reference_driver_reaches_the_app_as_missed_deadline(add_relu):
    c = nnapi.Compilation(add_relu, devices=["reference"]).finish()
    prepared = c.steps[0].prepared
    prepared.stats.record(60_000_000_000)                                # runs "take a minute"
    x = np.ones(4, np.float32)
    with pytest.raises(NnError) as e:
        c.execute([x, x], timeout=1)
    assert e.value.code == ResultCode.MISSED_DEADLINE_PERSISTENT
    (y,) = c.execute([x, x])                                              # no deadline: fine
    np.testing.assert_array_equal(y, [2, 2, 2, 2])


# --- error-code mapping (4.3) --------------------------------------------------------------------
HAL_TO_NDK = {
    ErrorStatus.DEVICE_UNAVAILABLE: ResultCode.UNAVAILABLE_DEVICE,
    ErrorStatus.GENERAL_FAILURE: ResultCode.OP_FAILED,
    ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: ResultCode.OUTPUT_INSUFFICIENT_SIZE,
    ErrorStatus.INVALID_ARGUMENT: ResultCode.BAD_DATA,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT: ResultCode.MISSED_DEADLINE_TRANSIENT,
    ErrorStatus.MISSED_DEADLINE_PERSISTENT: ResultCode.MISSED_DEADLINE_PERSISTENT,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ResultCode.RESOURCE_EXHAUSTED_PERSISTENT,
}


def test_hal_statuses_map_to_ndk_result_codes():
    assert result_code_for(ErrorStatus.NONE) == ResultCode.NO_ERROR
    for status, code in HAL_TO_NDK.items():
        assert result_code_for(status) == code and int(code) == {1: 9, 2: 5, 3: 8, 4: 4, 5: 10, 6: 11, 7: 12,
                                                                8: 13}[int(status)]
        assert NnError(code, "x").status == status
    for code in (ResultCode.BAD_STATE, ResultCode.INCOMPLETE, ResultCode.OP_FAILED, ResultCode.OUT_OF_MEMORY,
                 ResultCode.UNMAPPABLE, ResultCode.DEAD_OBJECT):
        assert NnError(code, "x").status == ErrorStatus.GENERAL_FAILURE
    assert NnError(ResultCode.UNEXPECTED_NULL, "x").status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("status", [s for s in HAL_TO_NDK if s != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE])
@pytest.mark.parametrize("mode", ["compute", "start_compute"])
def test_a_driver_error_reaches_the_app_as_its_result_code(add_relu, status, mode):
    """ExecutionTest.Wait: a driver whose executions fail with `status` gives the app the mapped
    code from compute and from start_compute + wait; output shapes are then BAD_STATE."""
    log: list = []
    c = nnapi.Compilation(add_relu, devices=[_make(recording(ReferenceDevice, log, fail_execute=status))]).finish()
    e = nnapi.Execution(c)
    x = np.ones(4, np.float32)
    e.set_input(0, x)
    e.set_input(1, x)
    e.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(NnError) as err:
        e.compute() if mode == "compute" else e.start_compute().wait()
    assert err.value.code == HAL_TO_NDK[status]
    with pytest.raises(NnError) as err:
        e.get_output_shape(0)
    assert err.value.code == ResultCode.BAD_STATE


# --- loop timeout (4.4, 4.5) ---------------------------------------------------------------------
def test_loop_timeout_default_clamp_and_checks(add_relu):
    log: list = []
    c = nnapi.Compilation(add_relu, devices=[_make(recording(ReferenceDevice, log))]).finish()
    x = np.ones(4, np.float32)
    for seconds, sent in [(None, LOOP_TIMEOUT_DEFAULT_NS), (20, LOOP_TIMEOUT_MAXIMUM_NS),
                          (float("inf"), LOOP_TIMEOUT_MAXIMUM_NS), (0.5, 500_000_000)]:
        e = nnapi.Execution(c)
        if seconds is not None:
            e.set_loop_timeout(seconds)
        e.set_input(0, x)
        e.set_input(1, x)
        e.set_output(0, np.zeros(4, np.float32))
        e.compute()
        assert log[-1][2] == sent
        with pytest.raises(NnError) as err:
            e.set_loop_timeout(1)
        assert err.value.code == ResultCode.BAD_STATE
    with pytest.raises(NnError) as err:
        nnapi.Execution(c).set_loop_timeout(-1)
    assert err.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("mode", ["compute", "start_compute"])
def test_an_infinite_loop_ends_with_a_missed_deadline(mode):
    test = next(t for t in load_vectors([f"{CTS}/V1_3/while_infinite_loop.json"]))
    built = build(test)
    c = nnapi.Compilation(built.model, devices=["reference"]).finish()
    e = nnapi.Execution(c)
    e.set_loop_timeout(0.001)
    for k, x in enumerate(built.inputs):
        e.set_input(k, x)
    for k, (_, spec) in enumerate(built.outputs):
        dims = tuple(spec["dimensions"]) or (1,)
        e.set_output(k, np.zeros(int(np.prod(dims)), numpy_dtype(nnapi.OperandType[spec["type"]])))
    start = time.monotonic()
    with pytest.raises(NnError) as err:
        e.compute() if mode == "compute" else e.start_compute().wait()
    assert err.value.code in MISSED_CODES and time.monotonic() - start < 5


def test_timing_is_not_reported_for_failed_executions(add_relu):
    c = nnapi.Compilation(add_relu, devices=["reference"]).finish()
    c.steps[0].prepared.stats.record(60_000_000_000)
    e = nnapi.Execution(c)
    e.set_measure_timing(True)
    x = np.ones(4, np.float32)
    e.set_input(0, x)
    e.set_input(1, x)
    e.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(NnError):
        e.compute(timeout=1)
    assert e._timing == Timing()
