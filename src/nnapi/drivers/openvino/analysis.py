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

from .backend import ops

from ...hal import Model
from ...validation import ConstantReader
from .graph import Scope, compute_type, constant_value, lower_operation, table
from .lowering import Value, collecting_checks



def refusal(model: Model, sub, op, dims, reader: ConstantReader, *, top: bool = True) -> str | None:
    """Why one operation of `sub` is not claimed, or None when it is."""
    admitted = table().admit(model, sub, op, dims, reader, top=top)
    return admitted if isinstance(admitted, str) else _lowering_fails(model, *admitted, top)


def _lowering_fails(model: Model, entry, ctx, top: bool) -> str | None:
    """The claim's proof: why the rule does not lower the operation on stand-in inputs, or None."""
    xs = [None if t.omitted else constant_value(t) if t.value is not None
          else Value(ops.parameter(list(t.dims), compute_type(t.type)).output(0)) for t in ctx.inputs]
    try:
        with collecting_checks([] if top else None):  # (the checks of a claim are dropped)
            lower_operation(entry, ctx, xs, Scope(model))
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def analyze(model: Model) -> list[bool]:
    """One flag per operation of the main graph: claimed or not (the base's claim loop)."""
    _, _, claimed = table().claim_graph(
        model, None, lambda m, op, k, entry, ctx, dims: (_lowering_fails(m, entry, ctx, True) is None, None))
    return [bool(c) for c in claimed]


__all__ = ["analyze", "refusal"]
