"""The reference driver's cache artifacts: what it writes to the model cache and the data cache.

Model cache: the validated graph in execution order (the interpreter's plan), with its
preference and priority, serialized by `hal.serialize` (plain data, nothing that runs code when
loaded). Data cache: every CONSTANT_REFERENCE value laid out 16-byte aligned, which the loaded
plan reads in place (zero-copy views over the verified bytes).
"""
from __future__ import annotations

import dataclasses
import struct

from ...hal import (DataLocation, ErrorStatus, ExecutionPreference, MemoryPool, Model, NnError,
                    OperandLifeTime, Priority)
from ...hal.serialize import model_from_bytes, model_to_bytes
from ...memory import map_pool

NUM_MODEL_CACHE, NUM_DATA_CACHE = 1, 1
_OPTIONS = struct.Struct("<ii")
_ALIGN = 16


def to_artifacts(model: Model, preference: ExecutionPreference, priority: Priority) -> tuple[bytes, bytes]:
    """(model blob, data blob) of a validated model."""
    pools = [map_pool(p) for p in model.pools]
    data = bytearray()
    subgraphs = []
    for sub in model.all_subgraphs():
        operands = []
        for operand in sub.operands:
            if operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
                loc = operand.location
                data.extend(b"\0" * (-len(data) % _ALIGN))
                offset = len(data)
                data.extend(pools[loc.pool_index].view(loc.offset, loc.length))
                operand = dataclasses.replace(operand, location=DataLocation(0, offset, loc.length))
            operands.append(operand)
        subgraphs.append(dataclasses.replace(sub, operands=operands))
    structure = dataclasses.replace(model, main=subgraphs[0], referenced=subgraphs[1:], pools=[])
    return _OPTIONS.pack(int(preference), int(priority)) + model_to_bytes(structure), bytes(data)


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
