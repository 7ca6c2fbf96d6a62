"""Partitioning across several devices: best device per operation, steps passing temporaries."""
from __future__ import annotations

import numpy as np
import pytest

import nnapi
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (Capabilities, DeviceInfo, DeviceType, OperandPerformance, OperandType, OperationType,
                       PerformanceInfo)
from nnapi.runtime.devices import Device, _make

from conftest import add_relu_model


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


def test_operations_go_to_the_fastest_supporting_device(two_devices):
    m = add_relu_model(64, large_constant=True)      # ADD, ADD, RELU
    c = nnapi.Compilation(m, devices=two_devices).finish()
    assert [s.device.name for s in c.steps] == ["add-only", "reference"]
    assert c.steps[0].operations == [0, 1] and c.steps[1].operations == [2]
    a = np.linspace(-50, 50, 64).astype(np.float32)
    b = np.ones(64, np.float32)
    (y,) = c.execute([a, b])
    np.testing.assert_allclose(y, np.maximum(a + b + np.arange(64), 0))
    (single,) = nnapi.Compilation(m, devices=["reference"]).finish().execute([a, b])
    np.testing.assert_array_equal(y, single)


def test_no_capable_device_is_bad_data(two_devices):
    m = add_relu_model()
    with pytest.raises(nnapi.NnError) as e:
        nnapi.Compilation(m, devices=[two_devices[0]]).finish()
    assert e.value.code == nnapi.ResultCode.BAD_DATA and "RELU" in e.value.message
