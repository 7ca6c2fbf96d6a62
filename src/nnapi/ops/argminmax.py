"""ARGMAX, ARGMIN: index of the largest / smallest value along an axis (TENSOR_INT32 output).

Input 1 is the axis (INT32, negative counts from the end). The axis is removed from the
output shape; a rank-1 input gives shape (1,) (Android's argMinMaxPrepare). Ties resolve to
the first index, as Android's strict comparison does. Quantized inputs compare raw values.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32,
          T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class ArgMinMaxParams:
    """ARGMAX / ARGMIN: the reduced axis (non-negative) and the output shape ((1,) for a rank-1 input);
    ties go to the first occurrence."""

    axis: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    ctx.check_types([_TYPES, T.INT32], [T.TENSOR_INT32])
    check_scalar_axis(ctx, 1)


@resolver
def params(ctx: OpContext) -> ArgMinMaxParams:
    """The resolved ArgMinMaxParams (axis: input 1); INVALID_ARGUMENT for an axis out of range,
    UnknownValue while it is not constant."""
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank at least 1")
    axis = scalar_axis(ctx, 1, len(dims))
    out = tuple(dims[:axis]) + tuple(dims[axis + 1:])
    return ArgMinMaxParams(axis, out or (1,))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    dims, axis = g.out_dims, g.axis
    x = ctx.input(0)
    if x.size == 0:
        return [np.zeros(dims, np.int32)]
    fn = np.argmax if ctx.op == Op.ARGMAX else np.argmin  # first occurrence on ties
    return [fn(x, axis=axis).astype(np.int32).reshape(dims)]


register(Op.ARGMAX, Op.ARGMIN, validate=_validate, prepare=_prepare, execute=_execute, params=params)
