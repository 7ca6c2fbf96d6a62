"""The reference driver's compilation cache: one model-cache file holding the validated model.

The file is a magic, a SHA-256 of the payload and the payload: the model serialized with
`hal.serialize` (plain data, no pickle), its CONSTANT_REFERENCE values folded into
`operand_values` so it does not depend on pools that died with the process. Loading hashes
the in-memory copy and builds from that same copy (C10).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

from ...hal import (CacheHandles, ErrorStatus, Model, NnError, OperandLifeTime)
from ...hal.serialize import model_from_bytes, model_to_bytes
from ...memory import map_pool

NUM_MODEL_CACHE, NUM_DATA_CACHE = 1, 0
_MAGIC = b"NNREF001"


def self_contained(model: Model) -> Model:
    """A copy of `model` whose CONSTANT_REFERENCE operands are CONSTANT_COPY values (no pools)."""
    if not model.pools:
        return model
    pools = [map_pool(p) for p in model.pools]
    values = bytearray(model.operand_values)
    subgraphs = []
    for sub in model.all_subgraphs():
        operands = []
        for operand in sub.operands:
            if operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
                loc = operand.location
                data = pools[loc.pool_index].view(loc.offset, loc.length)
                values.extend(b"\0" * (-len(values) % 8))
                offset = len(values)
                values.extend(data)
                operand = dataclasses.replace(operand, lifetime=OperandLifeTime.CONSTANT_COPY,
                                              location=dataclasses.replace(loc, pool_index=0, offset=offset))
            operands.append(operand)
        subgraphs.append(dataclasses.replace(sub, operands=operands))
    return dataclasses.replace(model, main=subgraphs[0], referenced=subgraphs[1:], operand_values=bytes(values),
                               pools=[])


def _check_handles(handles: CacheHandles) -> None:
    if len(handles.model_cache) != NUM_MODEL_CACHE or len(handles.data_cache) != NUM_DATA_CACHE:
        raise NnError(ErrorStatus.INVALID_ARGUMENT,
                      f"expected {NUM_MODEL_CACHE} model-cache and {NUM_DATA_CACHE} data-cache files, got "
                      f"{len(handles.model_cache)} and {len(handles.data_cache)}")


def save(handles: CacheHandles, token: bytes, model: Model) -> None:
    """Write the model cache; a failure to write only means no cache (never a failed preparation)."""
    try:
        _check_handles(handles)
        payload = model_to_bytes(self_contained(model))
        data = _MAGIC + hashlib.sha256(payload).digest() + payload
        fd = handles.model_cache[0]
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except (OSError, NnError):
        pass


def load(handles: CacheHandles, token: bytes) -> Model:
    """Read the model cache into memory, verify it, and build the model from that copy."""
    _check_handles(handles)
    fd = handles.model_cache[0]
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
    except OSError as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"cannot read the model cache: {e}") from None
    if len(data) < len(_MAGIC) + 32 or not data.startswith(_MAGIC):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "model cache is empty or not a reference-driver cache")
    digest, payload = data[len(_MAGIC):len(_MAGIC) + 32], data[len(_MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "model cache failed its integrity check")
    return model_from_bytes(payload)
