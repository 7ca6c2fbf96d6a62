"""IF and WHILE: run referenced subgraphs through the same interpreter as the main graph.

Their output shapes depend on the data, so `prepare` returns None ("known after execute").
Structural checks (subgraph signatures, compatible operands) live in `validation.control_flow`.
"""
from __future__ import annotations

import time

import numpy as np

from ..hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register


def _validate_if(ctx: OpContext) -> None:
    if len(ctx.inputs) < 3 or len(ctx.outputs) < 1:
        raise ctx.fail(f"expected a condition, two subgraphs and inputs (got {len(ctx.inputs)} inputs) "
                       f"and at least one output (got {len(ctx.outputs)})")
    ctx.check_types([T.TENSOR_BOOL8, T.SUBGRAPH, T.SUBGRAPH])


def _validate_while(ctx: OpContext) -> None:
    if len(ctx.inputs) < 3 or len(ctx.outputs) < 1:
        raise ctx.fail(f"expected two subgraphs and at least one input (got {len(ctx.inputs)} inputs) and at "
                       f"least one output (got {len(ctx.outputs)})")
    ctx.check_types([T.SUBGRAPH, T.SUBGRAPH])


def _data_dependent(ctx: OpContext) -> None:
    """Output shapes are known only once the subgraphs ran."""
    return None


def _executor(ctx: OpContext):
    if ctx.executor is None:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"{ctx.op.name}: no interpreter to run its subgraphs")
    return ctx.executor


def _execute_if(ctx: OpContext) -> list[np.ndarray]:
    cond = bool(np.asarray(ctx.input(0)).reshape(-1)[0])
    branch = int(ctx.scalar(1 if cond else 2))
    return _executor(ctx).run_subgraph(branch, [t.value for t in ctx.inputs[3:]])


def _execute_while(ctx: OpContext) -> list[np.ndarray]:
    executor = _executor(ctx)
    cond_graph, body_graph = int(ctx.scalar(0)), int(ctx.scalar(1))
    m = len(ctx.outputs)
    values = [t.value for t in ctx.inputs[2:]]
    clock = getattr(executor, "now_ns", time.monotonic_ns)  # running time: pauses for preemption don't count
    start = clock()
    while True:
        (cond,) = executor.run_subgraph(cond_graph, values)
        if not bool(np.asarray(cond).reshape(-1)[0]):
            return values[:m]
        if clock() - start > executor.loop_timeout_ns:
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                          f"WHILE: loop ran longer than its timeout of {executor.loop_timeout_ns / 1e9:g} s")
        outs = executor.run_subgraph(body_graph, values)
        values = list(outs) + values[len(outs):]


register(Op.IF, validate=_validate_if, prepare=_data_dependent, execute=_execute_if,
         allow_omitted_operand=False, allow_zero_sized_input=True)
register(Op.WHILE, validate=_validate_while, prepare=_data_dependent, execute=_execute_while,
         allow_omitted_operand=False, allow_zero_sized_input=True)
