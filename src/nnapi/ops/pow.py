"""POW: base ** exponent element-wise with broadcasting (FLOAT16 / FLOAT32; computed in float32
like Android's std::pow(float, float); pow of a negative base to a fractional exponent is NaN)."""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .broadcast import broadcast_dims
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 (base) has unsupported type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, t], [t])
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims, zeros_unknown=True)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    shape = broadcast_dims(ctx, a.dims, b.dims)
    if 0 in shape:
        return [np.zeros(shape, out.dtype)]
    x = a.value.reshape(a.dims).astype(np.float32)
    y = b.value.reshape(b.dims).astype(np.float32)
    with np.errstate(all="ignore"):
        r = np.power(x, y)
    return [np.broadcast_to(r, shape).astype(out.dtype)]


register(Op.POW, validate=_validate, prepare=_prepare, execute=_execute)
