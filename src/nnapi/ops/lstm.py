"""LSTM: one time step of a long short-term memory cell (float32, float16).

23 inputs (NNAPI 1.0) or 27 (1.2, with the four layer normalization weights); 4 outputs:
scratch buffer [batch, 3 or 4 * n_cell], output state [batch, n_output], cell state
[batch, n_cell], output [batch, n_output]. Optional inputs (CIFG input-gate weights and bias,
peephole weights, projection weights and bias, layer norm weights) may be omitted.
The cell itself lives in `_lstm_cell` (shared with the sequence LSTM operations).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from . import _lstm_cell as cell
from .context import OpContext, UnknownValue
from .registry import register, resolver

_IX = cell.CellIndex.standard(first=1, output_state=18, cell_state=19, layer_norm=23)
_ACTIVATION, _CELL_CLIP, _PROJ_CLIP = 20, 21, 22


@dataclass(frozen=True)
class LstmParams:
    """LSTM (one time step): the cell (operand positions, sizes, flags, scalars) and the shapes of the
    four outputs (scratch buffer, output state, cell state, output)."""

    cell: cell.LstmCellParams
    out_dims: tuple[tuple[int, ...], ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((23, 27), 4)
    t = ctx.inputs[0].type
    if t not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        raise ctx.fail(f"input 0 has unsupported type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    scalar = T.FLOAT32 if t == T.TENSOR_FLOAT32 else T.FLOAT16
    ctx.check_types([t] * 20 + [T.INT32, scalar, scalar] + [t] * 4, [t] * 4)
    ctx.check_rank(0, 2)
    try:
        cell.check_params(ctx, _ACTIVATION, _CELL_CLIP, _PROJ_CLIP)
    except UnknownValue:
        pass


def _config(ctx: OpContext) -> cell.CellConfig:
    dims = ctx.inputs[0].dims
    if len(dims) != 2:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 2")
    cfg = cell.check_cell(ctx, _IX, dims[1])
    cell.check_state_shapes(ctx, _IX, cfg, dims[0])
    return cfg


@resolver
def params(ctx: OpContext) -> LstmParams:
    """The resolved LstmParams (Android's LSTMCell::Prepare); INVALID_ARGUMENT naming the input at
    fault, UnknownValue while the activation or a clip is not constant."""
    cfg = _config(ctx)
    act, cell_clip, proj_clip = cell.check_params(ctx, _ACTIVATION, _CELL_CLIP, _PROJ_CLIP)
    n_batch = ctx.inputs[0].dims[0]
    dims = ((n_batch, (3 if cfg.use_cifg else 4) * cfg.n_cell), (n_batch, cfg.n_output),
            (n_batch, cfg.n_cell), (n_batch, cfg.n_output))
    return LstmParams(cell.LstmCellParams(_IX, cfg, act, cell_clip, proj_clip), dims)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(params(ctx).out_dims)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    w = params(ctx).cell.weights(ctx)
    x = ctx.input(0).astype(np.float32)
    outs, h, c, scratch = cell.run_sequence(w, x[None], None, ctx.input(_IX.output_state_in),
                                            ctx.input(_IX.cell_state_in))
    dt = [o.dtype for o in ctx.outputs]
    return [scratch.astype(dt[0]), h.astype(dt[1]), c.astype(dt[2]), outs[0].astype(dt[3])]


register(Op.LSTM, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_omitted_operand=True)
