"""EXPAND_DIMS: insert a dimension of size 1 at `axis` (input 1, INT32 in [-(rank+1), rank]).

A negative axis counts from the end of the output shape (axis + rank + 1), as Android's
expand_dims::prepare. Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import normalize_axis
from .context import OpContext, UnknownValue
from .registry import register, resolver
from .reshape import ReshapeParams

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32], [t])
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[0].dims:
        try:
            _axis(ctx)
        except UnknownValue:
            pass


def _axis(ctx: OpContext) -> int:
    # The output has rank + 1 dimensions: the axis indexes into it.
    return normalize_axis(ctx, ctx.scalar(1), len(ctx.inputs[0].dims) + 1, param="input 1 (axis)")


@resolver
def params(ctx: OpContext) -> ReshapeParams:
    """ReshapeParams of EXPAND_DIMS: the inserted axis (input 1, non-negative, counted in the output)
    and the output shape; INVALID_ARGUMENT when out of range, UnknownValue while not constant."""
    dims = ctx.inputs[0].dims
    axis = _axis(ctx)
    return ReshapeParams(tuple(dims[:axis]) + (1,) + tuple(dims[axis:]), (axis,))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    return [ctx.input(0).reshape(params(ctx).out_dims).astype(ctx.outputs[0].dtype)]


register(Op.EXPAND_DIMS, validate=_validate, prepare=_prepare, execute=_execute, params=params)
