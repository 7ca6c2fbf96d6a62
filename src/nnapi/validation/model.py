"""Model validation (Android's validateModel; VTS-BEHAVIOURS 5.1) plus preference and priority checks."""
from __future__ import annotations

from typing import Any

from ..hal import (ExecutionPreference, Model, NnError, OperandLifeTime, OperationType, Priority, Subgraph,
                   invalid)
from .control_flow import check_control_flow
from .graph import (check_consumers, check_execution_order, check_io_lists, check_operations,
                    check_reference_cycles, operation_label)
from .operands import as_enum, check_operand
from ..memory.pool_checks import check_pool
from .shapes import ConstantReader, propagate_shapes


def validate_model(model: Model, *, runtime: bool = False) -> None:
    """Raise NnError(INVALID_ARGUMENT) naming the first field at fault; return for a valid model.

    `runtime=True` is the app-facing runtime's check (Android's RUNTIME mode); today both modes
    apply the same rules (Android's driver-only rule on control-flow operands of unknown size is
    not enforced).
    """
    del runtime  # reserved for DRIVER-only rules
    try:
        _validate(model)
    except NnError:
        raise
    except Exception as e:  # malformed plain data must never crash a driver
        raise invalid(f"malformed model: {type(e).__name__}: {e}") from None


def validate_preference(preference: Any) -> None:
    """HAL execution preference must be LOW_POWER, FAST_SINGLE_ANSWER or SUSTAINED_SPEED (0..2)."""
    if as_enum(ExecutionPreference, preference) is None:
        raise invalid(f"invalid execution preference {preference!r} (expected 0..2)")


def validate_priority(priority: Any) -> None:
    """HAL priority must be LOW, MEDIUM or HIGH (0..2)."""
    if as_enum(Priority, priority) is None:
        raise invalid(f"invalid priority {priority!r} (expected 0..2)")


def _validate(model: Model) -> None:
    if not isinstance(model, Model):
        raise invalid(f"expected a Model, got {type(model).__name__}")
    if not isinstance(model.referenced, list) or not isinstance(model.pools, list):
        raise invalid("model referenced subgraphs and pools must be lists")
    try:
        values_size = memoryview(model.operand_values).nbytes
    except TypeError:
        raise invalid(f"operand_values must be bytes, got {type(model.operand_values).__name__}") from None
    pool_sizes = [check_pool(pool, f"model pool {i}", request=False) for i, pool in enumerate(model.pools)]
    subgraphs = [(None, model.main, "")] + [
        (k, sg, f"referenced subgraph {k}: ") for k, sg in enumerate(model.referenced)]
    targets: list[list[int]] = []
    for index, subgraph, prefix in subgraphs:
        _check_structure(prefix, subgraph, values_size, pool_sizes, len(model.referenced))
        if index is not None:
            targets.append([o.location.offset for o in subgraph.operands if o.lifetime == OperandLifeTime.SUBGRAPH])
    check_reference_cycles(targets)
    constants = ConstantReader(model)
    for index, subgraph, prefix in subgraphs:
        for i, op in enumerate(subgraph.operations):
            if op.type in (OperationType.IF, OperationType.WHILE):
                check_control_flow(operation_label(prefix, i, OperationType(op.type)), model, subgraph, op)
        propagate_shapes(model, index, prefix=prefix, constants=constants, check=True)


def _check_structure(prefix: str, subgraph: Any, values_size: int, pool_sizes: list[int],
                     referenced_count: int) -> None:
    """Operands, input/output lists, operation indexes, execution order and consumer counts."""
    where = prefix.rstrip(": ") or "main subgraph"
    if not isinstance(subgraph, Subgraph):
        raise invalid(f"{where}: expected a Subgraph, got {type(subgraph).__name__}")
    if not isinstance(subgraph.operands, list) or not isinstance(subgraph.operations, list):
        raise invalid(f"{where}: operands and operations must be lists")
    if not subgraph.operands:
        raise invalid(f"{where}: has no operands")
    if not subgraph.operations:
        raise invalid(f"{where}: has no operations")
    for j, operand in enumerate(subgraph.operands):
        check_operand(f"{prefix}operand {j}", operand, operand_values_size=values_size, pool_sizes=pool_sizes,
                      referenced_count=referenced_count)
    lifetimes = [OperandLifeTime(o.lifetime) for o in subgraph.operands]
    check_io_lists(prefix, subgraph, lifetimes)
    op_types = check_operations(prefix, subgraph)
    check_execution_order(prefix, subgraph, lifetimes, op_types)
    check_consumers(prefix, subgraph)
