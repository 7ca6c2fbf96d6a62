"""RELU, RELU1, RELU6: clamp activations (float32, float16, quant8 asymm and signed)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import FusedActivationFunc, OperandType as T, OperationType as Op
from ._activation import apply_float
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_RANGES = {Op.RELU: (0.0, None), Op.RELU1: (-1.0, 1.0), Op.RELU6: (0.0, 6.0)}
_CODES = {Op.RELU: FusedActivationFunc.RELU, Op.RELU1: FusedActivationFunc.RELU1,
          Op.RELU6: FusedActivationFunc.RELU6}


@dataclass(frozen=True)
class ReluParams:
    """RELU / RELU1 / RELU6 as the fused activation that clamps the same way (its float range:
    `activation_range(activation)`), and that range itself (None: unbounded on that side)."""

    activation: FusedActivationFunc
    low: float | None
    high: float | None


@resolver
def params(ctx: OpContext) -> ReluParams:
    """The clamp of RELU / RELU1 / RELU6 (no parameters to read)."""
    return ReluParams(_CODES[ctx.op], *_RANGES[ctx.op])


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    ctx.check_types([_TYPES], [ctx.inputs[0].type])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    if ctx.inputs[0].type.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [ctx.inputs[0].dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    lo, hi = _RANGES[ctx.op]
    if x.type.is_quantized:
        info = np.iinfo(x.dtype)
        qlo = info.min if lo is None else max(info.min, x.zero_point + round(lo / x.scale))
        qhi = info.max if hi is None else min(info.max, x.zero_point + round(hi / x.scale))
        return [np.clip(x.value, qlo, qhi).astype(x.dtype)]
    return [apply_float(x.value, _CODES[ctx.op]).astype(x.dtype, copy=False)]  # NaN: the low end


register(Op.RELU, Op.RELU1, Op.RELU6, validate=_validate, prepare=_prepare, execute=_execute,
         params=params, allow_zero_sized_input=True)
