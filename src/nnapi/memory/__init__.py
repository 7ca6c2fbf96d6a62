"""Shared memory and the drivers' memory toolkit: memfd-backed `ashmem`, `mmap_fd` regions,
emulated hardware buffers (BLOB and non-BLOB), bounds-checked mapping of pools, and memory
domains (driver-managed buffers: `domains`)."""
from .hardware_buffer import (HardwareBuffer, HardwareBufferDesc, HardwareBufferFormat, HardwareBufferUsage,
                              MappedImage, can_map, decode_hardware_buffer, is_hardware_buffer,
                              map_hardware_buffer, mappable_constant_flags)
from .pools import (MAPPED_KINDS, MAPPED_ONCE_BYTES, ArrayPool, FileCopy, MappedPool, MappingCache,
                    allocate_ashmem, close_handle, dup_handle, fd_identity, file_identity, fixed_size_memfd,
                    forget_mappings, is_sealed, map_handle, map_pool, map_pool_kept, max_tensor_bytes, mmap_fd_handle, on_forget,
                    physical_memory_bytes, process_mappings, read_region, seal_handle, stable_handle)

__all__ = ["MAPPED_KINDS", "MAPPED_ONCE_BYTES", "ArrayPool", "FileCopy", "HardwareBuffer", "HardwareBufferDesc",
           "HardwareBufferFormat", "HardwareBufferUsage", "MappedImage", "MappedPool", "MappingCache",
           "allocate_ashmem", "can_map", "close_handle", "decode_hardware_buffer", "dup_handle", "fd_identity",
           "file_identity", "fixed_size_memfd", "forget_mappings", "is_hardware_buffer", "is_sealed", "map_handle",
           "map_hardware_buffer", "map_pool", "map_pool_kept", "mappable_constant_flags", "max_tensor_bytes",
           "mmap_fd_handle", "on_forget", "physical_memory_bytes", "process_mappings", "read_region", "seal_handle",
           "stable_handle"]
