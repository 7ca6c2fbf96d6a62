"""RANK: the number of dimensions of input 0, as an INT32 scalar (any tensor type Android lists)."""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT16_SYMM, T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
          T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    ctx.check_types([_TYPES], [T.INT32])


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [()]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    return [np.array(len(ctx.inputs[0].dims), dtype=np.int32)]


register(Op.RANK, validate=_validate, prepare=_prepare, execute=_execute)
