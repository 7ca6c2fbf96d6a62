"""Staging the app's in-process (pointer) pools in shared memory for a call: tensor bytes never cross
the socket. A request's pointer pools share one region (one descriptor, one mapping in the service),
inputs copied in and outputs copied back (`Staged`); regions are kept for reuse by the device
(`RegionCache`); a model's in-process constants get regions of their own (`stage_model`).
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import threading
import weakref
from typing import Any, Callable

from ..hal import DataLocation, MemoryHandle, MemoryPool, Model, Request, RequestArgument, invalid
from ..memory import fixed_size_memfd
from .codec import Encoder
from .wire import close_fds


class Region:
    """A memfd with its mapping, reused for staging."""

    __slots__ = ("fd", "map", "capacity")

    def __init__(self, capacity: int) -> None:
        self.fd = fixed_size_memfd("nnapi-staging", capacity)  # (a service maps it without copying)
        try:
            self.map = mmap.mmap(self.fd, capacity, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(self.fd)
            raise
        self.capacity = capacity

    def handle(self, size: int) -> MemoryHandle:
        return MemoryHandle("ashmem", (self.fd,), (), size)

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a view is still alive: the mapping goes with it
            pass
        close_fds([self.fd])


class RegionCache:
    """Staging regions kept for reuse, by power-of-two capacity (at most `limit` bytes kept)."""

    def __init__(self, limit: int = 64 << 20) -> None:
        self._free: dict[int, list[Region]] = {}
        self._kept = 0
        self._limit = limit
        self._lock = threading.Lock()
        weakref.finalize(self, _close_regions, self._free)  # (their descriptors go with the cache)

    def clear(self) -> None:
        """Close every kept region (the device is closed)."""
        with self._lock:
            _close_regions(self._free)
            self._kept = 0

    def take(self, size: int) -> Region:
        capacity = max(4096, 1 << (max(size, 1) - 1).bit_length())
        with self._lock:
            regions = self._free.get(capacity)
            if regions:
                self._kept -= capacity
                return regions.pop()
        return Region(capacity)

    def give(self, region: Region) -> None:
        with self._lock:
            if self._kept + region.capacity <= self._limit:
                self._free.setdefault(region.capacity, []).append(region)
                self._kept += region.capacity
                return
        region.close()


def _close_regions(free: dict[int, list[Region]]) -> None:
    for regions in free.values():
        for region in regions:
            region.close()
    free.clear()


def pointer_view(pool: MemoryPool, k: int) -> memoryview:
    try:
        return memoryview(pool.pointer).cast("B")
    except (TypeError, ValueError):
        raise invalid(f"request pool {k}: pointer is not a contiguous buffer ({type(pool.pointer).__name__})") \
            from None


class Staged:
    """A request whose pointer pools stand in shared memory: `request` is what crosses the boundary;
    `finish` copies the written outputs back into the app's buffers; `release` returns the regions.

    A well-formed request gets one region for all its pointer pools (one descriptor, one mapping in
    the service), its arguments moved there; anything odd (an index or a region out of bounds) keeps
    one region per pool and every index as it is, so the driver reports it exactly as in-process."""

    ALIGN = 64

    def __init__(self, request: Request, cache: RegionCache,
                 persistent: Callable[[int], Region] | None = None) -> None:
        self.request = request
        self._cache = cache
        self._regions: list[Region] = []
        self._back: list[tuple[memoryview, int, int, Region, int]] = []  # view, start, end, region, at
        self._in: list[tuple[memoryview, Region, int]] = []  # an input pool's view, its region, where there
        #: For each pool of `request`, the index of the caller's pool it is (None: the merged region).
        self.origin: list[int | None] = list(range(len(request.pools)))
        #: The index of the pool in the `persistent` region (bursts keep it), if one was used.
        self.persistent_index: int | None = None
        views = {k: pointer_view(p, k) for k, p in enumerate(request.pools) if p.pointer is not None}
        if not views:
            return
        for j, a in enumerate(request.outputs):
            view = None if a.has_no_value else views.get(a.location.pool_index)
            if view is not None and view.readonly:
                raise invalid(f"request output {j}: pool {a.location.pool_index} is read-only")
        try:
            if self._well_formed(request, views):
                self._merge(request, views, persistent)
            else:
                self._separate(request, views)
        except BaseException:
            self.release()
            raise

    @staticmethod
    def _well_formed(request: Request, views: dict[int, memoryview]) -> bool:
        n = len(request.pools)
        for a in (*request.inputs, *request.outputs):
            if a.has_no_value:
                continue
            loc = a.location
            if type(loc.pool_index) is not int or not 0 <= loc.pool_index < n:
                return False
            view = views.get(loc.pool_index)
            if view is not None and not (type(loc.offset) is int and type(loc.length) is int and 0 <= loc.offset
                                         and 0 <= loc.length and loc.offset + loc.length <= view.nbytes):
                return False
        return True

    def _merge(self, request: Request, views: dict[int, memoryview],
               persistent: Callable[[int], Region] | None) -> None:
        bases, total = {}, 0
        for k, view in views.items():
            bases[k] = total
            total += view.nbytes + (-view.nbytes % self.ALIGN)
        if persistent is not None:
            region = persistent(max(total, 1))
        else:
            region = self._cache.take(max(total, 1))
            self._regions.append(region)
        for k in {a.location.pool_index for a in request.inputs if not a.has_no_value} & views.keys():
            self._in.append((views[k], region, bases[k]))
        self.refresh()
        pools = [p for k, p in enumerate(request.pools) if k not in views]
        index = {k: i for i, k in enumerate(k for k in range(len(request.pools)) if k not in views)}
        merged = len(pools)
        pools.append(MemoryPool(handle=region.handle(max(total, 1))))
        self.origin = [k for k in range(len(request.pools)) if k not in views] + [None]
        if persistent is not None:
            self.persistent_index = merged

        def moved(a: RequestArgument) -> RequestArgument:
            if a.has_no_value:
                return a
            loc = a.location
            if loc.pool_index in views:
                return RequestArgument(False, DataLocation(merged, bases[loc.pool_index] + loc.offset, loc.length),
                                       a.dimensions)
            return RequestArgument(False, DataLocation(index[loc.pool_index], loc.offset, loc.length), a.dimensions)

        outputs = [moved(a) for a in request.outputs]
        for a, b in zip(request.outputs, outputs):
            if not a.has_no_value and a.location.pool_index in views and a.location.length:
                self._back.append((views[a.location.pool_index], a.location.offset,
                                   a.location.offset + a.location.length, region, b.location.offset))
        self.request = Request([moved(a) for a in request.inputs], outputs, pools)

    def _separate(self, request: Request, views: dict[int, memoryview]) -> None:
        read = {a.location.pool_index for a in request.inputs if not a.has_no_value}
        pools = list(request.pools)
        for k, view in views.items():
            region = self._cache.take(view.nbytes)
            self._regions.append(region)
            if k in read:
                self._in.append((view, region, 0))
            pools[k] = MemoryPool(handle=region.handle(max(view.nbytes, 1)))
            for a in request.outputs:
                loc = a.location
                if not a.has_no_value and loc.pool_index == k:
                    start, end = max(0, loc.offset), min(view.nbytes, loc.offset + loc.length)
                    if end > start:
                        self._back.append((view, start, end, region, start))
        self.request = Request(request.inputs, request.outputs, pools)
        self.refresh()

    def refresh(self) -> None:
        """Copy the app's input pools into their regions (again, for a reusable execution's computation)."""
        for view, region, at in self._in:
            region.map[at:at + view.nbytes] = view

    def finish(self) -> None:
        for view, start, end, region, at in self._back:
            view[start:end] = region.map[at:at + end - start]

    def release(self) -> None:
        regions, self._regions = self._regions, []
        for region in regions:
            self._cache.give(region)
        self._back = []
        self._in = []


def stage_model(enc: Encoder, model: Any) -> Model:
    """`model` with its pointer pools (in-process constants) copied into shared memory, whose
    descriptors `enc` owns (duplicated into the frame when it is sent; the service keeps them)."""
    if not isinstance(model, Model):
        raise invalid(f"expected a Model, got {type(model).__name__}")
    if not any(p.pointer is not None for p in model.pools):
        return model
    pools = []
    for k, pool in enumerate(model.pools):
        if pool.pointer is None:
            pools.append(pool)
            continue
        view = pointer_view(pool, k)
        region = Region(max(view.nbytes, 1))
        enc.owned.append(region.fd)
        region.map[:view.nbytes] = view
        region.map.close()
        pools.append(MemoryPool(handle=region.handle(max(view.nbytes, 1))))
    return dataclasses.replace(model, pools=pools)
