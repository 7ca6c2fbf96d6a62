"""The reference driver's cache artifacts: what it writes to the model cache and the data cache.

Model cache: the validated graph in execution order (the interpreter's plan), with its
preference and priority, serialized by `hal.serialize` (plain data, nothing that runs code when
loaded). Data cache: every CONSTANT_REFERENCE value laid out 16-byte aligned, which the loaded
plan reads in place (zero-copy views over the verified bytes).
"""
from __future__ import annotations

import dataclasses
import struct

from ...caching.constants import relocate_constants
from ...hal import ErrorStatus, ExecutionPreference, MemoryPool, Model, NnError, Priority
from ...hal.serialize import model_from_bytes, model_to_bytes

NUM_MODEL_CACHE, NUM_DATA_CACHE = 1, 1
_OPTIONS = struct.Struct("<ii")
_ALIGN = 16


def to_artifacts(model: Model, preference: ExecutionPreference, priority: Priority) -> tuple[bytes, bytes]:
    """(model blob, data blob) of a validated model."""
    structure, data = relocate_constants(model, _ALIGN)
    return _OPTIONS.pack(int(preference), int(priority)) + model_to_bytes(structure), data


def from_artifacts(model_blob: memoryview, data_blob: memoryview) -> tuple[Model, ExecutionPreference, Priority]:
    """The model (its constants reading `data_blob` in place), preference and priority."""
    if len(model_blob) < _OPTIONS.size:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "model cache is too short")
    preference, priority = _OPTIONS.unpack_from(model_blob)
    try:
        model = model_from_bytes(bytes(model_blob[_OPTIONS.size:]))
        options = ExecutionPreference(preference), Priority(priority)
    except (NnError, ValueError) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"model cache cannot be decoded: {e}") from None
    model = dataclasses.replace(model, pools=[MemoryPool(pointer=data_blob)])
    return model, *options
