"""CAST: convert a tensor's element type; quantized values are cast as raw integers (no
dequantization), as Android's Cast.cpp does.

Between FLOAT16, FLOAT32, INT32 and QUANT8_ASYMM any pair is allowed: float to integer truncates
toward zero, and conversions to QUANT8_ASYMM first saturate to [0, 255]. BOOL8, QUANT16_ASYMM,
QUANT16_SYMM, QUANT8_ASYMM_SIGNED and QUANT8_SYMM only cast to themselves (a copy).
The output dimensions must equal the input's.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_CONVERTIBLE = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
_IDENTITY_ONLY = (T.TENSOR_BOOL8, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM,
                  T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    t_in, t_out = ctx.inputs[0].type, ctx.outputs[0].type
    if t_in in _CONVERTIBLE:
        if t_out not in _CONVERTIBLE:
            raise ctx.fail(f"cannot cast {t_in.name} to output type {t_out.name}")
    elif t_in in _IDENTITY_ONLY:
        if t_out != t_in:
            raise ctx.fail(f"{t_in.name} can only be cast to itself, output 0 has type {t_out.name}")
    else:
        raise ctx.fail(f"input 0 has unsupported type {t_in.name}")
    din, dout = ctx.inputs[0].dims, ctx.outputs[0].dims
    if din and dout and 0 not in dout and tuple(din) != tuple(dout):
        raise ctx.fail(f"output 0 dimensions {tuple(dout)} differ from input 0 dimensions {tuple(din)}")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    din, dout = ctx.inputs[0].dims, ctx.outputs[0].dims
    if dout and len(dout) != len(din):
        raise ctx.fail(f"output 0 rank {len(dout)} differs from input 0 rank {len(din)}")
    if dout and any(o != 0 and o != i for i, o in zip(din, dout)):
        raise ctx.fail(f"output 0 dimensions {tuple(dout)} differ from input 0 dimensions {tuple(din)}")
    return [tuple(din)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    v = x.value.reshape(x.dims)
    if out.type == x.type:
        return [v.astype(out.dtype, copy=True)]
    if out.type == T.TENSOR_QUANT8_ASYMM:
        # if (a < 0) 0; if (a > 255) 255; else static_cast<uint8_t> (truncation).
        wide = v.astype(np.float64) if x.type != T.TENSOR_INT32 else v.astype(np.int64)
        return [np.trunc(np.clip(wide, 0, 255)).astype(np.uint8)]
    if out.type == T.TENSOR_INT32 and x.type in (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        f = np.trunc(v.astype(np.float64))
        # Out-of-range conversion is undefined in C++; saturate rather than produce garbage.
        return [np.clip(np.nan_to_num(f), -(1 << 31), (1 << 31) - 1).astype(np.int32)]
    return [v.astype(out.dtype)]


register(Op.CAST, validate=_validate, prepare=_prepare, execute=_execute)
