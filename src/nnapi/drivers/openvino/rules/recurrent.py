"""Recurrent cells: RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN,
UNIDIRECTIONAL_SEQUENCE_LSTM (float) and QUANTIZED_LSTM (int8 / int16).

The sequences run their time steps in blocks (`_scan`): a short sequence is unrolled into the graph;
a longer one becomes a TensorIterator whose body is a block of `_block_steps` unrolled steps, the
steps left over unrolled after it. Unrolled, every step is nodes that a cached start pays to import
(about 0.2 ms each: lstm_text_f32's 32 steps in two layers were 0.36 s of its start); a one-step body
pays a dispatch per iteration (7 us a step here, 1.9x the unrolled run). Blocks of 8 to 16 steps take
the import to a seventh and cost the run 17-31% (`benchmarks/loops.py`); `lowering.LOOPS` "unrolled"
(SUSTAINED_SPEED) keeps every step unrolled.

The RNNs: h = activation(x W^T + b + h R^T), the input projections of every step in one MatMul.

The float LSTM: the input projections of every step are one MatMul, each step adds its recurrent
MatMul, gates and state update, as Android's LSTMStep does (peepholes, CIFG, layer normalization,
projection and both clips included). OpenVINO's LSTMSequence clips gate pre-activations rather than
the cell state, which is not NNAPI's cell clip.

QUANTIZED_LSTM (Android's 8x8_16 integer LSTM) is computed on real values with the integer kernel's
fixed points made explicit: gate pre-activations are the matmul results in the intermediate scales,
saturated to int16 and read as Q3.12; the cell state saturates to int16 in its power-of-two scale;
the hidden state is rounded to int8 in its scale and zero point (Android subtracts the zero point),
which the output then holds as raw values. As in Android, the gate biases act only through layer
normalization. Peepholes, layer normalization and projection are not lowered (not claimed).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..backend import ov, ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import (FLOAT, LOOPS, Q8AS, Unsupported, Value, constant, dequantized_array, f32, fake_quantize, i64,
                        lowers, out, scalar, sharing_constants)

#: A sequence of at most this many steps is unrolled whole.
UNROLLED_STEPS = 8
#: The steps of a TensorIterator's body: about a quarter of the sequence, within these bounds.
BLOCK_STEPS = (8, 16)

#: One time step: (the step's slice of the sequence, the state, the invariants) -> (the new state, the
#: step's output, to be stacked over time).
Step = Callable[[ov.Output, list, dict], tuple[list, ov.Output]]


def _block_steps(steps: int) -> int:
    """The steps of one TensorIterator body for a sequence of `steps` (0: unroll it whole, as
    `LOOPS` "unrolled" asks). At least two blocks: OpenVINO's low-precision pipeline fails on some
    graphs holding a TensorIterator of one iteration."""
    if steps <= UNROLLED_STEPS or LOOPS.get() == "unrolled":
        return 0
    low, high = BLOCK_STEPS
    block = min(high, max(low, math.ceil(steps / 4)))
    return block if steps >= 2 * block else 0


def _shape(x: ov.Output) -> list[int]:
    return list(x.get_partial_shape().to_shape())


def _unrolled(sequence: ov.Output, state: list, invariants: dict, step: Step, times: range,
              stacked: list) -> list:
    """`step` at each time of `times` in the graph being built, its outputs appended to `stacked`."""
    for t in times:
        state, output = step(out(ops.gather(sequence, i64(t), i64(0))), state, invariants)
        stacked.append(out(ops.unsqueeze(output, i64(0))))
    return state


def _scan(sequence: ov.Output, state: list, invariants: dict, step: Step, *,
          reverse: bool = False) -> tuple[ov.Output, list]:
    """`step` over time-major `sequence` [T, ...] from `state` (backwards with `reverse`): its outputs
    stacked [T, ...] and the final state. `invariants` are the values every step reads; a step reads
    them from its argument only (in a TensorIterator's body they are the body's parameters)."""
    steps = _shape(sequence)[0]
    if reverse:  # (backwards is forwards over the sequence reversed, its outputs reversed back)
        order = i64(list(range(steps - 1, -1, -1)))
        sequence = out(ops.gather(sequence, order, i64(0)))
    stacked: list = []
    block = _block_steps(steps)
    done = 0
    if block:
        done = steps - steps % block
        head = sequence if done == steps else out(ops.slice(sequence, i64([0]), i64([done]), i64([1]), i64([0])))
        with sharing_constants():  # (the body is a graph of its own)
            param_x = ops.parameter([block] + _shape(head)[1:], head.get_element_type())
            params_s = [ops.parameter(_shape(v), v.get_element_type()) for v in state]
            params_i = {k: ops.parameter(_shape(v), v.get_element_type()) for k, v in invariants.items()}
            inner: list = []
            new_state = _unrolled(param_x.output(0), [p.output(0) for p in params_s],
                                  {k: p.output(0) for k, p in params_i.items()}, step, range(block), inner)
            results_s = [ops.result(v) for v in new_state]
            result_o = ops.result(ops.concat(inner, 0))
            body = ov.Model(results_s + [result_o], [param_x, *params_s, *params_i.values()])
        loop = ops.tensor_iterator()
        loop.set_body(body)
        loop.set_sliced_input(param_x, head, 0, block, block, -1, 0)
        for p, v, r in zip(params_s, state, results_s):
            loop.set_merged_input(p, v, r.output(0))
        for k, p in params_i.items():
            loop.set_invariant_input(p, invariants[k])
        state = [loop.get_iter_value(r.output(0), -1) for r in results_s]
        stacked.append(loop.get_concatenated_slices(result_o.output(0), 0, block, block, -1, 0))
    state = _unrolled(sequence, state, invariants, step, range(done, steps), stacked)
    seq = out(ops.concat(stacked, 0)) if len(stacked) > 1 else stacked[0]
    if reverse:
        seq = out(ops.gather(seq, order, i64(0)))
    return seq, state

def _cell_activation(x, code: int):
    """Android's ActivationFn for the cell input and output."""
    if code == 4:
        return out(ops.tanh(x))
    if code == 6:
        return out(ops.sigmoid(x))
    if code == 1:
        return out(ops.relu(x))
    if code == 3:
        return out(ops.clamp(x, 0.0, 6.0))
    if code == 2:
        return out(ops.clamp(x, -1.0, 1.0))
    if code == 0:
        return x
    raise Unsupported(f"LSTM activation {code}")


def _normalize(x):
    """Android's MeanStddevNormalization over the last axis (variance floor 1e-8)."""
    axes = i64([-1])
    mean = ops.reduce_mean(x, axes, True)
    centered = ops.subtract(x, mean)
    var = ops.reduce_mean(ops.multiply(centered, centered), axes, True)
    return out(ops.divide(centered, ops.sqrt(ops.add(var, f32(1e-8)))))


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, types=FLOAT)
def sequence_lstm(ctx: OpContext, xs):
    g = resolve(ctx)
    cell, ix, cfg = g.cell, g.cell.index, g.cell.config
    x = xs[0].laid_out(None if g.time_major else (1, 0, 2))  # [T, B, I]
    w_in_ix = (ix.input_to_input, ix.input_to_forget, ix.input_to_cell, ix.input_to_output)
    w_rec_ix = (ix.recurrent_to_input, ix.recurrent_to_forget, ix.recurrent_to_cell, ix.recurrent_to_output)
    bias_ix = (ix.input_gate_bias, ix.forget_gate_bias, ix.cell_gate_bias, ix.output_gate_bias)
    peep_ix = {0: ix.cell_to_input, 1: ix.cell_to_forget, 3: ix.cell_to_output}
    ln_ix = (ix.input_layer_norm, ix.forget_layer_norm, ix.cell_layer_norm, ix.output_layer_norm)
    gates = [k for k in range(4) if not (k == 0 and cfg.use_cifg)]
    w_in = out(ops.concat([xs[w_in_ix[k]].node for k in gates], 0))      # [G*U, I]
    w_rec = out(ops.concat([xs[w_rec_ix[k]].node for k in gates], 0))    # [G*U, O]
    xw = out(ops.matmul(x, w_in, False, True))                           # [T, B, G*U]
    if not cfg.use_layer_norm:
        xw = out(ops.add(xw, ops.concat([xs[bias_ix[k]].node for k in gates], 0)))
    sizes = [cfg.n_cell] * len(gates)
    inv = {"w_rec": w_rec}  # (what every step reads: the body's parameters in a TensorIterator)
    for k in gates:
        if cfg.use_peephole and k != 2:
            inv[f"peephole{k}"] = xs[peep_ix[k]].node
        if cfg.use_layer_norm:
            inv[f"norm{k}"], inv[f"bias{k}"] = xs[ln_ix[k]].node, xs[bias_ix[k]].node
    if cfg.use_projection:
        inv["projection"] = xs[ix.projection_weights].node
        if cfg.use_projection_bias:
            inv["projection_bias"] = xs[ix.projection_bias].node

    def finish_gate(k: int, value, cell_state, v: dict):
        if cfg.use_peephole and k != 2:
            value = out(ops.add(value, ops.multiply(v[f"peephole{k}"], cell_state)))
        if cfg.use_layer_norm:
            value = out(ops.add(ops.multiply(_normalize(value), v[f"norm{k}"]), v[f"bias{k}"]))
        return value

    def step(xw_t: ov.Output, state: list, v: dict) -> tuple[list, ov.Output]:
        h, c = state
        pre = out(ops.add(xw_t, ops.matmul(h, v["w_rec"], False, True)))
        parts = ops.variadic_split(pre, i64(1), i64(sizes))
        g_pre = {k: parts.output(n) for n, k in enumerate(gates)}
        f_gate = out(ops.sigmoid(finish_gate(1, g_pre[1], c, v)))
        cell_in = _cell_activation(finish_gate(2, g_pre[2], c, v), cell.activation)
        i_gate = (out(ops.subtract(f32(1.0), f_gate)) if cfg.use_cifg
                  else out(ops.sigmoid(finish_gate(0, g_pre[0], c, v))))
        c = out(ops.add(ops.multiply(f_gate, c), ops.multiply(cell_in, i_gate)))
        if cell.cell_clip > 0.0:
            c = out(ops.clamp(c, -cell.cell_clip, cell.cell_clip))
        o_gate = out(ops.sigmoid(finish_gate(3, g_pre[3], c, v)))
        h = out(ops.multiply(o_gate, _cell_activation(c, cell.activation)))
        if cfg.use_projection:
            h = out(ops.matmul(h, v["projection"], False, True))
            if cfg.use_projection_bias:
                h = out(ops.add(h, v["projection_bias"]))
            if cell.proj_clip > 0.0:
                h = out(ops.clamp(h, -cell.proj_clip, cell.proj_clip))
        return [h, c], h

    seq, (h, c) = _scan(xw, [xs[ix.output_state_in].node, xs[ix.cell_state_in].node], inv, step)
    result = [Value(seq, None if g.time_major else (1, 0, 2))]  # [T, B, O]
    if len(ctx.outputs) == 3:
        result += [h, c]
    return result


def _rnn_steps(x, h, w, r, b, act: int, *, aux=None, aux_w=None, reverse: bool = False):
    """The RNN over time-major x [T, B, I] (`_scan`): the outputs [T, B, U] and the final state."""
    xw = out(ops.add(ops.matmul(x, w, False, True), b))
    if aux is not None:
        xw = out(ops.add(xw, ops.matmul(aux, aux_w, False, True)))

    def step(x_t: ov.Output, state: list, v: dict) -> tuple[list, ov.Output]:
        h = _cell_activation(out(ops.add(x_t, ops.matmul(state[0], v["r"], False, True))), act)
        return [h], h

    seq, (h,) = _scan(xw, [h], {"r": r}, step, reverse=reverse)
    return seq, h


@lowers(Op.RNN, types=FLOAT)
def rnn(ctx: OpContext, xs):
    g = resolve(ctx)
    x = out(ops.unsqueeze(xs[0].node, i64(0)))
    _, h = _rnn_steps(x, xs[4].node, xs[1].node, xs[2].node, xs[3].node, g.activation)
    return [h, h]


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_RNN, types=FLOAT)
def sequence_rnn(ctx: OpContext, xs):
    g = resolve(ctx)
    layout = None if g.time_major else (1, 0, 2)
    seq, h = _rnn_steps(xs[0].laid_out(layout), xs[4].node, xs[1].node, xs[2].node, xs[3].node, g.activation)
    return [Value(seq, layout), h][:len(ctx.outputs)]


@lowers(Op.BIDIRECTIONAL_SEQUENCE_RNN, types=FLOAT)
def bidirectional_rnn(ctx: OpContext, xs):
    # TODO(resolver): activation (12), time major (13), merge outputs (14); the auxiliary linking from
    # which of inputs 9-11 are present (none; parallel: aux input alone; cross: all three).
    act, time_major, merge = int(scalar(ctx, 12)), bool(scalar(ctx, 13)), bool(scalar(ctx, 14))
    aux_in, fw_aux, bw_aux = (ctx.has_input(i) for i in (9, 10, 11))
    layout = None if time_major else (1, 0, 2)
    x = xs[0].laid_out(layout)
    aux = xs[9].laid_out(layout) if aux_in else None
    cross = aux_in and fw_aux and bw_aux
    if aux_in and not cross and (fw_aux or bw_aux):
        raise Unsupported("BIDIRECTIONAL_SEQUENCE_RNN with one auxiliary weight")
    fw, fw_h = _rnn_steps(x, xs[4].node, xs[1].node, xs[2].node, xs[3].node, act,
                          aux=aux if cross else None, aux_w=xs[10].node if cross else None)
    bw, bw_h = _rnn_steps(aux if (aux_in and not cross) else x, xs[8].node, xs[5].node, xs[6].node, xs[7].node,
                          act, aux=aux if cross else None, aux_w=xs[11].node if cross else None, reverse=True)
    seqs = [Value(out(ops.concat([fw, bw], 2)), layout)] if merge else [Value(fw, layout), Value(bw, layout)]
    return seqs + ([fw_h, bw_h] if len(ctx.outputs) in (3, 4) else [])


# --- QUANTIZED_LSTM ---------------------------------------------------------------------------------
_Q_IN_W, _Q_REC_W, _Q_PEEP = (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11)
_Q_PROJ_W, _Q_PREV_OUT, _Q_PREV_CELL, _Q_LN = 16, 18, 19, (20, 21, 22, 23)
_Q_CELL_CLIP, _Q_INTER, _Q_HIDDEN_ZP, _Q_HIDDEN_SCALE = 24, (26, 27, 28, 29), 30, 31


class _QuantizedCell:
    """One QUANTIZED_LSTM operation's cell (its weights, scales and clips read once), stepped on real
    values: the products of the step's input with its input weights, the previous output and cell."""

    def __init__(self, ctx: OpContext) -> None:
        has = ctx.has_input
        if any(has(i) for i in (*_Q_PEEP, *_Q_LN, _Q_PROJ_W)):
            raise Unsupported("QUANTIZED_LSTM with peepholes, layer normalization or projection")
        self.ctx = ctx
        self.cifg = not has(_Q_IN_W[0])
        t = ctx.inputs
        self.inter = [np.float32(scalar(ctx, i)) for i in _Q_INTER]  # TODO(resolver)
        cell_clip = np.float32(scalar(ctx, _Q_CELL_CLIP))
        self.hidden_zp = ((int(scalar(ctx, _Q_HIDDEN_ZP)) & 0xFF) ^ 0x80) - 0x80  # read as int8, as Android does
        self.hidden_scale = np.float32(scalar(ctx, _Q_HIDDEN_SCALE))
        cell_scale = np.float32(t[_Q_PREV_CELL].scale)
        self.gates = [g for g in range(4) if not (g == 0 and self.cifg)]
        self.n_units = t[_Q_IN_W[1]].dims[0]
        self.w_in, self.w_rec = self._stacked(_Q_IN_W), self._stacked(_Q_REC_W)
        self.limit = float(32767 * cell_scale)
        if cell_clip > 0:
            q_clip = int(min(max(cell_clip / cell_scale, np.float32(-32768)), np.float32(32767)))
            if q_clip > 0:
                self.limit = min(self.limit, float(q_clip * cell_scale))

    def _stacked(self, positions) -> np.ndarray:
        """The gates' weights stacked [G*U, K] as real values, each times its gate's factor
        2^-12 / intermediate scale (so the product reads directly as the Q3.12 pre-activation)."""
        parts = []
        for g in self.gates:
            w = self.ctx.inputs[positions[g]]
            if w.value is None:
                raise Unsupported("QUANTIZED_LSTM with weights the request supplies")
            parts.append(dequantized_array(w) * (np.float32(2.0 ** -12) / self.inter[g]))
        return np.ascontiguousarray(np.concatenate(parts, axis=0), np.float32)

    @staticmethod
    def product(v: Value, w: np.ndarray):
        if v.is_constant:  # folded here (OpenVINO's pipeline fails on a MatMul of two constants)
            return constant(np.ascontiguousarray(v.array @ w.T, np.float32))
        return out(ops.matmul(v.node, constant(w), False, True))

    def step(self, x_product, h_prev: Value, c_prev) -> tuple:
        """(the int8 hidden values, the cell state) after one step."""
        # The int16 accumulators of every gate at once, saturated, read as Q3.12.
        acc = ops.add(x_product, self.product(h_prev, self.w_rec))
        acc = ops.clamp(acc, -8.0, float(np.float32(32767 * 2.0 ** -12)))
        parts = ops.variadic_split(acc, i64(-1), i64([self.n_units] * len(self.gates)))
        pre = {g: parts.output(k) for k, g in enumerate(self.gates)}
        forget = out(ops.sigmoid(pre[1]))
        modulation = out(ops.tanh(pre[2]))
        input_gate = out(ops.subtract(f32(1.0), forget)) if self.cifg else out(ops.sigmoid(pre[0]))
        cell = ops.add(ops.multiply(forget, c_prev), ops.multiply(input_gate, modulation))
        cell = out(ops.clamp(cell, -self.limit, self.limit))
        output_gate = out(ops.sigmoid(pre[3]))
        hidden = ops.divide(ops.multiply(output_gate, ops.tanh(cell)), f32(self.hidden_scale))
        hidden = ops.clamp(ops.subtract(ops.round(hidden, "half_away_from_zero"), f32(self.hidden_zp)), -128.0, 127.0)
        return hidden, cell

    def output(self, hidden, k: int):
        """Output `k` (0 or 2): the int8 hidden values, held raw."""
        o = self.ctx.outputs[k]
        return out(ops.multiply(ops.subtract(hidden, f32(o.zero_point)), f32(np.float32(o.scale))))


@lowers(Op.QUANTIZED_LSTM, types=(Q8AS,))
def quantized_lstm(ctx: OpContext, xs):
    cell = _QuantizedCell(ctx)
    hidden, c = cell.step(cell.product(xs[0], cell.w_in), xs[_Q_PREV_OUT], xs[_Q_PREV_CELL].node)
    return [cell.output(hidden, 0), c, cell.output(hidden, 2)]


def quantized_lstm_sequence(ctx: OpContext, xs: list, sequence: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
    """QUANTIZED_LSTM `ctx` (its inputs `xs`) stepped over time-major `sequence` [T, B, I] of its input,
    from its previous output and cell (`_scan`), each step's outputs on their grids as the operation's
    would be: (the output sequence [T, B, O], the last output state, the last cell state)."""
    cell = _QuantizedCell(ctx)
    x_products = out(ops.matmul(sequence, constant(cell.w_in), False, True))  # [T, B, G*U], every step at once
    h_t, c_t, o_t = ctx.outputs

    def step(x_t: ov.Output, state: list, v: dict) -> tuple[list, ov.Output]:
        hidden, c = cell.step(x_t, Value(state[0]), state[1])
        return ([fake_quantize(cell.output(hidden, 0), h_t), fake_quantize(c, c_t)],
                fake_quantize(cell.output(hidden, 2), o_t))

    seq, (h, c) = _scan(x_products, [xs[_Q_PREV_OUT].node, xs[_Q_PREV_CELL].node], {}, step)
    return seq, h, c


__all__ = ["quantized_lstm", "quantized_lstm_sequence", "sequence_lstm"]
