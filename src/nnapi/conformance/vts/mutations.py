"""The 21 model-mutation classes of the VTS `ValidateModel.cpp` (VTS-BEHAVIOURS 5.1), on HAL models.

`mutations(model)` yields `Mutation`s of a valid model's main graph, class by class in the VTS order;
each one is invalid, so a driver must answer get_supported_operations (when the preference and priority
are still valid) and prepare_model with INVALID_ARGUMENT. The skips are the VTS's own: combinations an
operation legitimately accepts are never generated.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Iterator

from ...hal import (DataLocation, ExecutionPreference, Model, Operand, OperandLifeTime as L, OperandType as T,
                    Operation, OperationType as Op, Priority, Subgraph)
from ...hal.enums import (OPERAND_TYPE_FUNDAMENTAL_MAX, OPERAND_TYPE_OEM_MAX, OPERAND_TYPE_OEM_MIN,
                          OPERATION_TYPE_FUNDAMENTAL_MAX, OPERATION_TYPE_OEM_MAX, OPERATION_TYPE_OEM_MIN)

#: Half of the binder transaction limit: the VTS never makes a constant copy that grows a model past it.
BINDER_HALF = 64 * 1024 // 2

CLASSES = (
    "mutateExecutionOrderTest", "mutateOperandTypeTest", "mutateOperandRankTest", "mutateOperandScaleTest",
    "mutateOperandZeroPointTest", "mutateOperandLifeTimeTest", "mutateOperandInputOutputTest",
    "mutateOperandNumberOfConsumersTest", "mutateOperandAddWriterTest", "mutateOperationOperandTypeTest",
    "mutateOperationTypeTest", "mutateOperationInputOperandIndexTest", "mutateOperationOutputOperandIndexTest",
    "mutateOperationRemoveWriteTest", "removeOperandTest", "removeOperationTest", "removeOperationInputTest",
    "removeOperationOutputTest", "addOperationInputTest", "addOperationOutputTest", "mutateExecutionPreferenceTest",
    "mutateExecutionPriorityTest",
)


@dataclass
class Mutation:
    """One invalid variant: its class, what changed, the model and the preference and priority to pass."""

    cls: str
    what: str
    model: Model
    preference: int = ExecutionPreference.FAST_SINGLE_ANSWER
    priority: int = Priority.MEDIUM

    @property
    def valid_options(self) -> bool:
        return self.preference in (0, 1, 2) and self.priority in (0, 1, 2)

    def describe(self) -> str:
        return f"{self.cls}: {self.what}"


class _Edit:
    """A copy of a model whose main graph may be changed without touching the original."""

    def __init__(self, model: Model) -> None:
        main = model.main
        self.operands = [copy.copy(o) for o in main.operands]
        self.operations = list(main.operations)
        self.inputs = list(main.input_indexes)
        self.outputs = list(main.output_indexes)
        self.values = model.operand_values
        self._model = model

    def add_operand(self, operand: Operand) -> int:
        self.operands.append(operand)
        return len(self.operands) - 1

    def finish(self) -> Model:
        m = self._model
        return Model(Subgraph(self.operands, self.operations, tuple(self.inputs), tuple(self.outputs)), m.referenced,
                     self.values, m.pools, m.relax_computation_float32_to_float16)


def _size(operand: Operand) -> int:
    """Bytes of the operand's data; 0 when its shape is unknown."""
    t = operand.type
    if t.is_scalar:
        return t.element_size
    if t == T.SUBGRAPH or not operand.dimensions or 0 in operand.dimensions:
        return 0
    return t.element_size * math.prod(operand.dimensions)


def _become_constant_copy(edit: _Edit, index: int) -> None:
    operand = edit.operands[index]
    size = _size(operand)
    offset = len(edit.values)
    edit.values = bytes(edit.values) + bytes(size)
    operand.lifetime = L.CONSTANT_COPY
    operand.location = DataLocation(0, offset, size)


def _model_size(model: Model) -> int:
    return len(model.operand_values) + 64 * len(model.main.operands)


# --- the classes ----------------------------------------------------------------------------------------
def _execution_order(model: Model) -> Iterator[Mutation]:
    main = model.main
    for k, op in enumerate(main.operations):
        if any(main.operands[i].lifetime in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT) for i in op.inputs):
            e = _Edit(model)
            e.operations.insert(0, e.operations.pop(k))
            yield Mutation("mutateExecutionOrderTest", f"operation {k} (a reader) moved first", e.finish())
        if any(main.operands[i].number_of_consumers > 0 for i in op.outputs):
            e = _Edit(model)
            e.operations.append(e.operations.pop(k))
            yield Mutation("mutateExecutionOrderTest", f"operation {k} (a writer) moved last", e.finish())


def _operand_type(model: Model) -> Iterator[Mutation]:
    for i in range(len(model.main.operands)):
        for bad in (0xFFFFFFFF, OPERAND_TYPE_FUNDAMENTAL_MAX + 1, OPERAND_TYPE_OEM_MIN - 1, OPERAND_TYPE_OEM_MAX + 1):
            e = _Edit(model)
            e.operands[i].type = bad  # a raw value outside the enum, as it arrives from another process
            yield Mutation("mutateOperandTypeTest", f"operand {i} type set to {bad}", e.finish())


_SCALARS = (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL)


def _operand_rank(model: Model) -> Iterator[Mutation]:
    for i, o in enumerate(model.main.operands):
        if o.type in _SCALARS:
            e = _Edit(model)
            e.operands[i].dimensions = (0,)
            yield Mutation("mutateOperandRankTest", f"scalar operand {i} ({o.type.name}) given rank 1", e.finish())


def _invalid_scale(t: T) -> float:
    if t in (*_SCALARS, T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
             T.SUBGRAPH):
        return 1.0
    if t == T.TENSOR_INT32:
        return -1.0
    return 0.0


def _operand_scale(model: Model) -> Iterator[Mutation]:
    for i, o in enumerate(model.main.operands):
        bad = _invalid_scale(o.type)
        e = _Edit(model)
        e.operands[i].scale = bad
        yield Mutation("mutateOperandScaleTest", f"operand {i} ({o.type.name}) scale set to {bad}", e.finish())


def _invalid_zero_points(t: T) -> tuple[int, ...]:
    if t in (*_SCALARS, T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
             T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.SUBGRAPH):
        return (1,)
    return {T.TENSOR_QUANT8_ASYMM: (-1, 256), T.TENSOR_QUANT8_SYMM: (-129, -1, 1, 128),
            T.TENSOR_QUANT16_ASYMM: (-1, 65536), T.TENSOR_QUANT16_SYMM: (-32769, -1, 1, 32768),
            T.TENSOR_QUANT8_ASYMM_SIGNED: (-129, 128)}.get(t, ())


def _operand_zero_point(model: Model) -> Iterator[Mutation]:
    for i, o in enumerate(model.main.operands):
        for bad in _invalid_zero_points(o.type):
            e = _Edit(model)
            e.operands[i].zero_point = bad
            yield Mutation("mutateOperandZeroPointTest", f"operand {i} ({o.type.name}) zero point set to {bad}",
                           e.finish())


def _lifetime(model: Model) -> Iterator[Mutation]:
    size = _model_size(model)
    for i, o in enumerate(model.main.operands):
        if o.lifetime in (L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE):
            targets = [L.SUBGRAPH_INPUT, L.CONSTANT_COPY]
        elif o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH_INPUT):
            targets = [L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT]
        else:
            continue
        n = _size(o)
        if not n or size + n > BINDER_HALF:
            targets = [t for t in targets if t != L.CONSTANT_COPY]
        for target in targets:
            e = _Edit(model)
            operand = e.operands[i]
            if operand.lifetime == L.SUBGRAPH_INPUT:
                e.inputs.remove(i)
            elif operand.lifetime == L.SUBGRAPH_OUTPUT:
                e.outputs.remove(i)
            operand.lifetime = target
            operand.location = DataLocation()
            if target == L.CONSTANT_COPY:
                _become_constant_copy(e, i)
            elif target == L.SUBGRAPH_INPUT:
                e.inputs.append(i)
            elif target == L.SUBGRAPH_OUTPUT:
                e.outputs.append(i)
            yield Mutation("mutateOperandLifeTimeTest", f"operand {i} lifetime {o.lifetime.name} -> {target.name}",
                           e.finish())


def _input_output(model: Model) -> Iterator[Mutation]:
    size = _model_size(model)
    for i, o in enumerate(model.main.operands):
        e = _Edit(model)
        operand = e.operands[i]
        if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            operand.lifetime = L.SUBGRAPH_INPUT
            operand.location = DataLocation()
        elif o.lifetime == L.SUBGRAPH_INPUT:
            n = _size(o)
            if not n or size + n > BINDER_HALF:
                continue
            _become_constant_copy(e, i)
        elif o.lifetime == L.SUBGRAPH_OUTPUT:
            operand.lifetime = L.TEMPORARY_VARIABLE
        elif o.lifetime == L.TEMPORARY_VARIABLE:
            operand.lifetime = L.SUBGRAPH_OUTPUT
        else:
            continue
        yield Mutation("mutateOperandInputOutputTest", f"operand {i} lifetime {o.lifetime.name} -> "
                       f"{operand.lifetime.name} without changing the input and output lists", e.finish())


def _consumers(model: Model) -> Iterator[Mutation]:
    for i, o in enumerate(model.main.operands):
        n = o.number_of_consumers
        for bad in ((1,) if n == 0 else (n - 1, n + 1)):
            e = _Edit(model)
            e.operands[i].number_of_consumers = bad
            yield Mutation("mutateOperandNumberOfConsumersTest", f"operand {i} number of consumers {n} -> {bad}",
                           e.finish())


def _fresh_output(e: _Edit, index: int) -> int:
    """A new unconsumed temporary copied from operand `index` (a SUBGRAPH_OUTPUT becomes a temporary)."""
    operand = dataclasses.replace(e.operands[index], number_of_consumers=0)
    if operand.lifetime == L.SUBGRAPH_OUTPUT:
        operand.lifetime = L.TEMPORARY_VARIABLE
    return e.add_operand(operand)


def _add_writer(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for bad in range(len(op.outputs)):
            e = _Edit(model)
            for i in op.inputs:
                e.operands[i].number_of_consumers += 1
            outputs = [o if n == bad else _fresh_output(e, o) for n, o in enumerate(op.outputs)]
            e.operations.append(Operation(op.type, op.inputs, tuple(outputs)))
            yield Mutation("mutateOperandAddWriterTest", f"a copy of operation {k} also writes operand "
                           f"{op.outputs[bad]}", e.finish())


def _retyped(operand: Operand, t: T) -> Operand:
    """The VTS `mutateOperand`: the operand as type `t`, kept locally well-formed."""
    new = dataclasses.replace(operand, type=t)
    dims = operand.dimensions if operand.dimensions else (1,)
    if t in _SCALARS:
        new.dimensions, new.scale, new.zero_point, new.channel_quant = (), 0.0, 0, None
    elif t in (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        new.dimensions, new.scale, new.zero_point, new.channel_quant = dims, 0.0, 0, None
    elif t == T.TENSOR_INT32:
        new.dimensions, new.zero_point, new.channel_quant = dims, 0, None
    elif t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM,
               T.TENSOR_QUANT8_ASYMM_SIGNED):
        new.dimensions, new.scale, new.channel_quant = dims, (operand.scale or 1.0), None
    elif t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        from ...hal import SymmPerChannelQuantParams
        channels = operand.dimensions[0] if operand.dimensions else 0
        new.dimensions, new.scale, new.zero_point = dims, 0.0, 0
        new.channel_quant = SymmPerChannelQuantParams(tuple([1.0] * channels), 0)
    return new


_ANY_OF_FIVE = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_RANK_INPUTS = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM,
                T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM,
                T.TENSOR_QUANT8_ASYMM_SIGNED)
_FLOATS = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


def _operand_type_skip(model: Model, index: int, t: T) -> bool:
    """The VTS `mutateOperationOperandTypeSkip`: types an operation legitimately accepts there."""
    main = model.main
    if t == main.operands[index].type or t in (T.OEM, T.TENSOR_OEM_BYTE):
        return True
    for op in main.operations:
        first_in = op.inputs[0] if op.inputs else None
        first_out = op.outputs[0] if op.outputs else None
        if op.type == Op.LSH_PROJECTION and len(op.inputs) > 1 and index == op.inputs[1]:
            return True
        if op.type in (Op.CAST, Op.ARGMAX, Op.ARGMIN) and t in _ANY_OF_FIVE:
            return True
        if op.type == Op.QUANTIZE and ((index == first_in and t in _FLOATS)
                                       or (index == first_out and t in (T.TENSOR_QUANT8_ASYMM,
                                                                        T.TENSOR_QUANT8_ASYMM_SIGNED))):
            return True
        if op.type == Op.RANDOM_MULTINOMIAL and index == first_in and t in _FLOATS:
            return True
        if op.type == Op.DEQUANTIZE and ((index == first_in and t in (T.TENSOR_QUANT8_ASYMM,
                                                                      T.TENSOR_QUANT8_ASYMM_SIGNED,
                                                                      T.TENSOR_QUANT8_SYMM,
                                                                      T.TENSOR_QUANT8_SYMM_PER_CHANNEL))
                                         or (index == first_out and t in _FLOATS)):
            return True
        if op.type in (Op.TRANSPOSE_CONV_2D, Op.GROUPED_CONV_2D, Op.DEPTHWISE_CONV_2D, Op.CONV_2D) \
                and len(op.inputs) > 1 and index == op.inputs[1] \
                and t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL):
            return True
        if op.type == Op.AXIS_ALIGNED_BBOX_TRANSFORM and len(op.inputs) > 1 and index == op.inputs[1] \
                and t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
            return True
        if op.type == Op.RANK and index == first_in and t in _RANK_INPUTS:
            return True
    return False


_VALID_TYPES = [t for t in T if t not in (T.OEM, T.TENSOR_OEM_BYTE)]


def _operation_operand_type(model: Model) -> Iterator[Mutation]:
    for i, o in enumerate(model.main.operands):
        for t in _VALID_TYPES:
            if _operand_type_skip(model, i, t):
                continue
            e = _Edit(model)
            e.operands[i] = _retyped(o, t)
            yield Mutation("mutateOperationOperandTypeTest", f"operand {i} ({o.type.name}) set to type {t.name}",
                           e.finish())


def _operation_type(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for bad in (OPERATION_TYPE_FUNDAMENTAL_MAX + 1, OPERATION_TYPE_OEM_MIN - 1, OPERATION_TYPE_OEM_MAX + 1):
            e = _Edit(model)
            e.operations[k] = Operation(bad, op.inputs, op.outputs)  # type: ignore[arg-type]  (a raw value)
            yield Mutation("mutateOperationTypeTest", f"operation {k} ({op.type.name}) type set to {bad}", e.finish())


def _operand_index(model: Model, outputs: bool) -> Iterator[Mutation]:
    bad = len(model.main.operands)
    cls = "mutateOperationOutputOperandIndexTest" if outputs else "mutateOperationInputOperandIndexTest"
    for k, op in enumerate(model.main.operations):
        indexes = op.outputs if outputs else op.inputs
        for n in range(len(indexes)):
            e = _Edit(model)
            changed = tuple(bad if j == n else x for j, x in enumerate(indexes))
            e.operations[k] = Operation(op.type, op.inputs, changed) if outputs else Operation(op.type, changed,
                                                                                                op.outputs)
            yield Mutation(cls, f"operation {k} {'output' if outputs else 'input'} {n} set to operand {bad} "
                           "(out of range)", e.finish())


def _remove_write(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n, index in enumerate(op.outputs):
            if model.main.operands[index].number_of_consumers == 0:
                continue
            e = _Edit(model)
            outputs = list(op.outputs)
            outputs[n] = _fresh_output(e, index)
            e.operations[k] = Operation(op.type, op.inputs, tuple(outputs))
            yield Mutation("mutateOperationRemoveWriteTest", f"operation {k} writes a new operand instead of "
                           f"operand {index}, which is read but then never written", e.finish())


_MULTI_OUTPUT = (Op.SPLIT, Op.BIDIRECTIONAL_SEQUENCE_LSTM, Op.BIDIRECTIONAL_SEQUENCE_RNN,
                 Op.UNIDIRECTIONAL_SEQUENCE_LSTM, Op.UNIDIRECTIONAL_SEQUENCE_RNN)


def _shift(indexes: tuple[int, ...] | list[int], removed: int) -> tuple[int, ...]:
    return tuple(i - 1 if i > removed else i for i in indexes if i != removed)


def _remove_operand_skip(model: Model, i: int) -> bool:
    """Unused operands (removing them changes nothing), the outputs of operations with a variable number of
    outputs, and optional trailing inputs (removing one leaves a valid operation, as in
    removeOperationInputTest)."""
    main = model.main
    if main.operands[i].number_of_consumers == 0:
        return True
    for op in main.operations:
        if op.type in _MULTI_OUTPUT and i in op.outputs:
            return True
        if any(index == i and _remove_input_skip(op, n) for n, index in enumerate(op.inputs)):
            return True
    return False


def _remove_operand(model: Model) -> Iterator[Mutation]:
    main = model.main
    for i in range(len(main.operands)):
        if _remove_operand_skip(model, i):
            continue
        e = _Edit(model)
        del e.operands[i]
        e.operations = [Operation(op.type, _shift(op.inputs, i), _shift(op.outputs, i)) for op in e.operations]
        e.inputs = list(_shift(e.inputs, i))
        e.outputs = list(_shift(e.outputs, i))
        yield Mutation("removeOperandTest", f"operand {i} removed", e.finish())


def _remove_operation(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        e = _Edit(model)
        for i in op.inputs:
            e.operands[i].number_of_consumers -= 1
        del e.operations[k]
        yield Mutation("removeOperationTest", f"operation {k} ({op.type.name}) removed", e.finish())


def _remove_input_skip(op: Operation, n: int) -> bool:
    size = len(op.inputs)
    if op.type == Op.CONCATENATION:
        return size > 2 and n != size - 1
    if op.type == Op.DEPTHWISE_CONV_2D:
        return (size == 12 and n == 11) or (size == 9 and n == 8)
    if op.type in (Op.CONV_2D, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D):
        return (size == 11 and n == 10) or (size == 8 and n == 7)
    if op.type in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR):
        return size > 3 and n > 2
    if op.type in (Op.SPACE_TO_DEPTH, Op.DEPTH_TO_SPACE, Op.BATCH_TO_SPACE_ND):
        return size == 3 and n == 2
    if op.type == Op.SPACE_TO_BATCH_ND:
        return size == 4 and n == 3
    if op.type == Op.L2_NORMALIZATION:
        return size == 2 and n == 1
    if op.type == Op.LOCAL_RESPONSE_NORMALIZATION:
        return size == 6 and n == 5
    if op.type == Op.SOFTMAX:
        return size == 3 and n == 2
    return False


def _remove_operation_input(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n, index in enumerate(op.inputs):
            if _remove_input_skip(op, n):
                continue
            e = _Edit(model)
            e.operands[index].number_of_consumers -= 1
            e.operations[k] = Operation(op.type, op.inputs[:n] + op.inputs[n + 1:], op.outputs)
            yield Mutation("removeOperationInputTest", f"operation {k} ({op.type.name}) input {n} removed", e.finish())


def _remove_operation_output(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n in range(len(op.outputs)):
            e = _Edit(model)
            e.operations[k] = Operation(op.type, op.inputs, op.outputs[:n] + op.outputs[n + 1:])
            yield Mutation("removeOperationOutputTest", f"operation {k} ({op.type.name}) output {n} removed",
                           e.finish())


def _add_input_skip(op: Operation) -> bool:
    size = len(op.inputs)
    return ((op.type == Op.L2_NORMALIZATION and size == 1) or (op.type == Op.LOCAL_RESPONSE_NORMALIZATION and size == 5)
            or (op.type == Op.SOFTMAX and size == 2)
            or (op.type in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR) and size < 6))


def _extra_int32(lifetime: L) -> Operand:
    return Operand(T.INT32, (), 1, 0.0, 0, lifetime, DataLocation())


def _add_operation_input(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        if _add_input_skip(op):
            continue
        e = _Edit(model)
        index = e.add_operand(_extra_int32(L.SUBGRAPH_INPUT))
        e.operations[k] = Operation(op.type, op.inputs + (index,), op.outputs)
        e.inputs.append(index)
        yield Mutation("addOperationInputTest", f"operation {k} ({op.type.name}) given an extra INT32 input",
                       e.finish())


def _add_operation_output(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        e = _Edit(model)
        index = e.add_operand(_extra_int32(L.SUBGRAPH_OUTPUT))
        e.operations[k] = Operation(op.type, op.inputs, op.outputs + (index,))
        e.outputs.append(index)
        yield Mutation("addOperationOutputTest", f"operation {k} ({op.type.name}) given an extra INT32 output",
                       e.finish())


def _preference(model: Model) -> Iterator[Mutation]:
    for bad in (-1, 3):
        yield Mutation("mutateExecutionPreferenceTest", f"preference {bad}", model, preference=bad)


def _priority(model: Model) -> Iterator[Mutation]:
    for bad in (-1, 3):
        yield Mutation("mutateExecutionPriorityTest", f"priority {bad}", model, priority=bad)


GENERATORS: dict[str, Callable[[Model], Iterator[Mutation]]] = {
    "mutateExecutionOrderTest": _execution_order,
    "mutateOperandTypeTest": _operand_type,
    "mutateOperandRankTest": _operand_rank,
    "mutateOperandScaleTest": _operand_scale,
    "mutateOperandZeroPointTest": _operand_zero_point,
    "mutateOperandLifeTimeTest": _lifetime,
    "mutateOperandInputOutputTest": _input_output,
    "mutateOperandNumberOfConsumersTest": _consumers,
    "mutateOperandAddWriterTest": _add_writer,
    "mutateOperationOperandTypeTest": _operation_operand_type,
    "mutateOperationTypeTest": _operation_type,
    "mutateOperationInputOperandIndexTest": lambda m: _operand_index(m, False),
    "mutateOperationOutputOperandIndexTest": lambda m: _operand_index(m, True),
    "mutateOperationRemoveWriteTest": _remove_write,
    "removeOperandTest": _remove_operand,
    "removeOperationTest": _remove_operation,
    "removeOperationInputTest": _remove_operation_input,
    "removeOperationOutputTest": _remove_operation_output,
    "addOperationInputTest": _add_operation_input,
    "addOperationOutputTest": _add_operation_output,
    "mutateExecutionPreferenceTest": _preference,
    "mutateExecutionPriorityTest": _priority,
}


def mutations(model: Model, per_class: int | None = None, seed: int = 0) -> Iterator[Mutation]:
    """Every class's mutations of `model`, in the VTS order; with `per_class`, at most that many of each
    class, spread evenly over the class's variants (deterministic)."""
    for cls in CLASSES:
        variants = GENERATORS[cls](model)
        if per_class is None:
            yield from variants
            continue
        every = list(variants)
        if len(every) <= per_class:
            yield from every
            continue
        step = len(every) / per_class
        offset = (seed % max(1, int(step))) if step >= 2 else 0
        for n in range(per_class):
            yield every[min(len(every) - 1, int(n * step) + offset)]
