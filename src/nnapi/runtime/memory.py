"""`Memory`: shared memory an app hands to models and executions (ashmem-like memfd, or an fd)."""
from __future__ import annotations

import mmap

import numpy as np

from ..hal import MemoryHandle, MemoryPool, NnError, ResultCode
from ..memory import MappedPool, allocate_ashmem, close_handle, map_handle, mmap_fd_handle


class Memory:
    """A region of shared memory, referenced in place by models (constants) and executions (I/O)."""

    def __init__(self, handle: MemoryHandle) -> None:
        self.handle = handle
        self._mapped: MappedPool | None = None

    @classmethod
    def ashmem(cls, size: int) -> "Memory":
        """New zero-filled shared memory of `size` bytes."""
        if size <= 0:
            raise NnError(ResultCode.BAD_DATA, f"Memory.ashmem: size must be positive, got {size}")
        return cls(allocate_ashmem(size))

    @classmethod
    def from_fd(cls, fd: int, offset: int, size: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> "Memory":
        """Memory over `size` bytes of a file descriptor from `offset`; the fd is duplicated."""
        if size <= 0 or fd < 0 or offset < 0:
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_fd: bad fd {fd}, offset {offset} or size {size}")
        return cls(mmap_fd_handle(fd, offset, size, prot))

    @property
    def size(self) -> int:
        return self.handle.size

    @property
    def pool(self) -> MemoryPool:
        return MemoryPool(handle=self.handle)

    def mapped(self) -> MappedPool:
        if self._mapped is None:
            self._mapped = map_handle(self.handle)
        return self._mapped

    def array(self, dtype, shape, offset: int = 0) -> np.ndarray:
        """A zero-copy numpy view of part of the memory."""
        dtype = np.dtype(dtype)
        return self.mapped().array(offset, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype, tuple(shape))

    def check_region(self, offset: int, length: int, what: str) -> None:
        """Runtime bounds rule: offset + length within the memory, and not both zero."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise NnError(ResultCode.BAD_DATA, f"{what}: region [{offset}, {offset + length}) is outside the "
                                               f"memory of {self.size} bytes")

    def close(self) -> None:
        close_handle(self.handle)

    def __del__(self) -> None:
        try:
            self._mapped = None
            self.close()
        except Exception:
            pass
