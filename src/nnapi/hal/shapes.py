"""Facts about operand types and dimensions that every layer needs, kept once: the numpy element
type of an operand type, a value's byte size, whether a shape is fully known, and merging two shapes."""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from .enums import OperandType

_DTYPES: dict[OperandType, np.dtype] = {
    OperandType.FLOAT32: np.dtype(np.float32), OperandType.TENSOR_FLOAT32: np.dtype(np.float32),
    OperandType.FLOAT16: np.dtype(np.float16), OperandType.TENSOR_FLOAT16: np.dtype(np.float16),
    OperandType.INT32: np.dtype(np.int32), OperandType.TENSOR_INT32: np.dtype(np.int32),
    OperandType.UINT32: np.dtype(np.uint32), OperandType.SUBGRAPH: np.dtype(np.uint32),
    OperandType.BOOL: np.dtype(np.bool_), OperandType.TENSOR_BOOL8: np.dtype(np.bool_),
    OperandType.TENSOR_QUANT8_ASYMM: np.dtype(np.uint8),
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.dtype(np.int8),
    OperandType.TENSOR_QUANT8_SYMM: np.dtype(np.int8),
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.dtype(np.int8),
    OperandType.TENSOR_QUANT16_ASYMM: np.dtype(np.uint16),
    OperandType.TENSOR_QUANT16_SYMM: np.dtype(np.int16),
    OperandType.TENSOR_OEM_BYTE: np.dtype(np.uint8), OperandType.OEM: np.dtype(np.uint8),
}


def numpy_dtype(operand_type: OperandType) -> np.dtype:
    """The numpy element type that stores values of `operand_type` (little-endian)."""
    return _DTYPES[operand_type]


def is_int(value: Any) -> bool:
    """True for integers (Python or numpy), excluding bool."""
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def is_scalar_type(t: OperandType) -> bool:
    """Scalars and SUBGRAPH references have rank 0."""
    return t.is_scalar or t == OperandType.SUBGRAPH


def byte_size(t: OperandType, dims: Sequence[int]) -> int:
    """Bytes of a value of type `t` and dimensions `dims` (scalars: the element size; 0 when unknown)."""
    if is_scalar_type(t):
        return t.element_size
    return t.element_size * math.prod(dims) if dims else 0


def is_fully_specified(t: OperandType, dims: Sequence[int]) -> bool:
    """True when the size is known: scalars always, tensors with a known rank and no 0 dimension."""
    if is_scalar_type(t):
        return True
    return len(dims) > 0 and all(d > 0 for d in dims)


def combine_dims(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """Merge two shapes where () is an unknown rank and 0 an unknown axis; None when incompatible."""
    a, b = tuple(a), tuple(b)
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x and y and x != y:
            return None
        out.append(x or y)
    return tuple(out)
