"""`DeviceMemoryValidator`: what memory from a `MemoryDesc` knows of itself (Android's
DeviceMemoryValidator): its roles, the operand it holds, its dimensions and whether it is initialized.
`Memory` carries one; executions and `Memory.copy` ask it before using the memory."""
from __future__ import annotations

import threading
from typing import Sequence

from ..hal import NnError, ResultCode, byte_size, combine_dims, is_fully_specified
from ..memory.domains import BufferOperand


def _bad(message: str) -> NnError:
    return NnError(ResultCode.BAD_DATA, message)


class DeviceMemoryValidator:
    """Roles, operand metadata, dimensions and the initialized flag of memory from a MemoryDesc."""

    def __init__(self, roles: set[tuple[int, str, int]], operand: BufferOperand, dims: tuple[int, ...],
                 compilations: Sequence[object] = ()) -> None:
        self.roles = roles                       # {(id(compilation), INPUT | OUTPUT, index)}
        #: The compilations of the roles, kept alive as long as the memory (the roles hold their ids).
        self.compilations = list(compilations)
        self.operand = operand
        self.initial_dims = dims
        self.updated_dims = dims
        self.initialized = False
        self._lock = threading.Lock()

    def has_role(self, compilation: object, io: str, index: int) -> bool:
        return (id(compilation), io, index) in self.roles

    def compatible(self, dims: Sequence[int]) -> bool:
        return combine_dims(tuple(dims), self.initial_dims) is not None

    def check_input(self, dims: Sequence[int]) -> str | None:
        """Why this memory cannot be an input of these dimensions now (None when it can)."""
        with self._lock:
            if not self.initialized:
                return "the memory is not initialized"
            if dims and tuple(dims) != tuple(self.updated_dims):
                return f"dimensions {list(dims)} differ from the memory's {list(self.updated_dims)}"
        return None

    def metadata(self) -> tuple[int, tuple[int, ...], BufferOperand]:
        with self._lock:
            dims = self.updated_dims
        size = byte_size(self.operand.type, dims) if is_fully_specified(self.operand.type, dims) else 0
        return size, dims, self.operand

    def update_metadata(self, metadata: tuple[int, tuple[int, ...], object]) -> None:
        """Accept another memory's content (Memory.copy): same operand, compatible dimensions and size."""
        size, dims, operand = metadata
        if operand is not None and operand != self.operand:
            raise _bad(f"Memory.copy: the source holds {operand.type.name} (scale {operand.scale}, zero point "
                       f"{operand.zero_point}), the destination {self.operand.type.name} (scale "
                       f"{self.operand.scale}, zero point {self.operand.zero_point})")
        if dims and self.operand.type.is_scalar:
            raise _bad(f"Memory.copy: a scalar memory cannot take dimensions {list(dims)}")
        combined = combine_dims(dims, self.initial_dims)
        if combined is None:
            raise _bad(f"Memory.copy: the source dimensions {list(dims)} are incompatible with the "
                       f"destination's {list(self.initial_dims)}")
        own = byte_size(self.operand.type, combined) if is_fully_specified(self.operand.type, combined) else 0
        if size and size != own:
            raise _bad(f"Memory.copy: the source holds {size} bytes, the destination of {list(combined)} "
                       f"{'has an unknown size' if not own else f'needs {own}'}")
        with self._lock:
            self.updated_dims = combined

    def set_initialized(self, value: bool) -> None:
        with self._lock:
            self.initialized = value

    def written(self, dims: Sequence[int] | None) -> None:
        """A successful execution wrote this memory as an output of `dims`."""
        with self._lock:
            if dims is not None and (dims or self.operand.type.is_scalar):
                self.updated_dims = tuple(dims)
            self.initialized = True
