"""LOGICAL_AND, LOGICAL_OR (broadcast) and LOGICAL_NOT on TENSOR_BOOL8 (any non-zero byte is true)."""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .broadcast import broadcast_dims, broadcast_params
from .context import OpContext
from .registry import register


def _validate_binary(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    ctx.check_types([T.TENSOR_BOOL8, T.TENSOR_BOOL8], [T.TENSOR_BOOL8])
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims, zeros_unknown=True)


def _prepare_binary(ctx: OpContext) -> list[tuple[int, ...]]:
    return [broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims)]


def _execute_binary(ctx: OpContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_dims(ctx, a.dims, b.dims)
    if 0 in shape:
        return [np.zeros(shape, np.bool_)]
    func = np.logical_and if ctx.op == Op.LOGICAL_AND else np.logical_or
    r = func(a.value.reshape(a.dims).astype(np.bool_), b.value.reshape(b.dims).astype(np.bool_))
    return [np.broadcast_to(r, shape).astype(np.bool_)]


def _validate_not(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    ctx.check_types([T.TENSOR_BOOL8], [T.TENSOR_BOOL8])


def _prepare_not(ctx: OpContext) -> list[tuple[int, ...]]:
    return [tuple(ctx.inputs[0].dims)]


def _execute_not(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    return [np.logical_not(x.value.astype(np.bool_)).reshape(x.dims)]


register(Op.LOGICAL_AND, Op.LOGICAL_OR, validate=_validate_binary, prepare=_prepare_binary,
         execute=_execute_binary, params=broadcast_params)
register(Op.LOGICAL_NOT, validate=_validate_not, prepare=_prepare_not, execute=_execute_not)
