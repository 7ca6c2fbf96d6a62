"""Recurrent rules: LSTM, UNIDIRECTIONAL / BIDIRECTIONAL_SEQUENCE_LSTM, RNN,
UNIDIRECTIONAL_SEQUENCE_RNN. The cells are `ops`' own (`lstm_step`, `rnn_step`), traced with
jax.numpy; sequences run under `lax.scan`."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import CellWeights, OpContext, lstm_step, resolve, rnn_step
from ..lowering import f32, lowers, time_major


def _lstm_scan(w: CellWeights, x, aux, h0, c0, *, forward: bool = True):
    """The shared LSTM cell over a time-major sequence: (outputs [T, B, n_output], final output
    state, final cell state)."""
    def body(carry, xt):
        h, c = carry
        x_t, aux_t = xt
        h, c, _ = lstm_step(w, x_t, aux_t, h, c, xp=jnp)
        return (h, c), h

    (h, c), outs = lax.scan(body, (f32(h0), f32(c0)), (x, aux), reverse=not forward)
    return outs, h, c


@lowers(Op.LSTM)
def _lstm(ctx: OpContext, xs: list) -> list:
    cell = resolve(ctx).cell
    ix = cell.index
    w = cell.weights(ctx, value=lambda i: f32(xs[i]))
    h, c, scratch = lstm_step(w, f32(xs[0]), None, f32(xs[ix.output_state_in]), f32(xs[ix.cell_state_in]), xp=jnp)
    return [scratch, h, c, h]


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_LSTM)
def _sequence_lstm(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    ix = p.cell.index
    w = p.cell.weights(ctx, value=lambda i: f32(xs[i]))
    outs, h, c = _lstm_scan(w, time_major(f32(xs[0]), p.time_major), None, xs[ix.output_state_in],
                            xs[ix.cell_state_in])
    return [time_major(outs, p.time_major), h, c][:len(ctx.outputs)]


@lowers(Op.BIDIRECTIONAL_SEQUENCE_LSTM)
def _bidirectional_lstm(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    tm, cross, fw, bw = p.time_major, p.cross_linking, p.forward.index, p.backward.index
    x = time_major(f32(xs[0]), tm)
    aux = time_major(f32(xs[p.aux_input]), tm) if ctx.has_input(p.aux_input) else None
    value = lambda i: f32(xs[i])  # noqa: E731
    w_fw = p.forward.weights(ctx, use_aux=cross, value=value)
    w_bw = p.backward.weights(ctx, use_aux=cross, value=value)
    fw_out, fw_h, fw_c = _lstm_scan(w_fw, x, aux if cross else None, xs[fw.output_state_in], xs[fw.cell_state_in])
    bw_out, bw_h, bw_c = _lstm_scan(w_bw, aux if p.parallel_linking else x, aux if cross else None,
                                    xs[bw.output_state_in], xs[bw.cell_state_in], forward=False)
    fw_out, bw_out = time_major(fw_out, tm), time_major(bw_out, tm)
    outs = [jnp.concatenate([fw_out, bw_out], axis=-1)] if p.merge_outputs else [fw_out, bw_out]
    return outs + ([fw_h, fw_c, bw_h, bw_c] if len(ctx.outputs) in (5, 6) else [])


@lowers(Op.RNN)
def _rnn(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    h = rnn_step(f32(xs[0]), f32(xs[4]), f32(xs[1]), f32(xs[2]), f32(xs[3]), p.activation, xp=jnp)
    return [h, h]


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_RNN)
def _sequence_rnn(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    w, r, b = f32(xs[1]), f32(xs[2]), f32(xs[3])

    def body(h, x_t):
        h = rnn_step(x_t, h, w, r, b, p.activation, xp=jnp)
        return h, h

    h, outs = lax.scan(body, f32(xs[4]), time_major(f32(xs[0]), p.time_major))
    return [time_major(outs, p.time_major), h][:len(ctx.outputs)]
