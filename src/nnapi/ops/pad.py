"""PAD and PAD_V2: pad each dimension by (before, after) counts from a [rank, 2] TENSOR_INT32.

PAD pads with 0 (quantized tensors: the zero point, i.e. real 0.0). PAD_V2 takes the pad value
as input 2: FLOAT32 for TENSOR_FLOAT32, FLOAT16 for TENSOR_FLOAT16, INT32 (a quantized value,
converted like C++ static_cast) for quantized tensors. Paddings must be >= 0; rank <= 4.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_VALUE_TYPE = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16,
               T.TENSOR_QUANT8_ASYMM: T.INT32, T.TENSOR_QUANT8_ASYMM_SIGNED: T.INT32}


@dataclass(frozen=True)
class PadParams:
    """PAD / PAD_V2: (before, after) per dimension, the pad value (a Python number of the output's
    element type: the zero point for quantized PAD, the raw quantized value for PAD_V2) and the
    output shape."""

    paddings: tuple[tuple[int, int], ...]
    value: int | float
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    v2 = ctx.op == Op.PAD_V2
    ctx.check_counts(3 if v2 else 2, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, T.TENSOR_INT32] + ([_VALUE_TYPE[t]] if v2 else []), [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    ctx.check_rank(1, 2)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[1].value is not None:
        try:
            _paddings(ctx, zeros_unknown=True)
        except UnknownValue:
            pass


def _paddings(ctx: OpContext, *, zeros_unknown: bool = False) -> np.ndarray:
    """The [rank, 2] paddings, checked against the input rank (unknown rank: UnknownValue)."""
    pads = ctx.input(1)
    rank = len(ctx.inputs[0].dims)
    if zeros_unknown and rank == 0:
        raise UnknownValue(f"{ctx.op.name}: input 0 rank not known yet")
    if pads.shape != (rank, 2):
        raise ctx.fail(f"input 1 (paddings) has shape {tuple(pads.shape)}, expected ({rank}, 2)")
    if (pads < 0).any():
        raise ctx.fail(f"input 1 (paddings) {pads.tolist()} has a negative value")
    return pads.astype(np.int64)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    try:  # resolved once for prepare and execute
        return [params(ctx).out_dims]
    except UnknownValue:  # PAD_V2's value is known only at execution: the shape does not need it
        return [_shape(ctx)[1]]


def _shape(ctx: OpContext) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """(paddings, output shape); an unknown (0) dimension stays unknown at compile time."""
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    pads = tuple((int(b), int(a)) for b, a in _paddings(ctx).tolist())
    unknown = ctx.compile_time
    return pads, tuple(0 if unknown and not d else d + b + a for d, (b, a) in zip(dims, pads))


@resolver
def params(ctx: OpContext) -> PadParams:
    """The resolved PadParams; INVALID_ARGUMENT naming the input at fault (paddings of the wrong shape
    or negative), UnknownValue while input 1 or PAD_V2's value (input 2) is not constant."""
    pads, out = _shape(ctx)
    return PadParams(pads, _pad_value(ctx), out)


def _pad_value(ctx: OpContext):
    out = ctx.outputs[0]
    if ctx.op == Op.PAD:
        return out.zero_point if out.type.is_quantized else 0
    value = ctx.scalar(2)
    if out.type.is_quantized:
        # static_cast to the 8-bit type: keep the low byte.
        return np.array(int(value) & 0xFF, np.uint8).view(out.dtype).item()
    return value


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    out = ctx.outputs[0]
    y = np.pad(ctx.input(0), g.paddings, constant_values=np.array(g.value).astype(out.dtype))
    return [y.astype(out.dtype)]


register(Op.PAD, Op.PAD_V2, validate=_validate, prepare=_prepare, execute=_execute, params=params)
