"""INSTANCE_NORMALIZATION: per batch and channel, (x - mean) * gamma / sqrt(var + epsilon) + beta.

Inputs: a rank-4 tensor (float32 or float16), gamma, beta, epsilon (FLOAT32, or FLOAT16 for a
float16 tensor) and the layout (BOOL, true for NCHW). Mean and (population) variance are taken
over height and width.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._padding import from_nhwc, to_nhwc
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


@dataclass(frozen=True)
class InstanceNormalizationParams:
    """INSTANCE_NORMALIZATION: (x - mean) * gamma / sqrt(var + epsilon) + beta over height and width
    per batch and channel; `nchw` is the layout. Scalars are Python floats."""

    gamma: float
    beta: float
    epsilon: float
    nchw: bool


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(5, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([t, s, s, s, T.BOOL], [t])
    ctx.check_rank(0, 4)


def _shape(ctx: OpContext) -> tuple[int, ...]:
    dims = ctx.inputs[0].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    return dims


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    try:  # resolved once for prepare and execute
        params(ctx)
    except UnknownValue:  # a scalar is known only at execution: the shape does not need it
        pass
    return [_shape(ctx)]


@resolver
def params(ctx: OpContext) -> InstanceNormalizationParams:
    """The resolved InstanceNormalizationParams (inputs 1-4); INVALID_ARGUMENT for a rank other than 4,
    UnknownValue while a scalar is not constant."""
    _shape(ctx)
    gamma, beta, epsilon = (float(ctx.scalar(i)) for i in (1, 2, 3))
    return InstanceNormalizationParams(gamma, beta, epsilon, bool(ctx.scalar(4)))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    g = params(ctx)
    gamma, beta, epsilon, nchw = g.gamma, g.beta, g.epsilon, g.nchw
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    f = to_nhwc(x.value.astype(np.float64), nchw)
    with np.errstate(all="ignore"):  # infinite inputs or parameters give inf / nan, as in C++
        mean = f.mean(axis=(1, 2), keepdims=True)
        var = ((f - mean) ** 2).mean(axis=(1, 2), keepdims=True)
        y = (f - mean) * gamma / np.sqrt(var + epsilon) + beta
        return [from_nhwc(y, nchw).astype(out.dtype)]


register(Op.INSTANCE_NORMALIZATION, validate=_validate, prepare=_prepare, execute=_execute, params=params)
