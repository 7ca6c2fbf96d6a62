"""SOFTMAX: exp(beta * (x - max)) / sum along an axis (float32, float16, quant8 asymm and signed).

Input 1 is beta (FLOAT16 for float16 tensors, FLOAT32 otherwise), optional input 2 the axis
(default -1). Quantized outputs must have scale 1/256 and zero point 0 (uint8) / -128 (int8).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, quantize
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_OUTPUT_ZERO_POINT = {T.TENSOR_QUANT8_ASYMM: 0, T.TENSOR_QUANT8_ASYMM_SIGNED: -128}


@dataclass(frozen=True)
class SoftmaxParams:
    """SOFTMAX / LOG_SOFTMAX: beta (a Python float, > 0 for SOFTMAX) and the axis, non-negative."""

    beta: float
    axis: int


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((2, 3), 1)
    t = ctx.inputs[0].type
    beta_type = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([_TYPES, beta_type, T.INT32], [t])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    if t.is_quantized:
        out = ctx.outputs[0]
        if as_float32(out.scale) != 1.0 / 256 or out.zero_point != _OUTPUT_ZERO_POINT[t]:
            raise ctx.fail(f"output 0 must have scale {1.0 / 256} and zero point {_OUTPUT_ZERO_POINT[t]}, "
                           f"got {out.scale} and {out.zero_point}")
    try:
        _check_beta(ctx)
        _axis(ctx)
    except UnknownValue:
        pass


def _check_beta(ctx: OpContext) -> float:
    beta = ctx.scalar(1)
    if not isinstance(beta, float) or not beta > 0.0:
        raise ctx.fail(f"input 1 (beta) must be positive, got {beta}")
    return beta


def _axis(ctx: OpContext) -> int:
    """The axis (input 2, default -1) made non-negative; UnknownValue while the rank is unknown."""
    axis = ctx.scalar(2, -1)
    if not isinstance(axis, int):
        raise ctx.fail("input 2 (axis) has no value")
    rank = len(ctx.inputs[0].dims)
    if rank == 0 and ctx.compile_time:
        raise UnknownValue(f"{ctx.op.name}: input 0 rank not known yet")
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ctx.fail(f"input 2 (axis) {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@resolver
def params(ctx: OpContext) -> SoftmaxParams:
    """The resolved SoftmaxParams: beta (input 1) and the axis (input 2, default -1); INVALID_ARGUMENT
    naming the input at fault, UnknownValue while one is not constant or the rank is unknown."""
    dims = ctx.inputs[0].dims
    if len(dims) > 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected at most 4")
    return SoftmaxParams(_check_beta(ctx), _axis(ctx))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    params(ctx)
    return [ctx.inputs[0].dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    g = params(ctx)
    beta, axis = g.beta, g.axis
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    v = x.value.reshape(x.dims or (1,))
    if x.type.is_quantized:
        # Android works on integer differences to the maximum, scaled by beta * input scale.
        diff = (v.astype(np.float64) - v.max(axis=axis, keepdims=True)) * (as_float32(x.scale) * beta)
    else:
        f = v.astype(np.float64)
        diff = (f - f.max(axis=axis, keepdims=True)) * beta
    e = np.exp(diff)
    y = (e / e.sum(axis=axis, keepdims=True)).reshape(x.dims)
    if out.type.is_quantized:
        return [quantize(y, 1.0 / 256, _OUTPUT_ZERO_POINT[out.type], out.dtype)]
    return [y.astype(out.dtype)]


register(Op.SOFTMAX, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
