"""L2_NORMALIZATION: x / max(||x||_2, 1e-6) along an axis (float32, float16, quant8 asymm/signed).

Optional input 1 is the axis (INT32, default -1). Rank 1 to 4. Quantized outputs must have
scale 1/128 and zero point 128 (uint8) or 0 (int8). Quantized results follow Android exactly:
the squared norm of the zero-point-shifted values gives an inverse square root in fixed point
(TFLite's GetInvSqrtQuantizedMultiplierExp); uint8 (and int8 off the last axis) then scale
128 * diff by it, int8 on the last axis uses TFLite's reference_integer_ops rescale.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from ._quant import (as_float32, inv_sqrt_quantized_multiplier_exp, multiply_by_quantized_multiplier,
                     rounding_divide_by_pot, saturating_rounding_doubling_high_mul)
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_OUTPUT_ZERO_POINT = {T.TENSOR_QUANT8_ASYMM: 128, T.TENSOR_QUANT8_ASYMM_SIGNED: 0}
_EPSILON = np.float32(1e-6)


@dataclass(frozen=True)
class L2NormalizationParams:
    """L2_NORMALIZATION: x / max(||x||_2 along `axis`, epsilon); the axis is non-negative."""

    axis: int
    epsilon: float


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((1, 2), 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    if t.is_quantized:
        out = ctx.outputs[0]
        if as_float32(out.scale) != 1.0 / 128 or out.zero_point != _OUTPUT_ZERO_POINT[t]:
            raise ctx.fail(f"output 0 must have scale {1.0 / 128} and zero point {_OUTPUT_ZERO_POINT[t]}, "
                           f"got {out.scale} and {out.zero_point}")
    check_scalar_axis(ctx, 1, default=-1)


@resolver
def params(ctx: OpContext) -> L2NormalizationParams:
    """The resolved L2NormalizationParams (axis: input 1, default -1); INVALID_ARGUMENT for a rank
    outside 1..4 or an axis out of range, UnknownValue while the axis is not constant."""
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    return L2NormalizationParams(scalar_axis(ctx, 1, len(dims), default=-1), float(_EPSILON))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    params(ctx)
    return [ctx.inputs[0].dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    axis = params(ctx).axis
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    if not x.type.is_quantized:
        f = x.value.astype(np.float32)
        norm = np.maximum(np.sqrt(np.sum(f * f, axis=axis, keepdims=True, dtype=np.float32)), _EPSILON)
        return [(f / norm).astype(out.dtype)]
    diff = x.value.astype(np.int64) - x.zero_point
    sums = np.sum(diff * diff, axis=axis, keepdims=True)
    pairs = [inv_sqrt_quantized_multiplier_exp(int(s), -1) for s in sums.reshape(-1)]
    mult = np.array([p[0] for p in pairs], np.int64).reshape(sums.shape)
    shift = np.array([p[1] for p in pairs], np.int64).reshape(sums.shape)
    mult, shift = np.broadcast_to(mult, diff.shape), np.broadcast_to(shift, diff.shape)
    res = np.empty(diff.shape, np.int64)
    signed_last_axis = x.type == T.TENSOR_QUANT8_ASYMM_SIGNED and axis == len(x.dims) - 1
    for m, s in set(zip(mult.reshape(-1).tolist(), shift.reshape(-1).tolist())):
        sel = (mult == m) & (shift == s)
        if signed_last_axis:
            # reference_integer_ops::L2Normalization: MultiplyByQuantizedMultiplier(diff, m, s + 7)
            res[sel] = multiply_by_quantized_multiplier(diff[sel], m, s + 7)
        else:
            # MultiplyByQuantizedMultiplierSmallerThanOneExp(128 * diff, m, s), s <= 0
            res[sel] = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(diff[sel] * 128, m), -s)
    info = np.iinfo(out.dtype)
    return [np.clip(res + _OUTPUT_ZERO_POINT[x.type], info.min, info.max).astype(out.dtype)]


register(Op.L2_NORMALIZATION, validate=_validate, prepare=_prepare, execute=_execute, params=params)
