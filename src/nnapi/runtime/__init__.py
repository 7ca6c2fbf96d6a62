"""The app-facing runtime: model building, compilation (partitioning, caching), execution, memory.

`devices` is imported at once (the submodule and the function share a name: importing the submodule
later would hide the function); every other export on first use (`lazy.exports`), so listing the
devices imports no compilation or execution code."""
from typing import TYPE_CHECKING

from ..lazy import exports
from .devices import Device, devices, find_device, register_device

__getattr__ = exports(__name__, {
    "Burst": ".burst", "CacheOutcome": ".cache_files", "Compilation": ".compilation", "Event": ".events",
    "Execution": ".execution", "ExecutionPlan": ".plan", "Memory": ".memory", "MemoryDesc": ".memory_desc",
    "Model": ".model", "model_token": ".model"})

if TYPE_CHECKING:
    from .burst import Burst
    from .cache_files import CacheOutcome
    from .compilation import Compilation
    from .events import Event
    from .execution import Execution
    from .memory import Memory
    from .memory_desc import MemoryDesc
    from .model import Model, model_token
    from .plan import ExecutionPlan

__all__ = ["Burst", "CacheOutcome", "Compilation", "Device", "devices", "find_device", "register_device", "Event",
           "Execution", "ExecutionPlan", "Memory", "MemoryDesc", "Model", "model_token"]
