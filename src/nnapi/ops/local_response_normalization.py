"""LOCAL_RESPONSE_NORMALIZATION: x * (bias + alpha * sum of squares in a window) ^ -beta.

Inputs: the tensor (float32 or float16, rank 1 to 4), radius (INT32), bias, alpha, beta
(FLOAT32, or FLOAT16 for a float16 tensor) and optional axis (INT32, default -1). The window
along the axis covers [i - radius, i + radius], clipped to the tensor (Android's reference), so a
radius beyond the depth means the whole depth: `params` clamps it there, and no kernel or compiled
window ever grows with a huge radius (any INT32 is legal).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


@dataclass(frozen=True)
class LocalResponseNormalizationParams:
    """LOCAL_RESPONSE_NORMALIZATION: x * (bias + alpha * sum of squares over [i - radius, i + radius]
    along `axis`) ^ -beta. `axis` is non-negative; `radius` is clamped to the depth along the axis
    (when known), where a larger window sums the same elements. Scalars are float32 values as Python
    floats."""

    axis: int
    radius: int
    bias: float
    alpha: float
    beta: float


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((5, 6), 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([t, T.INT32, s, s, s, T.INT32], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    check_scalar_axis(ctx, 5, default=-1)


def _shape(ctx: OpContext) -> tuple[tuple[int, ...], int]:
    """(input shape, axis)."""
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    return dims, scalar_axis(ctx, 5, len(dims), default=-1)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    try:  # resolved once for prepare and execute
        params(ctx)
    except UnknownValue:  # a scalar is known only at execution: the shape does not need it
        return [_shape(ctx)[0]]
    return [ctx.inputs[0].dims]


@resolver
def params(ctx: OpContext) -> LocalResponseNormalizationParams:
    """The resolved LocalResponseNormalizationParams (radius: input 1, clamped to the depth; bias,
    alpha, beta: inputs 2-4; axis: input 5, default -1); INVALID_ARGUMENT for a rank outside 1..4 or
    an axis out of range, UnknownValue while a scalar is not constant."""
    dims, axis = _shape(ctx)
    radius = int(ctx.scalar(1))
    depth = dims[axis]
    if depth:  # a window past the depth on both sides sums the whole depth: clamp it there
        radius = min(radius, depth)
    bias, alpha, beta = (float(np.float32(ctx.scalar(i))) for i in (2, 3, 4))
    return LocalResponseNormalizationParams(axis, radius, bias, alpha, beta)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    g = params(ctx)
    axis, radius, bias, alpha, beta = g.axis, g.radius, g.bias, g.alpha, g.beta
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    f = np.moveaxis(x.value.astype(np.float64), axis, -1)
    n = f.shape[-1]
    # Window sums of squares through a cumulative sum with a leading zero.
    csum = np.concatenate([np.zeros(f.shape[:-1] + (1,)), np.cumsum(f * f, axis=-1)], axis=-1)
    i = np.arange(n)
    lo = np.clip(i - radius, 0, n)
    hi = np.clip(i + radius + 1, 0, n)
    window = np.where(hi > lo, csum[..., hi] - csum[..., lo], 0.0)
    with np.errstate(all="ignore"):  # a zero base with a positive beta, or infinite values: inf / nan, as in C++
        y = f * np.power(bias + alpha * window, -beta)
        return [np.moveaxis(y, -1, axis).astype(out.dtype)]


register(Op.LOCAL_RESPONSE_NORMALIZATION, validate=_validate, prepare=_prepare, execute=_execute,
         params=params)
