"""`Model`: the app-facing model builder (ANeuralNetworksModel).

Operands and operations are added, constants set, inputs and outputs identified, then
`finish` validates and freezes it. Values of at most 128 bytes are copied at once
(CONSTANT_COPY); larger ones are referenced and moved into one shared pool at `finish` (M1).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .. import hal
from ..hal import (MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES, DataLocation, NnError, OperandLifeTime,
                   OperandType, OperationType, ResultCode, SymmPerChannelQuantParams, numpy_dtype)
from ..memory import allocate_ashmem
from .memory import Memory
from .values import exact_array

_ALIGN = 16


def _bad(message: str) -> NnError:
    return NnError(ResultCode.BAD_DATA, message)



class Model:
    """A model under construction; after `finish` it is immutable and can be compiled."""

    def __init__(self) -> None:
        self._operands: list[hal.Operand] = []
        self._operations: list[hal.Operation] = []
        self._inputs: tuple[int, ...] = ()
        self._outputs: tuple[int, ...] = ()
        self._values = bytearray()
        self._large: dict[int, bytes] = {}              # operand -> bytes moved to the shared pool at finish
        self._memories: list[Memory] = []               # pools of set_operand_value_from_memory
        self._referenced: dict[int, "Model"] = {}       # SUBGRAPH operand -> referenced model
        self._relaxed = False
        self._identified = False
        self._finished = False
        self._hal: hal.Model | None = None
        self._pool_memory: Memory | None = None

    # --- building -----------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._finished:
            raise NnError(ResultCode.BAD_STATE, f"Model.{what}: the model is already finished")

    def _operand(self, index: int, what: str) -> hal.Operand:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self._operands):
            raise _bad(f"Model.{what}: operand index {index} out of range ({len(self._operands)} operands)")
        return self._operands[index]

    def add_operand(self, type: OperandType, dimensions: Sequence[int] = (), scale: float = 0.0,
                    zero_point: int = 0) -> int:
        """Add an operand and return its index. A 0 dimension is unknown; scalars have no dimensions."""
        self._check_open("add_operand")
        try:
            type = OperandType(type)
        except ValueError:
            raise _bad(f"Model.add_operand: unknown operand type {type}") from None
        dims = tuple(int(d) for d in dimensions)
        if type.is_scalar and dims:
            raise _bad(f"Model.add_operand: scalar type {type.name} cannot have dimensions {dims}")
        if any(d < 0 for d in dims):
            raise _bad(f"Model.add_operand: negative dimension in {dims}")
        self._operands.append(hal.Operand(type, dims, 0, float(np.float32(scale)), int(zero_point)))
        return len(self._operands) - 1

    def set_operand_symm_per_channel_quant_params(self, index: int, scales: Sequence[float], channel_dim: int) -> None:
        self._check_open("set_operand_symm_per_channel_quant_params")
        operand = self._operand(index, "set_operand_symm_per_channel_quant_params")
        if operand.type != OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            raise _bad(f"Model.set_operand_symm_per_channel_quant_params: operand {index} is {operand.type.name}")
        operand.channel_quant = SymmPerChannelQuantParams(tuple(float(np.float32(s)) for s in scales), int(channel_dim))

    def set_operand_value(self, index: int, value: Any) -> None:
        """Set a constant: a numpy array, a Python scalar, bytes, or None for an omitted optional operand."""
        self._check_open("set_operand_value")
        operand = self._operand(index, "set_operand_value")
        self._large.pop(index, None)
        if value is None:
            operand.lifetime = OperandLifeTime.NO_VALUE
            operand.location = DataLocation()
            return
        data = self._to_bytes(operand, value, index)
        if operand.is_fully_specified and len(data) != operand.byte_size():
            raise _bad(f"Model.set_operand_value: operand {index} needs {operand.byte_size()} bytes, got {len(data)}")
        if len(data) <= MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES:
            self._values.extend(b"\0" * (-len(self._values) % 4))
            operand.lifetime = OperandLifeTime.CONSTANT_COPY
            operand.location = DataLocation(0, len(self._values), len(data))
            self._values.extend(data)
        else:
            operand.lifetime = OperandLifeTime.CONSTANT_REFERENCE
            operand.location = DataLocation(0, 0, len(data))
            self._large[index] = data

    @staticmethod
    def _to_bytes(operand: hal.Operand, value: Any, index: int) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        dtype = numpy_dtype(operand.type)
        try:
            arr = exact_array(value, dtype)
        except (TypeError, ValueError, OverflowError, FloatingPointError) as e:
            raise _bad(f"Model.set_operand_value: operand {index} ({operand.type.name}): {e}") from None
        return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()

    def set_operand_value_from_memory(self, index: int, memory: Memory, offset: int, length: int) -> None:
        """Reference a constant in shared memory in place (CONSTANT_REFERENCE)."""
        self._check_open("set_operand_value_from_memory")
        operand = self._operand(index, "set_operand_value_from_memory")
        if not isinstance(memory, Memory):
            raise NnError(ResultCode.UNEXPECTED_NULL, "Model.set_operand_value_from_memory: memory is not a Memory")
        memory.check_region(offset, length, f"Model.set_operand_value_from_memory operand {index}")
        if operand.is_fully_specified and length != operand.byte_size():
            raise _bad(f"Model.set_operand_value_from_memory: operand {index} needs {operand.byte_size()} bytes, "
                       f"got {length}")
        if memory not in self._memories:
            self._memories.append(memory)
        self._large.pop(index, None)
        operand.lifetime = OperandLifeTime.CONSTANT_REFERENCE
        operand.location = DataLocation(1 + self._memories.index(memory), offset, length)  # re-based in _build

    def set_operand_value_from_model(self, index: int, model: "Model") -> None:
        """Make operand `index` (type SUBGRAPH) refer to a finished model, for IF and WHILE."""
        self._check_open("set_operand_value_from_model")
        operand = self._operand(index, "set_operand_value_from_model")
        if operand.type != OperandType.SUBGRAPH:
            raise _bad(f"Model.set_operand_value_from_model: operand {index} is {operand.type.name}, not SUBGRAPH")
        if not isinstance(model, Model) or not model._finished:
            raise _bad("Model.set_operand_value_from_model: the referenced model must be finished")
        operand.lifetime = OperandLifeTime.SUBGRAPH
        self._referenced[index] = model

    def add_operation(self, type: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self._check_open("add_operation")
        try:
            type = OperationType(type)
        except ValueError:
            raise _bad(f"Model.add_operation: unknown operation type {type}") from None
        for kind, indexes in (("input", inputs), ("output", outputs)):
            for i in indexes:
                self._operand(i, f"add_operation({type.name}) {kind}")
        self._operations.append(hal.Operation(type, tuple(int(i) for i in inputs), tuple(int(i) for i in outputs)))

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self._check_open("identify_inputs_and_outputs")
        for kind, indexes in (("input", inputs), ("output", outputs)):
            for i in indexes:
                operand = self._operand(i, f"identify_inputs_and_outputs {kind}")
                if kind == "input" and operand.lifetime in (OperandLifeTime.CONSTANT_COPY,
                                                            OperandLifeTime.CONSTANT_REFERENCE):
                    raise _bad(f"Model.identify_inputs_and_outputs: operand {i} is a constant")
            if len(set(indexes)) != len(indexes):
                raise _bad(f"Model.identify_inputs_and_outputs: duplicate {kind} operands {list(indexes)}")
        self._inputs = tuple(int(i) for i in inputs)
        self._outputs = tuple(int(i) for i in outputs)
        self._identified = True

    def relax_computation_float32_to_float16(self, allow: bool = True) -> None:
        self._check_open("relax_computation_float32_to_float16")
        self._relaxed = bool(allow)

    # --- finishing ----------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def input_count(self) -> int:
        return len(self._inputs)

    @property
    def output_count(self) -> int:
        return len(self._outputs)

    def finish(self) -> None:
        """Validate and freeze; errors are BAD_DATA with the validator's message."""
        self._check_open("finish")
        if not self._identified:
            raise _bad("Model.finish: identify_inputs_and_outputs was not called")
        hal_model = self._build()
        from ..validation import validate_model
        try:
            validate_model(hal_model, runtime=True)
        except NnError as e:
            raise NnError(ResultCode.BAD_DATA, e.message) from None
        self._hal = hal_model
        self._finished = True

    @classmethod
    def remembered(cls, hal_model: hal.Model, memories: Sequence[Memory]) -> "Model":
        """A finished model from HAL data that this runtime validated when it built it before (an import
        memo's hit: `importers.tflite.remembered`); `memories` hold its pools, in pool order. Not
        validated again: the caller vouches for the data."""
        m = cls()
        m._operands = list(hal_model.main.operands)
        m._operations = list(hal_model.main.operations)
        m._inputs, m._outputs = tuple(hal_model.main.input_indexes), tuple(hal_model.main.output_indexes)
        m._memories = list(memories)
        m._relaxed = hal_model.relax_computation_float32_to_float16
        m._identified = m._finished = True
        m._hal = hal_model
        return m

    def _subgraph(self, operands: list[hal.Operand]) -> hal.Subgraph:
        return hal.Subgraph(operands, list(self._operations), self._inputs, self._outputs)

    def _build(self) -> hal.Model:
        """The HAL model: consumer counts, lifetimes of inputs/outputs, the shared pool, referenced graphs."""
        pools: list[hal.MemoryPool] = []
        operands = [dataclasses.replace(o) for o in self._operands]
        # Pool 0 is the shared pool of large values when there are any; the app's memories follow.
        shift = 1 if self._large else 0
        for index, o in enumerate(operands):
            if o.lifetime == OperandLifeTime.CONSTANT_REFERENCE and index not in self._large:
                o.location = DataLocation(o.location.pool_index - 1 + shift, o.location.offset, o.location.length)
        if self._large:
            total = sum(len(d) + _ALIGN for d in self._large.values())
            self._pool_memory = Memory(allocate_ashmem(total, "nnapi-constants"))
            pools.append(self._pool_memory.pool)
            mapped = self._pool_memory.mapped()
            offset = 0
            for index, data in self._large.items():
                mapped.view(offset, len(data))[:] = data
                operands[index].location = DataLocation(0, offset, len(data))
                offset += len(data) + (-len(data) % _ALIGN)
        pools.extend(m.pool for m in self._memories)
        for o in operands:
            o.number_of_consumers = 0
        for op in self._operations:
            for i in op.inputs:
                operands[i].number_of_consumers += 1
        for i in self._inputs:
            operands[i].lifetime = OperandLifeTime.SUBGRAPH_INPUT
        for i in self._outputs:
            operands[i].lifetime = OperandLifeTime.SUBGRAPH_OUTPUT
        referenced: list[hal.Subgraph] = []
        values = bytearray(self._values)
        seen: dict[int, int] = {}  # id(Model) -> referenced index

        def add_referenced(model: "Model") -> int:
            if id(model) in seen:
                return seen[id(model)]
            sub_model = model._hal
            seen[id(model)] = len(referenced)
            referenced.append(None)  # placeholder, filled below
            # Re-base the referenced model's constants into this model's values and pools.
            base_values = len(values)
            values.extend(sub_model.operand_values)
            values.extend(b"\0" * (-len(values) % 4))
            base_pool = len(pools)
            pools.extend(sub_model.pools)
            ref_map = {j: add_referenced(m) for j, m in model._referenced.items()}
            sub_operands = []
            for j, o in enumerate(sub_model.main.operands):
                o = dataclasses.replace(o)
                if o.lifetime == OperandLifeTime.CONSTANT_COPY:
                    o.location = DataLocation(0, o.location.offset + base_values, o.location.length)
                elif o.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
                    o.location = DataLocation(o.location.pool_index + base_pool, o.location.offset, o.location.length)
                elif o.lifetime == OperandLifeTime.SUBGRAPH:
                    o.location = _subgraph_location(values, ref_map[j])
                sub_operands.append(o)
            referenced[seen[id(model)]] = dataclasses.replace(sub_model.main, operands=sub_operands)
            return seen[id(model)]

        for index, model in self._referenced.items():
            operands[index].location = _subgraph_location(values, add_referenced(model))
        return hal.Model(self._subgraph(operands), referenced, bytes(values), pools, self._relaxed)

    def to_hal(self) -> hal.Model:
        """The finished model as HAL plain data (what drivers receive)."""
        if self._hal is None:
            raise NnError(ResultCode.BAD_STATE, "Model.to_hal: the model is not finished")
        return self._hal


def _subgraph_location(values: bytearray, subgraph_index: int) -> DataLocation:
    """SUBGRAPH operands name their referenced subgraph in `location.offset` (as in HAL 1.3)."""
    return DataLocation(0, subgraph_index, 0)


def model_token(model: Model) -> bytes:
    """A 32-byte cache token derived from a finished model's content, for apps that have none."""
    import hashlib

    from .cache_files import content_fingerprint
    return hashlib.sha256(b"nnapi-model-token" + content_fingerprint(model.to_hal())).digest()
