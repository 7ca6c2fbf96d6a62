"""RNN: one step of a basic recurrent cell (float32, float16).

Inputs: 0 input [batch, input_size], 1 weights [num_units, input_size], 2 recurrent weights
[num_units, num_units], 3 bias [num_units], 4 hidden state in [batch, num_units], 5 activation
(INT32). Outputs: 0 hidden state out and 1 output, both [batch, num_units] and equal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._activation import check_cell_activation
from ._rnn import check_cell_shapes, f32, rnn_step
from .context import OpContext, UnknownValue
from .registry import register, resolver

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


@dataclass(frozen=True)
class RnnParams:
    """RNN / UNIDIRECTIONAL_SEQUENCE_RNN: the cell activation code (0 NONE, 1 RELU, 2 RELU1, 3 RELU6,
    4 TANH, 6 SIGMOID), num_units, the layout of sequences (time_major; True for RNN, one step) and
    the output shapes. One step: h = activation(x @ W^T + bias + h @ R^T), `rnn_step`."""

    activation: int
    num_units: int
    time_major: bool
    out_dims: tuple[tuple[int, ...], ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(6, 2)
    t = ctx.inputs[0].type
    if t not in _FLOATS:
        raise ctx.fail(f"input 0 has type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, t, t, t, t, T.INT32], [t, t])
    for i in (0, 1, 2, 4):
        ctx.check_rank(i, 2)
    ctx.check_rank(3, 1)
    try:
        check_cell_activation(ctx.op.name, ctx.scalar(5), "input 5 (activation)")
    except UnknownValue:
        pass


@resolver
def params(ctx: OpContext) -> RnnParams:
    """The resolved RnnParams of RNN; INVALID_ARGUMENT naming the input at fault, UnknownValue while
    the activation (input 5) is not constant."""
    x = ctx.inputs[0].dims
    if len(x) != 2:
        raise ctx.fail(f"input 0 has rank {len(x)}, expected 2")
    act = check_cell_activation(ctx.op.name, ctx.scalar(5), "input 5 (activation)")
    units = check_cell_shapes(ctx, input_size=x[1], batch=x[0], weights=1, recurrent=2, bias=3, hidden=4)
    return RnnParams(act, units, True, ((x[0], units), (x[0], units)))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(params(ctx).out_dims)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    out = rnn_step(f32(ctx, 0), f32(ctx, 4), f32(ctx, 1), f32(ctx, 2), f32(ctx, 3), params(ctx).activation)
    out = out.astype(ctx.outputs[1].dtype)
    return [out.copy(), out]


register(Op.RNN, validate=_validate, prepare=_prepare, execute=_execute, params=params)
