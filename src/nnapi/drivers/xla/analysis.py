"""What the XLA driver claims: every operation of a graph checked against the lowering table.

An operation is claimed when its entry exists, its operands are float32 / float16 (plus int32 /
bool where the entry says so) with fully known, non-zero shapes, and tracing the entry abstractly
(`jax.eval_shape`) gives exactly the shapes and types shape inference declared. IF and WHILE are
claimed when their referenced subgraphs lower whole for the shapes they receive (`control_flow`);
the shapes their outputs then have are propagated to later operations, so models whose control
flow has data-dependent declared shapes (0 dimensions, unknown rank) still compile.

In the main graph, an operation that may take omitted operands (LSTM, RNN families) is not
claimed when an optional position is fed by a model input: the app may omit it at execution,
and a compiled program cannot change its structure per request.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...hal import Model, OperandLifeTime as L, OperandType as T
from ...ops import numpy_dtype
from ...validation import ConstantReader
from ..base.lowering import prove_in_order, with_dims
from . import control_flow
from .lowering import LOWERINGS, LoweredOp, run_op

LOWERINGS.load()  # the rules register themselves in LOWERINGS; this module is the table's reader

#: Deepest nesting of IF / WHILE bodies the driver lowers.
MAX_DEPTH = 8




def _prove(index: int | None, depth: int):
    """The claim loop's proof of one admitted operation of subgraph `index` (`base.lowering.claim_graph`):
    (its LoweredOp, for IF / WHILE the shapes their outputs get), or (None, None)."""
    def prove(model: Model, op, k: int, entry, ctx, dims) -> tuple[LoweredOp | None, tuple | None]:
        if entry.control is None:
            return LoweredOp(k, tuple(op.inputs), tuple(op.outputs), ctx, entry), None
        if depth >= MAX_DEPTH:
            return None, None
        sub = model.subgraph(index)
        lowered = entry.control(model, sub, op, ctx, dims, lambda g, specs: lower_graph(model, g, specs, depth + 1))
        if lowered is None:
            return None, None
        graphs, out_dims = lowered
        for i, d in zip(op.outputs, out_dims):
            declared = tuple(sub.operands[i].dimensions)
            if declared and (len(declared) != len(d) or any(a and a != b for a, b in zip(declared, d))):
                return None, None  # the model declares a shape the subgraphs do not produce
            if not LOWERINGS.holds(sub.operands[i], d):
                return None, None
        return LoweredOp(k, tuple(op.inputs), tuple(op.outputs), ctx, entry, tuple(graphs)), tuple(out_dims)
    return prove


def static_analysis(model: Model, index: int | None = None, depth: int = 0, top: bool = True
                    ) -> tuple[Model, list[tuple[int, ...]], list[LoweredOp | None]]:
    """(the model with control-flow output shapes resolved, operand shapes, per operation its
    LoweredOp or None) of subgraph `index`, without tracing."""
    return LOWERINGS.claim_graph(model, index, _prove(index, depth), top=top, control_outputs=False)


def lower_graph(model: Model, index: int, specs: list[tuple[T, tuple[int, ...]]], depth: int
                ) -> control_flow.LoweredGraph | None:
    """Referenced subgraph `index` lowered for inputs of the given (type, shape), or None when
    any of its operations is not lowered."""
    if not 0 <= index < len(model.referenced):
        return None
    sub = model.referenced[index]
    if len(specs) != len(sub.input_indexes):
        return None
    if any(T(sub.operands[i].type) != t for i, (t, _) in zip(sub.input_indexes, specs)):
        return None
    model = with_dims(model, index, {i: d for i, (_, d) in zip(sub.input_indexes, specs)})
    try:
        model, dims, ops = static_analysis(model, index, depth, top=False)
    except Exception:
        return None
    sub = model.referenced[index]
    if any(lop is None for lop in ops):
        return None
    if not all(LOWERINGS.holds(sub.operands[i], dims[i]) for i in sub.output_indexes):
        return None
    reader = ConstantReader(model)  # a subgraph output may be a constant itself
    constants = {i: reader.value(sub.operands[i]) for i in sub.output_indexes
                 if sub.operands[i].lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)}
    return control_flow.LoweredGraph(
        tuple(sub.input_indexes), tuple(sub.output_indexes),
        tuple((T(sub.operands[i].type), tuple(dims[i])) for i in sub.output_indexes), ops,
        {i: numpy_dtype(T(o.type)) for i, o in enumerate(sub.operands) if o.type != T.SUBGRAPH}, constants)


def analyze(model: Model) -> tuple[list[tuple[int, ...]], list[LoweredOp | None]]:
    """Inferred operand shapes of the main graph and, per operation, its LoweredOp or None (not
    claimed).

    The claim is proven by tracing every candidate abstractly, in order (`base.lowering.prove_in_order`):
    an entry that fails to trace, or whose outputs differ from the inferred shapes and types, is not
    claimed, and its outputs are stood in by zeros, so later operations are judged on their own.
    """
    model, dims, candidates = static_analysis(model)
    if not any(candidates):
        return dims, candidates
    specs = LOWERINGS.value_specs(model.main, dims, jax.ShapeDtypeStruct)
    verdict: list[LoweredOp | None] = []

    def trace(inputs: dict) -> int:
        env = control_flow.LoopBudget(jnp.asarray(1, jnp.int32))
        verdict[:] = prove_in_order(model.main, candidates, dict(inputs),
                                    lambda lop, values: run_op(lop, values, consts={}, env=env), specs,
                                    lambda spec: jnp.zeros(spec.shape, spec.dtype))
        return 0

    jax.eval_shape(trace, {i: s for i, s in specs.items() if model.main.operands[i].lifetime == L.SUBGRAPH_INPUT})
    return dims, verdict


__all__ = ["analyze", "lower_graph", "static_analysis", "with_dims"]
