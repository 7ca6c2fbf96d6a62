"""`Memory`: memory an app hands to models (constants) and executions (inputs and outputs).

Kinds (Android's RuntimeMemory family, AOSP-DESIGN 4.1):
- shared memory of a known size: `Memory.ashmem(size)` (memfd), `Memory.from_fd(fd, offset, size,
  prot)` (`mmap_fd`, the fd is duplicated), and BLOB hardware buffers
  (`Memory.from_hardware_buffer`); regions are bounds-checked, offset = length = 0 is refused
  ("size cannot be implied");
- non-BLOB hardware buffers: execution inputs and outputs only, always whole (offset = length = 0);
  their canonical size is 0 and their logical size the tightly packed pixels;
- memory from a `MemoryDesc` (`Memory.from_desc`): a driver-managed buffer (token) or, when no
  single device allocates it, a BLOB hardware buffer / ashmem fallback. Either way it may be
  used only in the declared roles, with offset = length = 0, and it tracks its dimensions and
  whether it is initialized (its `validator`, a `device_memory.DeviceMemoryValidator`).

`Memory.copy(src, dst)` moves the content between any two of them (ANeuralNetworksMemory_copy).
"""
from __future__ import annotations

import mmap
from typing import Protocol

import numpy as np

from ..hal import IBuffer, MemoryHandle, MemoryPool, NnError, ResultCode
from ..memory import (HardwareBuffer, MappedPool, allocate_ashmem, close_handle, decode_hardware_buffer,
                      dup_handle, is_sealed, map_handle, mmap_fd_handle, seal_handle)
from ..memory.hardware_buffer import IMAGE_KIND
from .device_memory import DeviceMemoryValidator

#: Memory kinds a driver's IBuffer copies to and from directly (M9).
_COPYABLE = ("ashmem", "mmap_fd", "hardware_buffer_blob")


class MemorySource(Protocol):
    """What `Memory.from_desc` takes: a finished `MemoryDesc` (`runtime.memory_desc`), which makes the memory."""

    def create_memory(self) -> "Memory": ...


class Memory:
    """A region of memory, referenced in place by models (constants) and executions (I/O)."""

    def __init__(self, handle: MemoryHandle | None = None, *, validator: DeviceMemoryValidator | None = None,
                 buffer: IBuffer | None = None, token: int | None = None, device: object = None) -> None:
        """Memory over `handle` (shared memory), or a driver-managed `buffer` known to drivers by `token`,
        allocated by `device`; `validator` for memory from a MemoryDesc (its roles, dimensions, state)."""
        if (buffer is None) != (token is None) or (buffer is not None and handle is not None):
            raise NnError(ResultCode.BAD_DATA, "Memory: either a handle or a driver buffer with its token")
        self.handle = handle
        self._closed = False
        self._mapped: MappedPool | None = None
        self._buffer = buffer                        # a driver-managed buffer (from_desc on a device)
        self._token = token
        self._device = device                        # the Device that allocated `_buffer`
        self._validator = validator                  # set for memories from a MemoryDesc
        self._image = None                           # HardwareBufferDesc of a non-BLOB buffer
        if handle is not None and handle.name == IMAGE_KIND:
            self._image = decode_hardware_buffer(handle)

    @classmethod
    def on_device(cls, buffer: IBuffer, token: int, device: object, validator: DeviceMemoryValidator) -> "Memory":
        """Device memory: driver `buffer`, `token` in requests, allocated by `device` for a MemoryDesc's roles."""
        return cls(buffer=buffer, token=token, device=device, validator=validator)

    # --- creation -------------------------------------------------------------------------------
    @classmethod
    def ashmem(cls, size: int) -> "Memory":
        """New zero-filled shared memory of `size` bytes."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise NnError(ResultCode.BAD_DATA, f"Memory.ashmem: size must be a positive integer, got {size!r}")
        return cls(allocate_ashmem(int(size)))

    @classmethod
    def from_fd(cls, fd: int, offset: int, size: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> "Memory":
        """Memory over `size` bytes of a file descriptor from `offset`; the fd is duplicated."""
        if size <= 0 or fd < 0 or offset < 0:
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_fd: bad fd {fd}, offset {offset} or size {size}")
        if prot & ~(mmap.PROT_READ | mmap.PROT_WRITE) or not prot & (mmap.PROT_READ | mmap.PROT_WRITE):
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_fd: prot {prot:#x} must be PROT_READ and/or PROT_WRITE")
        try:
            return cls(mmap_fd_handle(fd, offset, size, prot))
        except OSError as e:
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_fd: cannot use fd {fd}: {e}") from None

    @classmethod
    def from_hardware_buffer(cls, buffer: HardwareBuffer) -> "Memory":
        """Memory over a hardware buffer (its fd is duplicated; the buffer may be closed afterwards).

        BLOB buffers behave like ashmem of `width` bytes; other formats are usable whole as
        execution inputs and outputs only.
        """
        if buffer is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, "Memory.from_hardware_buffer: buffer is None")
        if not isinstance(buffer, HardwareBuffer):
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_hardware_buffer: expected a HardwareBuffer, got "
                                               f"{type(buffer).__name__}")
        if not buffer.handle.fds:
            raise NnError(ResultCode.BAD_DATA, "Memory.from_hardware_buffer: the buffer is closed")
        return cls(dup_handle(buffer.handle))

    @classmethod
    def from_desc(cls, desc: MemorySource) -> "Memory":
        """Memory for the roles of a finished `MemoryDesc` (see `runtime.memory_desc`)."""
        if desc is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, "Memory.from_desc: desc is None")
        create = getattr(desc, "create_memory", None)
        if not callable(create):
            raise NnError(ResultCode.BAD_DATA, f"Memory.from_desc: expected a MemoryDesc, got {type(desc).__name__}")
        return create()

    @staticmethod
    def copy(src: "Memory", dst: "Memory") -> None:
        """Copy the content of `src` into `dst` (ANeuralNetworksMemory_copy).

        BAD_DATA for an uninitialized source or incompatible sizes or dimensions, UNMAPPABLE for
        memory the CPU cannot access. A failed copy leaves `dst` uninitialized.
        """
        if src is None or dst is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, "Memory.copy: src and dst must be memories")
        if not isinstance(src, Memory) or not isinstance(dst, Memory):
            raise NnError(ResultCode.BAD_DATA, "Memory.copy: src and dst must be Memory objects")
        if src is dst:
            return
        if not src.initialized:
            raise NnError(ResultCode.BAD_DATA, "Memory.copy: the source memory is not initialized")
        metadata = src._metadata()
        try:
            dst._update_metadata(metadata)
            _copy_content(src, dst, metadata)
        except BaseException:
            dst._set_initialized(False)
            raise
        dst._set_initialized(True)

    # --- properties ------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """"device" for a driver-managed buffer, else the handle's memory kind."""
        return "device" if self._token is not None else self.handle.name

    @property
    def is_device(self) -> bool:
        return self._token is not None

    @property
    def is_image(self) -> bool:
        """A non-BLOB hardware buffer (used whole, never as constants)."""
        return self._image is not None

    @property
    def from_memory_desc(self) -> bool:
        return self._validator is not None

    @property
    def validator(self) -> DeviceMemoryValidator | None:
        """The roles, dimensions and initialized flag of memory from a MemoryDesc; None for other memory."""
        return self._validator

    @property
    def size(self) -> int:
        """Bytes a region may span: 0 for driver-managed buffers and non-BLOB hardware buffers."""
        return 0 if self.handle is None else self.handle.size

    @property
    def logical_size(self) -> int:
        """Bytes of content (Android's logical size): packed pixels of an image; for memory from a
        MemoryDesc the size of its current dimensions (0 while unknown)."""
        return self._metadata()[0]

    @property
    def initialized(self) -> bool:
        """False only for memory from a MemoryDesc that was never (successfully) written."""
        return True if self._validator is None else self._validator.initialized

    @property
    def dimensions(self) -> tuple[int, ...]:
        """Current dimensions of memory from a MemoryDesc (() for other memories)."""
        return () if self._validator is None else self._validator.updated_dims

    @property
    def pool(self) -> MemoryPool:
        if self._token is not None:
            return MemoryPool(token=self._token)
        return MemoryPool(handle=self.handle)

    def seal(self) -> None:
        """Make ashmem read-only for good once written (memfd seals): drivers then map it read-only.

        Drop views from `array()` first; BAD_STATE while a writable view is still alive.
        """
        if self.handle is None or self.handle.name != "ashmem" or self._validator is not None:
            raise NnError(ResultCode.BAD_DATA, "Memory.seal: only ashmem from Memory.ashmem can be sealed")
        self._mapped = None
        try:
            seal_handle(self.handle)
        except NnError as e:
            raise NnError(ResultCode.BAD_STATE, f"Memory.seal: {e.message}") from None

    @property
    def sealed(self) -> bool:
        return self.handle is not None and is_sealed(self.handle)

    # --- CPU access ----------------------------------------------------------------------------------
    def mapped(self) -> MappedPool:
        """The CPU mapping (cached); UNMAPPABLE for driver-managed or CPU-inaccessible memory."""
        if self._mapped is None:
            if self.handle is None:
                raise NnError(ResultCode.UNMAPPABLE, "Memory: a driver-managed buffer has no CPU mapping; "
                                                     "use Memory.copy")
            try:
                self._mapped = map_handle(self.handle)
            except NnError as e:
                raise NnError(ResultCode.UNMAPPABLE, f"Memory: {e.message}") from None
        return self._mapped

    def array(self, dtype, shape, offset: int = 0) -> np.ndarray:
        """A numpy view of part of the memory (zero-copy except for padded image rows)."""
        dtype = np.dtype(dtype)
        return self.mapped().array(offset, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype, tuple(shape))

    # --- validation ----------------------------------------------------------------------------------
    def check_region(self, offset: int, length: int, what: str) -> None:
        """The rule for a model constant or a sized execution region (BAD_DATA otherwise):
        shared memory of a known size, offset + length within it, and not both 0."""
        if self._validator is not None or self._token is not None:
            raise NnError(ResultCode.BAD_DATA, f"{what}: memory from a MemoryDesc cannot hold model constants")
        if self._image is not None:
            raise NnError(ResultCode.BAD_DATA, f"{what}: a non-BLOB hardware buffer cannot hold model constants")
        self.check_sized_region(offset, length, what)

    def check_sized_region(self, offset: int, length: int, what: str) -> None:
        for name, v in (("offset", offset), ("length", length)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise NnError(ResultCode.BAD_DATA, f"{what}: {name} must be an integer, got {v!r}")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise NnError(ResultCode.BAD_DATA, f"{what}: region [{offset}, {offset + length}) is outside the "
                                               f"memory of {self.size} bytes")
        if offset == 0 and length == 0:
            raise NnError(ResultCode.BAD_DATA, f"{what}: offset and length are both 0 (the size cannot be "
                                               "implied for this memory)")

    # --- metadata (Android's MemoryValidatorBase::Metadata) ------------------------------------------
    def _metadata(self) -> tuple[int, tuple[int, ...], object]:
        """(logical size, dimensions, operand metadata or None)."""
        if self._validator is not None:
            return self._validator.metadata()
        if self._image is not None:
            return self._image.packed_size, (), None
        return self.size, (), None

    def _update_metadata(self, metadata: tuple[int, tuple[int, ...], object]) -> None:
        if self._validator is not None:
            self._validator.update_metadata(metadata)
            return
        size = metadata[0]
        own = self._image.packed_size if self._image is not None else self.size
        if size and size != own:
            raise NnError(ResultCode.BAD_DATA, f"Memory.copy: sizes differ (source {size} bytes, destination "
                                               f"{own} bytes)")

    def _set_initialized(self, value: bool) -> None:
        if self._validator is not None:
            self._validator.set_initialized(value)

    # --- lifetime ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the memory (fds, or the driver-managed buffer and its token); once: a second call
        (the finalizer after an explicit close) must not close descriptor numbers reused since."""
        if self._closed:
            return
        self._closed = True
        self._mapped = None
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            release = getattr(buffer, "release", None)
            if callable(release):
                try:
                    release()
                except Exception:
                    pass
        if self.handle is not None:
            close_handle(self.handle)  # (which has bursts, services and drivers let go of it)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        extra = f", token={self._token}" if self._token is not None else f", size={self.size}"
        return f"Memory(kind={self.kind!r}{extra})"


def _staging(size: int) -> HardwareBuffer:
    """A runtime-owned BLOB hardware buffer for IBuffer copies (Android stages through one too)."""
    return HardwareBuffer(max(size, 1))


def _driver_call(fn, *args) -> None:
    try:
        fn(*args)
    except NnError:
        raise
    except Exception as e:  # a driver bug never escapes as anything but NnError
        raise NnError(ResultCode.OP_FAILED, f"Memory.copy: the driver failed: {type(e).__name__}: {e}") from None


def _copy_content(src: Memory, dst: Memory, metadata: tuple[int, tuple[int, ...], object]) -> None:
    size, dims, _ = metadata
    if src.is_device and dst.is_device:
        if not size:
            raise NnError(ResultCode.BAD_DATA, "Memory.copy: the source size is unknown")
        with _staging(size) as blob:
            _driver_call(src._buffer.copy_to, blob.handle)
            _driver_call(dst._buffer.copy_from, blob.handle, list(dims))
        return
    if dst.is_device:
        if src.handle.name in _COPYABLE:
            _driver_call(dst._buffer.copy_from, src.handle, list(dims))
            return
        data = src.mapped().view(0, size)
        with _staging(size) as blob:
            blob.write(data)
            _driver_call(dst._buffer.copy_from, blob.handle, list(dims))
        return
    if src.is_device:
        if dst.handle.name in _COPYABLE:
            _driver_call(src._buffer.copy_to, dst.handle)
            return
        with _staging(size) as blob:
            _driver_call(src._buffer.copy_to, blob.handle)
            dst.mapped().write_bytes(0, blob.lock().view(0, size))
        return
    n = src.logical_size
    target = dst.mapped()
    if target.size != n:
        raise NnError(ResultCode.BAD_DATA, f"Memory.copy: sizes differ (source {n} bytes, destination "
                                           f"{target.size} bytes)")
    if not target.writable:
        raise NnError(ResultCode.BAD_DATA, "Memory.copy: the destination memory is read-only")
    target.write_bytes(0, src.mapped().view(0, n))
