"""LOGISTIC and TANH (float32, float16, quant8 asymm and signed).

Quantized outputs have the fixed quantization Android requires: LOGISTIC scale 1/256 with zero
point 0 (uint8) or -128 (int8), TANH scale 1/128 with zero point 128 (uint8) or 0 (int8).
Values are computed in double precision and rounded once, which stays within TFLite's
fixed-point results by at most one unit.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, quantize
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
#: (scale, zero point) the output of each quantized variant must have.
_OUTPUT_QUANT = {
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM): (1.0 / 256, 0),
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM_SIGNED): (1.0 / 256, -128),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM): (1.0 / 128, 128),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM_SIGNED): (1.0 / 128, 0),
}


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    ctx.check_types([_TYPES], [ctx.inputs[0].type])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    required = _OUTPUT_QUANT.get((ctx.op, ctx.inputs[0].type))
    if required is not None:
        out = ctx.outputs[0]
        scale, zero_point = required
        if as_float32(out.scale) != scale or out.zero_point != zero_point:
            raise ctx.fail(f"output 0 must have scale {scale} and zero point {zero_point}, "
                           f"got {out.scale} and {out.zero_point}")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    if len(ctx.inputs[0].dims) > 4:
        raise ctx.fail(f"input 0 has rank {len(ctx.inputs[0].dims)}, expected at most 4")
    return [ctx.inputs[0].dims]


def _function(op: Op, x: np.ndarray) -> np.ndarray:
    """The activation in float64."""
    if op == Op.TANH:
        return np.tanh(x)
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for very negative x: result 0
        return 1.0 / (1.0 + np.exp(-x))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    y = _function(ctx.op, x.dequantized().astype(np.float64))
    if out.type.is_quantized:
        return [quantize(y, as_float32(out.scale), out.zero_point, out.dtype)]
    return [y.astype(out.dtype)]


register(Op.LOGISTIC, Op.TANH, validate=_validate, prepare=_prepare, execute=_execute,
         allow_zero_sized_input=True)
