"""QUANTIZED_16BIT_LSTM: one LSTM step in 8/16-bit fixed point (Android's QuantizedLSTM.cpp).

Inputs: 0 input [batches, input_size] QUANT8_ASYMM (scale 1/128, zero point 128); 1-4
input-to-{input,forget,cell,output} weights [output_size, input_size] and 5-8 recurrent-to-...
weights [output_size, output_size], QUANT8_ASYMM sharing one scale and zero point; 9-12 gate
biases [output_size] INT32 (scale = input scale * weights scale, zero point 0); 13 previous cell
state [batches, output_size] QUANT16_SYMM (scale 1/2048, zero point 0); 14 previous output
[batches, output_size] QUANT8_ASYMM (scale 1/128, zero point 128).
Outputs: 0 cell state QUANT16_SYMM, 1 output QUANT8_ASYMM, quantized like inputs 13 and 14.

The gates' fully connected part accumulates in int32 and rescales to int16 with 3 integer bits
(multiplier 4096 * bias scale); the gates then use gemmlowp's fixed-point logistic / tanh and the
state keeps 4 integer bits.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import (as_float32, fp_logistic, fp_mul_by_pot, fp_saturating_add, fp_srdhm, fp_tanh,
                     multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot)
from .context import OpContext
from .registry import register

_Q8, _Q16 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM
_INPUT, _PREV_CELL, _PREV_OUTPUT = 0, 13, 14
_WEIGHTS = range(1, 9)
_BIASES = range(9, 13)
_NAMES = ["input", "input to input weights", "input to forget weights", "input to cell weights",
          "input to output weights", "recurrent to input weights", "recurrent to forget weights",
          "recurrent to cell weights", "recurrent to output weights", "input gate bias",
          "forget gate bias", "cell gate bias", "output gate bias", "previous cell state",
          "previous output"]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(15, 2)
    ctx.check_types([_Q8] * 9 + [T.TENSOR_INT32] * 4 + [_Q16, _Q8], [_Q16, _Q8])
    _check_quant(ctx)


def _check_quant(ctx: OpContext) -> None:
    def quant(i: int, scale: float, zero_point: int, output: bool = False) -> None:
        t = (ctx.outputs if output else ctx.inputs)[i]
        if as_float32(t.scale) != as_float32(scale) or t.zero_point != zero_point:
            what = f"output {i}" if output else f"input {i} ({_NAMES[i]})"
            raise ctx.fail(f"{what} must have scale {scale} and zero point {zero_point}, "
                           f"got {t.scale} and {t.zero_point}")

    quant(_INPUT, 1 / 128, 128)
    quant(_PREV_OUTPUT, 1 / 128, 128)
    quant(_PREV_CELL, 1 / 2048, 0)
    quant(0, 1 / 2048, 0, output=True)
    quant(1, 1 / 128, 128, output=True)
    w = ctx.inputs[1]
    if not w.scale > 0:
        raise ctx.fail(f"input 1 ({_NAMES[1]}) must have a positive scale, got {w.scale}")
    for i in _WEIGHTS:
        quant(i, w.scale, w.zero_point)
    bias_scale = float(np.float32(w.scale) / np.float32(128.0))
    for i in _BIASES:
        quant(i, bias_scale, 0)


def _dims(ctx: OpContext) -> tuple[int, int, int]:
    def shape(i: int, *want: int) -> None:
        d = tuple(ctx.inputs[i].dims)
        if d != want:
            raise ctx.fail(f"input {i} ({_NAMES[i]}) has shape {list(d)}, expected {list(want)}")

    d = ctx.inputs[_INPUT].dims
    if len(d) != 2:
        raise ctx.fail(f"input 0 has rank {len(d)}, expected 2")
    n_batch, n_input = d
    r = ctx.inputs[5].dims
    if len(r) != 2:
        raise ctx.fail(f"input 5 ({_NAMES[5]}) has rank {len(r)}, expected 2")
    n_output = r[0]
    for i in range(1, 5):
        shape(i, n_output, n_input)
    for i in range(5, 9):
        shape(i, n_output, n_output)
    for i in _BIASES:
        shape(i, n_output)
    shape(_PREV_CELL, n_batch, n_output)
    shape(_PREV_OUTPUT, n_batch, n_output)
    return n_batch, n_input, n_output


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    _check_quant(ctx)
    n_batch, _, n_output = _dims(ctx)
    return [(n_batch, n_output), (n_batch, n_output)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    _dims(ctx)
    w_zp = ctx.inputs[1].zero_point
    x = ctx.input(_INPUT).astype(np.int64) - 128
    h = ctx.input(_PREV_OUTPUT).astype(np.int64) - 128
    c = ctx.input(_PREV_CELL).astype(np.int64)
    mult, shift = quantize_multiplier(4096.0 * as_float32(ctx.inputs[9].scale))

    # Android concatenates the activations as [input, previous output] but each gate's weights
    # as [recurrent weights, input weights] (QuantizedLSTMCell::concatenateWeights) and
    # multiplies the two rows position by position; the conformance vectors encode exactly that.
    concat = np.concatenate([x, h], axis=1)

    def gate(k: int) -> np.ndarray:  # k: 0 input, 1 forget, 2 cell, 3 output
        weights = np.concatenate([ctx.input(5 + k), ctx.input(1 + k)], axis=1).astype(np.int64) - w_zp
        acc = ctx.input(9 + k).astype(np.int64) + concat @ weights.T
        acc = multiply_by_quantized_multiplier(acc, mult, shift)
        return np.clip(acc, -32768, 32767)  # int16 with 3 integer bits

    i_gate = fp_logistic(gate(0), 3, 16)
    f_gate = fp_logistic(gate(1), 3, 16)
    modulation = fp_tanh(gate(2), 3, 16)
    o_gate = fp_logistic(gate(3), 3, 16)
    input_times_modulation = fp_srdhm(i_gate, modulation, 16)        # F0
    prev_times_forget = fp_srdhm(f_gate, c, 16)                       # F4
    new_c = fp_saturating_add(fp_mul_by_pot(input_times_modulation, -4, 16), prev_times_forget, 16)
    activ = fp_srdhm(o_gate, fp_tanh(fp_mul_by_pot(new_c, 1, 16), 3, 16), 16)  # F0
    out = np.clip(rounding_divide_by_pot(activ, 8), -128, 127) + 128
    return [new_c.astype(np.int16), out.astype(np.uint8)]


register(Op.QUANTIZED_16BIT_LSTM, validate=_validate, prepare=_prepare, execute=_execute)
