"""The kernels' view of an operand: type, dimensions, quantization and (when known) the value."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType, SymmPerChannelQuantParams

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


@dataclass
class Tensor:
    """One operation input or output as kernels see it.

    `dims` may hold 0 for an unknown dimension at compile time. `value` is a numpy array of
    shape `dims` (a 0-d array for scalars); at compile time only constants have one.
    `omitted` marks an optional operand with no value.
    """

    type: OperandType
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: SymmPerChannelQuantParams | None = None
    value: np.ndarray | None = None
    omitted: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.type)

    @property
    def known(self) -> bool:
        """True when every dimension is known (scalars always)."""
        return self.type.is_scalar or all(d > 0 for d in self.dims) or self.value is not None

    def dequantized(self) -> np.ndarray:
        """The value as float32, applying scale/zero point (or per-channel scales) when quantized."""
        v = self.value
        if self.type == OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = self.channel_quant
            shape = [1] * v.ndim
            shape[cq.channel_dim] = -1
            return v.astype(np.float32) * np.asarray(cq.scales, np.float32).reshape(shape)
        if self.type.is_quantized:
            return (v.astype(np.float32) - np.float32(self.zero_point)) * np.float32(self.scale)
        return v.astype(np.float32)
