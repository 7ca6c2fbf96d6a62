"""UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM (float32, float16).

Both run the LSTM cell of `_lstm_cell` over a sequence, time-major [max_time, batch, input] or
batch-major [batch, max_time, input] (the time_major BOOL parameter).

UNIDIRECTIONAL_SEQUENCE_LSTM: 28 inputs (LSTM's 0-19, activation 20, cell clip 21, projection
clip 22, time_major 23, layer norm weights 24-27); 1 output, or 3 with the final output state
and cell state (NNAPI 1.3).

BIDIRECTIONAL_SEQUENCE_LSTM: 61 inputs: input 0, forward cell 1-17, backward cell 18-34,
forward states 35-36, backward states 37-38, auxiliary input 39, forward auxiliary weights 40-43,
backward auxiliary weights 44-47, activation 48, cell clip 49, projection clip 50, merge_outputs
51, time_major 52, forward layer norm weights 53-56, backward 57-60. Outputs: forward output and
backward output (or one output with both concatenated on the last axis when merge_outputs), then
optionally the four final states (forward output/cell, backward output/cell).
Auxiliary input linking as Android: no auxiliary tensors; parallel linking (auxiliary input,
no auxiliary weights: the backward cell reads the auxiliary input instead of the input); cross
linking (auxiliary input times auxiliary weights added in both directions).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from . import _lstm_cell as cell
from .context import OpContext, UnknownValue
from .registry import register, resolver

_FLOAT_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


@dataclass(frozen=True)
class SequenceLstmParams:
    """UNIDIRECTIONAL_SEQUENCE_LSTM: the cell, the layout (time_major: [max_time, batch, input],
    else [batch, max_time, input]), and the output shapes (the sequence output, then the final
    output and cell states when the operation has 3 outputs)."""

    cell: cell.LstmCellParams
    time_major: bool
    out_dims: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class BidirectionalLstmParams:
    """BIDIRECTIONAL_SEQUENCE_LSTM: the forward and backward cells, the auxiliary input's position,
    the linking (parallel: the backward cell reads the auxiliary input instead of input 0; cross:
    the auxiliary input times the auxiliary weights is added in both directions; neither: no
    auxiliary input), the layout, whether outputs are merged on the last axis, and the output shapes
    (then the four final states, forward output / cell, backward output / cell, with 5 or 6 outputs)."""

    forward: cell.LstmCellParams
    backward: cell.LstmCellParams
    aux_input: int
    parallel_linking: bool
    cross_linking: bool
    time_major: bool
    merge_outputs: bool
    out_dims: tuple[tuple[int, ...], ...]


def _tensor_type(ctx: OpContext) -> tuple[T, T]:
    t = ctx.inputs[0].type
    if t not in _FLOAT_TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    return t, (T.FLOAT32 if t == T.TENSOR_FLOAT32 else T.FLOAT16)


def _bool(ctx: OpContext, i: int, what: str) -> bool:
    v = ctx.scalar(i)
    if v is None:
        raise ctx.fail(f"input {i} ({what}) has no value")
    return bool(v)


def _sequence_dims(ctx: OpContext, time_major: bool) -> tuple[int, int, int]:
    dims = ctx.inputs[0].dims
    if len(dims) != 3:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 3")
    return (dims[0], dims[1], dims[2]) if time_major else (dims[1], dims[0], dims[2])


def _to_time_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    x = x.astype(np.float32)
    return x if time_major else np.ascontiguousarray(x.transpose(1, 0, 2))


# --- UNIDIRECTIONAL_SEQUENCE_LSTM ---------------------------------------------------------------

_UNI = cell.CellIndex.standard(first=1, output_state=18, cell_state=19, layer_norm=24)
_UNI_ACT, _UNI_CELL_CLIP, _UNI_PROJ_CLIP, _UNI_TIME_MAJOR = 20, 21, 22, 23


def _uni_validate(ctx: OpContext) -> None:
    ctx.check_counts(28, (1, 3))
    t, scalar = _tensor_type(ctx)
    ctx.check_types([t] * 20 + [T.INT32, scalar, scalar, T.BOOL] + [t] * 4, [t] * len(ctx.outputs))
    ctx.check_rank(0, 3)
    try:
        cell.check_params(ctx, _UNI_ACT, _UNI_CELL_CLIP, _UNI_PROJ_CLIP)
    except UnknownValue:
        pass


def _uni_config(ctx: OpContext) -> tuple[cell.CellConfig, bool, tuple[int, int, int]]:
    time_major = _bool(ctx, _UNI_TIME_MAJOR, "time major")
    max_time, n_batch, n_input = _sequence_dims(ctx, time_major)
    cfg = cell.check_cell(ctx, _UNI, n_input)
    cell.check_state_shapes(ctx, _UNI, cfg, n_batch)
    return cfg, time_major, (max_time, n_batch, n_input)


@resolver
def uni_params(ctx: OpContext) -> SequenceLstmParams:
    """The resolved SequenceLstmParams; INVALID_ARGUMENT naming the input at fault, UnknownValue while
    a scalar parameter is not constant."""
    cfg, time_major, (_, n_batch, _) = _uni_config(ctx)
    act, cell_clip, proj_clip = cell.check_params(ctx, _UNI_ACT, _UNI_CELL_CLIP, _UNI_PROJ_CLIP)
    shapes = [tuple(ctx.inputs[0].dims[:2]) + (cfg.n_output,)]
    if len(ctx.outputs) == 3:
        shapes += [(n_batch, cfg.n_output), (n_batch, cfg.n_cell)]
    return SequenceLstmParams(cell.LstmCellParams(_UNI, cfg, act, cell_clip, proj_clip), time_major,
                              tuple(shapes))


def _uni_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(uni_params(ctx).out_dims)


def _uni_execute(ctx: OpContext) -> list[np.ndarray]:
    p = uni_params(ctx)
    time_major = p.time_major
    w = p.cell.weights(ctx)
    outs, h, c, _ = cell.run_sequence(w, _to_time_major(ctx.input(0), time_major), None,
                                      ctx.input(_UNI.output_state_in), ctx.input(_UNI.cell_state_in))
    out = outs if time_major else outs.transpose(1, 0, 2)
    res = [np.ascontiguousarray(out).astype(ctx.outputs[0].dtype)]
    if len(ctx.outputs) == 3:
        res += [h.astype(ctx.outputs[1].dtype), c.astype(ctx.outputs[2].dtype)]
    return res


register(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, validate=_uni_validate, prepare=_uni_prepare,
         execute=_uni_execute, params=uni_params, allow_omitted_operand=True)


# --- BIDIRECTIONAL_SEQUENCE_LSTM ----------------------------------------------------------------

_FW = cell.CellIndex.standard(first=1, output_state=35, cell_state=36, layer_norm=53, aux=40)
_BW = cell.CellIndex.standard(first=18, output_state=37, cell_state=38, layer_norm=57, aux=44)
_AUX_INPUT = 39
_BI_ACT, _BI_CELL_CLIP, _BI_PROJ_CLIP, _BI_MERGE, _BI_TIME_MAJOR = 48, 49, 50, 51, 52


def _bi_validate(ctx: OpContext) -> None:
    ctx.check_counts(61, (1, 2, 5, 6))
    t, scalar = _tensor_type(ctx)
    ctx.check_types([t] * 48 + [T.INT32, scalar, scalar, T.BOOL, T.BOOL] + [t] * 8,
                    [t] * len(ctx.outputs))
    ctx.check_rank(0, 3)
    try:
        cell.check_params(ctx, _BI_ACT, _BI_CELL_CLIP, _BI_PROJ_CLIP)
        _bi_merge(ctx)
    except UnknownValue:
        pass


def _bi_merge(ctx: OpContext) -> bool:
    merge = _bool(ctx, _BI_MERGE, "merge outputs")
    expected = (1, 5) if merge else (2, 6)
    if len(ctx.outputs) not in expected:
        raise ctx.fail(f"{len(ctx.outputs)} outputs with merge_outputs={merge}, expected "
                       f"{' or '.join(map(str, expected))}")
    return merge


def _has_aux_weights(ctx: OpContext, ix: cell.CellIndex) -> bool:
    return any(ctx.has_input(i) for i in (ix.aux_to_input, ix.aux_to_forget, ix.aux_to_cell,
                                          ix.aux_to_output))


def _bi_config(ctx: OpContext):
    time_major = _bool(ctx, _BI_TIME_MAJOR, "time major")
    merge = _bi_merge(ctx)
    max_time, n_batch, n_input = _sequence_dims(ctx, time_major)
    has_aux = ctx.has_input(_AUX_INPUT)
    fw_aux, bw_aux = _has_aux_weights(ctx, _FW), _has_aux_weights(ctx, _BW)
    if fw_aux != bw_aux:
        raise ctx.fail("forward and backward auxiliary weights must be both present or both omitted")
    if fw_aux and not has_aux:
        raise ctx.fail(f"auxiliary weights are present without the auxiliary input (input {_AUX_INPUT})")
    n_aux = None
    if has_aux:
        aux_dims = ctx.inputs[_AUX_INPUT].dims
        if len(aux_dims) != 3 or tuple(aux_dims[:2]) != tuple(ctx.inputs[0].dims[:2]):
            raise ctx.fail(f"input {_AUX_INPUT} (auxiliary input) has shape {list(aux_dims)}, expected "
                           f"[{ctx.inputs[0].dims[0]}, {ctx.inputs[0].dims[1]}, n_aux_input]")
        n_aux = aux_dims[2]
    parallel = has_aux and not fw_aux
    fw = cell.check_cell(ctx, _FW, n_input, name="forward", n_aux_input=n_aux if fw_aux else None)
    bw = cell.check_cell(ctx, _BW, n_aux if parallel else n_input, name="backward",
                         n_aux_input=n_aux if bw_aux else None)
    for cfg, ix, name in ((fw, _FW, "forward"), (bw, _BW, "backward")):
        if fw_aux:
            missing = [i for i in (ix.aux_to_forget, ix.aux_to_cell, ix.aux_to_output)
                       + (() if cfg.use_cifg else (ix.aux_to_input,)) if not ctx.has_input(i)]
            if missing or (cfg.use_cifg and ctx.has_input(ix.aux_to_input)):
                raise ctx.fail(f"{name} auxiliary weights must be all present or all omitted "
                               "(aux to input weights omitted exactly with CIFG)")
        cell.check_state_shapes(ctx, ix, cfg, n_batch, name)
    return fw, bw, time_major, merge, parallel, fw_aux, (max_time, n_batch)


@resolver
def bi_params(ctx: OpContext) -> BidirectionalLstmParams:
    """The resolved BidirectionalLstmParams (Android's BidirectionalSequenceLSTM::Prepare);
    INVALID_ARGUMENT naming the input at fault, UnknownValue while a scalar parameter is not constant."""
    fw, bw, time_major, merge, parallel, cross, (max_time, n_batch) = _bi_config(ctx)
    act, cell_clip, proj_clip = cell.check_params(ctx, _BI_ACT, _BI_CELL_CLIP, _BI_PROJ_CLIP)
    lead = (max_time, n_batch) if time_major else (n_batch, max_time)
    shapes = [lead + (fw.n_output + bw.n_output,)] if merge else [lead + (fw.n_output,), lead + (bw.n_output,)]
    if len(ctx.outputs) in (5, 6):
        shapes += [(n_batch, fw.n_output), (n_batch, fw.n_cell), (n_batch, bw.n_output), (n_batch, bw.n_cell)]
    return BidirectionalLstmParams(cell.LstmCellParams(_FW, fw, act, cell_clip, proj_clip),
                                   cell.LstmCellParams(_BW, bw, act, cell_clip, proj_clip),
                                   _AUX_INPUT, parallel, cross, time_major, merge, tuple(shapes))


def _bi_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return list(bi_params(ctx).out_dims)


def _bi_execute(ctx: OpContext) -> list[np.ndarray]:
    p = bi_params(ctx)
    time_major, merge, parallel, cross = p.time_major, p.merge_outputs, p.parallel_linking, p.cross_linking
    x = _to_time_major(ctx.input(0), time_major)
    aux = _to_time_major(ctx.input(_AUX_INPUT), time_major) if ctx.has_input(_AUX_INPUT) else None
    w_fw = p.forward.weights(ctx, use_aux=cross)
    w_bw = p.backward.weights(ctx, use_aux=cross)
    fw_out, fw_h, fw_c, _ = cell.run_sequence(w_fw, x, aux if cross else None,
                                              ctx.input(_FW.output_state_in), ctx.input(_FW.cell_state_in))
    bw_out, bw_h, bw_c, _ = cell.run_sequence(w_bw, aux if parallel else x, aux if cross else None,
                                              ctx.input(_BW.output_state_in), ctx.input(_BW.cell_state_in),
                                              forward=False)
    if not time_major:
        fw_out, bw_out = fw_out.transpose(1, 0, 2), bw_out.transpose(1, 0, 2)
    outs = [np.concatenate([fw_out, bw_out], axis=-1)] if merge else [fw_out, bw_out]
    if len(ctx.outputs) in (5, 6):
        outs += [fw_h, fw_c, bw_h, bw_c]
    return [np.ascontiguousarray(o).astype(t.dtype) for o, t in zip(outs, ctx.outputs)]


register(Op.BIDIRECTIONAL_SEQUENCE_LSTM, validate=_bi_validate, prepare=_bi_prepare,
         execute=_bi_execute, params=bi_params, allow_omitted_operand=True)
