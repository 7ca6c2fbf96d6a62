"""Client proxies of the HAL interfaces: `IDevice`, `IPreparedModel`, `IBuffer` and
`IFencedExecutionCallback` over one connection to a service (the burst's: `burst`; the reusable
execution's: `reusable`), so the runtime
uses a served driver exactly as an in-process one. Each method is one call declared in `protocol`
(`Connection.call`); in-process (pointer) pools are staged in shared memory for it (`staging`).
"""
from __future__ import annotations

import select
import socket
import time
from typing import Any, Callable, Sequence

from ..hal import (BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DeviceInfo, ErrorStatus, IBuffer,
                   IDevice, IFencedExecutionCallback, IPreparedModel, MemoryHandle, Model, NnError, OutputShape,
                   Request, Timing, invalid)
from . import protocol
from .burst import ServiceBurst
from .channel_end import ChannelEnd, socket_pair
from .codec import Encoder, fd_open
from .connection import CONNECT_TIMEOUT, Connection, Remote, hal
from .protocol import Method
from .reusable import ServiceExecution
from .staging import RegionCache, Staged, stage_model
from .values import check_int, check_list, decode_capabilities, decode_info
from .wire import Durations


class ServiceDevice(IDevice):
    """The `IDevice` of a driver served by `nnapi serve`."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        hello = connection.hello
        self._info = decode_info(hello.get("info"))
        self._capabilities = decode_capabilities(hello.get("capabilities"))
        n_model, n_data = check_list(hello.get("cache_files"), "cache files", length=2)
        self._cache_files = (check_int(n_model, "model cache files"), check_int(n_data, "data cache files"))
        self.staging = RegionCache()

    def __repr__(self) -> str:
        return f"ServiceDevice({self._info.name!r}, pid={self.pid}, socket={self.socket_path!r})"

    @property
    def pid(self) -> int | None:
        return self.connection.pid

    @property
    def socket_path(self) -> str:
        return self.connection.path

    @property
    def alive(self) -> bool:
        return self.connection.alive

    def on_death(self, callback: Callable[[], None]) -> None:
        self.connection.on_death(callback)

    def close(self) -> None:
        self.connection.close()
        self.staging.clear()

    def status(self) -> dict:
        """What the service holds for this connection (and, for its own user or root, service-wide figures)."""
        return self.connection.call(protocol.STATUS, 0)

    # --- IDevice ---------------------------------------------------------------------------------------------
    def get_info(self) -> DeviceInfo:
        return self._info

    def get_capabilities(self) -> Capabilities:
        return self._capabilities

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return self._cache_files

    @hal
    def get_supported_operations(self, model: Model) -> list[bool]:
        enc = Encoder()
        return self.connection.call(protocol.GET_SUPPORTED_OPERATIONS, 0, [stage_model(enc, model)], enc)

    @hal
    def prepare_model(self, model: Model, preference, priority, deadline: int | None, cache: CacheHandles | None,
                      token: bytes | None, *, client: ClientId | None = None) -> "ServicePreparedModel":
        enc = Encoder()
        try:
            staged = stage_model(enc, model)
        except BaseException:
            enc.close()
            raise
        oid, source = self.connection.call(protocol.PREPARE_MODEL, 0,
                                           [staged, preference, priority, deadline, cache, token], enc)
        prepared = ServicePreparedModel(self, oid)
        if source is not None:  # where the driver took it from (its fleet tier)
            prepared.cache_source = source
        return prepared

    @hal
    def prepare_model_from_cache(self, deadline: int | None, cache: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> "ServicePreparedModel":
        return ServicePreparedModel(self, self.connection.call(protocol.PREPARE_MODEL_FROM_CACHE, 0,
                                                               [deadline, cache, token]))

    @hal
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple["ServiceBuffer", int]:
        ids = [m.oid if isinstance(m, ServicePreparedModel) and m.device is self else -1 for m in prepared_models]
        oid, token = self.connection.call(protocol.ALLOCATE, 0, [desc, ids, input_roles, output_roles])
        return ServiceBuffer(self, oid), token


class ServicePreparedModel(Remote, IPreparedModel):
    """A model prepared by a served driver."""

    #: Where the served driver took it from, when not from the app's cache (its fleet tier), or why not.
    cache_source: str | None = None

    def __init__(self, device: ServiceDevice, oid: Any) -> None:
        super().__init__(device, oid)
        self._durations = Durations()  # of synchronous executions (their answers are polled for then)

    @hal
    def execute_synchronously(self, request: Request, measure, deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        staged = Staged(request, self.device.staging)
        try:
            durations = self._durations
            self.device.connection.sent_pools(staged.request.pools)
            start = time.monotonic_ns()
            result = self.device.connection.call(protocol.EXECUTE_SYNCHRONOUSLY, self.oid,
                                                 [staged.request, measure, deadline, loop_timeout_ns],
                                                 usual_ns=durations.usual())
            durations.record(time.monotonic_ns() - start)
            staged.finish()
            return result
        finally:
            staged.release()

    @hal
    def execute(self, request: Request, measure, deadline: int | None, loop_timeout_ns: int | None,
                callback: Callable[[ErrorStatus, list[OutputShape], Timing], None], *,
                client: ClientId | None = None) -> None:
        staged = Staged(request, self.device.staging)

        def on_event(payload: Any, error: NnError | None) -> None:
            try:
                if error is not None:
                    status, shapes, timing = error.status, [], Timing()
                else:
                    status, shapes, timing = protocol.decode_completion(payload)
                    if status == ErrorStatus.NONE:
                        staged.finish()
            except (NnError, ValueError):
                status, shapes, timing = ErrorStatus.GENERAL_FAILURE, [], Timing()
            finally:
                staged.release()
            callback(status, shapes, timing)

        try:
            self.device.connection.sent_pools(staged.request.pools)
            self.device.connection.call(protocol.EXECUTE, self.oid, [staged.request, measure, deadline,
                                                                     loop_timeout_ns], on_event=on_event)
        except BaseException:
            staged.release()
            raise

    @hal
    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure, deadline: int | None,
                       loop_timeout_ns: int | None, timeout_after_fence_ns: int | None, *,
                       client: ClientId | None = None) -> tuple[int, IFencedExecutionCallback]:
        """Sync fences cross to the service as descriptors; the service waits on them and runs. The answer
        is the completion (or the service's own sync fence and a callback to ask later). In-process
        (pointer) inputs are read once the fences are signalled, as in-process: the proxy waits on the
        fences before staging them."""
        if wait_for and any(p.pointer is not None for p in request.pools):
            _wait_fences(wait_for, deadline)
        staged = Staged(request, self.device.staging)
        try:
            self.device.connection.sent_pools(staged.request.pools)
            (has_fence, oid, info), fds = self.device.connection.call_fds(
                protocol.EXECUTE_FENCED, self.oid, [staged.request, wait_for, measure, deadline, loop_timeout_ns,
                                                    timeout_after_fence_ns])
            if not has_fence:
                callback: IFencedExecutionCallback = _DoneCallback(info)
                fence = -1
            else:
                fence = fds[0]
                callback = ServiceFencedCallback(self.device, oid)
                if staged.request is not request:  # pointer outputs: copy back once the work is done
                    _wait_fence(fence)
            if callback.get_execution_info()[0] == ErrorStatus.NONE:
                staged.finish()
            return fence, callback
        finally:
            staged.release()

    @hal
    def create_reusable_execution(self, request: Request, measure, loop_timeout_ns: int | None, *,
                                  client: ClientId | None = None) -> ServiceExecution:
        """The request crosses once and the service keeps it; each computation is one small call, on a
        channel of the execution's own (one end of a socket pair goes to the service)."""
        staged = Staged(request, self.device.staging)
        try:
            # (every size: the service keeps the execution's memory mapped, however small)
            self.device.connection.sent_pools(staged.request.pools, min_bytes=0)
            (oid, has_channel), mine = self._with_channel(
                protocol.CREATE_REUSABLE_EXECUTION, [staged.request, measure, loop_timeout_ns])
        except BaseException:
            staged.release()
            raise
        channel = ChannelEnd(mine, self.device.connection, "execution") if has_channel else None
        return ServiceExecution(self.device, oid, staged, channel)

    @hal
    def configure_execution_burst(self) -> ServiceBurst:
        """A burst with a channel of its own: one end of a socket pair goes to the service."""
        (oid, has_channel), mine = self._with_channel(protocol.CONFIGURE_EXECUTION_BURST, [])
        return ServiceBurst(self.device, oid, ChannelEnd(mine, self.device.connection, "burst") if has_channel
                            else None)

    def _with_channel(self, spec: Method, values: list) -> tuple[Any, socket.socket | None]:
        """Call `spec` with the service's end of a new socket pair as its last argument: (the answer, this
        end, or None when the service had no room for another channel: the connection carries its calls)."""
        mine, theirs = socket_pair()
        try:
            answer = self.device.connection.call(spec, self.oid, [*values, theirs.fileno()])
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        if not answer[1]:
            mine.close()
            mine = None
        return answer, mine


def _wait_fence(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll()


def _wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Wait for every valid sync fence (invalid ones are left for the driver to refuse);
    MISSED_DEADLINE_TRANSIENT when the deadline passes first."""
    for fd in fences:
        if not fd_open(fd):
            continue
        left = None if deadline is None else max(0, (deadline - time.monotonic_ns()) // 1_000_000)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(left):
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "the deadline passed while waiting for fences")


class _DoneCallback(IFencedExecutionCallback):
    """The completion that came with a fenced execution's answer."""

    def __init__(self, info: tuple[ErrorStatus, Timing, Timing] | None) -> None:
        self._info = info if info is not None else (ErrorStatus.GENERAL_FAILURE, Timing(), Timing())

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self._info


class ServiceFencedCallback(Remote, IFencedExecutionCallback):
    """The callback of a fenced execution still running in the service."""

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self.device.connection.call(protocol.GET_EXECUTION_INFO, self.oid)


class ServiceBuffer(Remote, IBuffer):
    """A driver-managed buffer (memory domain) in the service."""

    @hal
    def copy_to(self, dst: MemoryHandle) -> None:
        self.device.connection.call(protocol.COPY_TO, self.oid, [dst])

    @hal
    def copy_from(self, src: MemoryHandle, dimensions: Sequence[int]) -> None:
        self.device.connection.call(protocol.COPY_FROM, self.oid, [src, dimensions])


def connect(path: str, timeout: float = CONNECT_TIMEOUT) -> ServiceDevice:
    """The device served on socket `path`; DEVICE_UNAVAILABLE when no service answers there."""
    return ServiceDevice(Connection(path, timeout))
