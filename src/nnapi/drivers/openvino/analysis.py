"""What the OpenVINO driver claims: every operation checked against the lowering table.

An operation is claimed when the table has a rule for its type and input 0's operand type, every
operand has a type the graph holds and a fully known, non-zero shape, every scalar parameter is a
constant, and lowering it on stand-in inputs (OpenVINO infers each node's shape and type as it is
made) gives exactly the shapes shape inference declared. A rule that does not lower some parameters
raises, and the operation is not claimed. Which (operation, type, parameters) lower is thereby the
table's own verdict; the conformance vectors (`nnapi cts --device openvino`) prove what is claimed.

In the main graph, an operation that may take omitted operands is not claimed when an optional
position is fed by a model input: the app may omit it at execution, and a compiled graph cannot
change its structure per request.
"""
from __future__ import annotations

from typing import Sequence

from . import import_openvino

import_openvino()  # (before OpenVINO itself: its telemetry declined, see the package doc)
import openvino.opset16 as ops

from ...hal import Model, OperandLifeTime as L, OperandType as T
from ...validation import ConstantReader, build_operation_context, infer_model_shapes, optional_input_fed_by_request
from .graph import Scope, compute_type, constant_value, lower_operation, table
from .lowering import TENSOR_TYPES, Value, collecting_checks

_SCALARS = (T.INT32, T.FLOAT32, T.FLOAT16, T.BOOL, T.UINT32)


def operand_ok(operand, dims: Sequence[int]) -> bool:
    """A value the graph can hold: a scalar parameter, or a tensor of known, non-zero shape."""
    t = T(operand.type)
    if t.is_scalar:
        return t in _SCALARS
    return t in TENSOR_TYPES and len(dims) > 0 and all(d > 0 for d in dims)


def claim(model: Model, sub, op, dims, reader: ConstantReader, *, top: bool = True) -> bool:
    """Whether one operation of `sub` lowers (see the module doc)."""
    return refusal(model, sub, op, dims, reader, top=top) is None


def refusal(model: Model, sub, op, dims, reader: ConstantReader, *, top: bool = True) -> str | None:
    """Why one operation of `sub` is not claimed, or None when it is."""
    entry = table().get(op.type)
    if entry is None:
        return "no lowering rule"
    for i in (*op.inputs, *op.outputs):
        operand = sub.operands[i]
        if operand.lifetime == L.NO_VALUE:
            continue
        if entry.control and T(operand.type) == T.SUBGRAPH:
            continue
        if not operand_ok(operand, dims[i]):
            return f"operand {i} ({T(operand.type).name} {list(dims[i])}) cannot be held"
        if T(operand.type).is_scalar and operand.lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            return f"scalar operand {i} is not a constant"
    try:
        ctx = build_operation_context(model, sub, op, dims=dims, constants=reader)
    except Exception as e:
        return f"no context: {e}"
    if not ctx.inputs or ctx.inputs[0].type not in entry.types:
        return f"input 0 of type {ctx.inputs[0].type.name if ctx.inputs else None} is not lowered"
    if top and optional_input_fed_by_request(sub, op, ctx):
        return "an optional input is a model input"
    xs: list[Value | None] = []
    for t in ctx.inputs:
        if t.omitted:
            xs.append(None)
        elif t.value is not None:
            xs.append(constant_value(t))
        else:
            xs.append(Value(ops.parameter(list(t.dims), compute_type(t.type)).output(0)))
    try:
        with collecting_checks([] if top else None):  # (the checks of a claim are dropped)
            lower_operation(entry, ctx, xs, Scope(model))
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def analyze(model: Model) -> list[bool]:
    """One flag per operation of the main graph: claimed or not."""
    sub = model.main
    dims = infer_model_shapes(model)
    reader = ConstantReader(model)
    return [claim(model, sub, op, dims, reader) for op in sub.operations]


__all__ = ["analyze", "claim", "operand_ok", "refusal"]
