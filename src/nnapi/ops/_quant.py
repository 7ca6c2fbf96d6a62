"""Fixed-point quantization helpers (gemmlowp / TFLite semantics, as Android's reference uses).

`quantize_multiplier` turns a real multiplier into a Q31 mantissa and a shift;
`multiply_by_quantized_multiplier` applies it to int32 accumulators with the same rounding
as TFLite's MultiplyByQuantizedMultiplier (SaturatingRoundingDoublingHighMul followed by
RoundingDivideByPOT), vectorised over numpy int64 arrays.
"""
from __future__ import annotations

import math

import numpy as np


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(quantized_multiplier, shift) with real ≈ multiplier * 2^(shift - 31); shift may be negative."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)
    q = int(math.floor(mantissa * (1 << 31) + 0.5))  # std::round; mantissa > 0
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul for int32 values held in int64 arrays."""
    a = np.asarray(a, dtype=np.int64)
    ab = a * np.int64(b)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    # C++ integer division truncates toward zero.
    num = ab + nudge
    res = np.where(num >= 0, num >> 31, -((-num) >> 31))
    overflow = (a == -(1 << 31)) & (b == -(1 << 31))
    return np.where(overflow, np.int64((1 << 31) - 1), res)


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: divide by 2^exponent, rounding half away from zero."""
    if exponent <= 0:
        return np.asarray(x, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    mask = np.int64((1 << exponent) - 1)
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier(x, multiplier, shift) over an integer array."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    x = np.asarray(x, dtype=np.int64) * np.int64(1 << left)
    x = np.clip(x, -(1 << 31), (1 << 31) - 1)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), right)


def requantize(acc: np.ndarray, real_multiplier: float, zero_point: int) -> np.ndarray:
    """Scale int32 accumulators by `real_multiplier` in fixed point and add the output zero point."""
    m, s = quantize_multiplier(real_multiplier)
    return multiply_by_quantized_multiplier(acc, m, s) + zero_point


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Float values to a quantized type: round half away from zero, add zero point, saturate."""
    info = np.iinfo(dtype)
    q = _round_away(np.asarray(x, np.float64) / scale)
    return np.clip(q + zero_point, info.min, info.max).astype(dtype)


def _round_away(x: np.ndarray) -> np.ndarray:
    """std::round: halves away from zero (numpy's round is half-to-even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def as_float32(x: float) -> float:
    """`x` rounded to binary32: NNAPI scales are C++ floats, so scale arithmetic starts from them."""
    return float(np.float32(x))


def round_half_away(x: np.ndarray) -> np.ndarray:
    """std::round over an array (halves away from zero), keeping the input's float type."""
    return _round_away(x)


def quantize_float32(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Android's QUANTIZE formula in single precision: clamp(zp + round(x / scale)) into `dtype`."""
    info = np.iinfo(dtype)
    q = _round_away(np.asarray(x, np.float32) / np.float32(scale)) + np.float32(zero_point)
    return np.clip(q, info.min, info.max).astype(dtype)


def requantize_per_channel(acc: np.ndarray, real_multipliers: np.ndarray, zero_point: int) -> np.ndarray:
    """`requantize` with one real multiplier per channel along the last axis of `acc`
    (per-channel quantized filters), each applied like TFLite MultiplyByQuantizedMultiplier."""
    pairs = [quantize_multiplier(float(m)) for m in np.asarray(real_multipliers, np.float64).reshape(-1)]
    mult = np.array([p[0] for p in pairs], np.int64)
    shift = np.array([p[1] for p in pairs], np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    x = np.clip(np.asarray(acc, np.int64) << left, -(1 << 31), (1 << 31) - 1)
    # SaturatingRoundingDoublingHighMul (C++ division truncates toward zero).
    ab = x * mult
    num = ab + np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    high = np.where(num >= 0, num >> 31, -((-num) >> 31))
    high = np.where((x == -(1 << 31)) & (mult == -(1 << 31)), np.int64((1 << 31) - 1), high)
    # RoundingDivideByPOT: halves away from zero.
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold) + zero_point


def requantize_values(values: np.ndarray, old_scale: float, old_zero_point: int,
                      new_scale: float, new_zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Android's requantize<T> (OperationsUtils.cpp) over an array: move quantized `values` from
    (old_scale, old_zero_point) to (new_scale, new_zero_point) of `dtype`.

    `(value - offset) * scale` is a float product (int times float in C++), widened to double;
    the division and the zero-point addition are double; out-of-range values saturate and the
    rest round half away from zero (std::round).
    """
    info = np.iinfo(dtype)
    real = ((np.asarray(values, np.int32) - np.int32(old_zero_point)).astype(np.float32)
            * np.float32(old_scale)).astype(np.float64)
    ret = real / float(np.float32(new_scale)) + float(new_zero_point)
    return np.clip(_round_away(ret), info.min, info.max).astype(dtype)


def _srdhm_scalar(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul of two int32 Python ints."""
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    num = a * b + ((1 << 30) if a * b >= 0 else 1 - (1 << 30))
    return num >> 31 if num >= 0 else -((-num) >> 31)  # C++ division truncates toward zero


def _saturating_shift_left(x: int, exponent: int) -> int:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> for exponent > 0 on an int32."""
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return (1 << 31) - 1
    if x < -threshold:
        return -(1 << 31)
    return x << exponent


def inv_sqrt_quantized_multiplier_exp(value: int, reverse_shift: int) -> tuple[int, int]:
    """TFLite GetInvSqrtQuantizedMultiplierExp: (multiplier, shift) with 1/sqrt(value) ≈
    multiplier * 2^(shift * reverse_shift - 31), by gemmlowp fixed-point Newton-Raphson.

    0 and 1 give (INT32_MAX, 0), as TFLite handles them (b/143972021).
    """
    if value <= 1:
        return (1 << 31) - 1, 0
    shift = 11
    while value >= (1 << 29):
        value //= 4
        shift += 1
    max_left_shift_bits = (32 - value.bit_length()) - 1
    left_shift_bit_pairs = max_left_shift_bits // 2 - 1
    shift -= left_shift_bit_pairs
    value <<= 2 * left_shift_bit_pairs
    # F3 = FixedPoint<int32, 3 integer bits>: products of Fa and Fb are F(a+b) via SRDHM.
    fixed_input = value >> 1
    half_input = int(rounding_divide_by_pot(np.int64(fixed_input), 1))
    half_three = (1 << 28) + (1 << 27)  # 1.5 in F3
    x = 1 << 28  # F3 one
    for _ in range(5):
        x3 = _saturating_shift_left(_srdhm_scalar(_srdhm_scalar(x, x), x), 6)  # F9 -> F3
        diff = _srdhm_scalar(half_three, x) - _srdhm_scalar(half_input, x3)   # F6
        x = _saturating_shift_left(diff, 3)                                      # F6 -> F3
    x = _srdhm_scalar(x, 1518500250)  # times sqrt(2)/2 in F0
    if shift < 0:
        x <<= -shift
        shift = 0
    return x, shift * reverse_shift


def dequantize_float32(values: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Android's convertQuantToFloat32: (float(q) - zero_point) * scale, in single precision."""
    return ((np.asarray(values).astype(np.float32) - np.float32(zero_point)) * np.float32(scale)).astype(np.float32)


def convert_float32_to_quant(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Android's convertFloat32ToQuant (and BOX_WITH_NMS_LIMIT's castTo): clamp(round(x / scale +
    zero_point)) where the division and the addition are single precision and std::round rounds
    halves away from zero. (Differs from `quantize_float32` on halves: the zero point is added first.)"""
    info = np.iinfo(dtype)
    v = (np.asarray(x, np.float32) / np.float32(scale) + np.float32(zero_point)).astype(np.float64)
    return np.clip(_round_away(v), info.min, info.max).astype(dtype)


# --- gemmlowp FixedPoint arithmetic over numpy int64 arrays holding int16 or int32 raw values ---
# (fixedpoint.h: used by QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM; `bits` is the raw type's width.)

def _fp_wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """C++ conversion back to the raw type (two's complement wrap-around)."""
    half = np.int64(1) << (bits - 1)
    return ((np.asarray(x, np.int64) + half) & ((half << 1) - 1)) - half


def fp_srdhm(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul for int16 (bits=16) or int32 (bits=32) raws."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    lo = -(1 << (bits - 1))
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << (bits - 2)), np.int64(1 - (1 << (bits - 2))))
    num = ab + nudge
    den = bits - 1
    high = np.where(num >= 0, num >> den, -((-num) >> den))  # C++ division truncates
    return np.where((a == lo) & (b == lo), np.int64((1 << (bits - 1)) - 1), high)


def fp_rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    return rounding_divide_by_pot(x, exponent)


def fp_mul_by_pot(x: np.ndarray, exponent: int, bits: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> on raw values."""
    x = np.asarray(x, np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    res = _fp_wrap(x << exponent, bits)
    res = np.where(x > threshold, np.int64((1 << (bits - 1)) - 1), res)
    return np.where(x < -threshold, np.int64(-(1 << (bits - 1))), res)


def fp_saturating_add(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    lim = 1 << (bits - 1)
    return np.clip(np.asarray(a, np.int64) + b, -lim, lim - 1)


def _fp_rounding_half_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    s = np.asarray(a, np.int64) + b
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))


def _fp_const(raw32: int, bits: int) -> int:
    """RescaleConstantInitializer: an int32 constant rounded down to the raw type's width."""
    return int(rounding_divide_by_pot(np.int64(raw32), 32 - bits))


def _fp_exp_quarter(a: np.ndarray, bits: int) -> np.ndarray:
    """exp_on_interval_between_negative_one_quarter_and_0_excl (F0 in, F0 out)."""
    c = _fp_const(1895147668, bits)
    third = _fp_const(715827883, bits)
    x = _fp_wrap(a + (1 << (bits - 1 - 3)), bits)
    x2 = fp_srdhm(x, x, bits)
    x3 = fp_srdhm(x2, x, bits)
    x4 = fp_srdhm(x2, x2, bits)
    x4_over_4 = fp_mul_by_pot(x4, -2, bits)
    poly = fp_mul_by_pot(_fp_wrap(fp_srdhm(_fp_wrap(x4_over_4 + x3, bits), third, bits) + x2, bits), -1, bits)
    prod = fp_srdhm(np.int64(c), _fp_wrap(x + poly, bits), bits)
    if bits == 16:
        return fp_saturating_add(c, prod, bits)
    return _fp_wrap(c + prod, bits)


def fp_exp_on_negative_values(a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values: FixedPoint<raw, integer_bits> (a <= 0) -> F0."""
    a = np.asarray(a, np.int64)
    frac = bits - 1 - integer_bits
    quarter = 1 << (frac - 2)
    mask = quarter - 1
    a_mod = _fp_wrap((a & mask) - quarter, bits)
    result = _fp_exp_quarter(fp_mul_by_pot(a_mod, integer_bits, bits), bits)
    remainder = _fp_wrap(a_mod - a, bits)
    for exponent, mult in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                           (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent:
            shift = frac + exponent
            result = np.where((remainder & (1 << shift)) != 0,
                              fp_srdhm(result, _fp_const(mult, bits), bits), result)
    if integer_bits > 5:
        clamp = _fp_const(-(1 << (36 - integer_bits)), bits)
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, np.int64((1 << (bits - 1)) - 1), result)


def _fp_newton_reciprocal(half_denominator: np.ndarray, bits: int) -> np.ndarray:
    """The F2 Newton-Raphson iterate x ~ 1 / half_denominator shared by logistic and tanh."""
    c48 = _fp_const(1515870810, bits)
    cneg32 = _fp_const(-1010580540, bits)
    one_f2 = 1 << (bits - 1 - 2)
    x = _fp_wrap(c48 + fp_srdhm(half_denominator, cneg32, bits), bits)
    for _ in range(3):
        hdx = fp_srdhm(half_denominator, x, bits)
        x = _fp_wrap(x + fp_mul_by_pot(fp_srdhm(x, _fp_wrap(one_f2 - hdx, bits), bits), 2, bits), bits)
    return x


def fp_logistic(a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray:
    """gemmlowp logistic: FixedPoint<raw, integer_bits> -> F0 raw values."""
    a = np.asarray(a, np.int64)
    one = (1 << (bits - 1)) - 1
    abs_in = np.where(a > 0, a, _fp_wrap(-a, bits))
    e = fp_exp_on_negative_values(_fp_wrap(-abs_in, bits), integer_bits, bits)
    x = _fp_newton_reciprocal(_fp_rounding_half_sum(e, one), bits)
    pos = fp_mul_by_pot(x, 1, bits)  # Rescale<0>(ExactMulByPot<-1>(x)): F1 -> F0
    neg = _fp_wrap(one - pos, bits)
    return np.where(a == 0, _fp_const(1 << 30, bits), np.where(a > 0, pos, neg))


def fp_tanh(a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray:
    """gemmlowp tanh: FixedPoint<raw, integer_bits> -> F0 raw values."""
    a = np.asarray(a, np.int64)
    one = (1 << (bits - 1)) - 1
    n = np.where(a < 0, a, _fp_wrap(-a, bits))
    e = fp_exp_on_negative_values(n, integer_bits + 1, bits)  # ExactMulByPot<1>
    x = _fp_newton_reciprocal(_fp_rounding_half_sum(e, one), bits)
    t = fp_mul_by_pot(_fp_wrap(x - (1 << (bits - 3)), bits), 2, bits)  # Rescale<0>(x - F2 one)
    return np.where(a == 0, 0, np.where(a < 0, _fp_wrap(-t, bits), t))
