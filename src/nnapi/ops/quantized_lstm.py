"""QUANTIZED_LSTM: one LSTM step with int8 activations and weights and an int16 cell state
(Android's QLSTM.cpp with the integer kernels of QuantUtils.{h,cpp}, i.e. TFLite's 8x8_16 LSTM).

32 inputs: 0 input [batch, input_size] QUANT8_ASYMM_SIGNED; 1-4 input-to-{input,forget,cell,output}
weights [num_units, input_size] and 5-8 recurrent-to-... weights [num_units, output_size],
QUANT8_SYMM; 9-11 cell-to-{input,forget,output} (peephole) weights [num_units] QUANT16_SYMM;
12-15 gate biases [num_units] INT32; 16 projection weights [output_size, num_units] QUANT8_SYMM;
17 projection bias [output_size] INT32; 18 previous output [batch, output_size]
QUANT8_ASYMM_SIGNED; 19 previous cell state [batch, num_units] QUANT16_SYMM (scale a power of two
no larger than 2^-9); 20-23 layer norm weights [num_units] QUANT16_SYMM; 24 cell clip, 25
projection clip, 26-29 the scales of the four gates' matmul results (FLOAT32); 30 hidden state
zero point (INT32; Android reads its low byte as int8) and 31 hidden state scale (FLOAT32).
Optional: 1, 5, 9, 12 and 20 (CIFG), 9-11 (peephole), 16-17 (projection), 20-23 (layer norm).
Outputs: 0 output state [batch, output_size] QUANT8_ASYMM_SIGNED, 1 cell state
[batch, num_units] QUANT16_SYMM, 2 output (same values as output 0).

As in Android, a gate bias is only used by the layer normalization (without layer norm weights
the gate biases have no effect). Where Android's kernel reads memory it never wrote, this module
takes TFLite's meaning, whose in-place cell state Android's code was ported from: the input and
forget gate peepholes read the previous cell state (Android reads the not-yet-written cell state
output) over num_units values (Android passes output_size), and a projection without bias uses a
zero bias (Android dereferences a null bias).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import (fp_logistic, fp_tanh, inv_sqrt_quantized_multiplier_exp,
                     multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot)
from .context import OpContext
from .registry import register, resolver

_I8, _Q8, _Q16, _I32, _F32 = (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM,
                              T.TENSOR_INT32, T.FLOAT32)
_INPUT = 0
_IN_W = (1, 2, 3, 4)          # input-to-{input, forget, cell, output} weights
_REC_W = (5, 6, 7, 8)         # recurrent-to-... weights
_PEEP = (9, 10, 11)           # cell-to-{input, forget, output} weights
_BIAS = (12, 13, 14, 15)
_PROJ_W, _PROJ_B = 16, 17
_PREV_OUTPUT, _PREV_CELL = 18, 19
_LN = (20, 21, 22, 23)
_CELL_CLIP, _PROJ_CLIP = 24, 25
_INTERMEDIATE = (26, 27, 28, 29)
_HIDDEN_ZP, _HIDDEN_SCALE = 30, 31
_REQUIRED = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19)

_NAMES = ["input", "input to input weights", "input to forget weights", "input to cell weights",
          "input to output weights", "recurrent to input weights", "recurrent to forget weights",
          "recurrent to cell weights", "recurrent to output weights", "cell to input weights",
          "cell to forget weights", "cell to output weights", "input gate bias", "forget gate bias",
          "cell gate bias", "output gate bias", "projection weights", "projection bias",
          "previous output", "previous cell state", "input layer norm weights",
          "forget layer norm weights", "cell layer norm weights", "output layer norm weights",
          "cell clip", "projection clip", "input intermediate scale", "forget intermediate scale",
          "cell intermediate scale", "output intermediate scale", "hidden state zero point",
          "hidden state scale"]

_IN_TYPES = ([_I8] + [_Q8] * 8 + [_Q16] * 3 + [_I32] * 4 + [_Q8, _I32, _I8, _Q16] + [_Q16] * 4
             + [_F32] * 6 + [T.INT32, _F32])
_OUT_TYPES = [_I8, _Q16, _I8]


@dataclass(frozen=True)
class QuantizedLstmParams:
    """QUANTIZED_LSTM (one step, TFLite's integer LSTM): sizes, variant flags, the scalar parameters
    (float32 values as Python floats; the hidden state zero point read as int8, as Android does),
    the cell state's power-of-two exponent (its scale is 2^cell_shift), the output shapes (output
    state, cell state, output), and where each operand sits among the inputs: gate order input,
    forget, cell, output (peepholes: input, forget, output)."""

    batch: int
    input_size: int
    num_units: int
    output_size: int
    use_cifg: bool
    use_peephole: bool
    use_layer_norm: bool
    use_projection: bool
    cell_shift: int
    cell_clip: float
    proj_clip: float
    intermediate_scales: tuple[float, float, float, float]
    hidden_zero_point: int
    hidden_scale: float
    out_dims: tuple[tuple[int, ...], ...]
    input_weights: tuple[int, int, int, int] = _IN_W
    recurrent_weights: tuple[int, int, int, int] = _REC_W
    peephole_weights: tuple[int, int, int] = _PEEP
    gate_biases: tuple[int, int, int, int] = _BIAS
    projection_weights: int = _PROJ_W
    projection_bias: int = _PROJ_B
    output_state_in: int = _PREV_OUTPUT
    cell_state_in: int = _PREV_CELL
    layer_norm_weights: tuple[int, int, int, int] = _LN


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(32, 3)
    ctx.check_types(_IN_TYPES, _OUT_TYPES)


# --- shapes (Android's prepare) ---------------------------------------------------------------

def _name(i: int) -> str:
    return f"input {i} ({_NAMES[i]})"


def _shapes(ctx: OpContext) -> tuple[int, int, int, int]:
    """(batch, input_size, num_units, output_size) after Android's prepare checks."""
    has = ctx.has_input
    for i in _REQUIRED:
        if not has(i):
            raise ctx.fail(f"required {_name(i)} is omitted")

    def dims(i: int, rank: int) -> tuple[int, ...]:
        d = tuple(ctx.inputs[i].dims)
        if len(d) != rank:
            raise ctx.fail(f"{_name(i)} has rank {len(d)}, expected {rank}")
        return d

    def shape(i: int, *want: int) -> None:
        if has(i) and dims(i, len(want)) != want:
            raise ctx.fail(f"{_name(i)} has shape {list(ctx.inputs[i].dims)}, expected {list(want)}")

    batch, n_input = dims(_INPUT, 2)
    n_units = dims(4, 2)[0]
    n_output = dims(8, 2)[1]
    for i in _IN_W:
        shape(i, n_units, n_input)
    for i in _REC_W:
        shape(i, n_units, n_output)

    cifg = not has(1)
    if has(1) != has(5):
        raise ctx.fail(f"{_name(1)} and {_name(5)} must be both present (no CIFG) or both omitted (CIFG)")
    for i in _PEEP:
        shape(i, n_units)
    peep = [has(i) for i in _PEEP]
    if any(peep) and not ((peep[0] or cifg) and peep[1] and peep[2]):
        raise ctx.fail("peephole weights (inputs 9-11) must be all present or all omitted"
                       " (input 9 omitted with CIFG)")
    if cifg:
        if has(12):
            raise ctx.fail(f"{_name(12)} is present when CIFG is used (inputs 1 and 5 omitted)")
    else:
        if not has(12):
            raise ctx.fail(f"{_name(12)} is required without CIFG")
    for i in _BIAS:
        shape(i, n_units)
    shape(_PROJ_W, n_output, n_units)
    shape(_PROJ_B, n_output)
    if not has(_PROJ_W) and n_output != n_units:
        # Android copies batch * output_size values of the [batch, num_units] hidden state.
        raise ctx.fail(f"without projection weights the output size ({n_output}) must equal "
                       f"the number of units ({n_units})")
    shape(_PREV_OUTPUT, batch, n_output)
    shape(_PREV_CELL, batch, n_units)
    for i in _LN:
        shape(i, n_units)
    ln = [has(i) for i in _LN]
    if cifg:
        if ln[0]:
            raise ctx.fail(f"{_name(20)} is present when CIFG is used")
        if any(ln[1:]) and not all(ln[1:]):
            raise ctx.fail("layer norm weights (inputs 21-23) must be all present or all omitted")
    elif any(ln) and not all(ln):
        raise ctx.fail("layer norm weights (inputs 20-23) must be all present or all omitted")
    return batch, n_input, n_units, n_output


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    batch, _, n_units, n_output = _shapes(ctx)
    _cell_shift(ctx)
    return [(batch, n_output), (batch, n_units), (batch, n_output)]


@resolver
def params(ctx: OpContext) -> QuantizedLstmParams:
    """The resolved QuantizedLstmParams (Android's prepare checks); INVALID_ARGUMENT naming the input at
    fault, UnknownValue while a scalar parameter is not constant."""
    batch, n_input, n_units, n_output = _shapes(ctx)
    has, f32 = ctx.has_input, np.float32
    inter = tuple(float(f32(ctx.scalar(i))) for i in _INTERMEDIATE)
    hidden_zp = ((int(ctx.scalar(_HIDDEN_ZP)) & 0xFF) ^ 0x80) - 0x80  # getInputValue<int8_t>
    dims = ((batch, n_output), (batch, n_units), (batch, n_output))
    return QuantizedLstmParams(batch, n_input, n_units, n_output, not has(1), has(_PEEP[1]), has(_LN[1]),
                               has(_PROJ_W), _cell_shift(ctx), float(f32(ctx.scalar(_CELL_CLIP))),
                               float(f32(ctx.scalar(_PROJ_CLIP))), inter, hidden_zp,
                               float(f32(ctx.scalar(_HIDDEN_SCALE))), dims)


def _cell_shift(ctx: OpContext) -> int:
    """Android's CheckedLog2 of the cell state scale (float arithmetic), which must be <= -9."""
    scale = np.float32(ctx.inputs[_PREV_CELL].scale)
    if not scale > 0:
        raise ctx.fail(f"{_name(_PREV_CELL)} must have a positive scale, got {float(scale)}")
    log2 = np.float32(np.log(scale)) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = np.float32(math.floor(abs(float(log2)) + 0.5) * (1 if log2 >= 0 else -1))
    if not abs(float(np.float32(log2 - rounded))) < 1e-3:
        raise ctx.fail(f"{_name(_PREV_CELL)} scale {float(scale)} is not a power of two")
    shift = int(rounded)
    if shift > -9:
        raise ctx.fail(f"{_name(_PREV_CELL)} scale 2^{shift} is too large (at most 2^-9)")
    return shift


# --- integer kernels (QuantUtils) ----------------------------------------------------------------

def _multiplier(ctx: OpContext, real: float, what: str) -> tuple[int, int]:
    """Android's QuantizeMultiplier, failing where it does (non-finite or too large values)."""
    if not math.isfinite(real) or real < 0:
        raise ctx.fail(f"{what} effective scale {real} is not a finite non-negative number")
    return quantize_multiplier(real)


def _wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """C++ conversion to a signed `bits`-wide integer (two's complement wrap-around)."""
    half = np.int64(1) << (bits - 1)
    return ((np.asarray(x, np.int64) + half) & ((half << 1) - 1)) - half


def _matmul_acc(x: np.ndarray, bias: np.ndarray, w: np.ndarray, mult: tuple[int, int],
                zero_point: int, acc: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """MatrixBatchVectorMultiplyAccumulate: saturate(acc + zp + rescale(bias + x @ w.T))."""
    s = _wrap(bias[None, :] + x @ w.T, 32)
    return np.clip(multiply_by_quantized_multiplier(s, *mult) + zero_point + acc, lo, hi)


def _layer_norm(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, scale: tuple[int, int],
                variance_limit: int) -> np.ndarray:
    """ApplyLayerNorm: integer mean / variance normalization, then weights, bias and rescale."""
    n = x.shape[1]
    out = np.empty_like(x)
    guard = 1 << 20
    for b in range(x.shape[0]):
        v = x[b]
        total, total_sq = int(v.sum()), int((v * v).sum())
        mean = _cdiv(total * 1024, n)
        variance = total_sq * (guard // n) - mean * mean
        variance2 = _wrap(np.int64(_cdiv(variance, guard)), 32).item()
        if variance2 < 1:
            variance2 = variance_limit
        inv_a, inv_b = inv_sqrt_quantized_multiplier_exp(variance2, -1)
        shifted = 1024 * v - mean
        rescaled = multiply_by_quantized_multiplier(shifted, inv_a, inv_b)
        val3 = _wrap(_wrap(rescaled * weights, 32) + bias, 32)
        val3 = np.where(val3 > 0, val3 + 512, val3 - 512)
        val4 = np.where(val3 >= 0, val3 // 1024, -((-val3) // 1024))  # C++ division truncates
        val5 = multiply_by_quantized_multiplier(val4, scale[0], scale[1] + 12)
        out[b] = np.clip(val5, -32768, 32767)
    return out


def _cdiv(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _peephole(acc: np.ndarray, weights: np.ndarray, cell: np.ndarray, mult: tuple[int, int]) -> np.ndarray:
    """VectorBatchVectorCwiseProductAccumulate: saturate(acc + rescale(weights * cell))."""
    prod = multiply_by_quantized_multiplier(weights[None, :] * cell, *mult)
    return np.clip(prod + acc, -32768, 32767)


def _tanh(x: np.ndarray, integer_bits: int, fallback: np.ndarray) -> np.ndarray:
    """ApplyTanh(integer_bits, ...): gemmlowp tanh on int16; Android leaves the output buffer
    (`fallback`) untouched for integer bits outside 0..6."""
    if not 0 <= integer_bits <= 6:
        return fallback
    return fp_tanh(x, integer_bits, 16)


# --- execution -------------------------------------------------------------------------------------

def _execute(ctx: OpContext) -> list[np.ndarray]:
    p = params(ctx)
    batch, n_units, n_output, cell_shift, cifg = p.batch, p.num_units, p.output_size, p.cell_shift, p.use_cifg
    has = ctx.has_input
    t = ctx.inputs
    f32 = np.float32

    def val(i: int) -> np.ndarray:
        return ctx.input(i).astype(np.int64)

    cell_clip, proj_clip = f32(p.cell_clip), f32(p.proj_clip)
    inter = [f32(v) for v in p.intermediate_scales]
    hidden_zp, hidden_scale = p.hidden_zero_point, f32(p.hidden_scale)

    x = val(_INPUT)
    h_prev = val(_PREV_OUTPUT)
    c_prev = val(_PREV_CELL)
    x_zp, h_zp = t[_INPUT].zero_point, t[_PREV_OUTPUT].zero_point
    x_scale, h_scale = f32(t[_INPUT].scale), f32(t[_PREV_OUTPUT].scale)

    gates = range(1 if cifg else 0, 4)  # 0 input, 1 forget, 2 cell, 3 output
    use_ln = {g: has(_LN[g]) for g in gates}

    def gate_scales(g: int) -> tuple[tuple[int, int], tuple[int, int]]:
        wi = f32(t[_IN_W[g]].scale) * x_scale / inter[g]
        wr = f32(t[_REC_W[g]].scale) * h_scale / inter[g]
        return (_multiplier(ctx, float(wi), _NAMES[_IN_W[g]]),
                _multiplier(ctx, float(wr), _NAMES[_REC_W[g]]))

    def matmuls(g: int) -> np.ndarray:
        mi, mr = gate_scales(g)
        wi, wr = val(_IN_W[g]), val(_REC_W[g])
        # PrecomputeZeroPointTimesWeightWithBias with no bias: -zero_point * row sums.
        acc = np.zeros((batch, n_units), np.int64)
        acc = _matmul_acc(x, -x_zp * wi.sum(axis=1), wi, mi, 0, acc, -32768, 32767)
        return _matmul_acc(h_prev, -h_zp * wr.sum(axis=1), wr, mr, 0, acc, -32768, 32767)

    def peephole(g: int, acc: np.ndarray, cell: np.ndarray) -> np.ndarray:
        k = {0: 0, 1: 1, 3: 2}[g]
        if not has(_PEEP[k]):
            return acc
        real = 2.0 ** cell_shift * float(f32(t[_PEEP[k]].scale)) / float(inter[g])
        return _peephole(acc, val(_PEEP[k]), cell, _multiplier(ctx, real, _NAMES[_PEEP[k]]))

    def layer_norm(g: int, acc: np.ndarray) -> np.ndarray:
        if not use_ln[g]:
            return acc
        ln = t[_LN[g]]
        scale = _multiplier(ctx, float(f32(ln.scale)), _NAMES[_LN[g]])
        limit = min(1, int(f32(10000) * f32(ln.scale)))
        return _layer_norm(acc, val(_LN[g]), val(_BIAS[g]), scale, limit)

    forget = fp_logistic(layer_norm(1, peephole(1, matmuls(1), c_prev)), 3, 16)
    modulation = fp_tanh(layer_norm(2, matmuls(2)), 3, 16)
    if cifg:
        input_gate = 32767 - forget
    else:
        input_gate = fp_logistic(layer_norm(0, peephole(0, matmuls(0), c_prev)), 3, 16)

    # Cell: CwiseMul (rounding shifts, int16 wrap), CwiseAdd (saturating), optional clipping.
    forget_term = _wrap(rounding_divide_by_pot(forget * c_prev, 15), 16)
    input_term = _wrap(rounding_divide_by_pot(input_gate * modulation, 30 + cell_shift), 16)
    cell = np.clip(forget_term + input_term, -32768, 32767)
    if cell_clip > 0:
        q_clip = int(min(max(cell_clip / f32(t[_PREV_CELL].scale), f32(-32768)), f32(32767)))
        if q_clip > 0:
            cell = np.clip(cell, -q_clip, q_clip)

    output_gate = fp_logistic(layer_norm(3, peephole(3, matmuls(3), cell)), 3, 16)

    # Hidden: tanh of the cell state, times the output gate, rescaled to the hidden state.
    cell_tanh = _tanh(cell, cell_shift + 15, input_gate)
    hidden_mult = _multiplier(ctx, 2.0 ** -15 / float(hidden_scale) * 2.0 ** -15, _NAMES[_HIDDEN_SCALE])
    hidden = multiply_by_quantized_multiplier(output_gate * cell_tanh, *hidden_mult)
    hidden = np.clip(hidden - hidden_zp, -128, 127)

    if has(_PROJ_W):
        pw = val(_PROJ_W)
        real = f32(t[_PROJ_W].scale) * hidden_scale / h_scale
        pm = _multiplier(ctx, float(real), _NAMES[_PROJ_W])
        bias = val(_PROJ_B) if has(_PROJ_B) else np.zeros(n_output, np.int64)
        bias = _wrap(bias + hidden_zp * pw.sum(axis=1), 32)
        out = _matmul_acc(hidden, bias, pw, pm, h_zp, np.zeros((batch, n_output), np.int64), -128, 127)
        if proj_clip > 0:
            q_clip = _wrap(np.int64(int(min(max(proj_clip / f32(t[_PROJ_W].scale), f32(-128)),
                                             f32(127)))), 8).item()
            if q_clip > 0:
                out = np.clip(out, -q_clip, q_clip)
    else:
        out = hidden  # Android copies the hidden state (num_units == output_size here)
    out = out.astype(np.int8)
    return [out.copy(), cell.astype(np.int16), out]


register(Op.QUANTIZED_LSTM, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_omitted_operand=True)
