"""Creating and mapping memory handles (M3/M4): `ashmem` as memfd + mmap, `mmap_fd` from any fd,
and (through `hardware_buffer`) BLOB and non-BLOB hardware buffers.

A handle is plain data (fds + ints + size) so it can cross a process boundary. Mapping checks
bounds and returns a `MappedPool` whose `view(offset, length)` is a zero-copy memoryview;
`write` / `write_bytes` are the one way drivers store into a pool (so strided images work too).
"""
from __future__ import annotations

import errno
import fcntl
import functools
import gc
import mmap
import os
import stat
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..hal import ErrorStatus, MemoryHandle, MemoryPool, NnError

PROT_READ, PROT_WRITE = mmap.PROT_READ, mmap.PROT_WRITE


@functools.lru_cache(maxsize=1)
def physical_memory_bytes() -> int:
    """This machine's memory (no allocation can be larger), or 1 TiB when the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def max_tensor_bytes() -> int:
    """The largest single tensor anything here allocates by default: a quarter of the machine's memory
    (a kernel may need a few times its output while computing it, and other work needs room too)."""
    return physical_memory_bytes() // 4


def allocate_ashmem(size: int, name: str = "nnapi") -> MemoryHandle:
    """New anonymous shared memory of `size` bytes (a memfd, sealable with `seal_handle`), zero-filled.
    Its size is fixed, as ashmem's is: sealed against shrinking (see `stable_handle`)."""
    if size <= 0:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"ashmem size must be positive, got {size}")
    return MemoryHandle("ashmem", (fixed_size_memfd(name, size),), (), size)


def fixed_size_memfd(name: str, size: int) -> int:
    """A zero-filled memfd of `size` bytes, sealed against shrinking and growing (more seals may follow)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    except OSError:
        os.close(fd)
        raise
    return fd


MAPPED_KINDS = ("ashmem", "mmap_fd", "hardware_buffer_blob", "hardware_buffer")


@dataclass
class FileCopy:
    """A private copy of the part of an app's file a handle maps (`stable_handle`), at the same offsets:
    `refresh` copies the file in again (memory kept across calls), `write_back` copies the handle's
    region out into the file (writable handles only)."""

    source: int     # the app's descriptor
    copy: int       # the private memfd
    first: int      # where the mapping starts (the region's start, rounded down to a page)
    start: int      # the handle's region: [start, end)
    end: int
    writable: bool

    def refresh(self) -> None:
        _copy_range(self.source, self.copy, self.first, self.end)

    def write_back(self) -> None:
        if self.writable:
            _copy_range(self.copy, self.source, self.start, self.end)

    def source_identity(self) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the app's file."""
        return fd_identity(self.source)


def stable_handle(handle: MemoryHandle, max_copy_bytes: int | None = None) -> tuple[MemoryHandle, FileCopy | None]:
    """`handle`, safe to map in a process that does not own it. A mapping faults (SIGBUS, which kills
    the process) wherever its file has shrunk below it, and the owner may shrink it at any moment: a
    memfd is sealed against shrinking (ashmem's size is fixed anyway); another file, or a memfd that
    cannot be sealed, is copied into a private memfd. Returns the handle to map (the copy's, at the
    same offsets) and the copy, if one was made. INVALID_ARGUMENT for a file too short for the region
    or a descriptor that is not a file; RESOURCE_EXHAUSTED_PERSISTENT for a copy over `max_copy_bytes`
    (default: `max_tensor_bytes()`)."""
    if handle.name not in MAPPED_KINDS or len(handle.fds) != 1:
        return handle, None
    fd = handle.fds[0]
    try:
        st = os.fstat(fd)
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except (OSError, TypeError, ValueError, OverflowError):
        return handle, None  # (mapping it says what is wrong)
    if not stat.S_ISREG(st.st_mode):
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"a {handle.name} pool must be shared memory or a regular file")
    if handle.name == "mmap_fd" and len(handle.ints) == 3:
        start = mmap_fd_offset(handle)
        end, first = start + handle.size, start - start % mmap.ALLOCATIONGRANULARITY
        writable = bool(handle.ints[0] & PROT_WRITE)
    else:
        start, end = 0, (handle.size if handle.name == "ashmem" else st.st_size)
        first, writable = 0, True
    try:
        sealed = bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
        if not sealed:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            sealed = True
        st = os.fstat(fd)  # (its size now stays at least this)
    except OSError:
        sealed = False  # not a memfd, a read-only descriptor, or sealing not allowed: copy it
    if end > st.st_size or end <= 0:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"the {handle.name} pool's file holds {st.st_size} bytes, "
                                                    f"less than its region's end at {end}")
    if sealed:
        return handle, None
    limit = max_tensor_bytes() if max_copy_bytes is None else max_copy_bytes
    if end - first > limit:
        raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                      f"the {handle.name} pool's file cannot be sealed against shrinking, and a copy of its "
                      f"{end - first} bytes is over the {limit} allowed: share a sealable memfd (Memory.ashmem)")
    copy_fd = os.memfd_create("nnapi-copy", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    copy = FileCopy(fd, copy_fd, first, start, end, writable and access != os.O_RDONLY)
    try:
        os.ftruncate(copy_fd, end)  # (pages before `first` stay holes: they cost nothing)
        copy.refresh()
        fcntl.fcntl(copy_fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    except OSError as e:
        os.close(copy_fd)
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"could not copy the {handle.name} pool's file: {e}") from None
    return MemoryHandle(handle.name, (copy_fd,), handle.ints, handle.size), copy


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    """Bytes [start, end) of file `src` to the same place in `dst` (a read never faults; a short file
    leaves the rest as it was)."""
    chunk = 1 << 20
    at = start
    while at < end:
        data = os.pread(src, min(chunk, end - at), at)
        if not data:
            return
        os.pwrite(dst, data, at)
        at += len(data)


def read_region(fd: int, length: int, what: str, offset: int = 0) -> bytes:
    """Exactly `length` bytes of file `fd` from `offset`, by bounded reads (never a mapping: the owner
    may shrink the file at any moment, and a mapped page past its end would kill this process with
    SIGBUS). INVALID_ARGUMENT naming `what` when the file is not a regular one, holds fewer bytes, is
    sparse there (holes would be read as zeros into memory the sender never paid for) or shrinks.
    Each read allocates its own bytes, unfilled, and faults them in with the interpreter lock let go,
    so a large region costs the process's other threads (other apps' calls) next to nothing."""
    try:
        st = os.fstat(fd)
    except (OSError, TypeError, ValueError, OverflowError) as e:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: not a readable file: {e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: must be shared memory or a regular file")
    if st.st_size < offset + length:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: the file holds {st.st_size} bytes, "
                                                    f"fewer than the {offset + length} the message says")
    if st.st_blocks * 512 + mmap.PAGESIZE < length:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: the file is sparse ({st.st_blocks * 512} bytes "
                                                    f"of data for {length} bytes)")
    chunks: list[bytes] = []
    at = 0
    try:
        while at < length:
            chunk = os.pread(fd, min(length - at, 1 << 24), offset + at)
            if not chunk:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: the file shrank to {offset + at} bytes "
                                                            f"while it was read")
            chunks.append(chunk)
            at += len(chunk)
    except OSError as e:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{what}: cannot read it: {e}") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def mmap_fd_handle(fd: int, offset: int, size: int, prot: int = PROT_READ | PROT_WRITE) -> MemoryHandle:
    """An `mmap_fd` handle over a duplicate of `fd` (ints: prot, offset low 32, offset high 32)."""
    if size <= 0 or fd < 0 or offset < 0:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"mmap_fd needs fd >= 0, offset >= 0, size > 0 "
                                                     f"(got fd {fd}, offset {offset}, size {size})")
    return MemoryHandle("mmap_fd", (os.dup(fd),), (prot, offset & 0xFFFFFFFF, offset >> 32), size)


_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def seal_handle(handle: MemoryHandle) -> None:
    """Seal an `ashmem` memfd once written: no more writes, no resizing, by anyone holding it.

    Mappings kept across calls by bursts and services (`on_forget`) are given back first; fails
    (GENERAL_FAILURE) while a writable mapping of the caller's own is still alive.
    """
    if handle.name != "ashmem" or len(handle.fds) != 1:
        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"only ashmem can be sealed, not {handle.name!r}")
    for attempt in range(6):
        try:
            fcntl.fcntl(handle.fds[0], fcntl.F_ADD_SEALS, _SEALS)
            return
        except OSError as e:
            error = e
            if e.errno != errno.EBUSY:
                break
        if attempt == 0:
            forget_mappings(handle, wait=True)
            gc.collect()  # (a view in a reference cycle holds a mapping until the collector runs)
        else:  # (a burst's release reaches its service on the burst's own channel)
            time.sleep(0.002 * 2 ** attempt)
    raise NnError(ErrorStatus.GENERAL_FAILURE, f"cannot seal the ashmem: {error.strerror} (a writable "
                                               "mapping may still be alive)")


# Whoever keeps a mapping of (or a descriptor to) shared memory across calls (a burst's slots, a
# service's mapping cache) registers a method here, called with the handle before the memory is
# sealed (`wait`: return once it is given back) or closed (give it back soon: the memory is freed
# only when the last holder lets go).
_forgetters: list[weakref.WeakMethod] = []
# Re-entrant: the garbage collector may run a `__del__` that closes memory (and so calls `forget_mappings`)
# on a thread that already holds it.
_forgetters_lock = threading.RLock()


def file_identity(handle: MemoryHandle) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file a one-descriptor handle maps, or None (no such descriptor)."""
    return fd_identity(handle.fds[0]) if handle.fds else None


def fd_identity(fd: int) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file open on `fd`, or None (not an open descriptor)."""
    try:
        st = os.fstat(fd)
    except (OSError, TypeError, ValueError, OverflowError):
        return None
    return st.st_dev, st.st_ino


def on_forget(method: Callable[[MemoryHandle, bool], None]) -> None:
    """Call bound `method(handle, wait)` when shared memory is sealed or closed (kept weakly)."""
    with _forgetters_lock:
        _forgetters[:] = [ref for ref in _forgetters if ref() is not None]
        _forgetters.append(weakref.WeakMethod(method))


def forget_mappings(handle: MemoryHandle, wait: bool) -> None:
    """Ask every holder registered with `on_forget` to let go of `handle`'s memory (errors ignored)."""
    if handle.name not in ("ashmem", "mmap_fd"):
        return
    with _forgetters_lock:
        methods = [ref() for ref in _forgetters]
    for method in methods:
        if method is not None:
            try:
                method(handle, wait)
            except Exception:  # a holder that cannot let go (a dead service) holds nothing worth waiting for
                pass


def is_sealed(handle: MemoryHandle) -> bool:
    """True when the handle's memfd is sealed against writes."""
    try:
        return bool(fcntl.fcntl(handle.fds[0], fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE)
    except (OSError, IndexError, TypeError):
        return False


def dup_handle(handle: MemoryHandle) -> MemoryHandle:
    return MemoryHandle(handle.name, tuple(os.dup(fd) for fd in handle.fds), handle.ints, handle.size)


def close_handle(handle: MemoryHandle) -> None:
    """Close a handle's descriptors; whoever keeps its memory mapped is told to let go (`on_forget`)."""
    forget_mappings(handle, wait=False)
    for fd in handle.fds:
        try:
            os.close(fd)
        except OSError:
            pass


class MappedPool:
    """A mapped memory pool; `view` and `array` give bounds-checked zero-copy access."""

    def __init__(self, buffer: memoryview, keepalive: object = None, writable: bool = True) -> None:
        self.buffer = buffer
        self.size = buffer.nbytes
        self.writable = writable
        self._keepalive = keepalive

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"region [{offset}, {offset + length}) is outside the pool of {self.size} bytes")
        return self.buffer[offset:offset + length]

    def array(self, offset: int, length: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of a region (no copy)."""
        return np.frombuffer(self.view(offset, length), dtype=dtype).reshape(shape)

    def is_region(self, value: np.ndarray, offset: int) -> bool:
        """True when `value` is a contiguous array starting at `offset` of this pool (a view of it)."""
        if value.base is None:  # (it owns its memory)
            return False
        try:
            start = np.frombuffer(self.view(offset, 1), np.uint8).ctypes.data
        except NnError:
            return False
        return value.ctypes.data == start and value.flags.c_contiguous

    def _check_writable(self) -> None:
        if not self.writable:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, "the pool is read-only and cannot receive data")

    def write(self, offset: int, value: np.ndarray) -> None:
        """Store an array's bytes at `offset` (bounds-checked; one copy, straight into the mapping)."""
        self._check_writable()
        value = np.asarray(value)
        dst = np.frombuffer(self.view(offset, value.nbytes), dtype=value.dtype).reshape(value.shape)
        np.copyto(dst, value)

    def write_bytes(self, offset: int, data) -> None:
        """Store raw bytes at `offset` (bounds-checked)."""
        self._check_writable()
        src = memoryview(data).cast("B")
        self.view(offset, src.nbytes)[:] = src


class ArrayPool(MappedPool):
    """An in-process numpy buffer (the runtime's usual pool): the array itself serves a region that
    is all of it, and its byte view is made only when another region is asked for."""

    def __init__(self, array: np.ndarray) -> None:  # (a C-contiguous array)
        self._whole = array
        self.size = array.nbytes
        self.writable = bool(array.flags.writeable)
        self._buffer: memoryview | None = None

    @property
    def buffer(self) -> memoryview:  # type: ignore[override]
        if self._buffer is None:
            self._buffer = memoryview(self._whole).cast("B")
        return self._buffer

    def array(self, offset: int, length: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        whole = self._whole
        if offset == 0 and length == self.size and whole.dtype == dtype:
            return whole if whole.shape == shape else whole.reshape(shape)  # (the same array: drivers may
        return super().array(offset, length, dtype, shape)                   # keep what they set up for it)

    def write(self, offset: int, value: np.ndarray) -> None:
        whole = self._whole
        if offset == 0 and type(value) is np.ndarray and value.nbytes == self.size and whole.dtype == value.dtype:
            self._check_writable()
            (whole if whole.shape == value.shape else whole.reshape(value.shape))[...] = value  # (np.copyto: 3x)
            return
        super().write(offset, value)

    def is_region(self, value: np.ndarray, offset: int) -> bool:
        whole = self._whole
        if offset == 0 and (value is whole or value.base is whole) and value.nbytes == self.size \
                and value.flags.c_contiguous:
            return True  # (a contiguous view as large as the array is the whole array)
        return super().is_region(value, offset)


def map_handle(handle: MemoryHandle) -> MappedPool:
    """Map a shared-memory handle; GENERAL_FAILURE for kinds or handles that cannot be mapped (M5)."""
    if handle.name in ("hardware_buffer_blob", "hardware_buffer"):
        from .hardware_buffer import map_hardware_buffer
        return map_hardware_buffer(handle)
    try:
        if handle.name == "ashmem":
            (fd,) = handle.fds
            writable = not is_sealed(handle)
            m = mmap.mmap(fd, handle.size, mmap.MAP_SHARED, PROT_READ | (PROT_WRITE if writable else 0))
            return MappedPool(memoryview(m), m, writable=writable)
        if handle.name == "mmap_fd":
            (fd,) = handle.fds
            prot, _, _ = handle.ints
            offset = mmap_fd_offset(handle)
            page = mmap.ALLOCATIONGRANULARITY
            base = offset - offset % page
            m = mmap.mmap(fd, handle.size + offset - base, mmap.MAP_SHARED, prot, offset=base)
            view = memoryview(m)[offset - base:offset - base + handle.size]
            return MappedPool(view, m, writable=bool(prot & PROT_WRITE))
    except (ValueError, OSError, TypeError) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"could not map {handle.name} pool: {e}") from None
    raise NnError(ErrorStatus.GENERAL_FAILURE, f"cannot map memory pool of kind {handle.name!r}")


def mmap_fd_offset(handle: MemoryHandle) -> int:
    """Where an `mmap_fd` handle's region starts in its file (ints: prot, offset low 32, high 32)."""
    _, lo, hi = handle.ints
    return lo | (hi << 32)


def map_pool(pool: MemoryPool) -> MappedPool:
    """Map a model or request pool: shared memory or an in-process pointer (token pools have no mapping)."""
    pointer = pool.pointer
    if type(pointer) is np.ndarray and pointer.flags.c_contiguous:
        return ArrayPool(pointer)
    if pointer is not None:
        mv = memoryview(pointer).cast("B")
        return MappedPool(mv, pool.pointer, writable=not mv.readonly)
    if pool.handle is not None:
        return map_handle(pool.handle)
    raise NnError(ErrorStatus.INVALID_ARGUMENT, "a driver-managed buffer token cannot be mapped")


MAPPED_ONCE_BYTES = 256 << 10  # `MappingCache` keeps mappings of regions from this size


class MappingCache:
    """Mappings of shared memory kept by the file they map (a bounded LRU): memory that comes back
    under a new descriptor (each request across a process boundary brings fresh ones) costs no mmap,
    page faults or munmap. The key holds the file's identity, the region, the seals and the access
    the descriptor grants, so a descriptor never gets more than a fresh mapping of it would. Regions
    under `min_bytes` are mapped afresh (cheap; and each kept mapping holds a descriptor)."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = 64, min_bytes: int = MAPPED_ONCE_BYTES) -> None:
        self._maps: OrderedDict[tuple, tuple[MappedPool, int]] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_tensor_bytes() if max_bytes is None else max_bytes
        self._max_entries = max_entries
        self._min_bytes = min_bytes
        self._lock = threading.RLock()  # (a finalizer may ask it to forget while this thread holds it)

    def map(self, handle: MemoryHandle) -> MappedPool:
        """`map_handle(handle)`, reusing a mapping of the same region of the same file."""
        if handle.name not in ("ashmem", "mmap_fd") or len(handle.fds) != 1 or handle.size < self._min_bytes:
            return map_handle(handle)
        try:
            fd = handle.fds[0]
            st = os.fstat(fd)
            access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except (OSError, TypeError, ValueError, OverflowError):
            return map_handle(handle)  # which says what is wrong with it
        if not stat.S_ISREG(st.st_mode):
            return map_handle(handle)
        end = handle.size
        if handle.name == "mmap_fd" and len(handle.ints) == 3:
            end += mmap_fd_offset(handle)
        key = (st.st_dev, st.st_ino, handle.name, handle.ints, handle.size, access,
               handle.name == "ashmem" and is_sealed(handle))
        with self._lock:
            hit = self._maps.get(key)
            if hit is not None:
                if st.st_size >= end:  # (a file shrunk since must not be read past its end)
                    self._maps.move_to_end(key)
                    return hit[0]
                self._forget(key)
        pool = map_handle(handle)
        size = max(pool.size, 1)
        with self._lock:
            if key not in self._maps and size <= self._max_bytes:
                self._maps[key] = (pool, size)
                self._bytes += size
                while self._bytes > self._max_bytes or len(self._maps) > self._max_entries:
                    self._forget(next(iter(self._maps)))
        return pool

    def _forget(self, key: tuple) -> None:
        _, size = self._maps.pop(key)
        self._bytes -= size  # (the mapping goes when the last view of it does)

    def forget_handle(self, handle: MemoryHandle, wait: bool = True) -> None:
        """`forget_file` for the file `handle` maps (an `on_forget` holder)."""
        ident = file_identity(handle)
        if ident is not None:
            self.forget_file(*ident)

    def forget_file(self, dev: int, ino: int) -> int:
        """Drop every mapping of the file (`st_dev`, `st_ino`), before it is sealed or freed; how many."""
        with self._lock:
            keys = [key for key in self._maps if key[0] == dev and key[1] == ino]
            for key in keys:
                self._forget(key)
        return len(keys)

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._maps)


_process_mappings: MappingCache | None = None
_process_mappings_lock = threading.Lock()


def process_mappings() -> MappingCache:
    """This process's mappings of shared memory that comes back call after call (in-process drivers
    map an app's `Memory` once, not at every execution); let go of when the memory is sealed or closed."""
    global _process_mappings
    with _process_mappings_lock:
        if _process_mappings is None:
            _process_mappings = MappingCache()
            on_forget(_process_mappings.forget_handle)
        return _process_mappings


def map_pool_kept(pool: MemoryPool) -> MappedPool:
    """`map_pool`, with shared memory of `MAPPED_ONCE_BYTES` and more mapped once per process
    (`process_mappings`): what is read again and again (an app's request memory, a model's weights
    fingerprinted at each compilation) costs no fresh mapping and its page faults each time (about
    1 ms for 14 MB here)."""
    if pool.handle is not None and pool.token is None:
        return process_mappings().map(pool.handle)
    return map_pool(pool)
