"""UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN (float32, float16).

Both run the RNN cell of `_rnn.py` over time. Inputs are batch-major [batch, max_time, size]
unless the time-major parameter is set ([max_time, batch, size]); outputs follow the same layout.

UNIDIRECTIONAL: inputs 0 input, 1 weights, 2 recurrent weights, 3 bias, 4 hidden state,
5 activation (INT32), 6 time_major (INT32, 0 or 1); outputs 0 output [.., num_units] and,
optionally (NNAPI 1.3), 1 the final hidden state [batch, num_units].

BIDIRECTIONAL: inputs 0 input, 1-4 forward weights / recurrent weights / bias / hidden state,
5-8 the same for the backward cell, 9 aux input, 10 forward aux weights, 11 backward aux
weights (all three optional), 12 activation (INT32), 13 time_major (BOOL), 14 merge_outputs
(BOOL). Aux tensors either all omitted, aux input alone (parallel linking: the backward cell
reads the aux input instead of the input), or all three (cross linking: each cell adds
aux_input * aux_weights^T). Outputs: forward output, backward output unless merged (merged: one
output [.., fw_units + bw_units], forward first), then optionally the final forward and
backward hidden states (the backward state is the one after time step 0).
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._activation import check_cell_activation
from ._rnn import check_cell_shapes, f32, rnn_step
from .context import OpContext, UnknownValue
from .registry import register, resolver
from .rnn import RnnParams

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _float_type(ctx: OpContext) -> T:
    t = ctx.inputs[0].type
    if t not in _FLOATS:
        raise ctx.fail(f"input 0 has type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    return t


def _time_major_dims(ctx: OpContext, time_major: bool, dims: tuple[int, ...], what: str) -> tuple[int, int, int]:
    """(max_time, batch, size) of a rank-3 sequence tensor."""
    if len(dims) != 3:
        raise ctx.fail(f"{what} has rank {len(dims)}, expected 3")
    return (dims[0], dims[1], dims[2]) if time_major else (dims[1], dims[0], dims[2])


def _layout(time_major: bool, max_time: int, batch: int, size: int) -> tuple[int, int, int]:
    return (max_time, batch, size) if time_major else (batch, max_time, size)


def _to_time_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    return x if time_major else np.swapaxes(x, 0, 1)


# --- UNIDIRECTIONAL_SEQUENCE_RNN ------------------------------------------------------------------
def _uni_time_major(ctx: OpContext) -> bool:
    tm = ctx.scalar(6)
    if tm not in (0, 1):
        raise ctx.fail(f"input 6 (time_major) must be 0 or 1, got {tm}")
    return bool(tm)


def _uni_validate(ctx: OpContext) -> None:
    ctx.check_counts(7, (1, 2))
    t = _float_type(ctx)
    ctx.check_types([t, t, t, t, t, T.INT32, T.INT32], [t, t])
    ctx.check_rank(0, 3)
    try:
        check_cell_activation(ctx.op.name, ctx.scalar(5), "input 5 (activation)")
    except UnknownValue:
        pass
    try:
        _uni_time_major(ctx)
    except UnknownValue:
        pass


@resolver
def uni_params(ctx: OpContext) -> RnnParams:
    """RnnParams of UNIDIRECTIONAL_SEQUENCE_RNN (time_major: input 6); INVALID_ARGUMENT naming the
    input at fault, UnknownValue while a scalar is not constant."""
    act = check_cell_activation(ctx.op.name, ctx.scalar(5), "input 5 (activation)")
    tm = _uni_time_major(ctx)
    max_time, batch, input_size = _time_major_dims(ctx, tm, ctx.inputs[0].dims, "input 0")
    units = check_cell_shapes(ctx, input_size=input_size, batch=batch, weights=1, recurrent=2, bias=3, hidden=4)
    shapes = [_layout(tm, max_time, batch, units)]
    if len(ctx.outputs) == 2:
        shapes.append((batch, units))
    return RnnParams(act, units, tm, tuple(shapes))


def _uni_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(uni_params(ctx).out_dims)


def _uni_execute(ctx: OpContext) -> list[np.ndarray]:
    p = uni_params(ctx)
    tm, act = p.time_major, p.activation
    x = _to_time_major(f32(ctx, 0), tm)
    w, r, b, h = f32(ctx, 1), f32(ctx, 2), f32(ctx, 3), f32(ctx, 4)
    steps = []
    for t in range(x.shape[0]):
        h = rnn_step(x[t], h, w, r, b, act)
        steps.append(h)
    out = np.stack(steps) if steps else np.zeros((0, x.shape[1], w.shape[0]), np.float32)
    dtype = ctx.outputs[0].dtype
    results = [np.ascontiguousarray(_to_time_major(out, tm)).astype(dtype)]
    if len(ctx.outputs) == 2:
        results.append(h.astype(dtype))
    return results


register(Op.UNIDIRECTIONAL_SEQUENCE_RNN, validate=_uni_validate, prepare=_uni_prepare, execute=_uni_execute,
         params=uni_params)


# --- BIDIRECTIONAL_SEQUENCE_RNN -------------------------------------------------------------------
_NO_LINKING, _PARALLEL, _CROSS = "none", "parallel", "cross"


@dataclass(frozen=True)
class BidirectionalRnnParams:
    """BIDIRECTIONAL_SEQUENCE_RNN: the cell activation code, the layout (time_major), whether the
    outputs are merged on the last axis, the auxiliary linking ("none"; "parallel": the backward cell
    reads the auxiliary input (input 9) instead of input 0; "cross": the auxiliary input times the
    auxiliary weights (inputs 10, 11) is added in both directions), num_units of each direction and
    the output shapes. Forward weights / recurrent weights / bias / hidden state are inputs 1-4,
    backward 5-8."""

    activation: int
    time_major: bool
    merge_outputs: bool
    linking: str
    fw_units: int
    bw_units: int
    out_dims: tuple[tuple[int, ...], ...]


def _linking(ctx: OpContext) -> str:
    aux, fw_aux, bw_aux = (ctx.has_input(i) for i in (9, 10, 11))
    if not aux and not fw_aux and not bw_aux:
        return _NO_LINKING
    if aux and not fw_aux and not bw_aux:
        return _PARALLEL
    if aux and fw_aux and bw_aux:
        return _CROSS
    raise ctx.fail("unsupported auxiliary tensors: inputs 9 (aux input), 10 and 11 (aux weights) must be "
                   "all omitted, aux input alone, or all present")


def _bi_merge(ctx: OpContext) -> bool:
    merge = bool(ctx.scalar(14))
    n = len(ctx.outputs)
    if merge and n not in (1, 3):
        raise ctx.fail(f"merge_outputs (input 14) is true: expected 1 or 3 outputs, got {n}")
    if not merge and n not in (2, 4):
        raise ctx.fail(f"merge_outputs (input 14) is false: expected 2 or 4 outputs, got {n}")
    return merge


def _bi_validate(ctx: OpContext) -> None:
    ctx.check_counts(15, (1, 2, 3, 4))
    t = _float_type(ctx)
    ctx.check_types([t] * 12 + [T.INT32, T.BOOL, T.BOOL], [t] * len(ctx.outputs))
    for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14):
        if not ctx.has_input(i):
            raise ctx.fail(f"required input {i} is omitted")
    ctx.check_rank(0, 3)
    _linking(ctx)
    try:
        check_cell_activation(ctx.op.name, ctx.scalar(12), "input 12 (activation)")
    except UnknownValue:
        pass
    try:
        _bi_merge(ctx)
    except UnknownValue:
        pass


def _bi_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(bi_params(ctx).out_dims)


@resolver
def bi_params(ctx: OpContext) -> BidirectionalRnnParams:
    """The resolved BidirectionalRnnParams (Android's prepare); INVALID_ARGUMENT naming the input at
    fault, UnknownValue while a scalar is not constant. At compile time an auxiliary input fed by the
    model may still be omitted by the request, so its linking is checked only at execution."""
    act = check_cell_activation(ctx.op.name, ctx.scalar(12), "input 12 (activation)")
    merge = _bi_merge(ctx)
    tm = bool(ctx.scalar(13))
    linking = _linking(ctx)
    max_time, batch, input_size = _time_major_dims(ctx, tm, ctx.inputs[0].dims, "input 0")
    fw = check_cell_shapes(ctx, input_size=input_size, batch=batch, weights=1, recurrent=2, bias=3,
                           hidden=4, prefix="forward ")
    # At compile time an aux tensor that is a model input may still be omitted by the request,
    # so the linking mode (and the checks depending on it) is only certain at execution.
    unsure = ctx.compile_time and linking != _NO_LINKING
    bw_input_size = None if unsure else input_size
    if linking != _NO_LINKING and not unsure:
        aux = ctx.inputs[9].dims
        if len(aux) != 3:
            raise ctx.fail(f"input 9 (aux input) has rank {len(aux)}, expected 3")
        if aux[:2] != ctx.inputs[0].dims[:2]:
            raise ctx.fail(f"input 9 (aux input) has shape {aux}, its first two dimensions must match "
                           f"input 0 {ctx.inputs[0].dims}")
        if linking == _PARALLEL:
            bw_input_size = aux[2]
    bw = check_cell_shapes(ctx, input_size=bw_input_size, batch=batch, weights=5, recurrent=6, bias=7,
                           hidden=8, prefix="backward ")
    if linking == _CROSS and not unsure:
        aux_size = ctx.inputs[9].dims[2]
        for i, units, what in ((10, fw, "forward"), (11, bw, "backward")):
            if ctx.inputs[i].dims != (units, aux_size):
                raise ctx.fail(f"input {i} ({what} aux weights) has shape {ctx.inputs[i].dims}, "
                               f"expected ({units}, {aux_size})")
    shapes = [_layout(tm, max_time, batch, fw + bw if merge else fw)]
    if not merge:
        shapes.append(_layout(tm, max_time, batch, bw))
    if len(ctx.outputs) in (3, 4):
        shapes += [(batch, fw), (batch, bw)]
    return BidirectionalRnnParams(act, tm, merge, linking, fw, bw, tuple(shapes))


def _bi_execute(ctx: OpContext) -> list[np.ndarray]:
    p = bi_params(ctx)
    act, tm, merge, linking = p.activation, p.time_major, p.merge_outputs, p.linking
    x = _to_time_major(f32(ctx, 0), tm)
    aux = _to_time_major(f32(ctx, 9), tm) if linking != _NO_LINKING else None
    fw_aux_w = f32(ctx, 10) if linking == _CROSS else None
    bw_aux_w = f32(ctx, 11) if linking == _CROSS else None
    bw_x = aux if linking == _PARALLEL else x
    cross_aux = aux if linking == _CROSS else None
    max_time, batch = x.shape[0], x.shape[1]

    fw_w, fw_r, fw_b, fw_h = f32(ctx, 1), f32(ctx, 2), f32(ctx, 3), f32(ctx, 4)
    bw_w, bw_r, bw_b, bw_h = f32(ctx, 5), f32(ctx, 6), f32(ctx, 7), f32(ctx, 8)
    fw_out = np.zeros((max_time, batch, fw_w.shape[0]), np.float32)
    bw_out = np.zeros((max_time, batch, bw_w.shape[0]), np.float32)
    for t in range(max_time):
        fw_h = rnn_step(x[t], fw_h, fw_w, fw_r, fw_b, act,
                        None if cross_aux is None else cross_aux[t], fw_aux_w)
        fw_out[t] = fw_h
    for t in reversed(range(max_time)):
        bw_h = rnn_step(bw_x[t], bw_h, bw_w, bw_r, bw_b, act,
                        None if cross_aux is None else cross_aux[t], bw_aux_w)
        bw_out[t] = bw_h

    dtype = ctx.outputs[0].dtype
    seq = [np.concatenate([fw_out, bw_out], axis=2)] if merge else [fw_out, bw_out]
    results = [np.ascontiguousarray(_to_time_major(s, tm)).astype(dtype) for s in seq]
    if len(ctx.outputs) in (3, 4):
        results += [fw_h.astype(dtype), bw_h.astype(dtype)]
    return results


register(Op.BIDIRECTIONAL_SEQUENCE_RNN, validate=_bi_validate, prepare=_bi_prepare, execute=_bi_execute,
         params=bi_params, allow_omitted_operand=True)
