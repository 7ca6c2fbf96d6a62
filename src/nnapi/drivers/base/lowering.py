"""One lowering table for every compiling driver, with one claim step, in the style of JAX's
`register_lowering`: a backend makes its table (`LoweringTable`: the operand types it can hold and the
package of its rule modules), its rules register themselves with `table.register(...)` (the backend's
`lowers`), and the one claim loop (`LoweringTable.claim_graph`, each operation through `admit`) does what
every backend checks before its own proof: a rule for the operation, operands the backend holds, a
context, input 0's type, and no optional input the app may omit at execution. The backend then proves
the claim its own way (tracing, building: the loop's `prove` hook); a backend that traces a whole graph
at once proves it with `prove_in_order` on the table's `value_specs`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ...hal import Model, Operand, OperandLifeTime as L, OperandType as T, Operation, OperationType as Op
from ...ops import OpContext, numpy_dtype
from ...validation import ConstantReader, build_operation_context, infer_model_shapes, optional_input_fed_by_request
from .shared import RuleModules

_VALUE_LIFETIMES = (L.SUBGRAPH_INPUT, L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT)


@dataclass(frozen=True)
class Lowering:
    """One table entry: the rule `fn`, the types input 0 may have, and `control` (truthy for IF / WHILE,
    whose rules lower referenced subgraphs; what it holds is the backend's). A backend may subclass it
    to add fields of its own (`LoweringTable(entry=...)`)."""

    fn: Callable
    types: tuple[T, ...] = ()
    control: Any = None


class LoweringTable(dict):
    """NNAPI operation -> `Lowering` of one backend (a dict: `in`, `get`, iteration), with what the
    backend can hold: scalars of `scalar_types`, tensors of `tensor_types` with known, non-zero shapes."""

    def __init__(self, backend: str, *, rules: str, tensor_types: Iterable[T], scalar_types: Iterable[T],
                 default_types: Sequence[T] = (), entry: type = Lowering, constant_scalars: bool = False) -> None:
        super().__init__()
        self.backend = backend
        self.tensor_types = frozenset(tensor_types)
        self.scalar_types = frozenset(scalar_types)
        self.default_types = tuple(default_types)
        self.entry = entry
        #: Every scalar parameter must be a constant (the backend's program cannot take one per request).
        self.constant_scalars = constant_scalars
        self._rules = RuleModules(rules)

    def register(self, *ops: Op, types: Sequence[T] | None = None, **fields: Any) -> Callable[[Callable], Callable]:
        """Register the decorated rule for `ops` when input 0 has one of `types` (the table's default);
        `fields` are the entry's other fields (`control`, or the backend's own)."""
        def wrap(fn: Callable) -> Callable:
            for op in ops:
                if op in self:
                    raise RuntimeError(f"{self.backend}: {op.name} lowered twice")
                self[op] = self.entry(fn, tuple(self.default_types if types is None else types), **fields)
            return fn
        return wrap

    def load(self) -> "LoweringTable":
        """The table with every rule module imported (once; modules named with a leading underscore are
        helpers, not rules)."""
        self._rules.load()
        return self

    def holds(self, operand: Operand, dims: Sequence[int]) -> bool:
        """A value the backend can hold: a scalar of its scalar types, or a tensor of its tensor types
        with a known, non-zero shape."""
        t = T(operand.type)
        if t.is_scalar:
            return t in self.scalar_types
        return t in self.tensor_types and len(dims) > 0 and all(d > 0 for d in dims)

    def admit(self, model: Model, sub, op: Operation, dims, reader: ConstantReader, *, top: bool = True,
              control_outputs: bool = True) -> tuple[Lowering, OpContext] | str:
        """(entry, context) of an operation the backend may claim, to prove its own way; otherwise why not.
        `control_outputs`: whether an IF / WHILE's outputs must be held already (False where the backend
        learns their shapes from the subgraphs)."""
        self.load()
        entry = self.get(op.type)
        if entry is None:
            return "no lowering rule"
        outputs = op.outputs if control_outputs or not entry.control else ()
        for i in (*op.inputs, *outputs):
            operand = sub.operands[i]
            if operand.lifetime == L.NO_VALUE or (entry.control and T(operand.type) == T.SUBGRAPH):
                continue
            if not self.holds(operand, dims[i]):
                return f"operand {i} ({T(operand.type).name} {list(dims[i])}) cannot be held"
            if self.constant_scalars and T(operand.type).is_scalar \
                    and operand.lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
                return f"scalar operand {i} is not a constant"
        try:
            ctx = build_operation_context(model, sub, op, dims=dims, constants=reader)
        except Exception as e:
            return f"no context: {e}"
        if not ctx.inputs or ctx.inputs[0].type not in entry.types:
            return f"input 0 of type {ctx.inputs[0].type.name if ctx.inputs else None} is not lowered"
        if top and optional_input_fed_by_request(sub, op, ctx):
            return "an optional input is a model input"
        return entry, ctx

    def claim_graph(self, model: Model, index: int | None, prove: Callable[..., tuple[Any, Any]], *,
                    top: bool = True, control_outputs: bool = True) -> tuple[Model, list, list]:
        """The claim loop over subgraph `index` (None: main): each admitted operation is proven by the
        backend's `prove(model, op, k, entry, ctx, dims)` -> (result or None, the output shapes it
        found or None); found shapes are propagated to later operations. Returns (the model with the
        found shapes declared, the operand shapes, per operation its result or None)."""
        dims = infer_model_shapes(model, index)
        reader = ConstantReader(model)
        results = []
        for k, op in enumerate(model.subgraph(index).operations):
            admitted = self.admit(model, model.subgraph(index), op, dims, reader, top=top,
                                  control_outputs=control_outputs)
            result, out_dims = (None, None) if isinstance(admitted, str) else prove(model, op, k, *admitted, dims)
            results.append(result)
            if out_dims is not None and any(tuple(dims[i]) != tuple(d) for i, d in zip(op.outputs, out_dims)):
                model = with_dims(model, index, dict(zip(op.outputs, out_dims)))
                dims = infer_model_shapes(model, index)
                reader = ConstantReader(model)
        return model, dims, results


    def value_specs(self, sub, dims, spec: Callable[[tuple[int, ...], Any], Any]) -> dict[int, Any]:
        """`spec(shape, numpy dtype)` of every value of `sub`'s operations (model inputs, temporaries,
        outputs) that the backend holds, scalars with shape (): the stand-ins a tracing proof runs on."""
        specs = {}
        for op in sub.operations:
            for i in (*op.inputs, *op.outputs):
                operand = sub.operands[i]
                if operand.lifetime in _VALUE_LIFETIMES and self.holds(operand, dims[i]):
                    t = T(operand.type)
                    specs[i] = spec(() if t.is_scalar else tuple(dims[i]), numpy_dtype(t))
        return specs


def prove_in_order(sub, candidates: Sequence[Any], values: dict[int, Any], lower: Callable[[Any, dict], Sequence],
                   specs: dict[int, Any], stand_in: Callable[[Any], Any]) -> list:
    """The claim proof of a backend that lowers a whole graph at once (in one trace): each candidate's
    rule is run in order on `values` (operand -> value, updated), and kept when it gives every output
    with the shape of its spec (`value_specs`; the value cast to the spec's dtype). A candidate that
    fails, or gives other shapes, is dropped (None), and its outputs are stood in by `stand_in(spec)`,
    so later operations are judged on their own."""
    verdict = list(candidates)
    for k, candidate in enumerate(candidates):
        outputs = sub.operations[k].outputs
        try:
            if candidate is None:
                raise LookupError("not a candidate")
            outs = list(lower(candidate, values))
            if len(outs) != len(outputs) or any(i not in specs or tuple(o.shape) != tuple(specs[i].shape)
                                                for i, o in zip(outputs, outs)):
                raise ValueError("shape mismatch")
            values.update((i, o.astype(specs[i].dtype)) for i, o in zip(outputs, outs))
        except Exception:
            verdict[k] = None
            values.update((i, stand_in(specs[i])) for i in outputs if i in specs)
    return verdict


def with_dims(model: Model, index: int | None, dims: dict[int, Sequence[int]]) -> Model:
    """The model with the given operands of subgraph `index` (None: main) declared with `dims`."""
    sub = model.subgraph(index)
    operands = list(sub.operands)
    for i, d in dims.items():
        operands[i] = dataclasses.replace(operands[i], dimensions=tuple(int(x) for x in d))
    new_sub = dataclasses.replace(sub, operands=operands)
    if index is None:
        return dataclasses.replace(model, main=new_sub)
    referenced = list(model.referenced)
    referenced[index] = new_sub
    return dataclasses.replace(model, referenced=referenced)


__all__ = ["Lowering", "LoweringTable", "prove_in_order", "with_dims"]
