"""`MemoryDesc` and memory from it (memory domains on the runtime side; Android's MemoryBuilder).

    desc = nnapi.MemoryDesc()
    desc.add_input_role(compilation, 1)          # (compilation, input or output index, frequency)
    desc.add_output_role(compilation, 0)
    desc.set_dimensions((1, 256))                # optional: refines unknown dimensions
    desc.finish()
    state = nnapi.Memory.from_desc(desc)         # a driver-managed buffer when one device owns every role

Rules (VTS-BEHAVIOURS 3.4, 3.5):
- roles need a finished compilation, an index in range, a frequency in (0, 1], no role twice,
  and operands of one type, scale, zero point and per-channel parameters, with compatible
  dimensions (all BAD_DATA); nothing changes after `finish` (BAD_STATE);
- each main-model role expands to the roles of the partitions that read or write that operand;
  the runtime asks a device to `allocate` only when all of them are prepared on the same single
  device; a failed or impossible allocation falls back to a BLOB hardware buffer (every device of
  feature level >= 30) or ashmem of the operand's size, unless a role comes from a compilation
  with an explicit device list or the size is unknown: then OP_FAILED;
- the memory is usable only in its roles, with offset = length = 0, and tracks its dimensions
  and initialized flag (`device_memory.DeviceMemoryValidator`): an uninitialized input fails with OP_FAILED.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from .. import hal
from ..hal import (BufferDesc, BufferRole, IBuffer, NnError, ResultCode, byte_size, combine_dims, is_fully_specified,
                   is_int)
from ..memory import HardwareBuffer, allocate_ashmem, dup_handle
from ..memory.domains import BufferOperand
from .compilation import Compilation
from .device_memory import DeviceMemoryValidator
from .memory import Memory

INPUT, OUTPUT = "input", "output"


def _bad(message: str) -> NnError:
    return NnError(ResultCode.BAD_DATA, message)


class MemoryDesc:
    """The properties of a memory for a set of roles (ANeuralNetworksMemoryDesc)."""

    def __init__(self) -> None:
        self._roles: list[tuple[Compilation, str, int, float]] = []
        self._operand: hal.Operand | None = None
        self._metadata: BufferOperand | None = None
        self._dims: tuple[int, ...] = ()
        self._finished = False
        # Set by finish:
        self._step_roles: list[tuple[object, object, str, int, float]] = []  # (prepared, device, io, index, freq)
        self._devices: list = []
        self._fallback_allowed = False

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def dimensions(self) -> tuple[int, ...]:
        return self._dims

    def _check_open(self, what: str) -> None:
        if self._finished:
            raise NnError(ResultCode.BAD_STATE, f"MemoryDesc.{what}: the descriptor is already finished")

    def add_input_role(self, compilation: Compilation, index: int, frequency: float = 1.0) -> None:
        """Declare that the memory may be input `index` of `compilation`; `frequency` in (0, 1]."""
        self._add_role("add_input_role", compilation, INPUT, index, frequency)

    def add_output_role(self, compilation: Compilation, index: int, frequency: float = 1.0) -> None:
        """Declare that the memory may be output `index` of `compilation`; `frequency` in (0, 1]."""
        self._add_role("add_output_role", compilation, OUTPUT, index, frequency)

    def _add_role(self, what: str, compilation: Compilation, io: str, index: int, frequency: float) -> None:
        self._check_open(what)
        if compilation is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, f"MemoryDesc.{what}: compilation is None")
        if not isinstance(compilation, Compilation) or not compilation.finished:
            raise _bad(f"MemoryDesc.{what}: the compilation must be successfully finished")
        main = compilation.model.to_hal().main
        indexes = main.input_indexes if io == INPUT else main.output_indexes
        if not is_int(index) or not 0 <= index < len(indexes):
            raise _bad(f"MemoryDesc.{what}: {io} index {index!r} out of range ({len(indexes)} {io}s)")
        index = int(index)
        if not isinstance(frequency, numbers.Real) or isinstance(frequency, bool) or not 0.0 < frequency <= 1.0:
            raise _bad(f"MemoryDesc.{what}: frequency {frequency!r} must be in (0, 1]")
        if any(c is compilation and i == io and k == index for c, i, k, _ in self._roles):
            raise _bad(f"MemoryDesc.{what}: {io} {index} of this compilation is already a role")
        operand = main.operands[indexes[index]]
        metadata = BufferOperand.of(operand)
        if self._metadata is not None and metadata != self._metadata:
            raise _bad(f"MemoryDesc.{what}: {io} {index} is {metadata.type.name} (scale {metadata.scale}, zero "
                       f"point {metadata.zero_point}, per-channel {metadata.channel_quant}), the other roles "
                       f"{self._metadata.type.name} (scale {self._metadata.scale}, zero point "
                       f"{self._metadata.zero_point}, per-channel {self._metadata.channel_quant})")
        if metadata.type.is_scalar:
            if self._dims:
                raise _bad(f"MemoryDesc.{what}: {io} {index} is a scalar but the dimensions are {list(self._dims)}")
            dims: tuple[int, ...] = ()
        else:
            dims = combine_dims(self._dims, operand.dimensions)
            if dims is None:
                raise _bad(f"MemoryDesc.{what}: {io} {index} has dimensions {list(operand.dimensions)}, "
                           f"incompatible with {list(self._dims)}")
        self._metadata = metadata
        self._operand = operand
        self._dims = dims
        self._roles.append((compilation, io, index, float(frequency)))

    def set_dimensions(self, dimensions: Sequence[int] | None) -> None:
        """Refine the dimensions (0 = unknown); None or () for a scalar."""
        self._check_open("set_dimensions")
        dims = () if dimensions is None else dimensions
        if not isinstance(dims, (tuple, list, np.ndarray)) or not all(is_int(d) and 0 <= d < 2**32 for d in dims):
            raise _bad(f"MemoryDesc.set_dimensions: dimensions must be non-negative integers, got {dimensions!r}")
        dims = tuple(int(d) for d in dims)
        if self._metadata is not None and self._metadata.type.is_scalar and dims:
            raise _bad(f"MemoryDesc.set_dimensions: the roles are scalars, dimensions {list(dims)} are not allowed")
        combined = combine_dims(self._dims, dims)
        if combined is None:
            raise _bad(f"MemoryDesc.set_dimensions: {list(dims)} is incompatible with {list(self._dims)}")
        self._dims = combined

    def finish(self) -> "MemoryDesc":
        """Freeze the descriptor and work out which device can allocate it."""
        self._check_open("finish")
        if not self._roles:
            raise _bad("MemoryDesc.finish: no roles were added")
        step_roles = []
        for compilation, io, index, freq in self._roles:
            main = compilation.model.to_hal().main
            operand = (main.input_indexes if io == INPUT else main.output_indexes)[index]
            for step in compilation.steps:
                if io == OUTPUT and operand in step.outputs:
                    step_roles.append((step.prepared, step.device, OUTPUT, step.outputs.index(operand), freq))
                if operand in step.inputs:
                    step_roles.append((step.prepared, step.device, INPUT, step.inputs.index(operand), freq))
        devices = []
        for _, device, *_ in step_roles:
            if all(d is not device for d in devices):
                devices.append(device)
        self._step_roles = step_roles
        self._devices = devices
        explicit = any(c.explicit_devices for c, *_ in self._roles)
        self._fallback_allowed = not explicit and is_fully_specified(self._metadata.type, self._dims)
        self._finished = True
        return self

    @property
    def size(self) -> int:
        """Bytes of the memory when its dimensions are known, else 0."""
        if self._metadata is None or not is_fully_specified(self._metadata.type, self._dims):
            return 0
        return byte_size(self._metadata.type, self._dims)

    def _validator(self) -> DeviceMemoryValidator:
        roles = {(id(c), io, index) for c, io, index, _ in self._roles}
        return DeviceMemoryValidator(roles, self._metadata, self._dims, [c for c, *_ in self._roles])

    def create_memory(self) -> Memory:
        """`Memory.from_desc(self)`: a driver-managed buffer, else the shared-memory fallback, else OP_FAILED."""
        if not self._finished:
            raise NnError(ResultCode.BAD_STATE, "Memory.from_desc: the MemoryDesc is not finished")
        memory = self._allocate_on_device()
        if memory is not None:
            return memory
        if not self._fallback_allowed:
            why = ("a role comes from a compilation with an explicit device list"
                   if is_fully_specified(self._metadata.type, self._dims) else "the size is unknown")
            raise NnError(ResultCode.OP_FAILED, f"Memory.from_desc: no device allocated the memory and there is "
                                                f"no fallback ({why})")
        if self._devices and all(d.feature_level >= 30 for d in self._devices):
            with HardwareBuffer(self.size) as blob:
                return Memory(dup_handle(blob.handle), validator=self._validator())
        return Memory(allocate_ashmem(self.size, "nnapi-desc"), validator=self._validator())

    def _allocate_on_device(self) -> Memory | None:
        """Ask the single device of every role to allocate; None when it cannot (any failure)."""
        if len(self._devices) != 1:
            return None
        device = self._devices[0]
        models: list = []
        inputs, outputs = [], []
        for prepared, _, io, index, freq in self._step_roles:
            k = next((i for i, m in enumerate(models) if m is prepared), None)
            if k is None:
                models.append(prepared)
                k = len(models) - 1
            (inputs if io == INPUT else outputs).append(BufferRole(k, index, freq))
        try:
            result = device.driver.allocate(BufferDesc(self._dims), models, inputs, outputs)
        except Exception:
            return None
        buffer, token = result if isinstance(result, tuple) and len(result) == 2 else (None, None)
        if buffer is None or not isinstance(buffer, IBuffer) or not is_int(token) or token <= 0 or token >= 2**32:
            release = getattr(buffer, "release", None)
            if callable(release):
                release()
            return None  # Android treats a null buffer or a zero token as a failed allocation
        return Memory.on_device(buffer, int(token), device, self._validator())
