"""Peak memory of a model, estimated at preparation: constants plus the most tensor data alive at once.

Walks the main subgraph in execution order the way an interpreter frees operands after their last
reader (outputs are kept; subgraph inputs live in the caller's memory and do not count). An IF or
WHILE adds its most expensive referenced subgraph while it runs. Operands with unknown dimensions
count as 0, so the figure is a lower bound: a model over the limit surely cannot run within it.
"""
from __future__ import annotations

from ..hal import Model, OperandLifeTime, OperationType, Subgraph

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE, OperandLifeTime.SUBGRAPH,
             OperandLifeTime.NO_VALUE)


def _bytes(sub: Subgraph, index: int) -> int:
    operand = sub.operands[index]
    return operand.byte_size() if operand.is_fully_specified else 0


def subgraph_peak_bytes(model: Model, sub: Subgraph, depth: int = 0) -> int:
    """The most bytes of computed tensors alive at once while `sub` runs."""
    inputs = set(sub.input_indexes)
    keep = set(sub.output_indexes)
    last_use: dict[int, int] = {}
    for s, op in enumerate(sub.operations):
        for i in op.inputs:
            last_use[i] = s
    live = peak = 0
    for s, op in enumerate(sub.operations):
        nested = 0
        if op.type in (OperationType.IF, OperationType.WHILE) and depth < 8:
            for i in op.inputs:
                operand = sub.operands[i]
                ref = operand.location.offset
                if operand.lifetime == OperandLifeTime.SUBGRAPH and 0 <= ref < len(model.referenced):
                    nested = max(nested, subgraph_peak_bytes(model, model.referenced[ref], depth + 1))
        live += sum(_bytes(sub, o) for o in op.outputs)
        peak = max(peak, live + nested)
        for i in set(op.inputs):
            operand = sub.operands[i]
            if last_use.get(i) == s and i not in keep and i not in inputs and operand.lifetime not in _CONSTANT:
                live -= _bytes(sub, i)
    return peak


def estimate_peak_bytes(model: Model) -> int:
    """Constants (operand values and constant pools) plus the main subgraph's peak of computed tensors."""
    constants = len(model.operand_values) + sum(p.size for p in model.pools)
    return constants + subgraph_peak_bytes(model, model.main)
