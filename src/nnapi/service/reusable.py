"""Reusable executions across the service boundary (Android's IExecution over AIDL).

The app's side, `ServiceExecution`: the request crosses once, at `create_reusable_execution`, its
in-process (pointer) pools staged in a region that the execution keeps; each computation copies those
inputs in again, sends one small call with the deadline on the execution's own channel (`channel_end`;
on the connection when the service had no room for one), and copies the outputs back.

The service's side, `ServedExecution`: the driver's own reusable execution of the request as the
service decoded it (its shared memory mapped in place), the descriptors and file copies that request
holds (kept open until the app releases it), what it maps, so that memory the app seals or frees
ends the execution rather than staying mapped (`forget`), and its channel, ended with it.
"""
from __future__ import annotations

import socket
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from ..hal import ErrorStatus, IExecution, MeasureTiming, NnError, OutputShape, Request, SimpleExecution, Timing
from ..memory import fd_identity
from . import protocol
from .channel_end import ChannelEnd
from .codec import Decoder
from .connection import Remote, hal
from .staging import Staged
from .wire import Durations, close_fds, shutdown

if TYPE_CHECKING:
    from .proxies import ServiceDevice


class ServiceExecution(Remote, IExecution):
    """A reusable execution of a served prepared model (`ServicePreparedModel.create_reusable_execution`)."""

    def __init__(self, device: "ServiceDevice", oid: Any, staged: Staged, channel: ChannelEnd | None = None) -> None:
        super().__init__(device, oid)
        self._staged = staged
        self._channel = channel
        self._durations = Durations()
        self._lock = threading.Lock()
        weakref.finalize(self, staged.release)  # (its regions go back to the device's cache with it)

    @hal
    def compute(self, deadline: int | None = None) -> tuple[list[OutputShape], Timing]:
        if not self._lock.acquire(blocking=False):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "compute: this reusable execution is computing already "
                                                       "(one computation at a time)")
        try:
            self._staged.refresh()  # (a computation reads the app's memory as it is now)
            if self._channel is not None:
                result = self._channel.call(protocol.EXECUTION_COMPUTE, self.oid, [deadline])
            else:
                durations = self._durations
                start = time.monotonic_ns()
                result = self.device.connection.call(protocol.EXECUTION_COMPUTE, self.oid, [deadline],
                                                     usual_ns=durations.usual())
                durations.record(time.monotonic_ns() - start)
            self._staged.finish()
            return result
        finally:
            self._lock.release()

    def release(self) -> None:
        """Free the execution in the service now: its channel closes, and its thread there ends."""
        if self._channel is not None:
            self._channel.shutdown()
        super().release()


def create_served(prepared: Any, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None,
                  decoder: Decoder, client_kw: dict, channel: socket.socket | None = None) -> "ServedExecution":
    """The driver's reusable execution of a decoded request, holding what that request maps."""
    create = getattr(prepared, "create_reusable_execution", None)  # (a plug-in that predates it: one call each)
    execution = create(request, measure, loop_timeout_ns, **client_kw) if create is not None else \
        SimpleExecution(prepared, request, measure, loop_timeout_ns, client_kw.get("client"))
    if not isinstance(execution, IExecution) and not callable(getattr(execution, "compute", None)):
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"create_reusable_execution returned "
                                                   f"{type(execution).__name__}, not an IExecution")
    return ServedExecution(execution, decoder, getattr(prepared, "priority", None), channel)


class ServedExecution:
    """What the service holds for one app's reusable execution (see the module doc)."""

    def __init__(self, execution: IExecution, decoder: Decoder, priority: Any,
                 channel: socket.socket | None = None) -> None:
        self.execution: IExecution | None = execution
        self.channel = channel  # (served by `channel.Channels`, which closes it)
        self.priority = priority  # (LOW work gives way to the foreground's: `foreground.execution`)
        self.fds = decoder.adopt_all()  # (closed by the entry's release; the channel's, adopted first, is not)
        self._decoder = decoder
        self.files = ({fd_identity(fd) for fd in self.fds} - {None}) | decoder.copied_files()
        self.lock = threading.Lock()
        self.gone: str | None = None

    def compute(self, deadline: int | None) -> tuple[list[OutputShape], Timing]:
        """One computation (GENERAL_FAILURE when one is running already, or the memory is gone)."""
        if not self.lock.acquire(blocking=False):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "execution_compute: this reusable execution is computing "
                                                       "already (one computation at a time)")
        try:
            if self.execution is None:
                raise NnError(ErrorStatus.GENERAL_FAILURE, f"execution_compute: {self.gone}")
            result = self.execution.compute(deadline)
            self._decoder.write_back()  # (outputs in copies of the app's files go back into them)
            return result
        finally:
            self.lock.release()

    def forget(self, files: set[tuple[int, int]]) -> None:
        """End the execution when it maps one of `files` (sealed or freed by the app)."""
        if self.files & files:
            with self.lock:
                self.execution = None
                self.gone = "the memory of its request was sealed or freed by the app"

    def release(self) -> None:
        with self.lock:
            self.execution = None
            self.gone = "released"
        if self.channel is not None:  # its thread sees the end and leaves
            shutdown(self.channel)
        close_fds(self.fds)
        self.fds = []
