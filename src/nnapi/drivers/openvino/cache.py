"""The OpenVINO driver's cache artifact: one model-cache blob, no data-cache file.

    header (magic, format, preference, priority, OpenVINO version, structure length, export offset)
    | structure (`hal.serialize`, without pools) | padding | exported compiled model (64-byte aligned)

The structure is what the prepared model checks requests against; the exported compiled model
(`CompiledModel.export_model()`, weights included in the layout the kernels read) is handed to
`Core.import_model` only from the verified bytes `caching.load_artifacts` returns, without a copy.
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
from .backend import ov

from ...hal import ErrorStatus, ExecutionPreference, Model, NnError, Priority
from ...hal.serialize import model_from_bytes, model_to_bytes

MAGIC = b"NNOV"
FORMAT = 1
_HEADER = struct.Struct("<4sIii64sQQ")
_ALIGN = 64


def _fail(message: str) -> NnError:
    return NnError(ErrorStatus.GENERAL_FAILURE, f"openvino model cache: {message}")


def _ov_version() -> bytes:
    return ov.get_version().encode()[:64]


def to_blob(model: Model, preference: ExecutionPreference, priority: Priority, export: bytes | memoryview) -> bytes:
    structure = model_to_bytes(dataclasses.replace(model, pools=[]))
    start = _HEADER.size + len(structure)
    offset = -(-start // _ALIGN) * _ALIGN
    header = _HEADER.pack(MAGIC, FORMAT, int(preference), int(priority), _ov_version(), len(structure), offset)
    return b"".join([header, structure, b"\0" * (offset - start), bytes(export)])


def from_blob(blob: memoryview) -> tuple[Model, ExecutionPreference, Priority, memoryview]:
    """(structure, preference, priority, the exported compiled model as a view of `blob`)."""
    blob = memoryview(blob).cast("B")
    if len(blob) < _HEADER.size:
        raise _fail("too short")
    magic, fmt, preference, priority, version, n, offset = _HEADER.unpack_from(blob)
    if magic != MAGIC or fmt != FORMAT:
        raise _fail(f"format {bytes(magic)!r} v{fmt}, expected {MAGIC!r} v{FORMAT}")
    written = version.rstrip(b"\0")
    if written != _ov_version():
        raise _fail(f"written by OpenVINO {written.decode(errors='replace')}, this is {ov.get_version()}")
    if not _HEADER.size + n <= offset < len(blob) or offset % _ALIGN:
        raise _fail("sections out of bounds")
    try:
        options = ExecutionPreference(preference), Priority(priority)
        model = model_from_bytes(bytes(blob[_HEADER.size:_HEADER.size + n]))
    except Exception as e:
        raise _fail(f"structure cannot be decoded: {type(e).__name__}: {e}") from None
    return model, *options, blob[offset:]


def as_tensor(export: memoryview) -> ov.Tensor:
    """The exported model as a u8 tensor over the same memory (no copy)."""
    from .tensors import writable_alias
    return ov.Tensor(writable_alias(np.frombuffer(export, np.uint8)), shared_memory=True)


__all__ = ["MAGIC", "as_tensor", "from_blob", "to_blob"]
