"""EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL: broadcast comparisons to TENSOR_BOOL8.

Inputs share one type (BOOL8, FLOAT16, FLOAT32, INT32, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED).
Quantized inputs may have different scales and zero points: as in Android's Comparisons.cpp
each element is compared on its real value `(q - zero_point) * scale`, computed in float.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .broadcast import broadcast_dims, broadcast_params
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
          T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_FUNCS = {Op.EQUAL: np.equal, Op.NOT_EQUAL: np.not_equal, Op.GREATER: np.greater,
          Op.GREATER_EQUAL: np.greater_equal, Op.LESS: np.less, Op.LESS_EQUAL: np.less_equal}


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, t], [T.TENSOR_BOOL8])
    if t in _QUANT:
        for i in (0, 1):
            if not np.float32(ctx.inputs[i].scale) > 0:
                raise ctx.fail(f"input {i} has non-positive scale {ctx.inputs[i].scale}")
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims, zeros_unknown=True)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims)]


def _real(x) -> np.ndarray:
    """The compared values: float32 real values for quantized tensors, the raw values otherwise."""
    if x.type in _QUANT:
        return (x.value.astype(np.int32) - np.int32(x.zero_point)).astype(np.float32) * np.float32(x.scale)
    return x.value


def _execute(ctx: OpContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_dims(ctx, a.dims, b.dims)
    if 0 in shape:
        return [np.zeros(shape, np.bool_)]
    r = _FUNCS[ctx.op](_real(a).reshape(a.dims), _real(b).reshape(b.dims))
    return [np.broadcast_to(r, shape).astype(np.bool_)]


register(Op.EQUAL, Op.NOT_EQUAL, Op.GREATER, Op.GREATER_EQUAL, Op.LESS, Op.LESS_EQUAL,
         validate=_validate, prepare=_prepare, execute=_execute, params=broadcast_params)
