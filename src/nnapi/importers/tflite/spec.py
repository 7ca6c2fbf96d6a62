"""What an NNAPI operand of the imported model is (`Spec`), and the numpy type of each tensor type."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hal import OperandType as T


@dataclass(frozen=True)
class Spec:
    """What an NNAPI operand is: type, dimensions and quantization."""

    type: T
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    #: Per-channel scales and channel dimension (TENSOR_QUANT8_SYMM_PER_CHANNEL).
    channel: tuple[tuple[float, ...], int] | None = None

    def with_dims(self, dims) -> "Spec":
        """The same operand with other dimensions."""
        return Spec(self.type, tuple(int(d) for d in dims), self.scale, self.zero_point, self.channel)

    def with_type(self, type: T, scale: float = 0.0, zero_point: int = 0) -> "Spec":
        """The same dimensions with another type and quantization."""
        return Spec(type, self.dims, scale, zero_point, None)

    @property
    def quantized(self) -> bool:
        return self.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                             T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM)

    @property
    def is_float(self) -> bool:
        return self.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def f32(x: float) -> float:
    """`x` rounded to float32, as NNAPI stores FLOAT32 scalars and scales."""
    return float(np.float32(x))


#: The numpy type of each NNAPI tensor type the importer writes constants of.
NUMPY_OF = {T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16, T.TENSOR_INT32: np.int32,
            T.TENSOR_BOOL8: np.bool_, T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
            T.TENSOR_QUANT8_SYMM: np.int8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8,
            T.TENSOR_QUANT16_SYMM: np.int16, T.TENSOR_QUANT16_ASYMM: np.uint16}
