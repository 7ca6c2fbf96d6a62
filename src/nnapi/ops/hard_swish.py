"""HARD_SWISH: x * relu6(x + 3) / 6 (FLOAT16, FLOAT32, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED; any rank).

Floats follow TFLite's reference HardSwish in float32. Quantized tensors use TFLite's 16-bit
fixed-point reference_ops::HardSwish with the parameters Android's hardSwishQuant computes
(input and output may have different scales / zero points); the output multiplier must not
need a left shift (output_scale >= input_scale / 128 roughly), otherwise execution fails as in
Android.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import quantize_multiplier
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_I16_MIN, _I16_MAX = -(1 << 15), (1 << 15) - 1


@dataclass(frozen=True)
class HardSwishParams:
    """HARD_SWISH: x * relu6(x + 3) / 6. For quantized tensors, the 16-bit fixed-point parameters of
    Android's hardSwishQuant (output multiplier, output exponent, reluish multiplier, reluish
    exponent); None for float tensors."""

    quant: tuple[int, int, int, int] | None


@resolver
def params(ctx: OpContext) -> HardSwishParams:
    """The resolved HardSwishParams; INVALID_ARGUMENT when the output scale is too small for the
    input scale (the output multiplier would need a left shift)."""
    return HardSwishParams(_quant_params(ctx) if ctx.inputs[0].type.is_quantized else None)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t], [t])
    if t.is_quantized:
        for kind, tensor in (("input 0", ctx.inputs[0]), ("output 0", ctx.outputs[0])):
            if not np.float32(tensor.scale) > 0:
                raise ctx.fail(f"{kind} has non-positive scale {tensor.scale}")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    if ctx.inputs[0].type.is_quantized:
        params(ctx)  # Android checks the output multiplier when it executes
    return [tuple(ctx.inputs[0].dims)]


# --- 16-bit fixed point (gemmlowp / TFLite), over int64 arrays holding int16 values ----------
def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul for int16."""
    ab = a.astype(np.int64) * np.int64(b)
    num = ab + np.where(ab >= 0, np.int64(1 << 14), np.int64(1 - (1 << 14)))
    res = np.where(num >= 0, num >> 15, -((-num) >> 15))  # C++ division truncates toward zero
    res = res.astype(np.int16).astype(np.int64)  # static_cast<int16_t>
    return np.where((a == _I16_MIN) & (b == _I16_MIN), np.int64(_I16_MAX), res)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite SaturatingDoublingHighMul for int16 (rounds toward zero)."""
    ab = a.astype(np.int64) * b.astype(np.int64)
    res = np.where(ab >= 0, ab >> 15, -((-ab) >> 15)).astype(np.int16).astype(np.int64)
    return np.where((a == _I16_MIN) & (b == _I16_MIN), np.int64(_I16_MAX), res)


def _saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * np.int64(1 << amount), _I16_MIN, _I16_MAX)


def _rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    if exponent <= 0:
        return x
    mask = np.int64((1 << exponent) - 1)
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + ((x & mask) > threshold).astype(np.int64)


def _downscale_to_int16(m: int) -> int:
    """Android's DownScaleInt32ToInt16Multiplier."""
    if m >= (1 << 31) - 1 - (1 << 15):
        return _I16_MAX
    return (m + (1 << 15)) >> 16


def _quant_params(ctx: OpContext) -> tuple[int, int, int, int]:
    """(output multiplier int16, output exponent, reluish multiplier int16, reluish exponent)."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(x.scale)
    reluish_scale = np.float32(3.0 / 32768.0)
    out_m, out_e = quantize_multiplier(float(hires_input_scale / np.float32(out.scale)))
    if out_e > 0:
        raise ctx.fail(f"output 0 scale {out.scale} is too small for input 0 scale {x.scale} "
                       "(the output multiplier would need a left shift)")
    rel_m, rel_e = quantize_multiplier(float(hires_input_scale / reluish_scale))
    return _downscale_to_int16(out_m), out_e, _downscale_to_int16(rel_m), rel_e


def _hard_swish_quant(ctx: OpContext) -> np.ndarray:
    x, out = ctx.inputs[0], ctx.outputs[0]
    out_m, out_e, rel_m, rel_e = params(ctx).quant
    v = x.value.astype(np.int64) - x.zero_point
    hires = (v * 128).astype(np.int16).astype(np.int64)
    preshift_out = _srdhm16(hires, out_m)
    reluish = hires
    if rel_e > 0:
        reluish = _saturating_left_shift16(reluish, rel_e - 1)
    reluish = _srdhm16(reluish, rel_m)
    if rel_e > 0:
        reluish = _saturating_left_shift16(reluish, 1)
    if rel_e < 0:
        reluish = _rounding_divide_by_pot(reluish, -rel_e)
    reluish = (reluish + (1 << 15)) >> 1
    preshift = _sdhm16(reluish, preshift_out)
    r = _rounding_divide_by_pot(preshift, -out_e) + out.zero_point
    info = np.iinfo(out.dtype)
    return np.clip(r, info.min, info.max).astype(out.dtype)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    if x.type.is_quantized:
        return [_hard_swish_quant(ctx).reshape(x.dims)]
    f = x.value.reshape(x.dims).astype(np.float32)
    r = f * np.minimum(np.float32(6), np.maximum(np.float32(0), f + np.float32(3))) / np.float32(6)
    return [r.astype(out.dtype)]


register(Op.HARD_SWISH, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
