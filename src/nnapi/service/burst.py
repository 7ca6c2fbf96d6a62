"""The client's burst (`IBurst`): a channel of its own to the service (`channel_end`), and its staging
region and the app's pools kept in the service under slots, so a pool's descriptor is sent once per burst.
Without a channel its calls go on the connection.
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Sequence

from ..hal import (ClientId, IBurst, MemoryHandle, MemoryPool, NnError, OutputShape, Request, Timing,
                   check_burst_tokens)
from . import protocol
from .channel_end import ChannelEnd
from .connection import Remote, hal
from .protocol import Method
from .staging import Region, Staged

if TYPE_CHECKING:
    from .proxies import ServiceDevice


def _identity(handle: MemoryHandle) -> tuple | None:
    """What tells one shared memory from another across calls: kind, the files its descriptors are,
    its integers and size (None when a descriptor is not open: never cached)."""
    files = []
    for fd in handle.fds:
        try:
            st = os.fstat(fd)
        except (OSError, TypeError, ValueError):
            return None
        files.append((st.st_dev, st.st_ino))
    return handle.name, tuple(files), tuple(handle.ints), handle.size


class ServiceBurst(Remote, IBurst):
    """A burst in the service: pools named by a memory identifier token, and the one staging region of
    the pointer (numpy) pools, are sent once and then referred to by slot."""

    def __init__(self, device: "ServiceDevice", oid: Any, channel: ChannelEnd | None = None) -> None:
        super().__init__(device, oid)
        self._channel = channel
        self._lock = threading.Lock()
        self._slots = itertools.count()
        self._by_token: dict[int, tuple[int, tuple]] = {}  # memory identifier token -> (slot, identity)
        self._staging: list = [None, None, False]           # [slot, region, sent]
        weakref.finalize(self, _close_staging, self._staging)

    def _staging_region(self, size: int) -> Region:
        """The burst's staging region, grown (under a new slot) when a call needs more."""
        slot, region, _ = self._staging
        if region is not None and region.capacity >= size:
            return region
        if region is not None:
            self._notify([slot])
            region.close()
        region = Region(max(4096, 1 << (max(size, 1) - 1).bit_length()))
        self._staging[:] = [next(self._slots), region, False]
        return region

    @hal
    def execute_synchronously(self, request: Request, memory_identifier_tokens: Sequence[int], measure,
                              deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        check_burst_tokens(request, memory_identifier_tokens)
        with self._lock:  # one execution at a time per burst, as the HAL's burst channel
            staged = Staged(request, self.device.staging, self._staging_region)
            try:
                pools: list[MemoryPool] = []
                slots: list[list | None] = []
                new: list[tuple[int, object]] = []  # what this call sends for the first time
                for k, pool in enumerate(staged.request.pools):
                    origin = staged.origin[k]
                    if k == staged.persistent_index:
                        slot, _, sent = self._staging
                        pools.append(MemoryPool() if sent else pool)
                        slots.append(["s" if sent else "n", slot])
                        if not sent:
                            new.append((slot, None))
                        continue
                    token = memory_identifier_tokens[origin] if origin is not None else -1
                    ident = _identity(pool.handle) if pool.handle is not None and token >= 0 else None
                    if ident is None:
                        pools.append(pool)
                        slots.append(None)
                        continue
                    known = self._by_token.get(token)
                    if known is not None and known[1] == ident:
                        pools.append(MemoryPool())
                        slots.append(["s", known[0]])
                        continue
                    if known is not None:
                        self._notify([known[0]])
                    slot = next(self._slots)
                    self._by_token[token] = (slot, ident)
                    new.append((slot, token))
                    pools.append(pool)
                    slots.append(["n", slot])
                    self.device.connection.sent_pools([pool], min_bytes=0)  # (a slot keeps any size)
                args = [Request(staged.request.inputs, staged.request.outputs, pools), slots, measure, deadline,
                        loop_timeout_ns]
                try:
                    shapes, timing = self._call(protocol.BURST_EXECUTE, args)
                except NnError:
                    # The service may not have kept what this call sent: send it again next time.
                    for slot, token in new:
                        if token is not None:
                            self._by_token.pop(token, None)
                    raise
                if any(token is None for _, token in new):
                    self._staging[2] = True
                staged.finish()
                return shapes, timing
            finally:
                staged.release()

    @hal
    def release_memory_resource(self, token: int) -> None:
        with self._lock:
            known = self._by_token.pop(token, None)
            if known is not None:
                self._notify([known[0]])

    def release(self) -> None:
        """Free the burst in the service now: its channel closes, and its thread there ends."""
        if self._channel is not None:
            self._channel.shutdown()
        super().release()

    # --- the channel ---------------------------------------------------------------------------------------
    def _call(self, spec: Method, values: list) -> Any:
        """One call, on the burst's channel (callers hold the burst's lock), else on the connection."""
        if self._channel is None:
            return self.device.connection.call(spec, self.oid, values)
        return self._channel.call(spec, self.oid, values)

    def _notify(self, slots: list[int]) -> None:
        """Forget cached pools in the service (no answer)."""
        if self._channel is None:
            self.device.connection.notify(protocol.BURST_RELEASE, self.oid, slots)
        else:
            self._channel.notify(protocol.BURST_RELEASE, self.oid, slots)


def _close_staging(staging: list) -> None:
    if staging[1] is not None:
        staging[1].close()
    staging[:] = [None, None, False]
