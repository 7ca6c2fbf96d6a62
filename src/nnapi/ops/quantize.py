"""QUANTIZE (float32/16 to quant8 asymm or signed) and DEQUANTIZE (quant8 to float32/16).

QUANTIZE is Android's clamp(zero_point + round(x / scale)) in single precision, halves away
from zero. DEQUANTIZE computes scale * (q - zero_point) in float32, per channel for
TENSOR_QUANT8_SYMM_PER_CHANNEL.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, quantize_float32
from .context import OpContext
from .registry import register

_FLOAT = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANTIZE_OUT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_DEQUANTIZE_IN = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                  T.TENSOR_QUANT8_SYMM_PER_CHANNEL)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    if ctx.op == Op.QUANTIZE:
        ctx.check_types([_FLOAT], [_QUANTIZE_OUT])
        if not as_float32(ctx.outputs[0].scale) > 0.0:
            raise ctx.fail(f"output 0 has non-positive scale {ctx.outputs[0].scale}")
    else:
        ctx.check_types([_DEQUANTIZE_IN], [_FLOAT])
        _check_channels(ctx, zeros_unknown=True)
    ctx.check_rank(0, 0, 1, 2, 3, 4)


def _check_channels(ctx: OpContext, *, zeros_unknown: bool) -> None:
    """A per-channel input needs one scale per channel along channel_dim."""
    x = ctx.inputs[0]
    if x.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        return
    cq = x.channel_quant
    if cq is None:
        raise ctx.fail("input 0 is TENSOR_QUANT8_SYMM_PER_CHANNEL without channel quantization")
    if not x.dims and zeros_unknown:
        return
    if not 0 <= cq.channel_dim < len(x.dims):
        raise ctx.fail(f"input 0 channel_dim {cq.channel_dim} is out of range for rank {len(x.dims)}")
    channels = x.dims[cq.channel_dim]
    if channels != len(cq.scales) and not (zeros_unknown and channels == 0):
        raise ctx.fail(f"input 0 has {channels} channels but {len(cq.scales)} scales")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    if len(ctx.inputs[0].dims) > 4:
        raise ctx.fail(f"input 0 has rank {len(ctx.inputs[0].dims)}, expected at most 4")
    _check_channels(ctx, zeros_unknown=ctx.compile_time)
    return [ctx.inputs[0].dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if ctx.op == Op.QUANTIZE:
        return [quantize_float32(x.value, as_float32(out.scale), out.zero_point, out.dtype)]
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    return [x.dequantized().astype(out.dtype)]


register(Op.QUANTIZE, Op.DEQUANTIZE, validate=_validate, prepare=_prepare, execute=_execute,
         allow_zero_sized_input=True)
