"""MAXIMUM, MINIMUM: element-wise max / min with broadcasting.

Types FLOAT16, FLOAT32, INT32, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED (both inputs and the output
share the type). Quantized inputs may each have their own scale and zero point: as in
Android's MaximumMinimum.cpp both are first requantized to the output's (requantize<T>), then
compared.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import requantize_values
from .broadcast import broadcast_dims, broadcast_params, prepare_broadcast, validate_same_type_pair
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
          T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    validate_same_type_pair(ctx, _TYPES)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    shape = broadcast_dims(ctx, a.dims, b.dims)
    if 0 in shape:
        return [np.zeros(shape, out.dtype)]
    x, y = a.value.reshape(a.dims), b.value.reshape(b.dims)
    if a.type.is_quantized:
        x = requantize_values(x, a.scale, a.zero_point, out.scale, out.zero_point, out.dtype)
        y = requantize_values(y, b.scale, b.zero_point, out.scale, out.zero_point, out.dtype)
    r = np.minimum(x, y) if ctx.op == Op.MINIMUM else np.maximum(x, y)
    return [np.broadcast_to(r, shape).astype(out.dtype)]


register(Op.MAXIMUM, Op.MINIMUM, validate=_validate, prepare=prepare_broadcast, execute=_execute,
         params=broadcast_params)
