"""nnapi: the Android Neural Networks API stack in Python.

The public API is the app-facing runtime (`Model`, `Compilation`, `Execution`, `Memory`,
`devices`); `nnapi.hal` is the driver contract and `nnapi.drivers.*` the drivers behind it.
"""
from ._version import __version__
from .hal import (DeviceType, ErrorStatus, ExecutionPreference, FusedActivationFunc, NnError, OperandType,
                  OperationType, OutputShape, PaddingScheme, Priority, ResultCode, Timing)
from .runtime import (Burst, CacheOutcome, Compilation, Device, Event, Execution, Memory, Model, devices,
                      model_token, register_device)
from .memory import HardwareBuffer, HardwareBufferFormat, HardwareBufferUsage
from .runtime import MemoryDesc
from .tracing import trace
from .session import CompiledModel, TensorInfo, load

__all__ = [
    "__version__", "Model", "Compilation", "Execution", "Event", "Memory", "Device", "devices",
    "register_device", "model_token", "CacheOutcome", "NnError", "ErrorStatus", "ResultCode", "OperandType",
    "OperationType", "OutputShape", "Priority", "ExecutionPreference", "DeviceType", "FusedActivationFunc",
    "PaddingScheme", "Timing",
    "HardwareBuffer", "HardwareBufferFormat", "HardwareBufferUsage", "MemoryDesc", "trace",
    "load", "CompiledModel", "TensorInfo", "Burst",
]
