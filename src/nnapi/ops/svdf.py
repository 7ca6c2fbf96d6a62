"""SVDF: singular value decomposition filter, one time step (float32, float16).

Inputs: 0 input [batch, input_size], 1 weights_feature [num_filters, input_size], 2 weights_time
[num_filters, memory_size], 3 bias [num_units] (optional), 4 state in [batch, memory_size *
num_filters], 5 rank (INT32, num_filters = num_units * rank), 6 activation (INT32).
Outputs: 0 state out [batch, memory_size * num_filters], 1 output [batch, num_units].

As Android's SVDF::EvalFloat32: the state holds, per batch and filter, the last memory_size
feature activations (oldest first). The newest slot receives input * weights_feature^T, each
filter's memory is dotted with its weights_time row, every `rank` consecutive filters are summed
into one unit (plus bias), the activation applied, and the state shifted one slot left with a
zero entering at the end. float16 is computed in float32.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._activation import apply_cell_activation, check_cell_activation
from .context import OpContext, UnknownValue
from .registry import register

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _rank(ctx: OpContext) -> int:
    rank = ctx.scalar(5)
    if not isinstance(rank, int) or rank <= 0:
        raise ctx.fail(f"input 5 (rank) must be positive, got {rank}")
    return rank


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(7, 2)
    t = ctx.inputs[0].type
    if t not in _FLOATS:
        raise ctx.fail(f"input 0 has type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, t, t, t, t, T.INT32, T.INT32], [t, t])
    for i in (0, 1, 2, 4, 5, 6):
        if not ctx.has_input(i):
            raise ctx.fail(f"required input {i} is omitted")
    for i in (0, 1, 2, 4):
        ctx.check_rank(i, 2)
    ctx.check_rank(3, 1)
    for check in (lambda: _rank(ctx),
                  lambda: check_cell_activation(ctx.op.name, ctx.scalar(6), "input 6 (activation)")):
        try:
            check()
        except UnknownValue:
            pass


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    rank = _rank(ctx)
    check_cell_activation(ctx.op.name, ctx.scalar(6), "input 6 (activation)")
    x, wf, wt, state = (ctx.inputs[i].dims for i in (0, 1, 2, 4))
    for i, d in ((0, x), (1, wf), (2, wt), (4, state)):
        if len(d) != 2:
            raise ctx.fail(f"input {i} has rank {len(d)}, expected 2")
    batch, input_size = x
    num_filters, memory_size = wf[0], wt[1]
    if num_filters % rank:
        raise ctx.fail(f"input 1 (weights_feature) has {num_filters} filters, not a multiple of rank {rank}")
    units = num_filters // rank
    if wf[1] != input_size:
        raise ctx.fail(f"input 1 (weights_feature) has {wf[1]} columns, expected the input size {input_size}")
    if wt[0] != num_filters:
        raise ctx.fail(f"input 2 (weights_time) has {wt[0]} rows, expected num_filters {num_filters}")
    if ctx.has_input(3):
        bias = ctx.inputs[3].dims
        if len(bias) != 1 or bias[0] != units:
            raise ctx.fail(f"input 3 (bias) has shape {bias}, expected ({units},)")
    if state != (batch, memory_size * num_filters):
        raise ctx.fail(f"input 4 (state) has shape {state}, expected ({batch}, {memory_size * num_filters})")
    return [(batch, memory_size * num_filters), (batch, units)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    rank = _rank(ctx)
    activation = ctx.scalar(6)
    x = np.asarray(ctx.input(0), np.float32)
    wf = np.asarray(ctx.input(1), np.float32)
    wt = np.asarray(ctx.input(2), np.float32)
    batch = x.shape[0]
    num_filters, memory_size = wt.shape
    units = num_filters // rank
    state = np.asarray(ctx.input(4), np.float32).reshape(batch, num_filters, memory_size).copy()
    state[:, :, -1] = x @ wf.T                                     # newest feature activations
    per_filter = np.einsum("bfm,fm->bf", state, wt)                # memory dotted with weights_time
    out = per_filter.reshape(batch, units, rank).sum(axis=2)
    if ctx.has_input(3):
        out = out + np.asarray(ctx.input(3), np.float32)
    out = apply_cell_activation(out.astype(np.float32), activation)
    state[:, :, :-1] = state[:, :, 1:].copy()                      # shift left, zero the newest slot
    state[:, :, -1] = 0.0
    dtype = ctx.outputs[0].dtype
    return [state.reshape(batch, num_filters * memory_size).astype(dtype), out.astype(ctx.outputs[1].dtype)]


register(Op.SVDF, validate=_validate, prepare=_prepare, execute=_execute, allow_omitted_operand=True)
