"""SPLIT: input 0 cut along `axis` (input 1) into `num_splits` (input 2) equal parts, one per output.

The axis dimension must be a multiple of num_splits and the operation must have exactly
num_splits outputs. Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import scalar_axis
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class SplitParams:
    """SPLIT: the axis (non-negative), the number of equal parts and each part's shape."""

    axis: int
    num_splits: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    if len(ctx.outputs) < 1:
        raise ctx.fail("expected at least 1 output")
    ctx.check_counts(3, len(ctx.outputs))
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32, T.INT32], [t] * len(ctx.outputs))
    if t.is_quantized:
        for j in range(len(ctx.outputs)):
            ctx.check_same_quant(0, j, j_output=True)
    try:
        _num_splits(ctx)
        if ctx.inputs[0].dims:
            scalar_axis(ctx, 1, len(ctx.inputs[0].dims))
    except UnknownValue:
        pass


def _num_splits(ctx: OpContext) -> int:
    n = ctx.scalar(2)
    if not isinstance(n, int) or n < 1:
        raise ctx.fail(f"input 2 (num_splits) must be >= 1, got {n}")
    if n != len(ctx.outputs):
        raise ctx.fail(f"input 2 (num_splits) is {n} but the operation has {len(ctx.outputs)} outputs")
    return n


@resolver
def params(ctx: OpContext) -> SplitParams:
    """The resolved SplitParams; INVALID_ARGUMENT when the axis dimension is not a multiple of
    num_splits or num_splits differs from the output count, UnknownValue while a scalar is not constant."""
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank >= 1")
    axis = scalar_axis(ctx, 1, len(dims))
    n = _num_splits(ctx)
    if dims[axis] % n:
        raise ctx.fail(f"input 0 dimension {axis} of size {dims[axis]} is not a multiple of "
                       f"num_splits {n}")
    out = list(dims)
    out[axis] = dims[axis] // n
    return SplitParams(axis, n, tuple(out))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    g = params(ctx)
    return [g.out_dims] * g.num_splits


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    parts = np.split(ctx.input(0), g.num_splits, axis=g.axis)
    return [np.ascontiguousarray(p).astype(o.dtype) for p, o in zip(parts, ctx.outputs)]


register(Op.SPLIT, validate=_validate, prepare=_prepare, execute=_execute, params=params)
