"""Hardware buffers (Android's `AHardwareBuffer`) emulated on Linux over memfd (M3-M5).

A `HardwareBuffer(width, height, layers, format, usage)` is a memfd holding the pixels, and
its handle carries the metadata next to the fd, so it is plain data that can cross a process
boundary:

    name  "hardware_buffer_blob" (format BLOB) or "hardware_buffer" (an image format)
    fds   (memfd,)
    ints  (width, height, layers, format, usage low 32 bits, usage high 32 bits, stride)
    size  width for BLOB (a BLOB is `width` bytes, height 1, layers 1); 0 for images, as
          Android's canonical memory size of a non-BLOB buffer is 0

Images are laid out layer after layer, row after row, each row `stride` pixels long (the
stride is in pixels and >= width). Their *logical* content is the tightly packed pixels:
width * height * layers * bytes-per-pixel. A driver decodes the handle with
`decode_hardware_buffer` and maps it with `map_hardware_buffer`; both raise GENERAL_FAILURE
for a handle they cannot decode or access (planar YUV, packed depth/stencil formats, or a
buffer whose usage has no CPU access), which is what M5 asks a driver to report.
"""
from __future__ import annotations

import enum
import mmap
import os
from dataclasses import dataclass

import numpy as np

from ..hal import ErrorStatus, MemoryHandle, NnError, ResultCode
from .pools import MappedPool, fixed_size_memfd

BLOB_KIND = "hardware_buffer_blob"
IMAGE_KIND = "hardware_buffer"
#: Number of integers in a hardware-buffer handle.
HANDLE_INTS = 7


class HardwareBufferFormat(enum.IntEnum):
    """`AHardwareBuffer_Format` values."""

    R8G8B8A8_UNORM = 1
    R8G8B8X8_UNORM = 2
    R8G8B8_UNORM = 3
    R5G6B5_UNORM = 4
    R16G16B16A16_FLOAT = 0x16
    BLOB = 0x21
    Y8Cb8Cr8_420 = 0x23
    R10G10B10A2_UNORM = 0x2B
    D16_UNORM = 0x30
    D24_UNORM = 0x31
    D24_UNORM_S8_UINT = 0x32
    D32_FLOAT = 0x33
    D32_FLOAT_S8_UINT = 0x34
    S8_UINT = 0x35
    YCbCr_P010 = 0x36
    R8_UNORM = 0x38
    R16_UINT = 0x39
    R16G16_UINT = 0x3A
    R10G10B10A10_UNORM = 0x3B


class HardwareBufferUsage(enum.IntFlag):
    """`AHardwareBuffer_UsageFlags` values (a 64-bit mask)."""

    CPU_READ_NEVER = 0
    CPU_READ_RARELY = 0x2
    CPU_READ_OFTEN = 0x3
    CPU_READ_MASK = 0xF
    CPU_WRITE_RARELY = 0x20
    CPU_WRITE_OFTEN = 0x30
    CPU_WRITE_MASK = 0xF0
    GPU_SAMPLED_IMAGE = 0x100
    GPU_FRAMEBUFFER = 0x200
    COMPOSER_OVERLAY = 0x800
    PROTECTED_CONTENT = 0x4000
    VIDEO_ENCODE = 0x10000
    SENSOR_DIRECT_DATA = 0x800000
    GPU_DATA_BUFFER = 0x1000000
    GPU_CUBE_MAP = 0x2000000
    GPU_MIPMAP_COMPLETE = 0x4000000


F = HardwareBufferFormat
#: Bytes per pixel of the single-plane formats a CPU driver can decode.
DECODABLE_BPP = {F.R8G8B8A8_UNORM: 4, F.R8G8B8X8_UNORM: 4, F.R8G8B8_UNORM: 3, F.R5G6B5_UNORM: 2,
                 F.R16G16B16A16_FLOAT: 8, F.R10G10B10A2_UNORM: 4, F.D16_UNORM: 2, F.D32_FLOAT: 4,
                 F.S8_UINT: 1, F.R8_UNORM: 1, F.R16_UINT: 2, F.R16G16_UINT: 4, F.R10G10B10A10_UNORM: 8}
#: Allocation bytes per pixel, times 2, of the formats an emulated allocation can hold but a CPU
#: driver cannot decode (planar YUV 4:2:0, depth/stencil with padding bytes).
_OPAQUE_BPP2 = {F.Y8Cb8Cr8_420: 3, F.YCbCr_P010: 6, F.D24_UNORM: 8, F.D24_UNORM_S8_UINT: 8,
                F.D32_FLOAT_S8_UINT: 16}
DEFAULT_USAGE = HardwareBufferUsage.CPU_READ_OFTEN | HardwareBufferUsage.CPU_WRITE_OFTEN
_CPU_MASK = HardwareBufferUsage.CPU_READ_MASK | HardwareBufferUsage.CPU_WRITE_MASK


@dataclass(frozen=True)
class HardwareBufferDesc:
    """The metadata a hardware-buffer handle carries (`AHardwareBuffer_Desc` plus the stride)."""

    width: int
    height: int
    layers: int
    format: int
    usage: int
    stride: int

    @property
    def is_blob(self) -> bool:
        return self.format == F.BLOB

    @property
    def bytes_per_pixel(self) -> int | None:
        """Bytes per pixel for BLOB (1) and decodable formats; None when a CPU cannot decode it."""
        if self.is_blob:
            return 1
        return DECODABLE_BPP.get(self.format)

    @property
    def packed_size(self) -> int:
        """Logical size: the tightly packed content (BLOB: width bytes). 0 for undecodable formats."""
        bpp = self.bytes_per_pixel
        return 0 if bpp is None else self.width * self.height * self.layers * bpp

    @property
    def allocation_size(self) -> int:
        """Bytes the emulated allocation holds (rows of `stride` pixels)."""
        if self.is_blob:
            return self.width
        bpp = DECODABLE_BPP.get(self.format)
        if bpp is not None:
            return self.stride * self.height * self.layers * bpp
        return -(-self.stride * self.height * self.layers * _OPAQUE_BPP2[self.format] // 2)

    @property
    def cpu_readable(self) -> bool:
        return bool(self.usage & HardwareBufferUsage.CPU_READ_MASK)

    @property
    def cpu_writable(self) -> bool:
        return bool(self.usage & HardwareBufferUsage.CPU_WRITE_MASK)

    @property
    def cpu_accessible(self) -> bool:
        return bool(self.usage & _CPU_MASK) and not self.usage & HardwareBufferUsage.PROTECTED_CONTENT

    def ints(self) -> tuple[int, ...]:
        return (self.width, self.height, self.layers, int(self.format), self.usage & 0xFFFFFFFF,
                self.usage >> 32, self.stride)


def _check_desc(width: int, height: int, layers: int, format: int, usage: int, stride: int | None) -> HardwareBufferDesc:
    """Android's AHardwareBuffer_allocate checks; BAD_DATA naming the field at fault."""
    values = {"width": width, "height": height, "layers": layers, "format": format, "usage": usage}
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: {name} must be an integer, got {v!r}")
    width, height, layers, format, usage = (int(v) for v in values.values())
    if width <= 0 or height <= 0 or layers <= 0:
        raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: width, height and layers must be positive "
                                           f"(got {width}x{height}x{layers})")
    if width >= 2**31 or height >= 2**31 or layers >= 2**31:
        raise NnError(ResultCode.BAD_DATA, "HardwareBuffer: width, height and layers must fit in 31 bits")
    if format not in F.__members__.values():
        raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: unknown format {format:#x}")
    if not 0 <= usage < 2**64:
        raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: usage {usage} is not a 64-bit mask")
    if format == F.BLOB and (height != 1 or layers != 1):
        raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: a BLOB buffer has height 1 and layers 1 "
                                           f"(got {height}x{layers}); its width is its size in bytes")
    if stride is None:
        stride = width
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < width or stride >= 2**31:
        raise NnError(ResultCode.BAD_DATA, f"HardwareBuffer: stride {stride!r} must be an integer >= width {width}")
    if format == F.BLOB and stride != width:
        raise NnError(ResultCode.BAD_DATA, "HardwareBuffer: a BLOB buffer has no row padding (stride = width)")
    return HardwareBufferDesc(width, height, layers, F(format), usage, int(stride))


def make_handle(desc: HardwareBufferDesc, fd: int) -> MemoryHandle:
    """The plain-data handle of a buffer whose memory is `fd`."""
    return MemoryHandle(BLOB_KIND if desc.is_blob else IMAGE_KIND, (fd,), desc.ints(),
                        desc.width if desc.is_blob else 0)


def allocate_hardware_buffer(desc: HardwareBufferDesc, name: str = "nnapi-ahwb") -> MemoryHandle:
    """A memfd of the buffer's allocation size, zero-filled, and its handle."""
    try:
        fd = fixed_size_memfd(name, desc.allocation_size)  # (its size is fixed: another process may map it)
    except OSError as e:
        raise NnError(ResultCode.OUT_OF_MEMORY, f"HardwareBuffer: cannot allocate {desc.allocation_size} "
                                                f"bytes: {e}") from None
    return make_handle(desc, fd)


def is_hardware_buffer(handle: MemoryHandle) -> bool:
    return handle.name in (BLOB_KIND, IMAGE_KIND)


def decode_hardware_buffer(handle: MemoryHandle) -> HardwareBufferDesc:
    """The metadata of a hardware-buffer handle; GENERAL_FAILURE when it cannot be decoded (M5)."""
    def fail(why: str) -> NnError:
        return NnError(ErrorStatus.GENERAL_FAILURE, f"cannot decode {handle.name} handle: {why}")

    if not is_hardware_buffer(handle):
        raise fail("not a hardware buffer")
    if len(handle.fds) != 1:
        raise fail(f"expected 1 file descriptor, got {len(handle.fds)}")
    if len(handle.ints) != HANDLE_INTS or not all(isinstance(v, (int, np.integer)) for v in handle.ints):
        raise fail(f"expected {HANDLE_INTS} integers (width, height, layers, format, usage low, usage high, "
                   f"stride), got {tuple(handle.ints)!r}")
    width, height, layers, fmt, usage_lo, usage_hi, stride = (int(v) for v in handle.ints)
    if not (0 <= usage_lo < 2**32 and 0 <= usage_hi < 2**32):
        raise fail("usage words must be 32-bit unsigned")
    try:
        desc = _check_desc(width, height, layers, fmt, usage_lo | (usage_hi << 32), stride)
    except NnError as e:
        raise fail(e.message) from None
    if desc.is_blob != (handle.name == BLOB_KIND):
        raise fail(f"format {F(fmt).name} does not match the kind {handle.name!r}")
    if desc.is_blob and handle.size != desc.width:
        raise fail(f"BLOB size {handle.size} differs from its width {desc.width}")
    return desc


def can_map(handle: MemoryHandle) -> bool:
    """True when a CPU driver can decode and access this hardware-buffer handle (what
    `get_supported_operations` reports for constants, M5); other kinds are always mappable."""
    if not is_hardware_buffer(handle):
        return True
    try:
        desc = decode_hardware_buffer(handle)
    except NnError:
        return False
    return desc.cpu_accessible and desc.bytes_per_pixel is not None


def mappable_constant_flags(model) -> list[bool]:
    """One flag per main-graph operation of a HAL `Model`: False when a constant it reads (in an
    IF/WHILE: any constant of the referenced graphs) lives in a pool a CPU driver cannot map. What a
    CPU driver's `get_supported_operations` reports for M5."""
    from ..hal import OperandLifeTime, OperationType
    bad = {i for i, pool in enumerate(model.pools) if pool.handle is not None and not can_map(pool.handle)}
    if not bad:
        return [True] * len(model.main.operations)

    def reads_bad(sub, operand_indexes) -> bool:
        return any(sub.operands[i].lifetime == OperandLifeTime.CONSTANT_REFERENCE
                   and sub.operands[i].location.pool_index in bad for i in operand_indexes)

    referenced_bad = any(reads_bad(sub, range(len(sub.operands))) for sub in model.referenced)
    return [not (reads_bad(model.main, op.inputs)
                 or (referenced_bad and op.type in (OperationType.IF, OperationType.WHILE)))
            for op in model.main.operations]


class MappedImage(MappedPool):
    """A mapped non-BLOB buffer seen as its tightly packed content of `size` bytes.

    With stride = width the packed content is contiguous and views are zero-copy; with row
    padding, reads gather the rows into a copy and `write` scatters them.
    """

    def __init__(self, buffer: memoryview, keepalive: object, writable: bool, desc: HardwareBufferDesc) -> None:
        bpp = desc.bytes_per_pixel
        self.desc = desc
        self.row_bytes = desc.width * bpp
        self.pitch = desc.stride * bpp
        self.rows = desc.height * desc.layers
        self.packed = desc.stride == desc.width
        packed_size = desc.packed_size
        super().__init__(buffer[:packed_size] if self.packed else buffer, keepalive, writable)
        self.size = packed_size
        self._raw = buffer

    def _grid(self) -> np.ndarray:
        base = np.frombuffer(self._raw, np.uint8)
        return np.lib.stride_tricks.as_strided(base, (self.rows, self.row_bytes), (self.pitch, 1),
                                               writeable=self.writable)

    def view(self, offset: int, length: int) -> memoryview:
        if self.packed:
            return super().view(offset, length)
        if offset < 0 or length < 0 or offset + length > self.size:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"region [{offset}, {offset + length}) is outside the image of {self.size} bytes")
        flat = np.ascontiguousarray(self._grid()).reshape(-1)
        return memoryview(flat[offset:offset + length]).toreadonly()

    def write(self, offset: int, value: np.ndarray) -> None:
        if self.packed:
            return super().write(offset, value)
        self.write_bytes(offset, np.ascontiguousarray(value).reshape(-1).view(np.uint8))

    def write_bytes(self, offset: int, data) -> None:
        if self.packed:
            return super().write_bytes(offset, data)
        src = np.frombuffer(memoryview(data).cast("B"), np.uint8)
        if offset < 0 or offset + src.size > self.size:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"region [{offset}, {offset + src.size}) is outside the image of {self.size} bytes")
        if not self.writable:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, "the hardware buffer is not CPU-writable")
        grid = self._grid()
        pos, end = offset, offset + src.size
        while pos < end:  # at most one partial row at each end; whole rows in one assignment
            row, col = divmod(pos, self.row_bytes)
            if col == 0 and end - pos >= self.row_bytes:
                n_rows = (end - pos) // self.row_bytes
                grid[row:row + n_rows] = src[pos - offset:pos - offset + n_rows * self.row_bytes].reshape(
                    n_rows, self.row_bytes)
                pos += n_rows * self.row_bytes
            else:
                n = min(self.row_bytes - col, end - pos)
                grid[row, col:col + n] = src[pos - offset:pos - offset + n]
                pos += n


def map_hardware_buffer(handle: MemoryHandle) -> MappedPool:
    """Map a hardware buffer for the CPU; GENERAL_FAILURE when it cannot be decoded or accessed (M5)."""
    desc = decode_hardware_buffer(handle)
    if not desc.cpu_accessible:
        raise NnError(ErrorStatus.GENERAL_FAILURE,
                      f"cannot map {handle.name}: usage {desc.usage:#x} allows no CPU access")
    if desc.bytes_per_pixel is None:
        raise NnError(ErrorStatus.GENERAL_FAILURE,
                      f"cannot map {handle.name}: format {F(desc.format).name} cannot be decoded by a CPU driver")
    writable = desc.cpu_writable
    (fd,) = handle.fds
    try:
        if os.fstat(fd).st_size < desc.allocation_size:  # (a page mapped past the end faults: SIGBUS)
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"cannot map {handle.name}: its file holds "
                                                       f"{os.fstat(fd).st_size} bytes, the image needs "
                                                       f"{desc.allocation_size}")
        m = mmap.mmap(fd, desc.allocation_size, mmap.MAP_SHARED,
                      mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
    except (ValueError, OSError, TypeError, OverflowError) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"could not map {handle.name} pool: {e}") from None
    view = memoryview(m)
    if desc.is_blob:
        return MappedPool(view, m, writable=writable)
    return MappedImage(view, m, writable, desc)


class HardwareBuffer:
    """An emulated `AHardwareBuffer`: `HardwareBuffer(width, height, layers, format, usage)`.

    BLOB buffers are `width` bytes (height 1, layers 1); image formats hold
    width x height x layers pixels in rows of `stride` pixels (default: no padding).
    `handle` is the plain-data handle; `view()` maps the pixels for the CPU (zero-copy).
    """

    def __init__(self, width: int, height: int = 1, layers: int = 1,
                 format: int = HardwareBufferFormat.BLOB, usage: int = DEFAULT_USAGE, *,
                 stride: int | None = None) -> None:
        self.desc = _check_desc(width, height, layers, format, usage, stride)
        self.handle = allocate_hardware_buffer(self.desc)
        self._mapped: MappedPool | None = None

    @classmethod
    def from_handle(cls, handle: MemoryHandle) -> "HardwareBuffer":
        """A buffer over a duplicate of a hardware-buffer handle's fd (BAD_DATA if it cannot be decoded)."""
        try:
            desc = decode_hardware_buffer(handle)
        except NnError as e:
            raise NnError(ResultCode.BAD_DATA, e.message) from None
        hb = cls.__new__(cls)
        hb.desc = desc
        hb.handle = make_handle(desc, os.dup(handle.fds[0]))
        hb._mapped = None
        return hb

    width = property(lambda self: self.desc.width)
    height = property(lambda self: self.desc.height)
    layers = property(lambda self: self.desc.layers)
    format = property(lambda self: HardwareBufferFormat(self.desc.format))
    usage = property(lambda self: self.desc.usage)
    stride = property(lambda self: self.desc.stride)
    is_blob = property(lambda self: self.desc.is_blob)

    @property
    def size(self) -> int:
        """The logical (tightly packed) size in bytes; 0 for formats a CPU cannot decode."""
        return self.desc.packed_size

    def lock(self) -> MappedPool:
        """Map for CPU access (cached); UNMAPPABLE without CPU usage or for undecodable formats."""
        if self._mapped is None:
            try:
                self._mapped = map_hardware_buffer(self.handle)
            except NnError as e:
                raise NnError(ResultCode.UNMAPPABLE, e.message) from None
        return self._mapped

    def view(self) -> np.ndarray:
        """The bytes as a zero-copy uint8 array: (width,) for BLOB, else (layers, height, width * bpp)
        with the row stride of the allocation."""
        mapped = self.lock()
        if self.is_blob:
            return np.frombuffer(mapped.buffer, np.uint8)
        assert isinstance(mapped, MappedImage)
        return mapped._grid().reshape(self.layers, self.height, mapped.row_bytes)

    def read(self) -> bytes:
        """The tightly packed content."""
        return bytes(self.lock().view(0, self.size))

    def write(self, data, offset: int = 0) -> None:
        """Write tightly packed bytes at a logical offset."""
        self.lock().write_bytes(offset, data)

    def close(self) -> None:
        self._mapped = None
        for fd in self.handle.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.handle = MemoryHandle(self.handle.name, (), self.handle.ints, self.handle.size)

    def __enter__(self) -> "HardwareBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"HardwareBuffer({self.width}x{self.height}x{self.layers}, {self.format.name}, "
                f"usage={self.usage:#x}, stride={self.stride})")
