"""WHILE loops with a trip count known at compile time, unrolled into the main graph before lowering.

An OpenVINO Loop pays a dispatch of its body per iteration and fuses nothing across them; a short loop
whose count follows from constants alone (a counter from a constant, stepped by constants, against a
constant bound, as converted Keras RNNs have) runs faster as straight-line code. `unroll_loops`
finds the values the condition depends on, follows them through the body back to the loop's
inputs, and when all of them start as constants, runs just those operations (the ops registry's
kernels) to count the iterations; it then replaces the WHILE with that many copies of its body.
Anything else (a count that depends on the inputs, nested control flow, more than `MAX_TRIPS`
iterations or `MAX_OPERATIONS` copied operations) keeps its loop. The result is the same model with
the same inputs and outputs: executions compute exactly what the loop computes.

A long loop unrolled whole is many nodes that every cached start imports again (gru_text_f32's 32
trips: 1700 nodes). A loop of more than `UNROLLED_TRIPS` trips whose count a block of 8 to 16 trips
divides stays a loop, of a body that is that block of copies (`_repeated`): half the sequence per
iteration where it can, since each iteration of an OpenVINO Loop costs 30-50 us here (gru_text_f32:
two iterations run as fast as the 32 copies, four 25% slower). Its condition, read
after each block, reads what the loop's own condition reads after those trips: true before the
count, false at it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from ...hal import (DataLocation, Model, Operand, OperandLifeTime as L, OperandType, Operation, OperationType as Op,
                   Subgraph)
from ...ops import OpContext, Tensor, find_operation
from ...validation import ConstantReader
from .lowering import LOOPS

#: The most iterations a loop is unrolled for, and the most operations its copies may add.
MAX_TRIPS = 64
MAX_OPERATIONS = 4096
#: A loop of at most this many trips is unrolled whole; a longer one, in blocks of trips.
UNROLLED_TRIPS = 8
BLOCK_TRIPS = (8, 16)
_CONSTANT = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)


class _Keep(ValueError):
    """This loop stays a loop."""


@dataclasses.dataclass(frozen=True)
class Control:
    """A WHILE's control (`loop_control`): the input positions its condition depends on, through the
    body's updates, and their values before each trip and after the last (`states[k]`: before trip k)."""

    positions: frozenset[int]
    states: tuple[dict[int, np.ndarray], ...]

    @property
    def trips(self) -> int:
        return len(self.states) - 1


def loop_control(model: Model, cond_index: int, body_index: int, initial: Sequence[np.ndarray | None],
                 max_trips: int = MAX_TRIPS) -> Control | None:
    """The control of a WHILE on subgraphs `cond_index` and `body_index` of `model` whose inputs start as
    `initial` (None: not a constant), when its trip count follows from constants alone; else None (a
    count that depends on the inputs, nested control flow, more than `max_trips` trips)."""
    cond, body = model.referenced[cond_index], model.referenced[body_index]
    carried = len(body.output_indexes)  # input-output and state-only values; the rest are input-only
    if len(cond.output_indexes) != 1 or carried > len(initial):
        return None
    if any(o.lifetime == L.SUBGRAPH for sub in (cond, body) for o in sub.operands):
        return None  # nested control flow
    # The loop's control: the positions the condition reads, closed under the body's updates.
    cond_ops, control = _slice(cond, list(cond.output_indexes))
    while True:
        wanted = [body.output_indexes[p] for p in sorted(control) if p < carried]
        body_ops, more = _slice(body, wanted)
        if more <= control:
            break
        control |= more
    if any(initial[p] is None for p in control):
        return None  # the count depends on the inputs
    try:
        states = _count(cond, body, cond_ops, body_ops, control, carried, {p: initial[p] for p in control},
                        ConstantReader(model), max_trips)
    except _Keep:
        return None
    return Control(frozenset(control), tuple(states))


def unroll_loops(model: Model, keep: Callable[[Operation], bool] | None = None) -> Model:
    """`model` with every WHILE of its main graph whose trip count is known at compile time unrolled,
    except those `keep` says stay (the same model object when there is none)."""
    main = model.main
    if not any(op.type == Op.WHILE for op in main.operations):
        return model
    reader = ConstantReader(model)
    operands = [dataclasses.replace(o) for o in main.operands]
    operations: list[Operation] = []
    referenced = list(model.referenced)
    changed = False
    for op in main.operations:
        if op.type == Op.WHILE and not (keep is not None and keep(op)):
            try:
                copies = _unrolled(model, reader, op, operands, referenced)
                operations.extend(copies)
                changed = True
                continue
            except _Keep:
                pass
            except Exception:  # an input the kernels refuse: leave the loop to the driver's own checks
                pass
        operations.append(op)
    if not changed:
        return model
    counts = [0] * len(operands)
    for op in operations:
        for i in op.inputs:
            counts[i] += 1
    for operand, n in zip(operands, counts):
        operand.number_of_consumers = n
    return dataclasses.replace(model, main=dataclasses.replace(main, operands=operands, operations=operations),
                               referenced=referenced)


def _block(trips: int) -> int:
    """The trips of one block of a loop of `trips` (0: unroll it whole, as `lowering.LOOPS`
    "unrolled" asks): a divisor of `trips` within `BLOCK_TRIPS`, the nearest to half of them."""
    if trips <= UNROLLED_TRIPS or LOOPS.get() == "unrolled":
        return 0
    low, high = BLOCK_TRIPS
    divisors = [k for k in range(low, high + 1) if trips % k == 0 and k < trips]
    return min(divisors, key=lambda k: abs(k - trips / 2)) if divisors else 0


def _unrolled(model: Model, reader: ConstantReader, op: Operation, operands: list[Operand],
              referenced: list[Subgraph]) -> list[Operation]:
    """The operations replacing one WHILE (appending the operands and the subgraphs they need), or
    _Keep."""
    main = model.main
    cond_index, body_index = (int(reader.value(main.operands[i])) for i in op.inputs[:2])
    body = model.referenced[body_index]
    args = list(op.inputs[2:])
    carried = len(body.output_indexes)  # input-output and state-only values; the rest are input-only
    if not len(op.outputs) <= carried <= len(args):
        raise _Keep
    initial = [reader.value(main.operands[a]) if main.operands[a].lifetime in _CONSTANT else None for a in args]
    control = loop_control(model, cond_index, body_index, initial)
    if control is None:
        raise _Keep
    trips = control.trips
    if trips == 0 or trips * len(body.operations) > MAX_OPERATIONS:
        raise _Keep
    finals = [body.output_indexes[p] for p in range(len(op.outputs))]
    if len(set(finals)) != len(finals) or any(body.operands[i].lifetime != L.SUBGRAPH_OUTPUT for i in finals):
        raise _Keep  # an output passed straight through (or a constant): the loop keeps its own operands
    block = _block(trips)
    outs = body.output_indexes
    if block and len(set(outs)) == len(outs) and all(body.operands[i].lifetime == L.SUBGRAPH_OUTPUT for i in outs):
        referenced.append(_repeated(body, carried, block))
        blocks = _add(operands, Operand(OperandType.SUBGRAPH, lifetime=L.SUBGRAPH,
                                        location=DataLocation(0, len(referenced) - 1, 0)))
        return [Operation(Op.WHILE, (op.inputs[0], blocks, *op.inputs[2:]), op.outputs)]
    copies, _ = _copies(body, carried, args, trips, operands, last=dict(zip(finals, op.outputs)))
    return copies


def _copies(body: Subgraph, carried: int, args: list[int], times: int, operands: list[Operand], *,
            last: dict[int, int] | None = None, keep_outputs: bool = False) -> tuple[list[Operation], list[int]]:
    """`times` copies of `body`'s operations, the first on `args`, each next one on the carried outputs
    of the one before (input-only values stay `args`), their operands appended to `operands` (the
    body's constants once): the operations and the last copy's outputs. The last copy writes the
    operands `last` maps body operands to; with `keep_outputs` its outputs stay subgraph outputs."""
    copies: list[Operation] = []
    shared: dict[int, int] = {}
    mapping: dict[int, int] = {}
    for trip in range(times):
        final = trip == times - 1
        mapping = dict(zip(body.input_indexes, args))
        if final and last:
            mapping.update(last)
        for step in body.operations:
            for i in (*step.inputs, *step.outputs):
                if i in mapping:
                    continue
                operand = body.operands[i]
                if operand.lifetime in (*_CONSTANT, L.NO_VALUE):
                    if i not in shared:
                        shared[i] = _add(operands, dataclasses.replace(operand, number_of_consumers=0))
                    mapping[i] = shared[i]
                else:
                    kept = final and keep_outputs and operand.lifetime == L.SUBGRAPH_OUTPUT
                    mapping[i] = _add(operands, dataclasses.replace(
                        operand, number_of_consumers=0, lifetime=L.SUBGRAPH_OUTPUT if kept else L.TEMPORARY_VARIABLE))
            copies.append(Operation(step.type, tuple(mapping[i] for i in step.inputs),
                                    tuple(mapping[i] for i in step.outputs)))
        args = [mapping[body.output_indexes[p]] if p < carried else a for p, a in enumerate(args)]
    return copies, [mapping[i] for i in body.output_indexes]


def _repeated(body: Subgraph, carried: int, times: int) -> Subgraph:
    """`body` `times` over, as one subgraph of the same inputs and outputs (`_copies`)."""
    operands: list[Operand] = []
    inputs = [_add(operands, dataclasses.replace(body.operands[i], number_of_consumers=0)) for i in body.input_indexes]
    operations, outputs = _copies(body, carried, inputs, times, operands, keep_outputs=True)
    for step in operations:
        for i in step.inputs:
            operands[i].number_of_consumers += 1
    return Subgraph(operands, operations, tuple(inputs), tuple(outputs))


def _add(operands: list[Operand], operand: Operand) -> int:
    operands.append(operand)
    return len(operands) - 1


def _slice(sub: Subgraph, wanted: Sequence[int]) -> tuple[list[Operation], set[int]]:
    """The operations of `sub` that `wanted` operands depend on (in order) and the input positions
    they read."""
    needed = set(wanted)
    ops: list[Operation] = []
    for step in reversed(sub.operations):
        if needed.intersection(step.outputs):
            ops.append(step)
            needed.update(step.inputs)
    ops.reverse()
    return ops, {p for p, i in enumerate(sub.input_indexes) if i in needed}


def _count(cond: Subgraph, body: Subgraph, cond_ops: list[Operation], body_ops: list[Operation], control: set[int],
           carried: int, state: dict[int, np.ndarray], reader: ConstantReader,
           max_trips: int) -> list[dict[int, np.ndarray]]:
    """The control values before each trip and after the last, from the control values alone; _Keep
    beyond `max_trips`."""
    states = [state]
    for _ in range(max_trips + 1):
        values = evaluate(cond, cond_ops, {cond.input_indexes[p]: state[p] for p in control}, reader)
        go = values[cond.output_indexes[0]]
        if go.size != 1:
            raise _Keep
        if not bool(go.reshape(-1)[0]):
            return states
        values = evaluate(body, body_ops, {body.input_indexes[p]: state[p] for p in control}, reader)
        state = {p: values[body.output_indexes[p]] if p < carried else state[p] for p in control}
        states.append(state)
    raise _Keep


def evaluate(sub: Subgraph, ops: Sequence[Operation], values: dict[int, np.ndarray | None],
             reader: ConstantReader) -> dict[int, np.ndarray]:
    """Evaluate `ops` of `sub` on `values` (by operand) with the registry's kernels; `values` with
    every result added. ValueError when an input has no value or an operation no kernel."""
    for step in ops:
        inputs = []
        for i in step.inputs:
            operand = sub.operands[i]
            value = values[i] if i in values else reader.value(operand)
            if value is None:
                raise _Keep(f"operand {i} has no value")
            inputs.append(Tensor(operand.type, () if operand.type.is_scalar else tuple(value.shape), operand.scale,
                                 operand.zero_point, operand.channel_quant, value))
        outputs = [Tensor(sub.operands[i].type, tuple(sub.operands[i].dimensions), sub.operands[i].scale,
                          sub.operands[i].zero_point, sub.operands[i].channel_quant) for i in step.outputs]
        registration = find_operation(step.type)
        if registration is None:
            raise _Keep(f"{step.type.name} has no kernel")
        ctx = OpContext(step.type, inputs, outputs)
        registration.prepare(ctx)
        for i, result in zip(step.outputs, registration.execute(ctx)):
            values[i] = np.asarray(result)
    return values


__all__ = ["Control", "evaluate", "loop_control", "unroll_loops"]
