"""WHILE loops that run a GRU cell over a sequence, lowered as one OpenVINO GRUSequence node.

NNAPI has no GRU operation, so a Keras GRU (`reset_after=True`, as TFLite converts it) arrives as a WHILE
whose body is the cell: two FULLY_CONNECTED products (the step's input, the state), their [z, r, h]
thirds, two LOGISTIC gates and a TANH. As a Loop each trip pays its own dispatch, and unrolled it is
~50 nodes a trip (gru_text_f32: 1697), where one GRUSequence (`linear_before_reset`: the same cell)
computes every trip in one kernel.

`find_gru` recognises such a loop by what it computes, not by its form alone:
- its control (`unroll.loop_control`): a trip count known at compile time, a counter that reads trip
  k's input at index k of one sequence input ([T, B, I], time first);
- its carried values: that counter and the others of the control, the state h ([B, H], read by one
  FULLY_CONNECTED), and slots the body only writes (h's new value in another shape);
- the weights of the two products, taken in Keras's gate order;
- then the body itself, run by the ops registry's kernels on random inputs at the first, second and
  last trip, against the GRU cell on those weights: any difference beyond float32 rounding (another
  gate order, an activation, a clip, another use of the counter) and the loop lowers as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .backend import ov, ops

from ...hal import Model, OperandLifeTime as L, OperandType as T, Operation, OperationType as Op, Subgraph
from ...ops import Tensor
from ...validation import ConstantReader
from .lowering import i64
from .unroll import Control, evaluate, loop_control

#: The longest sequence recognised (its trip count is found by running the loop's control: a few kernel
#: calls per trip). Longer than what is unrolled (`unroll.MAX_TRIPS`): one node whatever the length.
MAX_TRIPS = 1024
#: Random draws the body is checked on, and how far it may be from the cell (float32 rounding).
CHECK_DRAWS = 2
ATOL, RTOL = 2e-5, 2e-5


@dataclass(frozen=True)
class GruLoop:
    """A WHILE found to be a GRU over a sequence: its trips, the input positions of the sequence and
    the state, the carried slots that take the new state in their own shape, the control's final
    values by position, and the cell's weights ([3H, I], [3H, H]) and biases ([3H]), gates z, r, h."""

    trips: int
    sequence: int
    state: int
    slots: tuple[int, ...]
    finals: dict[int, np.ndarray]
    w: np.ndarray
    r: np.ndarray
    bw: np.ndarray
    br: np.ndarray

    @property
    def hidden(self) -> int:
        return int(self.r.shape[1])


def find_gru(model: Model, cond_index: int, body_index: int, args: Sequence[Tensor]) -> GruLoop | None:
    """The GRU a WHILE of `model` runs (its condition and body subgraphs, its input tensors: constants
    hold their values), or None (see the module doc)."""
    try:
        return _find(model, cond_index, body_index, args)
    except Exception:  # an input the kernels refuse, a shape that does not fit: not a GRU loop
        return None


def find_gru_op(model: Model, op: Operation) -> GruLoop | None:
    """`find_gru` for a WHILE operation of `model`'s main graph."""
    if op.type != Op.WHILE:
        return None
    main = model.main
    reader = ConstantReader(model)
    cond_index, body_index = (int(reader.value(main.operands[i])) for i in op.inputs[:2])
    args = [Tensor(o.type, tuple(o.dimensions), o.scale, o.zero_point, o.channel_quant,
                   reader.value(o) if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE) else None)
            for o in (main.operands[i] for i in op.inputs[2:])]
    return find_gru(model, cond_index, body_index, args)


def _find(model: Model, cond_index: int, body_index: int, args: Sequence[Tensor]) -> GruLoop | None:
    body = model.referenced[body_index]
    carried = len(body.output_indexes)
    products = [op for op in body.operations if op.type == Op.FULLY_CONNECTED]
    if carried > len(args) or len(products) != 2:
        return None  # (the cheap checks first: counting the trips runs the loop's control)
    used = [body.operands[i].number_of_consumers > 0 for i in body.input_indexes]
    readers = _readers(body)
    # The sequence: the one input-only value the body reads, by a GATHER on axis 0 at a counter.
    read = [p for p in range(carried, len(args)) if used[p]]
    if len(read) != 1:
        return None
    sequence = read[0]
    seq_dims = tuple(args[sequence].dims)
    gathers = readers.get(body.input_indexes[sequence], [])
    if args[sequence].type != T.TENSOR_FLOAT32 or len(seq_dims) != 3 or len(gathers) != 1 \
            or gathers[0].type != Op.GATHER:
        return None
    control = loop_control(model, cond_index, body_index, [a.value for a in args], MAX_TRIPS)
    if control is None or not 1 <= control.trips <= seq_dims[0]:
        return None
    counter = _position(body, gathers[0].inputs[2])
    if counter not in control.positions or any(
            np.asarray(state[counter]).reshape(-1).tolist() != [k] for k, state in enumerate(control.states[:-1])):
        return None
    # The carried values outside the control: the state (read) and slots (only written).
    others = [p for p in range(carried) if p not in control.positions]
    states = [p for p in others if used[p]]
    slots = tuple(p for p in others if not used[p])
    if len(states) != 1:
        return None
    state = states[0]
    batch, hidden = (int(d) for d in args[state].dims)
    if args[state].type != T.TENSOR_FLOAT32 or seq_dims[1] != batch:
        return None
    if any(args[p].type != T.TENSOR_FLOAT32 or int(np.prod(args[p].dims)) != batch * hidden for p in slots):
        return None
    reader = ConstantReader(model)
    on_state = [op for op in products if op.inputs[0] == body.input_indexes[state]]
    on_input = [op for op in products if op not in on_state]
    if len(on_state) != 1 or len(on_input) != 1:
        return None
    r, br = _weights(body, reader, on_state[0], hidden)
    w, bw = _weights(body, reader, on_input[0], hidden)
    if r.shape[1] != hidden or w.shape[1] != seq_dims[2]:
        return None
    found = GruLoop(control.trips, sequence, state, slots, dict(control.states[-1]), w, r, bw, br)
    return found if _computes_the_cell(body, reader, found, control, args) else None


def _readers(sub: Subgraph) -> dict[int, list[Operation]]:
    """The operations that read each operand of `sub`."""
    readers: dict[int, list[Operation]] = {}
    for op in sub.operations:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    return readers


def _position(sub: Subgraph, operand: int) -> int | None:
    """Which input of `sub` `operand` is (None: not an input)."""
    return sub.input_indexes.index(operand) if operand in sub.input_indexes else None


def _weights(sub: Subgraph, reader: ConstantReader, fc: Operation, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """A FULLY_CONNECTED's constant weights [3H, in] and bias [3H] (zeros when omitted)."""
    weights = reader.value(sub.operands[fc.inputs[1]])
    bias_operand = sub.operands[fc.inputs[2]]
    bias = None if bias_operand.lifetime == L.NO_VALUE else reader.value(bias_operand)
    if weights is None or weights.ndim != 2 or weights.shape[0] != 3 * hidden:
        raise ValueError("not a GRU product")
    bias = np.zeros(3 * hidden, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(3 * hidden)
    return np.asarray(weights, np.float32), bias


def cell(found: GruLoop, x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """One step of the GRU cell (Keras reset_after, OpenVINO linear_before_reset), in float64."""
    H = found.hidden
    gx = x.astype(np.float64) @ found.w.T.astype(np.float64) + found.bw
    gh = h.astype(np.float64) @ found.r.T.astype(np.float64) + found.br
    z = 1 / (1 + np.exp(-(gx[:, :H] + gh[:, :H])))
    reset = 1 / (1 + np.exp(-(gx[:, H:2 * H] + gh[:, H:2 * H])))
    n = np.tanh(gx[:, 2 * H:] + reset * gh[:, 2 * H:])
    return z * h + (1 - z) * n


def _computes_the_cell(body: Subgraph, reader: ConstantReader, found: GruLoop, control: Control,
                       args: Sequence[Tensor]) -> bool:
    """Whether the body, run by the kernels at the first, second and last trip on random values, gives
    the cell's new state in the state and in every slot (see the module doc)."""
    rng = np.random.default_rng(0)
    seq_dims = tuple(args[found.sequence].dims)
    batch = int(args[found.state].dims[0])
    for draw in range(CHECK_DRAWS):
        scale = 1.0 + 2.0 * draw  # the second draw saturates the gates
        sequence = (rng.standard_normal(seq_dims) * scale).astype(np.float32)
        for k in sorted({0, min(1, found.trips - 1), found.trips - 1}):
            h = rng.uniform(-1, 1, (batch, found.hidden)).astype(np.float32)
            values: dict[int, np.ndarray] = {}
            for p, i in enumerate(body.input_indexes):
                if p in control.positions:
                    values[i] = np.asarray(control.states[k][p])
                elif p == found.sequence:
                    values[i] = sequence
                elif p == found.state:
                    values[i] = h
                elif args[p].value is not None:
                    values[i] = np.asarray(args[p].value)
                else:  # (a slot, or an input-only value the body does not read)
                    values[i] = np.zeros(tuple(args[p].dims), np.float32)
            got = evaluate(body, body.operations, values, reader)
            want = cell(found, sequence[k], h)
            for p in (found.state, *found.slots):
                out = np.asarray(got[body.output_indexes[p]], np.float64).reshape(want.shape)
                if not np.all(np.abs(out - want) <= ATOL + RTOL * np.abs(want)):
                    return False
    return True


def lower_gru(found: GruLoop, args: Sequence, outputs: Sequence[Tensor]) -> list[ov.Output]:
    """The WHILE's outputs (`outputs`: their tensors) computed by one GRUSequence over the lowered
    inputs `args` (`lowering.Value`s)."""
    H = found.hidden
    seq = args[found.sequence].node  # [T', B, I], time first
    if args[found.sequence].shape[0] != found.trips:
        seq = ops.slice(seq, i64([0]), i64([found.trips]), i64([1]), i64([0])).output(0)
    batch = args[found.sequence].shape[1]
    x = ops.transpose(seq, i64([1, 0, 2])).output(0)  # [B, T, I]
    h0 = ops.reshape(args[found.state].node, i64([batch, 1, H]), special_zero=False).output(0)
    lengths = ops.constant(np.full(batch, found.trips, np.int32)).output(0)
    bias = np.concatenate([found.bw[:2 * H] + found.br[:2 * H], found.bw[2 * H:], found.br[2 * H:]])
    # (copied constants: the derived arrays live no longer than this call)
    gru = ops.gru_sequence(x, h0, lengths, ops.constant(np.ascontiguousarray(found.w[None])),
                           ops.constant(np.ascontiguousarray(found.r[None])),
                           ops.constant(np.ascontiguousarray(bias[None], np.float32)), H, "forward",
                           linear_before_reset=True)
    last = gru.output(1)  # [B, 1, H]
    results = []
    for p, tensor in enumerate(outputs):
        if p == found.state or p in found.slots:
            results.append(ops.reshape(last, i64(list(tensor.dims)), special_zero=False).output(0))
        elif p in found.finals:
            results.append(ops.constant(np.asarray(found.finals[p])).output(0))
        else:
            raise ValueError(f"WHILE output {p} is neither the state, a slot nor the control")
    return results


__all__ = ["GruLoop", "cell", "find_gru", "find_gru_op", "lower_gru"]
