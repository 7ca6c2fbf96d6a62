"""Checks of memory pools, shared by model and request validation and by memory domains
(VTS-BEHAVIOURS 2.1, 2.2 rule 6)."""
from __future__ import annotations

import mmap
from typing import Any

from ..hal import MemoryHandle, MemoryPool, invalid, is_int

#: Shared-memory kinds a handle may name.
POOL_KINDS = ("ashmem", "mmap_fd", "hardware_buffer_blob", "hardware_buffer")
_PROT_BITS = mmap.PROT_READ | mmap.PROT_WRITE


def check_pool(pool: Any, label: str, *, request: bool) -> int:
    """Validate one pool and return the size bounds checks use (0 for tokens and non-BLOB buffers)."""
    if not isinstance(pool, MemoryPool):
        raise invalid(f"{label}: expected a MemoryPool, got {type(pool).__name__}")
    kinds = [name for name, value in (("handle", pool.handle), ("token", pool.token),
                                      ("pointer", pool.pointer)) if value is not None]
    if len(kinds) != 1:
        raise invalid(f"{label}: exactly one of handle, token or pointer must be set "
                      f"(got {', '.join(kinds) or 'none'})")
    if pool.token is not None:
        if not request:
            raise invalid(f"{label}: a driver-managed buffer (token) cannot hold model constants")
        if not is_int(pool.token) or pool.token <= 0:
            raise invalid(f"{label}: token must be a positive integer, got {pool.token!r}")
        return 0
    if pool.pointer is not None:
        try:
            return memoryview(pool.pointer).nbytes
        except TypeError:
            raise invalid(f"{label}: pointer is not a buffer ({type(pool.pointer).__name__})") from None
    return _check_handle(pool.handle, label, request=request)


def _check_handle(handle: Any, label: str, *, request: bool) -> int:
    """Validate a shared-memory handle: kind, file descriptors, integers and size."""
    if not isinstance(handle, MemoryHandle):
        raise invalid(f"{label}: expected a MemoryHandle, got {type(handle).__name__}")
    if handle.name not in POOL_KINDS:
        raise invalid(f"{label}: unknown memory kind {handle.name!r} (expected one of {', '.join(POOL_KINDS)})")
    for field, values in (("fds", handle.fds), ("ints", handle.ints)):
        if not isinstance(values, (tuple, list)) or not all(is_int(v) for v in values):
            raise invalid(f"{label}: handle {field} must be a sequence of integers")
    if any(fd < 0 for fd in handle.fds):
        raise invalid(f"{label}: invalid file descriptor in {tuple(handle.fds)}")
    if not is_int(handle.size) or handle.size < 0:
        raise invalid(f"{label}: invalid size {handle.size!r}")
    if handle.name == "hardware_buffer":
        if not request:
            raise invalid(f"{label}: a non-BLOB hardware buffer cannot hold model constants")
        return 0  # not mappable: only the whole buffer (offset = length = 0) can be used
    if handle.size == 0:
        raise invalid(f"{label}: {handle.name} pool size must be > 0")
    if handle.name in ("ashmem", "mmap_fd") and len(handle.fds) != 1:
        raise invalid(f"{label}: {handle.name} handle must hold exactly 1 file descriptor, got {len(handle.fds)}")
    if handle.name == "mmap_fd":
        if len(handle.ints) != 3:
            raise invalid(f"{label}: mmap_fd handle needs 3 ints (prot, offset low, offset high), "
                          f"got {len(handle.ints)}")
        prot, low, high = handle.ints
        if prot & ~_PROT_BITS:
            raise invalid(f"{label}: mmap_fd prot {prot:#x} has bits other than PROT_READ|PROT_WRITE")
        if not (0 <= low < 2**32 and 0 <= high < 2**32):
            raise invalid(f"{label}: mmap_fd offset words must be 32-bit unsigned, got {low}, {high}")
    return int(handle.size)
