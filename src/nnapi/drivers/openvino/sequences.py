"""Unrolled integer LSTM sequences, found in a graph and lowered as one sequence each.

NNAPI has no integer sequence LSTM, so a full-integer one (TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM, as
the importer writes it) is a chain: a SPLIT of the input into its time steps, one QUANTIZED_LSTM per
step, each taking the output state and cell state of the one before and every other input from the
first, and a CONCATENATION of their outputs along the SPLIT's axis. Lowered operation by operation,
each step is ~25 nodes that a cached start imports again (lstm_text_int8: two such chains of 32
steps, 0.56 s of its start). `find_chains` finds the chains whose intermediate values nothing else
reads; `lower_chain` lowers one as `rules.recurrent.quantized_lstm_sequence`, whose steps run in
TensorIterator blocks. The values every operation of the chain computes are the ones its steps
would give: only the nodes differ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .backend import ops

from ...hal import OperationType as Op, Subgraph
from ...ops import OpContext
from .lowering import Unsupported, Value, fake_quantize, i64, out
from .rules.recurrent import UNROLLED_STEPS, quantized_lstm_sequence

_PREV_OUT, _PREV_CELL = 18, 19


@dataclass(frozen=True)
class Chain:
    """Operations `split`, `split + 1` .. `split + steps` (the QUANTIZED_LSTM steps) and `concat`
    (`split + steps + 1`) of a subgraph."""

    split: int
    steps: int

    @property
    def concat(self) -> int:
        return self.split + self.steps + 1


def find_chains(sub: Subgraph) -> dict[int, Chain]:
    """The chains of `sub` of more than `UNROLLED_STEPS` steps, by the index of their SPLIT."""
    outputs = set(sub.output_indexes)
    consumers = [o.number_of_consumers + (i in outputs) for i, o in enumerate(sub.operands)]  # (validated)
    chains, n = {}, 0
    while n < len(sub.operations):
        chain = _chain_at(sub, n, consumers)
        if chain is not None:
            chains[n] = chain
            n = chain.concat + 1
        else:
            n += 1
    return chains


def _chain_at(sub: Subgraph, n: int, consumers: list[int]) -> Chain | None:
    ops_ = sub.operations
    split = ops_[n]
    if split.type != Op.SPLIT:
        return None
    pieces = split.outputs
    steps = len(pieces)
    if steps <= UNROLLED_STEPS or n + steps + 1 >= len(ops_):
        return None
    cells = ops_[n + 1:n + 1 + steps]
    concat = ops_[n + 1 + steps]
    first = cells[0]
    if concat.type != Op.CONCATENATION or len(concat.inputs) != steps + 1:
        return None
    for k, cell in enumerate(cells):
        if cell.type != Op.QUANTIZED_LSTM or cell.inputs[0] != pieces[k] or concat.inputs[k] != cell.outputs[2]:
            return None
        if consumers[pieces[k]] != 1 or consumers[cell.outputs[2]] != 1:
            return None
        if any(a != b for j, (a, b) in enumerate(zip(cell.inputs, first.inputs))
               if j not in (0, _PREV_OUT, _PREV_CELL)):
            return None
        before = cells[k - 1].outputs if k else None
        if before is not None and (cell.inputs[_PREV_OUT], cell.inputs[_PREV_CELL]) != (before[0], before[1]):
            return None
        if k < steps - 1 and (consumers[cell.outputs[0]] != 1 or consumers[cell.outputs[1]] != 1):
            return None
    return Chain(n, steps)


def lower_chain(sub: Subgraph, chain: Chain, context: Callable[[int], OpContext],
                inputs: Callable[..., list[Value | None]], values: dict[int, Value],
                unrounded: dict[int, tuple] | None) -> bool:
    """Lower `chain` into `values` (every operand it computes that is read later: the output sequence,
    and the last step's states); `context(n)` is operation n's context, `inputs(n, context)` its inputs.
    False, nothing lowered, for a chain of another form (its operations are then lowered one by one)."""
    split_ctx, cell_ctx, concat_ctx = context(chain.split), context(chain.split + 1), context(chain.concat)
    axis = int(split_ctx.inputs[1].value)
    source = inputs(chain.split, split_ctx)[0]
    if source is None or source.rank != 2 or axis not in (0, 1) or int(concat_ctx.inputs[-1].value) != axis:
        return False
    rows, width = source.shape
    steps = chain.steps
    piece_rows = cell_ctx.inputs[0].dims[0]
    # The sequence time-major [T, B, I]: rows of the steps one after another (axis 0), or each row
    # holding every step's inputs side by side (axis 1).
    if axis == 0:
        sequence = out(ops.reshape(source.node, i64([steps, rows // steps, width]), False))
    else:
        sequence = out(ops.transpose(ops.reshape(source.node, i64([rows, steps, width // steps]), False),
                                     i64([1, 0, 2])))
    if tuple(int(d) for d in sequence.get_partial_shape().to_shape())[1] != piece_rows:
        return False
    xs = inputs(chain.split + 1, cell_ctx, (0,))  # (its input is the sequence's first step)
    try:
        seq, h, c = quantized_lstm_sequence(cell_ctx, xs, sequence)  # [T, B, O]
    except Unsupported:
        return False
    n_out = int(seq.get_partial_shape().to_shape()[2])
    if axis == 0:
        joined = out(ops.reshape(seq, i64([steps * piece_rows, n_out]), False))
    else:
        joined = out(ops.reshape(ops.transpose(seq, i64([1, 0, 2])), i64([piece_rows, steps * n_out]), False))
    t_out, t_step = concat_ctx.outputs[0], cell_ctx.outputs[2]
    same_grid = (t_out.type, t_out.scale, t_out.zero_point) == (t_step.type, t_step.scale, t_step.zero_point)
    concat_out = sub.operations[chain.concat].outputs[0]
    if not same_grid:
        if unrounded is not None:
            unrounded[concat_out] = (joined, None)
        joined = fake_quantize(joined, t_out)
    values[concat_out] = Value(joined)
    last = sub.operations[chain.concat - 1]
    values[last.outputs[0]], values[last.outputs[1]] = Value(h), Value(c)
    return True
