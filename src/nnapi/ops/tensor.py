"""The kernels' view of an operand: type, dimensions, quantization and (when known) the value."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType, SymmPerChannelQuantParams, numpy_dtype


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
