"""Partitioning across several devices: best device per operation, steps passing temporaries."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import nnapi
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (Capabilities, DeviceInfo, DeviceType, OperandPerformance, OperandType, OperationType,
                       PerformanceInfo)
from nnapi.runtime.devices import Device, _make

from conftest import SHARED, add_relu_model


class AddOnlyDevice(ReferenceDevice):
    """A fast device that only runs ADD (and says so), to force a multi-step plan."""

    def get_info(self) -> DeviceInfo:
        return DeviceInfo("add-only", "1", DeviceType.ACCELERATOR, 30)

    def get_capabilities(self) -> Capabilities:
        fast = PerformanceInfo(0.5, 0.5)
        return Capabilities(fast, fast, tuple(OperandPerformance(t, fast) for t in (OperandType.TENSOR_FLOAT32,)),
                            fast, fast)

    def get_supported_operations(self, model):
        return [op.type == OperationType.ADD for op in model.main.operations]

    def get_number_of_cache_files_needed(self):
        return 0, 0


@pytest.fixture
def two_devices() -> list[Device]:
    reference = next(d for d in nnapi.devices() if d.name == "reference")
    return [_make(AddOnlyDevice()), reference]


def test_operations_go_to_the_fastest_supporting_device_when_it_pays(two_devices):
    n = 1 << 18                                       # 1 MB tensors: the ADDs' work outweighs a boundary
    m = add_relu_model(n, large_constant=True)        # ADD, ADD, RELU
    c = nnapi.Compilation(m, devices=two_devices).finish()
    assert [s.device.name for s in c.steps] == ["add-only", "reference"]
    assert c.steps[0].operations == [0, 1] and c.steps[1].operations == [2]
    a = np.linspace(-50, 50, n).astype(np.float32)
    b = np.ones(n, np.float32)
    (y,) = c.execute([a, b])
    np.testing.assert_allclose(y, np.maximum(a + b + np.arange(n), 0))
    (single,) = nnapi.Compilation(m, devices=["reference"]).finish().execute([a, b])
    np.testing.assert_array_equal(y, single)


def test_cheap_operations_never_split_a_graph(two_devices):
    """Two small ADDs would be faster on the accelerator, but not by the cost of a partition boundary."""
    m = add_relu_model(64, large_constant=True)
    c = nnapi.Compilation(m, devices=two_devices).finish()
    assert [s.device.name for s in c.steps] == ["reference"]


def test_a_device_that_runs_everything_takes_the_whole_model(two_devices):
    m = add_relu_model(1 << 18, large_constant=False)     # ADD, RELU
    everything = _make(AllFastDevice())
    c = nnapi.Compilation(m, devices=[two_devices[0], everything, two_devices[1]]).finish()
    assert [s.device.name for s in c.steps] == ["all-fast"]


class AllFastDevice(ReferenceDevice):
    """Runs every operation a little faster than the reference (and slower than add-only on ADD)."""

    def get_info(self) -> DeviceInfo:
        return DeviceInfo("all-fast", "1", DeviceType.ACCELERATOR, 30)

    def get_capabilities(self) -> Capabilities:
        fast = PerformanceInfo(0.8, 0.8)
        return Capabilities(fast, fast, tuple(OperandPerformance(t, fast) for t in (OperandType.TENSOR_FLOAT32,)),
                            fast, fast)

    def get_number_of_cache_files_needed(self):
        return 0, 0


def test_no_capable_device_is_bad_data(two_devices):
    m = add_relu_model()
    with pytest.raises(nnapi.NnError) as e:
        nnapi.Compilation(m, devices=[two_devices[0]]).finish()
    assert e.value.code == nnapi.ResultCode.BAD_DATA and "RELU" in e.value.message


def test_a_plan_has_at_most_three_steps(two_devices):
    """ADD and RELU alternating on large tensors: each ADD alone would pay for its own step on the
    fast device, but a plan never has more than three steps when the devices can take runs over."""
    from nnapi import OperandType as T, OperationType as Op
    n = 1 << 18
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for _ in range(4):
        y = m.add_operand(T.TENSOR_FLOAT32, (n,))
        m.add_operation(Op.ADD, [cur, cur, act], [y])
        z = m.add_operand(T.TENSOR_FLOAT32, (n,))
        m.add_operation(Op.RELU, [y], [z])
        cur = z
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    c = nnapi.Compilation(m, devices=two_devices).finish()
    assert 1 <= len(c.steps) <= 3
    v = np.linspace(-1, 1, n).astype(np.float32)
    np.testing.assert_allclose(c.execute([v])[0], np.maximum(v, 0) * 16)


SHARED_MODELS = sorted(glob.glob(os.path.join(SHARED, "models", "*", "*.tflite")))


@pytest.mark.skipif(not SHARED_MODELS, reason="no shared models beside the project")
@pytest.mark.parametrize("path", SHARED_MODELS, ids=lambda p: p.rsplit("/", 1)[-1])
def test_real_models_run_in_at_most_three_partitions_on_default_devices(path):
    from nnapi.importers import load_tflite
    from nnapi.runtime.partitioner import partition
    imported = load_tflite(path)
    steps = partition(nnapi.devices(), imported.model.to_hal(), nnapi.ExecutionPreference.FAST_SINGLE_ANSWER)
    assert len(steps) <= 3, [(s.device.name, len(s.operations)) for s in steps]
