"""Bursts on the service's side (their slots of cached pools: `ServedBurst`), and the channels of bursts and
reusable executions (one end of a socket pair the client made; `channel_end` is the client's), each served
by a thread of its own that polls it for a moment after each answer (Android's burst polls its message
queue the same way), so back-to-back executions cost no wake-up and skip the event loop. Without a channel
(or past the service's limit, or the uid's share) the object's calls come on its connection."""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..hal import ClientId, ErrorStatus, MemoryPool, NnError, Request, invalid
from ..memory import FileCopy
from ..hal.identity import calling_client
from ..qos import threads
from . import codec
from .codec import REPLY, Decoder, Encoder, check_int, check_list, read_call
from .handlers import Call
from .objects import Client, Entry
from .protocol import BURST, CHANNEL_METHODS
from .values import MAX_ITEMS
from .wire import BURST_POLL_NS, FrameDecoder, ProtocolError, close_fds, receive, send_frame, shutdown

if TYPE_CHECKING:
    from .server import Service

log = logging.getLogger("nnapi.service")


class ServedBurst:
    """A burst on the service side: the driver's IBurst, the pools the client cached in it by slot and
    its channel, if it has one."""

    def __init__(self, driver_burst, channel: socket.socket | None = None) -> None:
        self.driver_burst = driver_burst
        self.channel = channel
        #: slot -> (pool, the descriptors kept for it, its copy of an app's file or None)
        self.slots: dict[int, tuple[MemoryPool, list[int], FileCopy | None]] = {}
        self.lock = threading.Lock()

    def forget(self, slot: int) -> None:
        with self.lock:
            entry = self.slots.pop(slot, None)
        if entry is not None:
            try:
                self.driver_burst.release_memory_resource(slot)
            finally:
                close_fds(entry[1])

    def close(self) -> None:
        if self.channel is not None:  # its thread sees the end and leaves
            shutdown(self.channel)
        for slot in list(self.slots):
            self.forget(slot)


class Channels:
    """A service's burst calls and channels: how many channels are open (at most `limit`, and each
    uid's share of them in the service's budget)."""

    def __init__(self, service: "Service", limit: int) -> None:
        self.service = service
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()
        self._methods = {kind: {m.name: m for m in methods} for kind, methods in CHANNEL_METHODS.items()}

    def _take(self, call: Call, fd: int | None, what: str) -> socket.socket | None:
        """The client's channel end that came as `fd` (INVALID_ARGUMENT unless a Unix stream socket), or
        None without one or without room for it (counted until its thread ends: `_closed`)."""
        if fd is None:
            return None
        if fd < 0:
            raise invalid(f"{call.spec.name}: the {what} is not a valid descriptor")
        try:
            channel = socket.socket(fileno=call.dec.adopt(fd))
        except OSError as e:
            raise invalid(f"{call.spec.name}: the {what} is not a socket: {e}") from None
        if channel.type != socket.SOCK_STREAM or channel.family != socket.AF_UNIX:
            channel.close()
            raise invalid(f"{call.spec.name}: the {what} must be a Unix stream socket")
        with self._lock:  # (the service's channels, and the uid's share of them)
            full = self.open >= self.limit or not self.service.budget.open_channel(call.client.creds.uid)
            if not full:
                self.open += 1
        if full:
            channel.close()
            return None
        return channel

    def _serve_on_thread(self, client: Client, oid: int, kind: str, obj: Any, channel: socket.socket | None) -> None:
        """Serve `obj`'s channel (taken by `_take`) on a thread of its own; the object goes with it."""
        if channel is None:
            return
        try:
            # (it runs driver calls: the process's exit waits for the one it is in, `qos.threads`)
            threads.start(self._serve, client, oid, kind, obj, channel, name=f"nnapi-service-{kind.split()[-1]}",
                          stop=lambda: setattr(client, "closed", True))
        except BaseException:
            channel.close()
            self._closed(client.creds.uid)
            raise

    def with_channel(self, call: Call, kind: str, fd: int | None,
                     make: Callable[[socket.socket | None], tuple[Any, Callable[[], None]]]) -> list:
        """A new object of `kind`, `make(channel)` -> (it, what releases it), given the client's channel end
        that came as `fd` when there is room for it, its calls then served on it by a thread of its own:
        [its id, whether it took the channel]."""
        channel = self._take(call, fd, f"{kind} channel")
        try:
            obj, release = make(channel)
            oid = call.client.add(Entry(kind, obj, on_release=release))
        except BaseException:
            if channel is not None:
                channel.close()
                self._closed(call.client.creds.uid)
            raise
        self._serve_on_thread(call.client, oid, kind, obj, channel)
        return [oid, channel is not None]

    def configure(self, call: Call, prepared: Any, args: list) -> list:
        """A burst; with a channel its executions come on that channel."""
        (fd,) = args

        def make(channel: socket.socket | None) -> tuple[ServedBurst, Callable[[], None]]:
            burst = ServedBurst(prepared.configure_execution_burst(), channel)
            return burst, burst.close
        return self.with_channel(call, BURST, fd, make)

    def _serve(self, client: Client, oid: int, kind: str, obj: Any, channel: socket.socket) -> None:
        """The thread of one channel: its object's calls only, run here, answered on the channel."""
        decoder = FrameDecoder()
        send_lock = threading.Lock()
        methods = self._methods[kind]
        try:
            channel.setblocking(True)  # (a timeout would make every receive wait in poll() first)
            while not client.closed:
                data, fds = receive(channel, BURST_POLL_NS)
                if not data:
                    close_fds(fds)
                    return
                for body, frame_fds in decoder.feed(data, fds):
                    self._call(client, oid, obj, methods, channel, send_lock, body, frame_fds)
        except (OSError, ProtocolError, ValueError) as e:
            log.debug("%s: %s channel closed (%s)", client, kind, e)
        finally:
            decoder.close()
            channel.close()
            self._closed(client.creds.uid)
            client.release(oid)  # the object goes with its channel

    def _closed(self, uid: int) -> None:
        """A channel taken by `_take` is closed."""
        with self._lock:
            self.open -= 1
        self.service.budget.close_channel(uid)

    def _call(self, client: Client, oid: int, obj: Any, methods: dict, channel: socket.socket,
              send_lock: threading.Lock, body: bytes, fds: list[int]) -> None:
        dec = Decoder(fds, stable=True)
        rid = 0
        with contextlib.ExitStack() as hold:  # an execution: from its decoding to its answer
            try:
                rid, method, target, args = read_call(body, len(fds))
                spec = methods.get(method) if type(method) is str else None
                if spec is None or target != oid:
                    raise invalid(f"this channel takes {', '.join(methods)} of object {oid}, not {method!r} on "
                                  f"{target!r}")
                args = check_list(args, f"{method} arguments")
                if spec.execution:
                    hold.enter_context(self.service.foreground.execution(obj))
                call = Call(client, spec, rid, dec, Encoder())
                with calling_client(client.creds.uid, client.creds.pid):
                    result = self.service.handlers.handler(spec.name)(call, obj, spec.decode(dec, args))
                answer = [REPLY, rid, result]
            except NnError as e:
                answer = codec.error_message(rid, e)
            except Exception as e:  # a driver bug never takes the service down
                log.exception("%s: %s failed on its channel", client, method if rid else "a call")
                answer = codec.error_message(rid, NnError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}"))
            finally:
                dec.close()
            if rid:
                with send_lock:
                    send_frame(channel, codec.pack(answer))

    def execute(self, call: Call, burst: ServedBurst, args: list) -> list:
        """A burst execution: pools the client cached are named by slot, new ones come with their fds."""
        request, slots, measure, deadline, loop_timeout = args
        request: Request
        slots = check_list(slots, "burst slots", length=len(request.pools))
        tokens = []
        kept: list[FileCopy] = []  # copies of the app's files the burst keeps, used by this execution
        for k, s in enumerate(slots):
            if s is None:
                tokens.append(-1)
                continue
            kind, slot = check_list(s, f"burst slot {k}", length=2)
            slot = check_int(slot, f"burst slot {k}", 0, 2**31 - 1)
            if kind == "n":  # a new pool for this slot: keep it (and its descriptors)
                pool = request.pools[k]
                fds = [call.dec.adopt(fd) for fd in (pool.handle.fds if pool.handle is not None else ()) if fd >= 0]
                copy = call.dec.copy_of(pool.handle)  # (a copy of the app's file: that file is kept too)
                if copy is not None:
                    fds.append(call.dec.adopt(copy.source))
                burst.forget(slot)
                with burst.lock:
                    burst.slots[slot] = (pool, fds, copy)
            elif kind == "s":
                with burst.lock:
                    entry = burst.slots.get(slot)
                if entry is None:
                    raise invalid(f"burst slot {slot} (pool {k}) holds no memory")
                request.pools[k] = entry[0]
                if entry[2] is not None:  # a copy: what the app wrote into its file since comes in
                    entry[2].refresh()
                    kept.append(entry[2])
            else:
                raise invalid(f"burst slot {k}: unknown kind {kind!r}")
            tokens.append(slot)
        result = burst.driver_burst.execute_synchronously(request, tokens, measure, deadline, loop_timeout,
                                                          client=ClientId(call.client.creds.uid))
        call.dec.write_back()
        codec.write_back(kept)
        return call.spec.encode_result(result)

    def release(self, call: Call, burst: ServedBurst, args: list) -> None:
        for slot in args[:MAX_ITEMS]:
            if type(slot) is int:
                burst.forget(slot)
