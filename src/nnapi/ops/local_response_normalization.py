"""LOCAL_RESPONSE_NORMALIZATION: x * (bias + alpha * sum of squares in a window) ^ -beta.

Inputs: the tensor (float32 or float16, rank 1 to 4), radius (INT32), bias, alpha, beta
(FLOAT32, or FLOAT16 for a float16 tensor) and optional axis (INT32, default -1). The window
along the axis covers [i - radius, i + radius], clipped to the tensor (Android's reference).
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((5, 6), 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([t, T.INT32, s, s, s, T.INT32], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    check_scalar_axis(ctx, 5, default=-1)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    scalar_axis(ctx, 5, len(dims), default=-1)
    return [dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    axis = scalar_axis(ctx, 5, len(x.dims), default=-1)
    radius = int(ctx.scalar(1))
    bias, alpha, beta = (float(np.float32(ctx.scalar(i))) for i in (2, 3, 4))
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
    y = f * np.power(bias + alpha * window, -beta)
    return [np.moveaxis(y, -1, axis).astype(out.dtype)]


register(Op.LOCAL_RESPONSE_NORMALIZATION, validate=_validate, prepare=_prepare, execute=_execute)
