"""One TFLite subgraph being turned into one `nnapi.Model` (`Graph`): its operands, constants and
emitted operations, with the checked accessors the operator mappings read tensors through.

Each operator is mapped by the function the registry holds for it (`registry.mapping_of`), called
with this graph; WHILE and IF bodies are converted by `Graph.submodel` into graphs of their own.
"""
from __future__ import annotations

import os
import re
from typing import Callable

import numpy as np

from ...hal import NnError, OperandType as T, OperationType as Op, ResultCode
from ...runtime import Model
from .context import MAX_NESTING, ImportContext
from .flatbuffer import BadModel
from .imported import Problem, Unsupported, UnsupportedOperatorsError
from .registry import mapping_of
from .schema import FlatOperator, FlatSubgraph, FlatTensor
from .spec import NUMPY_OF, Spec, f32

_COPY_LIMIT = 128  # NNAPI copies values of at most this many bytes (CONSTANT_COPY)
#: The value range of each quantized TFLite tensor type (zero points must lie in it).
QUANT_RANGES = {"UINT8": (0, 255), "INT8": (-128, 127), "INT16": (-32768, 32767)}


class Graph:
    """One TFLite subgraph being turned into one `nnapi.Model`."""

    def __init__(self, context: ImportContext, sub: FlatSubgraph, input_order: list[int],
                 output_order: list[int]) -> None:
        self.context = context
        self.flat = context.flat
        self.sub = sub
        self.input_order = input_order
        self.output_order = output_order
        self.m = Model()
        self.specs: list[Spec] = []
        self.values: dict[int, int] = {}          # TFLite tensor -> operand holding its value
        self.folded: dict[int, np.ndarray] = {}   # TFLite tensor -> value computed at import
        self._constants: dict[tuple, int] = {}
        self._scalars: dict[tuple, int] = {}
        self._produced: set[int] = set()          # operands written by an operation
        self._unmapped: set[int] = set()          # TFLite tensors written by operators that could not be mapped
        self.origin: list[tuple[int, str]] = []   # per NNAPI operation: (TFLite operator index, name)
        self._current: FlatOperator | None = None

    # --- operands -----------------------------------------------------------------------------
    def add(self, spec: Spec) -> int:
        """A new operand of `spec` (with its per-channel quantization), recorded in `specs`."""
        index = self.m.add_operand(spec.type, spec.dims, spec.scale, spec.zero_point)
        if spec.channel is not None:
            self.m.set_operand_symm_per_channel_quant_params(index, spec.channel[0], spec.channel[1])
        self.specs.append(spec)
        return index

    def tensor(self, t: int) -> FlatTensor:
        """TFLite tensor `t` of this subgraph (indexes were checked when the file was read; -1, an
        omitted optional input, is refused where a tensor is needed)."""
        if not 0 <= t < len(self.sub.tensors):
            raise BadModel(f"a required tensor is omitted (index {t})" if t == -1 else
                           f"tensor index {t} out of range")
        return self.sub.tensors[t]

    def dims(self, t: int, rank: int | tuple[int, ...], what: str) -> tuple[int, ...]:
        """The (NNAPI) dimensions of tensor `t`, which must have rank `rank` (or one of them) as the
        operator needs: BAD_DATA naming `what` and the tensor otherwise."""
        dims = self.spec_of(t).dims
        ranks = (rank,) if isinstance(rank, int) else rank
        if len(dims) not in ranks:
            raise BadModel(f"{what} (tensor {self.tensor(t).describe()}) has rank {len(dims)}, the operator needs "
                           f"{' or '.join(map(str, ranks))}")
        return dims

    def check_computed(self, dims, itemsize: int, what: str) -> None:
        """Refuse, before allocating, a constant of `dims` the importer would compute that is larger
        than the file justifies."""
        size = int(np.prod([int(d) for d in dims], dtype=object)) * itemsize
        if size > self.context.computed_limit:
            raise BadModel(f"{what}: a computed constant of shape {list(dims)} ({size} bytes) is larger than "
                           f"this file can justify ({self.context.computed_limit} bytes)")

    def zeros(self, spec: Spec, value: int | float = 0) -> int:
        """A constant operand of `spec` filled with `value` (size checked before allocating)."""
        np_type = NUMPY_OF[spec.type]
        self.check_computed(spec.dims, np.dtype(np_type).itemsize, f"{spec.type.name} constant")
        return self.const(np.full(spec.dims, value, np_type), spec)

    def spec_of(self, t: int) -> Spec:
        """The NNAPI operand a TFLite tensor becomes (its quantization checked: BAD_DATA when invalid)."""
        tensor = self.tensor(t)
        dims = tensor.shape or (1,)
        if any(d < 0 for d in dims):
            raise Unsupported(f"tensor {tensor.describe()} has an unknown dimension")
        q = tensor.quant
        kind = tensor.type
        if q is not None and kind in QUANT_RANGES:
            low, high = QUANT_RANGES[kind]
            if not np.all(q.scales > 0):
                raise BadModel(f"tensor {tensor.describe()}: quantization scale {q.scales.min()} is not positive")
            if np.any(q.zero_points < low) or np.any(q.zero_points > high):
                raise BadModel(f"tensor {tensor.describe()}: zero point outside the {kind} range [{low}, {high}]")
        if kind == "FLOAT32":
            return Spec(T.TENSOR_FLOAT32, dims)
        if kind == "FLOAT16":
            return Spec(T.TENSOR_FLOAT16, dims)
        if kind == "INT32" or (kind == "INT64" and self.is_const(t)):
            return Spec(T.TENSOR_INT32, dims, q.scale if q and not q.per_channel else 0.0)
        if kind == "BOOL":
            return Spec(T.TENSOR_BOOL8, dims)
        if kind in ("UINT8", "INT8", "INT16"):
            if q is None:
                raise Unsupported(f"tensor {tensor.describe()} is {kind} without quantization parameters")
            if q.per_channel:
                if kind != "INT8" or np.any(q.zero_points != 0):
                    raise Unsupported(f"tensor {tensor.describe()}: per-channel quantization needs int8 with "
                                      "zero points 0")
                return Spec(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, dims,
                            channel=(tuple(float(s) for s in q.scales), q.axis))
            if kind == "UINT8":
                return Spec(T.TENSOR_QUANT8_ASYMM, dims, q.scale, q.zero_point)
            if kind == "INT8":
                return Spec(T.TENSOR_QUANT8_ASYMM_SIGNED, dims, q.scale, q.zero_point)
            if q.zero_point != 0:
                raise Unsupported(f"tensor {tensor.describe()}: int16 with zero point {q.zero_point}")
            return Spec(T.TENSOR_QUANT16_SYMM, dims, q.scale, 0)
        raise Unsupported(f"tensor {tensor.describe()} has type {kind}, which NNAPI does not have")

    def is_const(self, t: int) -> bool:
        """Whether tensor `t` is a constant: a buffer in the file, or a value folded at import."""
        return t >= 0 and (t in self.folded or self.tensor(t).region is not None)

    def const_value(self, t: int) -> np.ndarray | None:
        """The value of a constant tensor (folded at import, or a view of the file), else None."""
        if t < 0:
            return None
        if t in self.folded:
            return self.folded[t]
        tensor = self.tensor(t)
        if tensor.region is None:
            return None
        if tensor.sparsity is not None:
            raise Unsupported(f"tensor {tensor.describe()} is sparse; only DENSIFY may read it")
        if tensor.dtype is None:
            raise Unsupported(f"tensor {tensor.describe()} has type {tensor.type}")
        return self.flat.array(tensor).reshape(tensor.shape or (1,))

    def real_value(self, t: int) -> np.ndarray | None:
        """A constant's real (dequantized) value as float32."""
        v = self.const_value(t)
        if v is None:
            return None
        q = self.tensor(t).quant
        if q is None or self.tensor(t).type in ("FLOAT32", "FLOAT16"):
            return v.astype(np.float32)
        if q.per_channel:
            shape = [1] * v.ndim
            shape[q.axis] = -1
            return ((v.astype(np.float32) - q.zero_points.reshape(shape).astype(np.float32))
                    * q.scales.reshape(shape))
        return (v.astype(np.float32) - np.float32(q.zero_point)) * np.float32(q.scale)

    def input(self, t: int, spec: Spec | None = None) -> int:
        """The operand holding TFLite tensor `t` (as `spec` when given: constants are re-declared,
        other tensors reshaped)."""
        want = spec or self.spec_of(t)
        if self.is_const(t) and t not in self.values:
            return self._constant_tensor(t, want)
        if t not in self.values:
            tensor = self.tensor(t)
            if tensor.is_variable:  # a stateful operator's state: TFLite resets int8 to the zero point, others to 0
                return self.zeros(want, want.zero_point if want.type == T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
            if t not in self._unmapped:
                raise BadModel(f"tensor {tensor.describe()} is read before any operator writes it (and is neither "
                               "a constant, a variable nor a subgraph input)")
            # Its producer could not be mapped (already reported): a placeholder keeps going.
            self.values[t] = self.add(self.spec_of(t))
        have_index = self.values[t]
        have = self.specs[have_index]
        if have == want:
            return have_index
        if have.with_dims(want.dims) == want and int(np.prod(have.dims)) == int(np.prod(want.dims)):
            return self.reshape(have_index, want.dims)
        raise Unsupported(f"tensor {self.tensor(t).describe()} is needed as {want.type.name}{list(want.dims)}, "
                          f"it is {have.type.name}{list(have.dims)}")

    def _constant_tensor(self, t: int, spec: Spec) -> int:
        """The operand of constant tensor `t` as `spec`: a reference into the file mapping where its
        bytes are the operand's as they are (copied when small), else the value converted and copied."""
        key = (t, spec)
        if key in self._constants:
            return self._constants[key]
        tensor = self.tensor(t)
        np_type = NUMPY_OF[spec.type]
        if t not in self.folded and tensor.sparsity is None and tensor.dtype == np.dtype(np_type).newbyteorder("<") \
                and tensor.region[1] == int(np.prod(spec.dims)) * np.dtype(np_type).itemsize:
            offset, length = tensor.region
            index = self.add(spec)
            if length > _COPY_LIMIT:
                self.m.set_operand_value_from_memory(index, self.context.memory, offset, length)
                self.context.referenced_regions.add((offset, length))
            else:
                self.m.set_operand_value(index, bytes(self.flat.data(tensor)))
            self._constants[key] = index
            return index
        value = self.const_value(t)
        if spec.type == T.TENSOR_INT32 and value.dtype == np.int64:
            if value.size and (value.max() > 2**31 - 1 or value.min() < -2**31):
                raise Unsupported(f"tensor {tensor.describe()}: int64 values out of the int32 range")
        index = self.const(np.asarray(value).astype(np_type).reshape(spec.dims), spec)
        self._constants[key] = index
        return index

    def const(self, value: np.ndarray, spec: Spec) -> int:
        """A new constant operand holding `value` (copied: the importer computed it)."""
        value = np.ascontiguousarray(np.asarray(value).astype(NUMPY_OF[spec.type]).reshape(spec.dims))
        index = self.add(spec)
        self.m.set_operand_value(index, value)
        self.context.copied_bytes += value.nbytes
        return index

    def const_f32(self, value: float | list | np.ndarray) -> int:
        """A new TENSOR_FLOAT32 constant (a scalar becomes shape [1])."""
        v = np.asarray(value, np.float32)
        return self.const(v.reshape(v.shape or (1,)), Spec(T.TENSOR_FLOAT32, v.shape or (1,)))

    def const_i32(self, value: int | list | np.ndarray) -> int:
        """A new TENSOR_INT32 constant (a scalar becomes shape [1])."""
        v = np.asarray(value, np.int32)
        return self.const(v.reshape(v.shape or (1,)), Spec(T.TENSOR_INT32, v.shape or (1,)))

    def scalar(self, type: T, value: int | float | bool) -> int:
        """The scalar operand of `type` holding `value` (one per distinct value)."""
        key = (type, value if type != T.FLOAT32 else f32(value))
        if key not in self._scalars:
            index = self.m.add_operand(type)
            self.specs.append(Spec(type, ()))
            self.m.set_operand_value(index, value)
            self._scalars[key] = index
        return self._scalars[key]

    def i32(self, value: int) -> int:
        """The INT32 scalar `value`."""
        return self.scalar(T.INT32, int(value))

    def f32(self, value: float) -> int:
        """The FLOAT32 scalar `value`."""
        return self.scalar(T.FLOAT32, float(value))

    def bool(self, value: bool) -> int:
        """The BOOL scalar `value`."""
        return self.scalar(T.BOOL, bool(value))

    def temp(self, spec: Spec) -> int:
        """A new intermediate operand of `spec`."""
        return self.add(spec)

    def omitted(self, kind: T = T.TENSOR_FLOAT32) -> int:
        """An omitted optional operand of type `kind` (quantized types still need a valid scale)."""
        spec = Spec(kind, ())
        index = self.add(Spec(kind, (), 1.0) if spec.quantized else spec)
        self.m.set_operand_value(index, None)
        return index

    def subgraph_operand(self, model: Model) -> int:
        """A SUBGRAPH operand referencing `model` (a WHILE or IF body)."""
        index = self.m.add_operand(T.SUBGRAPH)
        self.specs.append(Spec(T.SUBGRAPH, ()))
        self.m.set_operand_value_from_model(index, model)
        return index

    def output(self, t: int, spec: Spec | None = None) -> int:
        """A new operand for the value of TFLite tensor `t`, written by the next emitted operation."""
        index = self.add(spec or self.spec_of(t))
        self.values[t] = index
        return index

    def shaped_output(self, t: int, dims) -> tuple[int, Callable[[], None]]:
        """An operand of `dims` to write tensor `t` into, and a function that reshapes it to `t`'s shape
        afterwards when they differ (e.g. NNAPI FULLY_CONNECTED's 2-D output of a 3-D TFLite one)."""
        spec = self.spec_of(t)
        dims = tuple(int(d) for d in dims)
        if dims == spec.dims:
            return self.output(t), lambda: None
        tmp = self.temp(spec.with_dims(dims))

        def finish() -> None:
            self.emit(Op.RESHAPE, [tmp, self.const_i32(list(spec.dims))], [self.output(t)])
        return tmp, finish

    def reshape(self, operand: int, dims: tuple[int, ...] | list[int]) -> int:
        """A new operand holding `operand` reshaped to `dims` (by a RESHAPE)."""
        out = self.temp(self.specs[operand].with_dims(dims))
        self.emit(Op.RESHAPE, [operand, self.const_i32([int(d) for d in dims])], [out])
        return out

    def emit(self, type: Op, inputs: list[int], outputs: list[int]) -> None:
        """Add operation `type`, remembering which TFLite operator it came from (for messages)."""
        self.m.add_operation(type, inputs, outputs)
        self._produced.update(outputs)
        op = self._current
        self.origin.append((op.index, op.label) if op is not None else (-1, "(import)"))
        self.context.operations[type.name] += 1

    # --- float islands: NNAPI operations that only exist in float -------------------------------------
    def float_input(self, t: int) -> int:
        """TFLite tensor `t` as TENSOR_FLOAT32 real values (DEQUANTIZE, CAST or a folded constant)."""
        spec = self.spec_of(t)
        if spec.type == T.TENSOR_FLOAT32:
            return self.input(t)
        if self.is_const(t):
            return self.const(self.real_value(t), Spec(T.TENSOR_FLOAT32, spec.dims))
        out = self.temp(Spec(T.TENSOR_FLOAT32, spec.dims))
        if spec.type == T.TENSOR_FLOAT16:
            self.emit(Op.CAST, [self.input(t)], [out])
        elif spec.quantized:
            self.emit(Op.DEQUANTIZE, [self.input(t)], [out])
        else:
            raise Unsupported(f"tensor {self.tensor(t).describe()} cannot be converted to float")
        return out

    def float_output(self, t: int) -> tuple[int, Callable[[], None]]:
        """A TENSOR_FLOAT32 operand to compute tensor `t` into, and a function that then converts it
        to `t`'s type (QUANTIZE / CAST) when `t` is not float32."""
        spec = self.spec_of(t)
        if spec.type == T.TENSOR_FLOAT32:
            return self.output(t), lambda: None
        tmp = self.temp(Spec(T.TENSOR_FLOAT32, spec.dims))

        def finish() -> None:
            if spec.quantized and spec.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
                self.emit(Op.QUANTIZE, [tmp], [self.output(t)])
            elif spec.type == T.TENSOR_FLOAT16:
                self.emit(Op.CAST, [tmp], [self.output(t)])
            else:
                raise Unsupported(f"output {self.tensor(t).describe()} cannot be produced from float")
        return tmp, finish

    # --- the subgraph -------------------------------------------------------------------------------
    def convert(self) -> None:
        """Map every operator of the subgraph in order; problems are collected, BAD_DATA raised at once."""
        sub = self.sub
        for t in sub.inputs:
            try:
                self.output(t)
            except Unsupported as e:
                self.context.problems.append(Problem(sub.index, -1, "input", (self.tensor(t).describe(),), str(e)))
                self.values[t] = self.add(Spec(T.TENSOR_FLOAT32, (1,)))
            except BadModel as e:
                raise e if e.located else BadModel(f"{os.path.basename(self.flat.path)}: subgraph {sub.index} input: "
                                                   f"{e.message}", located=True) from None
        for op in sub.operators:
            self._current = op
            self.context.operators[op.label] += 1
            try:
                mapping_of(op)(self, op)
            except Unsupported as e:
                self.context.problems.append(Problem(sub.index, op.index, op.label, self._describe_inputs(op), str(e)))
                self._unmapped.update(op.outputs)
            except BadModel as e:
                raise e if e.located else BadModel(f"{os.path.basename(self.flat.path)}: {op.where}: {e.message}",
                                                   located=True) from None
            except NnError as e:
                self.context.problems.append(Problem(sub.index, op.index, op.label, self._describe_inputs(op),
                                                     f"rejected: {e.message}"))
                self._unmapped.update(op.outputs)
        self._current = None

    def submodel(self, index: int, input_order: list[int], output_order: list[int]) -> Model | None:
        """A finished model of subgraph `index` with its inputs / outputs in the given order (None on problems).
        A subgraph that is not a valid body (the main one, out of range, one of its own callers) is BAD_DATA."""
        context = self.context
        if not 0 < index < len(self.flat.subgraphs):
            raise BadModel(f"subgraph index {index} out of range (the model has {len(self.flat.subgraphs)} "
                           "subgraphs; 0 is the main one)")
        if index in context.active:
            raise BadModel(f"subgraph {index} calls itself (through subgraphs {context.active})")
        if len(context.active) > MAX_NESTING:
            raise BadModel(f"control flow nests more than {MAX_NESTING} subgraphs deep")
        key = (index, tuple(input_order), tuple(output_order))
        if key not in context.submodels:
            sub = self.flat.subgraphs[index]
            for k in input_order:
                if not 0 <= k < len(sub.inputs):
                    raise BadModel(f"subgraph {index} has {len(sub.inputs)} inputs, input {k} is needed")
            for k in output_order:
                if not 0 <= k < len(sub.outputs):
                    raise BadModel(f"subgraph {index} has {len(sub.outputs)} outputs, output {k} is needed")
            context.submodels[key] = None
            before = len(context.problems)
            graph = Graph(context, sub, input_order, output_order)
            context.active.append(index)
            try:
                graph.convert()
            finally:
                context.active.pop()
            if len(context.problems) == before:
                graph.finish()
                context.submodels[key] = graph.m
        return context.submodels[key]

    def _describe_inputs(self, op: FlatOperator) -> tuple[str, ...]:
        return tuple(self.sub.tensors[t].describe() if t >= 0 else "(none)" for t in op.inputs)

    def finish(self) -> None:
        """Identify inputs and outputs (copying outputs that are not written here) and finish the model."""
        sub = self.sub
        name = os.path.basename(self.flat.path)
        inputs = [self.values[sub.inputs[k]] for k in self.input_order]
        outputs = []
        for k in self.output_order:
            t = sub.outputs[k]
            try:
                index = self.input(t)
            except Unsupported as e:
                raise UnsupportedOperatorsError(self.flat.path, [Problem(
                    sub.index, -1, "output", (self.tensor(t).describe(),), str(e))]) from None
            except BadModel as e:
                raise e if e.located else BadModel(f"{name}: subgraph {sub.index} output {k}: {e.message}",
                                                   located=True) from None
            if index not in self._produced or index in outputs or index in inputs:
                copy = self.add(self.specs[index])
                self.emit(Op.RESHAPE, [index, self.const_i32(list(self.specs[index].dims))], [copy])
                index = copy
            outputs.append(index)
        try:
            self.m.identify_inputs_and_outputs(inputs, outputs)
            if self.context.relaxed:
                self.m.relax_computation_float32_to_float16(True)
            self.m.finish()
        except NnError as e:
            raise NnError(ResultCode.BAD_DATA, f"{name}: the imported model is not valid: "
                                               f"{self._explain(e.message)}") from None

    def _explain(self, message: str) -> str:
        """Name the TFLite operator behind an "operation N" of a validation message."""
        match = re.search(r"operation (\d+)", message)
        if match and int(match.group(1)) < len(self.origin):
            index, name = self.origin[int(match.group(1))]
            where = f"subgraph {self.sub.index} " if self.sub.index else ""
            return f"{message} [from TFLite {where}operator {index} {name}]"
        return message
