"""One `ov.Model` from an NNAPI model (a partition): inputs -> Parameters with their exact shapes and
element types, constants -> Constants (shared with the pool memory where possible), operations through
the lowering table, outputs -> Results in their NNAPI element types.

Model inputs are brought to the compute representation (`lowering` module doc): float16 widened,
quantized integers dequantized (`Convert -> Subtract -> Multiply`); quantized outputs leave through a
FakeQuantize onto the integer range and a Convert, taken from the operation's unrounded result.

Referenced subgraphs (IF branches, WHILE conditions and bodies) are lowered by the same code into the
bodies of OpenVINO If / Loop nodes. A compiled loop cannot be interrupted, yet NNAPI bounds every loop
by the execution's loop timeout: a graph with loops takes one more input, an iteration budget (each
loop runs at most that many iterations per entry), and gives one more output, whether a loop stopped
because the budget ran out; the prepared model then runs it again with a larger budget until the
loop timeout (executions are pure functions of their inputs).
"""
from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from .backend import ov, ops

from ...hal import ErrorStatus, Model, NnError, OperandLifeTime as L, OperandType as T
from ...ops import OpContext, Tensor
from ...validation import ConstantReader, build_operation_context, infer_model_shapes
from .tensors import CHECK_PREFIX, check_outputs
from .sequences import find_chains, lower_chain
from .gru import find_gru_op
from .norms import find_layer_norms, lower_layer_norm
from .unroll import unroll_loops
from ..base.lowering import LoweringTable, with_dims
from .lowering import (B8, F16, F32, I32, LOOPS, LOWERINGS, Q8PC, REAL_TYPES, ROUNDING, Lowering, Unsupported, Value,
                       as_value, collecting_checks, dequantize_input, dequantized_array, fake_quantize, i64,
                       sharing_constants)

#: Element type of each NNAPI tensor type at the model's boundary.
IO_TYPES: dict[T, ov.Type] = {
    T.TENSOR_FLOAT32: ov.Type.f32, T.TENSOR_FLOAT16: ov.Type.f16, T.TENSOR_INT32: ov.Type.i32,
    T.TENSOR_BOOL8: ov.Type.boolean, T.TENSOR_QUANT8_ASYMM: ov.Type.u8, T.TENSOR_QUANT8_ASYMM_SIGNED: ov.Type.i8,
    T.TENSOR_QUANT8_SYMM: ov.Type.i8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: ov.Type.i8,
    T.TENSOR_QUANT16_ASYMM: ov.Type.u16, T.TENSOR_QUANT16_SYMM: ov.Type.i16,
}
_PER_TENSOR_QUANT = REAL_TYPES - {F32, F16, Q8PC}
#: Deepest nesting of IF / WHILE bodies the driver lowers.
MAX_DEPTH = 8


def table() -> LoweringTable:
    """The lowering table with every rule module loaded."""
    return LOWERINGS.load()


def compute_type(t: T) -> ov.Type:
    """Element type of an operand inside the graph: float32 real values, i32 or boolean."""
    if t in REAL_TYPES:
        return ov.Type.f32
    return {I32: ov.Type.i32, B8: ov.Type.boolean}[t]


def to_compute(x: ov.Output, t: Tensor) -> ov.Output:
    """A model input in the compute representation."""
    if t.type == F32 or t.type in (I32, B8):
        return x
    if t.type == F16:
        return ops.convert(x, ov.Type.f32).output(0)
    return dequantize_input(x, t)


def from_compute(x: ov.Output, t: Tensor, unrounded: ov.Output | None = None) -> ov.Output:
    """A value in the compute representation as model output of type `t`; a quantized output is
    rounded from `unrounded` (the operation's result before its FakeQuantize) when given."""
    if t.type == F32 or t.type in (I32, B8):
        return x
    if t.type == F16:
        return ops.convert(x, ov.Type.f16).output(0)
    if t.type not in _PER_TENSOR_QUANT:
        raise Unsupported(f"output of type {t.type.name}")
    q = fake_quantize(unrounded if unrounded is not None else x, t, to_int=True)
    return ops.convert(q, IO_TYPES[t.type]).output(0)


def _same_grid(ctx: OpContext, t: Tensor) -> bool:
    """True when every quantized input lies on output `t`'s grid (same type, scale and zero point)."""
    quantized = [i for i in ctx.inputs if i.type in _PER_TENSOR_QUANT and not i.omitted]
    return bool(quantized) and all(i.type == t.type and i.scale == t.scale and i.zero_point == t.zero_point
                                   for i in quantized)


def constant_value(t: Tensor) -> Value:
    """A constant operand in the compute representation (made into a node only when used)."""
    v = dequantized_array(t) if t.type in REAL_TYPES else t.value
    return Value(array=np.asarray(v))


# --- scopes and control flow ------------------------------------------------------------------------
class Scope:
    """The graph being built for the main model or one referenced subgraph's body: the iteration
    budget as seen from here (made on first use) and the ran-out flags of the loops lowered here."""

    def __init__(self, model: Model, depth: int = 0, reader: ConstantReader | None = None) -> None:
        self.model = model
        self.depth = depth
        #: Reads constants for every scope of one build: its mappings stay alive with the built graph,
        #: whose shared constants point into them.
        self.reader = reader if reader is not None else ConstantReader(model)
        self.budget_param: ov.op.Parameter | None = None
        self.flags: list[ov.Output] = []

    def budget(self) -> ov.Output:
        """The iteration budget (i64 scalar), a Parameter of this graph."""
        if self.budget_param is None:
            self.budget_param = ops.parameter([], ov.Type.i64, name="loop_budget")
        return self.budget_param.output(0)

    def ran_out(self, flag: ov.Output) -> None:
        self.flags.append(flag)

    def any_ran_out(self) -> ov.Output | None:
        """One boolean scalar: whether any loop of this scope ran out of budget (None: no loops)."""
        if not self.flags:
            return None
        return functools.reduce(lambda a, b: ops.logical_or(a, b).output(0), self.flags)

    def lower_subgraph(self, index: int, inputs: Sequence[Value], *, inline: bool = False) -> "Body":
        """Referenced subgraph `index` lowered on Parameters shaped like `inputs` (a body of its own),
        or with `inline` on `inputs` themselves in this graph. Unsupported when any of its
        operations does not lower."""
        if self.depth >= MAX_DEPTH:
            raise Unsupported("control flow nested too deeply")
        if not 0 <= index < len(self.model.referenced):
            raise Unsupported(f"no referenced subgraph {index}")
        sub = self.model.referenced[index]
        if len(sub.input_indexes) != len(inputs):
            raise Unsupported(f"referenced subgraph {index} takes {len(sub.input_indexes)} inputs, "
                              f"{len(inputs)} given")
        model = with_dims(self.model, index, {i: v.shape for i, v in zip(sub.input_indexes, inputs)})
        sub = model.referenced[index]
        dims = infer_model_shapes(model, index)
        inner = self if inline else Scope(model, self.depth + 1, self.reader)
        params, values = [], {}
        for i, v in zip(sub.input_indexes, inputs):
            t = T(sub.operands[i].type)
            if t not in REAL_TYPES and t not in (I32, B8):
                raise Unsupported(f"referenced subgraph {index}: input of type {t.name}")
            if v.node.get_element_type() != compute_type(t):
                raise Unsupported(f"referenced subgraph {index}: input {i} has another type")
            if inline:
                values[i] = v
                continue
            p = ops.parameter(list(v.shape), compute_type(t))
            params.append(p)
            values[i] = Value(p.output(0))
        for i, d in enumerate(dims):
            operand = sub.operands[i]
            if operand.lifetime != L.NO_VALUE and T(operand.type).is_tensor and (not d or 0 in d):
                raise Unsupported(f"referenced subgraph {index}: operand {i} has an unknown shape")
        checks: list = []  # a body's run-time checks: the IF / WHILE rule carries them out
        with contextlib.nullcontext() if inline else collecting_checks(checks), \
                contextlib.nullcontext() if inline else sharing_constants():  # (a body: a graph of its own)
            lowered = lower_graph(model, sub, dims, self.reader, values, inner)
        outputs = []
        for i in sub.output_indexes:
            if i not in lowered:
                raise Unsupported(f"referenced subgraph {index}: output {i} has no value")
            t = T(sub.operands[i].type)
            if t not in REAL_TYPES and t not in (I32, B8):
                raise Unsupported(f"referenced subgraph {index}: output of type {t.name}")
            outputs.append(lowered[i].node)
        return Body(params, outputs, inner, checks)


@dataclass
class Body:
    """A lowered referenced subgraph: its Parameters (one per subgraph input), its outputs (logical
    layout) and its scope (budget Parameter, loops inside)."""

    params: list
    outputs: list[ov.Output]
    scope: Scope
    #: Its run-time checks (`lowering.runtime_check`), for the IF / WHILE rule to carry out of it.
    checks: list = field(default_factory=list)

    def any_check(self) -> tuple[ov.Output, str] | None:
        """The body's checks as one boolean scalar of the body and their messages (None: none)."""
        if not self.checks:
            return None
        flag = functools.reduce(lambda a, b: ops.logical_or(a, b).output(0), [bad for bad, _ in self.checks])
        return flag, "; ".join(dict.fromkeys(message for _, message in self.checks))


# --- operations -------------------------------------------------------------------------------------
@dataclass
class Lowered:
    """The outputs of one lowered operation; `unrounded` holds, for quantized outputs that were put
    back on their grid, the value before the FakeQuantize."""

    values: list[Value]
    unrounded: list[tuple[ov.Output, tuple | None] | None]


def lower_operation(entry: Lowering, ctx: OpContext, xs: Sequence[Value | None], scope: Scope) -> Lowered:
    """Run one rule and bring its outputs to their declared types and shapes (Unsupported, or the
    rule's own error, when it cannot)."""
    outs = entry.fn(ctx, list(xs), scope) if entry.control else entry.fn(ctx, list(xs))
    if len(outs) != len(ctx.outputs):
        raise Unsupported(f"{ctx.op.name}: the rule gave {len(outs)} outputs for {len(ctx.outputs)}")
    values, unrounded = [], []
    for k, (o, t) in enumerate(zip(outs, ctx.outputs)):
        v = as_value(o)
        raw = None
        if t.type in _PER_TENSOR_QUANT and not (entry.keeps_grid and _same_grid(ctx, t)):
            node, perm = v.physical()
            raw = (node, perm)
            v = Value(fake_quantize(node, t), perm)
        elif t.type == Q8PC:
            raise Unsupported(f"{ctx.op.name}: a per-channel quantized output")
        if tuple(v.shape) != tuple(t.dims):
            raise Unsupported(f"{ctx.op.name}: output {k} lowered to shape {list(v.shape)}, "
                              f"expected {list(t.dims)}")
        node, _ = v.physical()
        if node.get_element_type() != compute_type(t.type):
            raise Unsupported(f"{ctx.op.name}: output {k} lowered to {node.get_element_type()}, "
                              f"expected {compute_type(t.type)}")
        values.append(v)
        unrounded.append(raw)
    return Lowered(values, unrounded)


def lower_graph(model: Model, sub, dims, reader: ConstantReader, values: dict[int, Value], scope: Scope,
                unrounded: dict[int, tuple] | None = None) -> dict[int, Value]:
    """Lower every operation of `sub` in order, starting from `values` (its inputs); returns the value
    of every operand computed or used. Raises NnError(GENERAL_FAILURE) for what does not lower."""
    lowerings = table()

    def context(n: int) -> OpContext:
        return build_operation_context(model, sub, sub.operations[n], dims=dims, constants=reader)

    def inputs(n: int, ctx: OpContext, skip: tuple[int, ...] = ()) -> list[Value | None]:
        """Operation n's input values (None: omitted, or in `skip`)."""
        xs = []
        for k, i in enumerate(sub.operations[n].inputs):
            t = ctx.inputs[k]
            if t.omitted or k in skip:
                xs.append(None)
            elif i in values:
                xs.append(values[i])
            elif t.value is not None:
                values[i] = constant_value(t)
                xs.append(values[i])
            else:
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"operation {n} ({sub.operations[n].type.name}): operand {i} has no value")
        return xs

    chains = find_chains(sub) if LOOPS.get() == "compact" else {}  # (unrolled int8 LSTM sequences)
    norms = find_layer_norms(sub, dims, reader)  # (by the operation that writes each norm's result)
    done = 0
    for n, op in enumerate(sub.operations):
        if n < done:
            continue
        chain = chains.get(n)
        if chain is not None and lower_chain(sub, chain, context, inputs, values, unrounded):
            done = chain.concat + 1
            continue
        norm = norms.get(n)
        if norm is not None and norm.x in values:
            values[norm.y] = lower_layer_norm(norm, values[norm.x])  # (the norm's other nodes go unused)
            continue
        ctx = context(n)
        xs = inputs(n, ctx)
        entry = lowerings.get(op.type)
        if entry is None:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"operation {n} ({op.type.name}) has no lowering")
        try:
            lowered = lower_operation(entry, ctx, xs, scope)
        except NnError:
            raise
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"operation {n} ({op.type.name}) cannot be lowered: {type(e).__name__}: {e}") from None
        for i, v, raw in zip(op.outputs, lowered.values, lowered.unrounded):
            values[i] = v
            if raw is not None and unrounded is not None:
                unrounded[i] = raw
    for i in sub.output_indexes:  # an output that is a constant of the subgraph
        if i not in values:
            o = sub.operands[i]
            value = reader.value(o) if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE) else None
            if value is not None:
                values[i] = constant_value(Tensor(T(o.type), tuple(dims[i]), float(o.scale), int(o.zero_point),
                                                  o.channel_quant, value=value))
    return values


@dataclass
class BuiltGraph:
    """An `ov.Model` and what its shared constants need kept alive (the mapped pools). `has_budget`:
    the graph takes the iteration budget as its last input and gives the ran-out flag as its last
    output (it has loops)."""

    model: ov.Model
    keep_alive: list = field(default_factory=list)
    has_budget: bool = False


def build(model: Model, dims: list[tuple[int, ...]] | None = None, name: str = "nnapi", *,
          rounding: str = "fq", loops: str = "compact") -> BuiltGraph:
    """The whole main graph as one `ov.Model` (every operation must lower: the device claimed them).
    `rounding` "plain" rounds quantized values with Round and Clamp instead of FakeQuantize
    (`lowering.ROUNDING`); `loops` "unrolled" makes every step of a recurrence nodes of the graph
    (`lowering.LOOPS`)."""
    if loops not in ("compact", "unrolled"):
        raise ValueError(f"loops must be 'compact' or 'unrolled', not {loops!r}")
    tokens = ROUNDING.set(rounding), LOOPS.set(loops)
    try:
        # loops of a known count as straight-line code, or in blocks; a GRU's loop stays one (`gru`)
        unrolled = unroll_loops(model, keep=lambda op: find_gru_op(model, op) is not None)
        if unrolled is not model:
            model, dims = unrolled, None
        with sharing_constants():
            return _build(model, dims, name)
    finally:
        ROUNDING.reset(tokens[0])
        LOOPS.reset(tokens[1])


def _build(model: Model, dims: list[tuple[int, ...]] | None, name: str) -> BuiltGraph:
    sub = model.main
    if dims is None:
        dims = infer_model_shapes(model)
    reader = ConstantReader(model)
    values: dict[int, Value] = {}
    unrounded: dict[int, tuple] = {}
    params = []

    def tensor(i: int) -> Tensor:
        o = sub.operands[i]
        return Tensor(T(o.type), tuple(dims[i]), float(o.scale), int(o.zero_point), o.channel_quant,
                      value=reader.value(o))

    for k, i in enumerate(sub.input_indexes):
        t = tensor(i)
        if t.type not in IO_TYPES:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"model input {k} has type {t.type.name}")
        p = ops.parameter(list(t.dims), IO_TYPES[t.type], name=f"input_{k}")
        params.append(p)
        values[i] = Value(to_compute(p.output(0), t))
    scope = Scope(model, reader=reader)
    checks: list = []
    with collecting_checks(checks):
        lower_graph(model, sub, dims, reader, values, scope, unrounded)
    results = []
    for k, i in enumerate(sub.output_indexes):
        t = tensor(i)
        if i not in values:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"model output {k} has no value")
        raw = unrounded.get(i)
        raw_node = Value(raw[0], raw[1]).node if raw is not None else None
        node = from_compute(values[i].node, t, raw_node)
        if node.get_node().get_type_name() in ("Parameter", "Constant"):
            # A Result fed straight by a Parameter or a Constant does not write a caller's output
            # tensor (OpenVINO 2026.4): an Identity makes it a computed value.
            node = ops.identity(node).output(0)
        results.append(ops.result(node, name=f"output_{k}"))
    has_budget = scope.budget_param is not None
    if has_budget:
        params.append(scope.budget_param)
        flag = scope.any_ran_out()
        results.append(ops.result(flag if flag is not None else ops.constant(np.array(False)), name="ran_out"))
    if checks:  # after the ran-out flag: one boolean per check, their messages in the tensor's name
        flags = ops.concat([ops.unsqueeze(bad, i64([0])) for bad, _ in checks], 0).output(0)
        flags.get_tensor().set_names({CHECK_PREFIX + json.dumps([message for _, message in checks])})
        results.append(ops.result(flags, name="checks"))
    return BuiltGraph(ov.Model(results, params, name), [reader, model], has_budget)


__all__ = ["Body", "BuiltGraph", "CHECK_PREFIX", "IO_TYPES", "check_outputs", "Lowered", "Scope", "build",
           "compute_type", "constant_value", "from_compute", "lower_graph", "lower_operation", "table", "to_compute"]
