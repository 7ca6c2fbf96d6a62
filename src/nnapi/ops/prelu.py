"""PRELU: x >= 0 ? x : alpha * x, with alpha broadcast against the input.

Types FLOAT16, FLOAT32, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED (input, alpha and output share the
type; quantization parameters may differ). Quantized maths follows Android's PRelu.cpp:
non-negative inputs are rescaled by in_scale / out_scale, negative ones multiply
(x - zp_x) * (alpha - zp_alpha) rescaled by in_scale * alpha_scale / out_scale, both with
TFLite's MultiplyByQuantizedMultiplier, then the output zero point is added and the result
saturated.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import multiply_by_quantized_multiplier, quantize_multiplier
from .broadcast import broadcast_dims, broadcast_params, prepare_broadcast, validate_same_type_pair
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    validate_same_type_pair(ctx, _TYPES, ('input 0', 'input 1 (alpha)'))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, alpha, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    shape = broadcast_dims(ctx, x.dims, alpha.dims)
    if 0 in shape:
        return [np.zeros(shape, out.dtype)]
    xv = np.broadcast_to(x.value.reshape(x.dims), shape)
    av = np.broadcast_to(alpha.value.reshape(alpha.dims), shape)
    if x.type.is_quantized:
        s_in, s_alpha, s_out = np.float32(x.scale), np.float32(alpha.scale), np.float32(out.scale)
        # C++: `double pos = in.scale / out.scale` divides floats; `double prod = in * alpha`
        # multiplies floats, and `prod / out.scale` then divides in double.
        m_pos, sh_pos = quantize_multiplier(float(s_in / s_out))
        m_neg, sh_neg = quantize_multiplier(float(s_in * s_alpha) / float(s_out))
        xi = xv.astype(np.int64) - x.zero_point
        ai = av.astype(np.int64) - alpha.zero_point
        pos = multiply_by_quantized_multiplier(xi, m_pos, sh_pos)
        neg = multiply_by_quantized_multiplier(xi * ai, m_neg, sh_neg)
        r = np.where(xi >= 0, pos, neg) + out.zero_point
        info = np.iinfo(out.dtype)
        return [np.clip(r, info.min, info.max).astype(out.dtype)]
    f, a = xv.astype(np.float32), av.astype(np.float32)
    return [np.where(f >= 0, f, f * a).astype(out.dtype)]


register(Op.PRELU, validate=_validate, prepare=prepare_broadcast, execute=_execute, params=broadcast_params)
