"""LOG_SOFTMAX: (x - max) * beta - log(sum(exp((x - max) * beta))) along an axis.

Inputs: the tensor (float32 or float16), beta (FLOAT32, or FLOAT16 for a float16 tensor, as
NeuralNetworks.h specifies) and the axis (INT32, negative counts from the end). Computed in
double precision and cast to the output type, as Android's reference does its exp/log.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext
from .registry import register, resolver
from .softmax import SoftmaxParams

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    beta_type = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([_TYPES, beta_type, T.INT32], [t])
    check_scalar_axis(ctx, 2)


@resolver
def params(ctx: OpContext) -> SoftmaxParams:
    """SoftmaxParams of LOG_SOFTMAX: beta (input 1) and the axis (input 2) made non-negative;
    INVALID_ARGUMENT naming the input at fault, UnknownValue while one is not constant."""
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank at least 1")
    axis = scalar_axis(ctx, 2, len(dims))
    beta = ctx.scalar(1)
    if not isinstance(beta, float):
        raise ctx.fail(f"input 1 (beta) must be a float, got {beta!r}")
    return SoftmaxParams(beta, axis)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.inputs[0].dims  # the shape needs the axis only (beta may be known only at execution)
    if not dims:
        raise ctx.fail("input 0 must have rank at least 1")
    scalar_axis(ctx, 2, len(dims))
    return [dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    g = params(ctx)
    axis, beta = g.axis, g.beta
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    f = x.value.astype(np.float64)
    shifted = (f - f.max(axis=axis, keepdims=True)) * beta
    y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return [y.astype(out.dtype)]


register(Op.LOG_SOFTMAX, validate=_validate, prepare=_prepare, execute=_execute, params=params)
