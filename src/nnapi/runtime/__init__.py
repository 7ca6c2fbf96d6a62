"""The app-facing runtime: model building, compilation (partitioning, caching), execution, memory."""
from .burst import Burst
from .cache_files import CacheOutcome
from .compilation import Compilation
from .devices import Device, devices, find_device, register_device
from .events import Event
from .execution import Execution
from .memory import Memory
from .memory_desc import MemoryDesc
from .model import Model
from .plan import ExecutionPlan


def model_token(model: Model) -> bytes:
    """A 32-byte cache token derived from a finished model's content, for apps that have none."""
    from .cache_files import content_fingerprint
    import hashlib
    return hashlib.sha256(b"nnapi-model-token" + content_fingerprint(model.to_hal())).digest()


__all__ = ["Burst", "CacheOutcome", "Compilation", "Device", "devices", "find_device", "register_device", "Event",
           "Execution", "ExecutionPlan", "Memory", "MemoryDesc", "Model", "model_token"]
