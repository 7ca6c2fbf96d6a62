"""POW: base ** exponent element-wise with broadcasting (FLOAT16 / FLOAT32; computed in float32
like Android's std::pow(float, float); pow of a negative base to a fractional exponent is NaN)."""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .broadcast import broadcast_dims, broadcast_params, prepare_broadcast, validate_same_type_pair
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


def _validate(ctx: OpContext) -> None:
    validate_same_type_pair(ctx, _TYPES, ('input 0 (base)', 'input 1 (exponent)'))


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


register(Op.POW, validate=_validate, prepare=prepare_broadcast, execute=_execute, params=broadcast_params)
