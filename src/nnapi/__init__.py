"""nnapi: the Android Neural Networks API stack in Python.

The public API is the app-facing runtime (`Model`, `Compilation`, `Execution`, `Memory`,
`devices`); `nnapi.hal` is the driver contract and `nnapi.drivers.*` the drivers behind it.

Every export is imported on first use (`lazy.exports`): `import nnapi` costs a few files, and an app
pays for the runtime, the session or the tracer only once it uses them (issue 32: `import nnapi` and
`nnapi.devices()` within 0.15 s).
"""
from typing import TYPE_CHECKING

from ._version import __version__
from .lazy import exports

_EXPORTS = {
    **{name: ".hal" for name in ("DeviceType", "ErrorStatus", "ExecutionPreference", "FusedActivationFunc",
                                 "NnError", "OperandType", "OperationType", "OutputShape", "PaddingScheme",
                                 "Priority", "ResultCode", "Timing")},
    **{name: ".runtime" for name in ("Burst", "CacheOutcome", "Compilation", "Event", "Execution", "Memory",
                                     "MemoryDesc", "Model", "model_token")},
    **{name: ".runtime.devices" for name in ("Device", "devices", "register_device")},
    **{name: ".memory" for name in ("HardwareBuffer", "HardwareBufferFormat", "HardwareBufferUsage")},
    "trace": ".tracing",
    **{name: ".session" for name in ("CompiledModel", "TensorInfo", "load")},
}

__getattr__ = exports(__name__, _EXPORTS, submodules=True)

if TYPE_CHECKING:
    from .hal import (DeviceType, ErrorStatus, ExecutionPreference, FusedActivationFunc, NnError, OperandType,
                      OperationType, OutputShape, PaddingScheme, Priority, ResultCode, Timing)
    from .memory import HardwareBuffer, HardwareBufferFormat, HardwareBufferUsage
    from .runtime import Burst, CacheOutcome, Compilation, Event, Execution, Memory, MemoryDesc, Model, model_token
    from .runtime.devices import Device, devices, register_device
    from .session import CompiledModel, TensorInfo, load
    from .tracing import trace

__all__ = [
    "__version__", "Model", "Compilation", "Execution", "Event", "Memory", "Device", "devices",
    "register_device", "model_token", "CacheOutcome", "NnError", "ErrorStatus", "ResultCode", "OperandType",
    "OperationType", "OutputShape", "Priority", "ExecutionPreference", "DeviceType", "FusedActivationFunc",
    "PaddingScheme", "Timing",
    "HardwareBuffer", "HardwareBufferFormat", "HardwareBufferUsage", "MemoryDesc", "trace",
    "load", "CompiledModel", "TensorInfo", "Burst",
]
