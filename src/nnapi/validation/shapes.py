"""Operation contexts at compile time and shape propagation through a subgraph.

Each registered operation gets an `OpContext` whose tensors carry the declared (or already
inferred) dimensions, quantization and, for constants, their values. `reg.validate` checks the
signature; when every input's shape is known, `reg.prepare` infers the output shapes, which are
checked against the declared ones and carried forward to later operations.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from ..hal import (ErrorStatus, Model, NnError, OperandLifeTime, OperandType, Operation, OperationType,
                   Subgraph, invalid)
from ..memory import MappedPool, map_pool
from ..ops import OpContext, Tensor, UnknownValue, find_operation, numpy_dtype
from .graph import operation_label
from ..hal import is_scalar_type

L = OperandLifeTime
Dims = tuple[int, ...]
_NOT_INFERABLE = object()
#: Operations whose output shapes depend on referenced subgraphs; their declared shapes are kept.
_CONTROL_FLOW = frozenset({OperationType.IF, OperationType.WHILE})


class ConstantReader:
    """Reads constant operand values of one model as read-only numpy arrays, mapping each pool once."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._pools: dict[int, MappedPool | None] = {}

    def value(self, operand: Any) -> np.ndarray | None:
        """The value of a CONSTANT_COPY / CONSTANT_REFERENCE / SUBGRAPH operand, else None."""
        lifetime = operand.lifetime
        loc = operand.location
        if lifetime == L.SUBGRAPH:
            return np.array(loc.offset, dtype=np.uint32)
        if lifetime == L.CONSTANT_COPY:
            buffer = memoryview(self._model.operand_values)[loc.offset:loc.offset + loc.length]
        elif lifetime == L.CONSTANT_REFERENCE:
            pool = self._pool(loc.pool_index)
            if pool is None:
                return None  # memory this process cannot access: the value is unknown here (M5)
            buffer = pool.view(loc.offset, loc.length)
        else:
            return None
        op_type = OperandType(operand.type)
        dims = tuple(int(d) for d in operand.dimensions)
        count = 1 if is_scalar_type(op_type) else math.prod(dims)
        dtype = numpy_dtype(op_type)
        if len(buffer) < count * dtype.itemsize:
            raise invalid(f"constant of {len(buffer)} bytes is too small for {op_type.name} {list(dims)}")
        array = np.frombuffer(buffer, dtype=dtype, count=count).reshape(dims)
        array.flags.writeable = False
        return array

    def _pool(self, index: int) -> MappedPool | None:
        if index not in self._pools:
            try:
                self._pools[index] = map_pool(self._model.pools[index])
            except NnError as e:
                if e.status == ErrorStatus.GENERAL_FAILURE:  # a valid handle the CPU cannot map
                    self._pools[index] = None
                else:
                    raise invalid(f"model pool {index}: {e.message}") from None
        return self._pools[index]


def build_operation_context(model: Model, subgraph: Subgraph, operation: Operation, *,
                            dims: Sequence[Dims] | None = None,
                            constants: ConstantReader | None = None) -> OpContext:
    """The compile-time context of one operation; `dims` overrides the declared operand dimensions."""
    constants = constants if constants is not None else ConstantReader(model)

    def tensor(index: int, with_value: bool) -> Tensor:
        o = subgraph.operands[index]
        shape = tuple(dims[index]) if dims is not None else tuple(int(d) for d in o.dimensions)
        return Tensor(OperandType(o.type), shape, float(o.scale), int(o.zero_point), o.channel_quant,
                      value=constants.value(o) if with_value else None,
                      omitted=o.lifetime == L.NO_VALUE)

    return OpContext(OperationType(operation.type), [tensor(i, True) for i in operation.inputs],
                     [tensor(i, False) for i in operation.outputs],
                     relaxed=bool(model.relax_computation_float32_to_float16), compile_time=True)


def infer_model_shapes(model: Model, subgraph_index: int | None = None) -> list[Dims]:
    """Per-operand dimensions of a (valid) subgraph after compile-time shape propagation."""
    prefix = "" if subgraph_index is None else f"referenced subgraph {subgraph_index}: "
    return propagate_shapes(model, subgraph_index, prefix=prefix, constants=ConstantReader(model), check=False)


def propagate_shapes(model: Model, subgraph_index: int | None, *, prefix: str, constants: ConstantReader,
                     check: bool) -> list[Dims]:
    """Run validate (when `check`) and prepare of every registered operation in order."""
    subgraph = model.subgraph(subgraph_index)
    dims: list[Dims] = [tuple(int(d) for d in o.dimensions) for o in subgraph.operands]
    for i, op in enumerate(subgraph.operations):
        op_type = OperationType(op.type)
        reg = find_operation(op_type)
        if reg is None:
            continue  # unsupported here: the driver reports it, the runtime decides
        label = operation_label(prefix, i, op_type)
        ctx = _call(label, lambda: build_operation_context(model, subgraph, op, dims=dims, constants=constants))
        if check:
            if not reg.allow_omitted_operand:
                for k, t in enumerate(ctx.inputs):
                    if t.omitted:
                        raise invalid(f"{label}: input {k} (operand {op.inputs[k]}) is omitted (NO_VALUE), "
                                      f"which {op_type.name} does not allow")
            if _call(label, lambda: reg.validate(ctx)) is _NOT_INFERABLE:
                continue
        if op_type in _CONTROL_FLOW or not all(_known(t) for t in ctx.inputs):
            continue
        result = _call(label, lambda: reg.prepare(ctx))
        if result is _NOT_INFERABLE or result is None:  # None: data-dependent shapes
            continue
        for index, shape in zip(op.outputs, _merge_outputs(label, subgraph, op, dims, result)):
            dims[index] = shape
    return dims


def _known(t: Tensor) -> bool:
    """True when prepare can run on this input: omitted, constant, scalar or fully specified."""
    return (t.omitted or t.value is not None or is_scalar_type(t.type)
            or (len(t.dims) > 0 and all(d > 0 for d in t.dims)))


def _call(label: str, fn: Callable[[], Any]) -> Any:
    """Run an operation hook; any failure becomes INVALID_ARGUMENT naming the operation."""
    try:
        return fn()
    except UnknownValue:
        return _NOT_INFERABLE
    except NnError as e:
        name = label.rsplit("(", 1)[-1].rstrip(")")
        message = e.message[len(name) + 2:] if e.message.startswith(f"{name}: ") else e.message
        raise invalid(f"{label}: {message}") from None
    except Exception as e:  # a driver must never crash on bad input
        raise invalid(f"{label}: {type(e).__name__}: {e}") from None


def _merge_outputs(label: str, subgraph: Subgraph, op: Operation, dims: Sequence[Dims], result: Any) -> list[Dims]:
    """Check inferred output shapes against the declared ones; returns the combined shapes."""
    if not isinstance(result, (list, tuple)) or len(result) != len(op.outputs):
        raise invalid(f"{label}: shape inference gave {result!r} for {len(op.outputs)} outputs")
    merged = []
    for k, (index, inferred) in enumerate(zip(op.outputs, result)):
        declared = dims[index]
        try:
            inferred = tuple(int(d) for d in inferred)
        except (TypeError, ValueError):
            raise invalid(f"{label}: shape inference gave {inferred!r} for output {k}") from None
        if any(d < 0 for d in inferred):
            raise invalid(f"{label}: shape inference gave {list(inferred)} for output {k}")
        if is_scalar_type(OperandType(subgraph.operands[index].type)) or not inferred:
            merged.append(declared)  # scalars have no shape; () from prepare means unknown
            continue
        if declared:
            if len(declared) != len(inferred) or any(a and b and a != b for a, b in zip(declared, inferred)):
                raise invalid(f"{label}: output {k} (operand {index}) is declared with dimensions "
                              f"{list(declared)} but its inputs give {list(inferred)}")
            merged.append(tuple(a or b for a, b in zip(declared, inferred)))
        else:
            merged.append(inferred)
    return merged


def optional_input_fed_by_request(sub: Subgraph, op: Operation, ctx: OpContext) -> bool:
    """True when an input position the operation lets be omitted is a model input: a request may then
    leave it out (`has_no_value`), which a driver that compiles the graph for its inputs cannot follow.
    The operation's own validation says whether a position is optional."""
    registration = find_operation(op.type)
    if registration is None or not registration.allow_omitted_operand:
        return False
    for k, i in enumerate(op.inputs):
        if sub.operands[i].lifetime != OperandLifeTime.SUBGRAPH_INPUT:
            continue
        inputs = list(ctx.inputs)
        inputs[k] = dataclasses.replace(inputs[k], dims=(), value=None, omitted=True)
        trial = OpContext(ctx.op, inputs, ctx.outputs, relaxed=ctx.relaxed, compile_time=True)
        try:
            registration.validate(trial)
            registration.prepare(trial)
        except Exception:  # not optional there
            continue
        return True
    return False
