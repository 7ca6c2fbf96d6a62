"""Graph-level checks of a subgraph: input/output lists, operation indexes, execution order, consumers."""
from __future__ import annotations

from typing import Any, Sequence

from ..hal import OperandLifeTime, Operation, OperationType, Subgraph, invalid
from ..hal.enums import OPERATION_TYPE_FUNDAMENTAL_MAX, OPERATION_TYPE_OEM_MIN
from .operands import as_enum
from ..hal import is_int

L = OperandLifeTime


def operation_label(prefix: str, index: int, op_type: Any) -> str:
    """"operation 2 (CONV_2D)" with the subgraph prefix; the raw code when the type is invalid."""
    name = op_type.name if isinstance(op_type, OperationType) else repr(op_type)
    return f"{prefix}operation {index} ({name})"


def check_io_lists(prefix: str, subgraph: Subgraph, lifetimes: Sequence[OperandLifeTime]) -> None:
    """Subgraph input/output indexes: in range, not repeated, and consistent with operand lifetimes."""
    count = len(lifetimes)
    where = prefix or "subgraph "
    for kind, indexes, lifetime in (("input", subgraph.input_indexes, L.SUBGRAPH_INPUT),
                                    ("output", subgraph.output_indexes, L.SUBGRAPH_OUTPUT)):
        if not isinstance(indexes, (tuple, list)):
            raise invalid(f"{where}{kind} indexes must be a sequence, got {type(indexes).__name__}")
        seen: set[int] = set()
        for k, index in enumerate(indexes):
            if not is_int(index) or not 0 <= index < count:
                raise invalid(f"{where}{kind} {k}: operand index {index!r} out of range ({count} operands)")
            if index in seen:
                raise invalid(f"{where}{kind} {k}: operand {index} is listed more than once")
            seen.add(int(index))
            if lifetimes[index] != lifetime:
                raise invalid(f"{where}{kind} {k}: operand {index} has lifetime {lifetimes[index].name}, "
                              f"expected {lifetime.name}")
        for index, operand_lifetime in enumerate(lifetimes):
            if operand_lifetime == lifetime and index not in seen:
                raise invalid(f"{prefix}operand {index}: lifetime {lifetime.name} but it is not listed in "
                              f"the subgraph {kind} indexes")


def check_operations(prefix: str, subgraph: Subgraph) -> list[OperationType]:
    """Each operation's type is valid and its operand indexes are in range; returns the types."""
    count = len(subgraph.operands)
    types = []
    for i, op in enumerate(subgraph.operations):
        if not isinstance(op, Operation):
            raise invalid(f"{prefix}operation {i}: expected an Operation, got {type(op).__name__}")
        op_type = as_enum(OperationType, op.type)
        label = operation_label(prefix, i, op_type if op_type is not None else op.type)
        if op_type is None:
            raise invalid(f"{label}: invalid operation type {op.type!r} (valid types are "
                          f"0..{OPERATION_TYPE_FUNDAMENTAL_MAX} and {OPERATION_TYPE_OEM_MIN})")
        for kind, indexes in (("input", op.inputs), ("output", op.outputs)):
            if not isinstance(indexes, (tuple, list)):
                raise invalid(f"{label}: {kind}s must be a sequence of operand indexes")
            for k, index in enumerate(indexes):
                if not is_int(index) or not 0 <= index < count:
                    raise invalid(f"{label}: {kind} {k} index {index!r} out of range ({count} operands)")
        types.append(op_type)
    return types


def check_execution_order(prefix: str, subgraph: Subgraph, lifetimes: Sequence[OperandLifeTime],
                          op_types: Sequence[OperationType]) -> None:
    """Operations are in topological order, every written operand is written exactly once."""
    writer: list[int | None] = [None] * len(lifetimes)
    written = [lt not in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT) for lt in lifetimes]
    has_writer = {index for op in subgraph.operations for index in op.outputs}
    for i, op in enumerate(subgraph.operations):
        label = operation_label(prefix, i, op_types[i])
        for k, index in enumerate(op.inputs):
            if not written[index] and index not in has_writer:
                raise invalid(f"{prefix}operand {index}: {lifetimes[index].name} operand is never written "
                              f"(read by {label[len(prefix):]} input {k})")
            if not written[index]:
                raise invalid(f"{label}: input {k} (operand {index}) is read before it is written "
                              f"(operations must be in topological order, without cycles)")
        for k, index in enumerate(op.outputs):
            if lifetimes[index] not in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT):
                raise invalid(f"{label}: output {k} (operand {index}) has lifetime {lifetimes[index].name}; "
                              f"only TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT operands can be written")
            if written[index]:
                raise invalid(f"{label}: output {k} (operand {index}) is written more than once "
                              f"(also by operation {writer[index]})")
            written[index] = True
            writer[index] = i
    for index, lifetime in enumerate(lifetimes):
        if not written[index]:
            raise invalid(f"{prefix}operand {index}: {lifetime.name} operand is never written")


def check_consumers(prefix: str, subgraph: Subgraph) -> None:
    """Each operand's number_of_consumers equals how many operation inputs read it."""
    counts = [0] * len(subgraph.operands)
    for op in subgraph.operations:
        for index in op.inputs:
            counts[index] += 1
    for index, operand in enumerate(subgraph.operands):
        if operand.number_of_consumers != counts[index]:
            raise invalid(f"{prefix}operand {index}: number_of_consumers is {operand.number_of_consumers} "
                          f"but {counts[index]} operation inputs read it")


def check_reference_cycles(referenced_targets: Sequence[Sequence[int]]) -> None:
    """No referenced subgraph reaches itself through SUBGRAPH operands (iterative DFS)."""
    state = [0] * len(referenced_targets)  # 0 unvisited, 1 on the current path, 2 done
    for start in range(len(referenced_targets)):
        if state[start]:
            continue
        stack = [(start, iter(referenced_targets[start]))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state[child] == 1:
                raise invalid(f"referenced subgraph {child}: circular subgraph reference "
                              f"(from referenced subgraph {node})")
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(referenced_targets[child])))
