"""Shared memory: memfd-backed `ashmem`, `mmap_fd` regions, and bounds-checked mapping of pools."""
from .pools import (MappedPool, allocate_ashmem, close_handle, dup_handle, map_handle, map_pool,
                    mmap_fd_handle)

__all__ = ["MappedPool", "allocate_ashmem", "close_handle", "dup_handle", "map_handle", "map_pool",
           "mmap_fd_handle"]
