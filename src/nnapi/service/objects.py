"""What a connection owns, on the service's side: its objects by id (prepared models, buffers, bursts,
fenced callbacks) with the descriptors they keep (`Entry`), and the connection itself (`Client`: its
socket, the caller's credentials, its calls in flight and its kept mappings of the app's memory).
Everything a connection owns is freed when it releases it or disconnects."""
from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..hal import ErrorStatus, MemoryPool, NnError, Request, invalid
from ..memory import MappingCache
from . import codec
from .codec import REPLY, Encoder
from .peer import Credentials
from .protocol import OBJECT_KINDS
from .wire import FrameDecoder, close_fds, send_frame

if TYPE_CHECKING:
    from .server import Service

log = logging.getLogger("nnapi.service")


class Foreign:
    """Stands for a prepared model the caller does not own (the driver then refuses it as foreign)."""


@dataclass
class Entry:
    """An object a connection owns, the descriptors it keeps open and what frees it."""

    kind: str
    obj: Any
    fds: list[int] = field(default_factory=list)
    on_release: Callable[[], None] | None = None

    def release(self) -> None:
        try:
            if self.on_release is not None:
                self.on_release()
        except Exception:  # freeing must never fail the caller
            log.debug("releasing a %s failed", self.kind, exc_info=True)
        finally:
            close_fds(self.fds)
            self.fds = []
            self.obj = None


class Client:
    """One connection: its socket, the caller's credentials, its objects and its calls in flight."""

    def __init__(self, service: Service, sock: socket.socket, creds: Credentials) -> None:
        self.service = service
        self.sock = sock
        self.creds = creds
        self.decoder = FrameDecoder()
        self.send_lock = threading.Lock()
        self.io_lock = threading.RLock()   # held while a thread reads this connection or drops it
        self.lock = threading.Lock()
        self.objects: dict[int, Entry] = {}
        self.next_id = 1
        self.in_flight = 0
        self.greeted = False
        self.closed = False
        # This client's shared memory, mapped once; what it keeps mapped (at most 256 MiB) stays
        # allocated after the app frees it, until it is pushed out or the client disconnects.
        self.mappings = MappingCache(max_bytes=256 << 20)

    def __repr__(self) -> str:
        return f"client pid {self.creds.pid} uid {self.creds.uid}"

    # --- objects ----------------------------------------------------------------------------------
    def add(self, entry: Entry) -> int:
        with self.lock:
            if not self.closed and len(self.objects) < self.service.max_objects:
                oid = self.next_id
                self.next_id += 1
                self.objects[oid] = entry
                return oid
            closed = self.closed
        entry.release()
        if closed:
            raise NnError(ErrorStatus.DEVICE_UNAVAILABLE, "the connection closed during the call")
        raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                      f"a connection may hold at most {self.service.max_objects} objects")

    def lookup(self, oid: Any, kind: str) -> Any:
        with self.lock:
            entry = self.objects.get(oid) if type(oid) is int else None
        if entry is None or entry.kind != kind:
            raise invalid(f"object {oid!r} is not a live {kind} of this connection")
        return entry.obj

    def release(self, oid: Any) -> None:
        with self.lock:
            entry = self.objects.pop(oid, None) if type(oid) is int else None
        if entry is not None:
            entry.release()

    def objects_of(self, kind: str) -> list:
        """The live objects of one kind."""
        with self.lock:
            return [e.obj for e in self.objects.values() if e.kind == kind]

    def counts(self) -> dict[str, int]:
        with self.lock:
            kinds = [e.kind for e in self.objects.values()]
        return {kind: kinds.count(kind) for kind in OBJECT_KINDS}

    # --- sending ------------------------------------------------------------------------------------
    def send(self, message: list, enc: Encoder | None = None) -> None:
        """Send a message (replies, events); a connection that cannot take it is closed."""
        try:
            body = codec.pack(message)
        except NnError as e:
            body = codec.pack(codec.error_message(message[1], NnError(ErrorStatus.GENERAL_FAILURE, e.message)))
            enc = None
        try:
            with self.send_lock:
                if self.closed:
                    return
                send_frame(self.sock, body, enc.fds if enc is not None else ())
        except (OSError, ValueError) as e:
            log.info("%s: cannot send (%s); closing the connection", self, e)
            self.service.request_close(self)
        finally:
            if enc is not None:
                enc.close()

    def reply(self, rid: int, value: Any, enc: Encoder | None = None) -> None:
        if rid:
            self.send([REPLY, rid, value], enc)
        elif enc is not None:
            enc.close()

    def error(self, rid: int, error: NnError) -> None:
        """Answer a failed call (request id 0 when the call could not even be read)."""
        self.send(codec.error_message(rid, error))

    # --- closing -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free everything this connection owns (also while its calls finish: they find it closed)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            entries = list(self.objects.values())
            self.objects.clear()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # a send blocked on a full socket returns at once
        except OSError:
            pass
        with self.send_lock:
            self.sock.close()
        self.decoder.close()
        self.mappings.clear()
        for entry in entries:
            entry.release()

    def in_place(self, request: Request) -> Request:
        """The request with its shared-memory pools as views of this client's kept mappings: the driver
        runs on the app's memory in place, and memory sent again is not mapped again."""
        for k, pool in enumerate(request.pools):
            handle = pool.handle
            if handle is not None and pool.token is None and handle.name in ("ashmem", "mmap_fd"):
                try:
                    request.pools[k] = MemoryPool(pointer=self.mappings.map(handle).buffer)
                except NnError:  # the driver gets it as sent, and says what is wrong with it
                    pass
        return request
