"""Client proxies: `IDevice`, `IPreparedModel`, `IBuffer`, `IBurst` and `IFencedExecutionCallback`
over one connection to a service, so the runtime uses a served driver exactly as an in-process one.

One connection per service. Calls are multiplexed by request id: any number of threads may call at
once; one thread at a time reads the socket (a caller waiting for its answer, handing other callers
theirs, or a background reader when no call waits) and asynchronous completions (EVENT messages)
go to their callbacks in order on an event thread. If the service goes away (killed, crashed,
stopped) every pending call ends at once with DEVICE_UNAVAILABLE (Android's DEAD_OBJECT), so does
every later call, and the device's death callbacks run (the runtime marks it dead).

A socket is connected only if nobody but root or the app itself could have put it there
(`discovery.untrusted`) and its process runs as root or as the app's uid (SO_PEERCRED): a fake service
would get the app's cache files opened read-write. Anything else is DEVICE_UNAVAILABLE, with a warning.

Tensor bytes never cross the socket: shared-memory pools travel as descriptors, and in-process
pointer pools (numpy arguments) are staged in shared memory for the call (one region for all of
them; inputs copied in, outputs copied back). A burst has a channel of its own (a socket pair whose
other end goes to the service) and keeps its staging region and the app's pools in the service
under slots, so a pool's descriptor is sent once per burst.
"""
from __future__ import annotations

import functools
import itertools
import logging
import mmap
import os
import queue
import select
import socket
import stat
import threading
import time
import weakref
from typing import Any, Callable, Sequence

from ..hal import (BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DataLocation, DeviceInfo,
                   ErrorStatus, IBuffer, IBurst, IDevice, IFencedExecutionCallback, IPreparedModel, MemoryHandle,
                   MemoryPool, Model, NnError, OutputShape, Request, RequestArgument, Timing, check_burst_tokens,
                   invalid)
from ..memory import MAPPED_ONCE_BYTES, file_identity, fixed_size_memfd, on_forget
from . import codec
from .codec import CALL, ERROR, EVENT, REPLY, Encoder
from .discovery import untrusted, warn_untrusted
from .peer import peer_credentials
from .wire import Durations, FrameDecoder, ProtocolError, close_fds, poll_window, receive, recv_chunk, send_frame

log = logging.getLogger("nnapi.service")

#: Seconds to wait for a service to answer `hello` when connecting.
CONNECT_TIMEOUT = 10.0


def _unavailable(message: str) -> NnError:
    return NnError(ErrorStatus.DEVICE_UNAVAILABLE, message)


def _hal(method: Callable) -> Callable:
    """A proxy method: arguments that cannot even be sent (a None handle, a wrong type) are
    INVALID_ARGUMENT, as a driver would answer, never another exception."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (AttributeError, TypeError, ValueError, OverflowError, KeyError, IndexError) as e:
            raise invalid(f"{method.__name__}: cannot send the arguments: {type(e).__name__}: {e}") from None

    return call


class _Waiter:
    """One pending call: `done` once its answer (or the connection's death) is in."""

    __slots__ = ("done", "result", "error", "fds")

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.error: NnError | None = None
        self.fds: list[int] = []


_connections: "weakref.WeakSet[Connection]" = weakref.WeakSet()
#: How long the background reader leaves the socket to callers after the last call (seconds): calls
#: in a row never wake it, and an answer to no call (an asynchronous completion) waits at most this.
LINGER = 0.005


class Connection:
    """One Unix-socket connection to a service (see the module doc).

    One thread at a time reads the socket: a caller waiting for its answer reads it itself (answers
    to other calls it hands over), so a call costs no handoff between threads; when no call waits,
    a background thread reads (asynchronous completions, the service going away). It yields the
    socket to a caller through a wake-up pipe.
    """

    def __init__(self, path: str, timeout: float = CONNECT_TIMEOUT) -> None:
        self.path = os.path.abspath(path)
        sock = _connect_trusted(self.path, timeout)
        self._sock = sock
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._cond = threading.Condition(self._state_lock)
        self._decoder = FrameDecoder()
        self._reading = False          # a thread is reading the socket
        self._waiting = 0              # calls waiting for their answer
        self._polling = False          # the background reader is waiting on the socket
        self._followers = 0            # callers waiting for the reader to hand over their answer
        self._last_call = 0.0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_fds = [self._wake_r, self._wake_w]  # closed with the object, never reused while it lives
        weakref.finalize(self, _close_wake, self._wake_fds)
        self._pending: dict[int, _Waiter] = {}
        self._handlers: dict[int, Callable[[Any, NnError | None], None]] = {}
        self._ids = itertools.count(1)
        self._error: NnError | None = None
        self._releases: list[int] = []
        self._files: set[tuple[int, int]] = set()  # app memory the service may keep mapped (dev, ino)
        self._forgets: list[list[int]] = []        # freed memory of those, told with the next call
        self._death_callbacks: list[Callable[[], None]] = []
        self._events: queue.SimpleQueue | None = None
        #: Frames and descriptors sent to the service so far, burst channels included (a burst sends a
        #: pool's descriptor once: tests check it).
        self.frames_sent = 0
        self.fds_sent = 0
        self.pid: int | None = None
        self.label = f"service at {self.path}"
        self._background = threading.Thread(target=self._background_loop, name="nnapi-service-reader", daemon=True)
        self._background.start()
        _connections.add(self)
        on_forget(self._forget_memory)
        try:
            self.hello: dict = self.call("hello", 0, [codec.PROTOCOL_VERSION], timeout=timeout)
            if type(self.hello) is not dict:
                raise invalid("hello answered with something other than a map")
        except NnError:
            self.close()
            raise
        self.pid = self.hello.get("pid")
        self.label = f"service at {self.path} (pid {self.pid})"

    # --- state -----------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._error is None

    def on_death(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) when the connection is lost; at once if it is."""
        with self._state_lock:
            if self._error is None:
                self._death_callbacks.append(callback)
                return
        callback()

    def close(self) -> None:
        """Disconnect: the service frees everything this connection owns; pending calls fail."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._die("closed by this process")
        if threading.current_thread() is not self._background:
            self._background.join(5.0)

    def _die(self, reason: str) -> None:
        """Mark the connection dead: fail every pending call and asynchronous completion."""
        error = _unavailable(f"the {self.label} is gone: {reason}")
        with self._cond:
            if self._error is not None:
                return
            self._error = error
            pending, self._pending = self._pending, {}
            handlers, self._handlers = self._handlers, {}
            callbacks, self._death_callbacks = self._death_callbacks, []
            for waiter in pending.values():
                waiter.error = error
                waiter.done = True
            self._cond.notify_all()
        for handler in handlers.values():
            self._post(handler, None, error)
        try:  # whoever reads (a caller, the background reader) stops at once
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if not self._reading:
            self._close_socket()
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.debug("a death callback failed", exc_info=True)
        log.info("%s", error.message)

    def _close_socket(self) -> None:
        with self._send_lock:
            try:
                self._sock.close()
            except OSError:
                pass
        self._decoder.close()

    # --- calls -------------------------------------------------------------------------------------------
    def call(self, method: str, target: int, args: list, enc: Encoder | None = None, *,
             timeout: float | None = None,
             on_event: Callable[[Any, NnError | None], None] | None = None, usual_ns: int = 0) -> Any:
        """Call `method` on object `target` (0: the device) and wait for the answer (NnError on failure);
        `usual_ns`, how long such a call usually takes, lets the wait poll when the answer is due."""
        return self.call_fds(method, target, args, enc, timeout=timeout, on_event=on_event, usual_ns=usual_ns)[0]

    def call_fds(self, method: str, target: int, args: list, enc: Encoder | None = None, *,
                 timeout: float | None = None,
                 on_event: Callable[[Any, NnError | None], None] | None = None,
                 usual_ns: int = 0) -> tuple[Any, list[int]]:
        """As `call`, also returning the descriptors that came with the answer (the caller owns them)."""
        waiter = _Waiter()
        start = time.monotonic_ns()
        try:
            rid = next(self._ids)
            body = codec.pack([CALL, rid, method, target, args])
            with self._cond:
                if self._error is not None:
                    raise self._error
                self._pending[rid] = waiter
                if on_event is not None:
                    self._handlers[rid] = on_event
                self._waiting += 1
                wake = self._polling
            try:
                if wake:
                    os.write(self._wake_w, b"w")
                self._send(body, enc.fds if enc is not None else ())
                self._await(waiter, method, timeout, start + usual_ns if usual_ns else 0, poll_window(usual_ns))
            except OSError as e:
                self._die(f"sending failed ({e})")
            finally:
                with self._cond:
                    self._waiting -= 1
                    self._last_call = time.monotonic()
        finally:
            if enc is not None:
                enc.close()
        if waiter.error is not None:
            with self._state_lock:
                self._handlers.pop(rid, None)
            raise waiter.error
        return waiter.result, waiter.fds

    def _await(self, waiter: _Waiter, method: str, timeout: float | None, due_ns: int = 0,
               poll_ns: int = 0) -> None:
        """Wait for `waiter`'s answer: read the socket if no other thread does (polling for it around
        `due_ns` when given), else wait to be told."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._followers += 1
            while not waiter.done and self._reading:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            self._followers -= 1
            if waiter.done:
                return
            if self._reading:  # timed out waiting for the reader
                reading = False
            else:
                self._reading = reading = True
        if not reading:
            self._die(f"no answer to {method} within {timeout} s")
            return
        try:
            self._read_until(waiter, method, deadline, timeout, due_ns, poll_ns)
        finally:
            with self._cond:
                self._reading = False
                if self._followers:  # one of them reads next
                    self._cond.notify_all()
                dead = self._error is not None
            if dead:
                self._close_socket()

    def _read_until(self, waiter: _Waiter, method: str, deadline: float | None, timeout: float | None,
                    due_ns: int = 0, poll_ns: int = 0) -> None:
        while not waiter.done:
            if deadline is not None:
                poller = select.poll()
                poller.register(self._sock, select.POLLIN)
                if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                    self._die(f"no answer to {method} within {timeout} s")
                    return
            if not self._read_once(due_ns if deadline is None else 0, poll_ns):
                return

    def _read_once(self, due_ns: int = 0, poll_ns: int = 0) -> bool:
        """Read what the socket has (blocking until something; polling around `due_ns` when given)
        and deliver it; False once dead."""
        try:
            data, fds = receive(self._sock, poll_ns, due_ns) if due_ns else recv_chunk(self._sock)
            if not data:
                close_fds(fds)
                self._die("the service closed the connection")
                return False
            for body, frame_fds in self._decoder.feed(data, fds):
                self._deliver(body, frame_fds)
        except (OSError, ProtocolError) as e:
            self._die(f"{type(e).__name__}: {e}")
            return False
        except NnError as e:
            self._die(f"malformed answer: {e.message}")
            return False
        return self._error is None

    def notify(self, method: str, target: int, args: list) -> None:
        """A call that wants no answer (request id 0); ignored when the connection is dead."""
        if self._error is None:
            try:
                self._send(codec.pack([CALL, 0, method, target, args]), ())
            except (OSError, NnError):
                pass

    def release(self, oid: int) -> None:
        """Free a service object; sent with the next call (safe from finalizers on any thread)."""
        self._releases.append(oid)

    def sent_pools(self, pools: Sequence[MemoryPool], min_bytes: int = MAPPED_ONCE_BYTES) -> None:
        """Note the app's shared memory a request sends that the service may keep mapped between calls,
        so that sealing or freeing it first has the service let go (`_forget_memory`)."""
        for pool in pools:
            handle = pool.handle
            if handle is not None and handle.size >= min_bytes and handle.name in ("ashmem", "mmap_fd"):
                ident = file_identity(handle)
                if ident is not None:
                    self._files.add(ident)

    def _forget_memory(self, handle: MemoryHandle, wait: bool) -> None:
        """Memory being sealed (`wait`: the service lets go of it before this returns) or freed (told
        with the next call: this may run in a finalizer, on any thread)."""
        if not self._files or self._error is not None:
            return
        ident = file_identity(handle)
        if ident is None or ident not in self._files:
            return
        self._files.discard(ident)
        if wait:
            self.call("forget_memory", 0, [[list(ident)]], timeout=CONNECT_TIMEOUT)
        else:
            self._forgets.append(list(ident))

    def _send(self, body: bytes, fds: Sequence[int]) -> None:
        with self._send_lock:
            if self._releases:
                releases, self._releases = self._releases, []
                send_frame(self._sock, codec.pack([CALL, 0, "release", 0, releases]))
            if self._forgets:
                forgets, self._forgets = self._forgets, []
                send_frame(self._sock, codec.pack([CALL, 0, "forget_memory", 0, [forgets]]))
            send_frame(self._sock, body, fds)
            self.frames_sent += 1
            self.fds_sent += len(fds)

    # --- reading when no call waits ------------------------------------------------------------------------
    def _background_loop(self) -> None:
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                with self._cond:
                    while self._error is None and (self._reading or self._waiting
                                                   or time.monotonic() - self._last_call < LINGER):
                        self._cond.wait(LINGER)
                    if self._error is not None:
                        return
                    self._reading = self._polling = True
                try:
                    ready = dict(poller.poll())
                    with self._cond:
                        self._polling = False
                    if self._wake_r in ready:
                        try:
                            os.read(self._wake_r, 4096)
                        except OSError:
                            pass
                    if self._sock.fileno() in ready and self._error is None:
                        self._read_once()
                finally:
                    with self._cond:
                        self._reading = self._polling = False
                        if self._followers:
                            self._cond.notify_all()
                        dead = self._error is not None
                    if dead:
                        self._close_socket()
        except Exception:  # never let the reader die silently: the connection dies with it
            log.exception("the background reader failed")
            self._die("the background reader failed")

    def _deliver(self, body: bytes, fds: list[int]) -> None:
        try:
            message = codec.unpack(body, len(fds))
            kind, rid = message[0], message[1]
        except (NnError, TypeError, IndexError, KeyError) as e:
            close_fds(fds)
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{e}") from None
        if kind == EVENT:
            close_fds(fds)
            with self._state_lock:
                handler = self._handlers.pop(rid, None)
            if handler is not None:
                self._post(handler, message[2], None)
            return
        with self._cond:
            waiter = self._pending.pop(rid, None)
            if waiter is None:
                close_fds(fds)
                return
            if kind == REPLY:
                waiter.result = message[2]
                waiter.fds = fds
            elif kind == ERROR:
                close_fds(fds)
                waiter.error = codec.decode_error(*message[2:5])
            else:
                close_fds(fds)
                waiter.error = NnError(ErrorStatus.GENERAL_FAILURE, f"unexpected message kind {kind!r}")
            waiter.done = True
            if self._followers:
                self._cond.notify_all()

    def _post(self, handler: Callable[[Any, NnError | None], None], payload: Any, error: NnError | None) -> None:
        """Run an asynchronous completion on this connection's event thread (in arrival order)."""
        if self._events is None:
            self._events = queue.SimpleQueue()
            threading.Thread(target=self._event_loop, args=(self._events,), name="nnapi-service-events",
                             daemon=True).start()
        self._events.put((handler, payload, error))

    @staticmethod
    def _event_loop(events: queue.SimpleQueue) -> None:
        while True:
            handler, payload, error = events.get()
            try:
                handler(payload, error)
            except Exception:
                log.exception("an execution callback failed")


def _connect_trusted(path: str, timeout: float) -> socket.socket:
    """A socket connected to the service at `path`, which only root or this app could have put there and
    whose process runs as root or as this app's uid (SO_PEERCRED); DEVICE_UNAVAILABLE naming the path
    and why otherwise (a fake service would get the app's cache files opened read-write)."""
    reason = untrusted(path)
    if reason is not None:
        warn_untrusted(path, reason)
        raise _unavailable(f"not connecting to the service socket {path}: {reason}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    deadline = time.monotonic() + timeout
    try:
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                sock.connect(path)
                break
            except BlockingIOError:  # its backlog is full (a flood of connections): try again until the timeout
                if time.monotonic() >= deadline:
                    raise TimeoutError("its queue of connections stayed full") from None
                time.sleep(0.005)
        uid, mine = peer_credentials(sock).uid, os.geteuid()
    except OSError as e:
        sock.close()
        raise _unavailable(f"cannot connect to the service at {path}: {e.strerror or e}") from None
    if uid not in (0, mine):
        sock.close()
        reason = f"its process runs as uid {uid}, not as root or as this app's uid {mine}"
        warn_untrusted(path, reason)
        raise _unavailable(f"not using the service at {path}: {reason}")
    sock.settimeout(None)
    return sock


def _forget_connections_in_child() -> None:
    """After fork the child must not talk on its parent's connections (and would carry the parent's
    credentials): they are dead in the child, which connects anew."""
    for conn in list(_connections):
        if conn._error is not None:  # already closed: its descriptor numbers may be in use again
            continue
        conn._error = _unavailable(f"the {conn.label} connection belongs to the parent process")
        conn._pending, conn._handlers, conn._death_callbacks = {}, {}, []
        conn._send_lock = threading.Lock()
        conn._state_lock = threading.Lock()
        conn._cond = threading.Condition(conn._state_lock)
        conn._events = None
        try:
            conn._sock.close()
        except OSError:
            pass
        _close_wake(conn._wake_fds)


def _close_wake(fds: list[int]) -> None:
    open_fds = [fd for fd in fds if fd >= 0]
    fds[:] = [-1] * len(fds)
    close_fds(open_fds)


os.register_at_fork(after_in_child=_forget_connections_in_child)


# --- staging pointer pools in shared memory ------------------------------------------------------------
class _Region:
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


class _RegionCache:
    """Staging regions kept for reuse, by power-of-two capacity (at most `limit` bytes kept)."""

    def __init__(self, limit: int = 64 << 20) -> None:
        self._free: dict[int, list[_Region]] = {}
        self._kept = 0
        self._limit = limit
        self._lock = threading.Lock()
        weakref.finalize(self, _close_regions, self._free)  # (their descriptors go with the cache)

    def clear(self) -> None:
        """Close every kept region (the device is closed)."""
        with self._lock:
            _close_regions(self._free)
            self._kept = 0

    def take(self, size: int) -> _Region:
        capacity = max(4096, 1 << (max(size, 1) - 1).bit_length())
        with self._lock:
            regions = self._free.get(capacity)
            if regions:
                self._kept -= capacity
                return regions.pop()
        return _Region(capacity)

    def give(self, region: _Region) -> None:
        with self._lock:
            if self._kept + region.capacity <= self._limit:
                self._free.setdefault(region.capacity, []).append(region)
                self._kept += region.capacity
                return
        region.close()


def _close_regions(free: dict[int, list[_Region]]) -> None:
    for regions in free.values():
        for region in regions:
            region.close()
    free.clear()


def _pointer_view(pool: MemoryPool, k: int) -> memoryview:
    try:
        return memoryview(pool.pointer).cast("B")
    except (TypeError, ValueError):
        raise invalid(f"request pool {k}: pointer is not a contiguous buffer ({type(pool.pointer).__name__})") \
            from None


class _Staged:
    """A request whose pointer pools stand in shared memory: `request` is what crosses the boundary;
    `finish` copies the written outputs back into the app's buffers; `release` returns the regions.

    A well-formed request gets one region for all its pointer pools (one descriptor, one mapping in
    the service), its arguments moved there; anything odd (an index or a region out of bounds) keeps
    one region per pool and every index as it is, so the driver reports it exactly as in-process."""

    ALIGN = 64

    def __init__(self, request: Request, cache: _RegionCache,
                 persistent: Callable[[int], _Region] | None = None) -> None:
        self.request = request
        self._cache = cache
        self._regions: list[_Region] = []
        self._back: list[tuple[memoryview, int, int, _Region, int]] = []  # view, start, end, region, at
        #: For each pool of `request`, the index of the caller's pool it is (None: the merged region).
        self.origin: list[int | None] = list(range(len(request.pools)))
        #: The index of the pool in the `persistent` region (bursts keep it), if one was used.
        self.persistent_index: int | None = None
        views = {k: _pointer_view(p, k) for k, p in enumerate(request.pools) if p.pointer is not None}
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
               persistent: Callable[[int], _Region] | None) -> None:
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
            region.map[bases[k]:bases[k] + views[k].nbytes] = views[k]
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
                region.map[:view.nbytes] = view
            pools[k] = MemoryPool(handle=region.handle(max(view.nbytes, 1)))
            for a in request.outputs:
                loc = a.location
                if not a.has_no_value and loc.pool_index == k:
                    start, end = max(0, loc.offset), min(view.nbytes, loc.offset + loc.length)
                    if end > start:
                        self._back.append((view, start, end, region, start))
        self.request = Request(request.inputs, request.outputs, pools)

    def finish(self) -> None:
        for view, start, end, region, at in self._back:
            view[start:end] = region.map[at:at + end - start]

    def release(self) -> None:
        regions, self._regions = self._regions, []
        for region in regions:
            self._cache.give(region)
        self._back = []


def _stage_model(model: Model) -> tuple[Model, list[_Region]]:
    """A model whose pointer pools (in-process constants) are copied into shared memory."""
    if not any(p.pointer is not None for p in model.pools):
        return model, []
    import dataclasses
    regions, pools = [], []
    for k, pool in enumerate(model.pools):
        if pool.pointer is None:
            pools.append(pool)
            continue
        view = _pointer_view(pool, k)
        region = _Region(max(view.nbytes, 1))
        regions.append(region)
        region.map[:view.nbytes] = view
        pools.append(MemoryPool(handle=region.handle(max(view.nbytes, 1))))
    return dataclasses.replace(model, pools=pools), regions


def _encode_model(enc: Encoder, model: Any) -> list:
    if not isinstance(model, Model):
        raise invalid(f"expected a Model, got {type(model).__name__}")
    staged, regions = _stage_model(model)
    try:
        return enc.model(staged)
    finally:  # the descriptors are duplicated into the frame when it is sent; the service keeps them
        enc.owned.extend(r.fd for r in regions)
        for r in regions:
            r.map.close()


def _shapes_timing(result: Any) -> tuple[list[OutputShape], Timing]:
    shapes, timing = codec.check_list(result, "execution result", length=2)
    return codec.decode_shapes(shapes) or [], codec.decode_timing(timing)


# --- proxies -------------------------------------------------------------------------------------------------
class ServiceDevice(IDevice):
    """The `IDevice` of a driver served by `nnapi serve` (see the module doc)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        hello = connection.hello
        self._info = codec.decode_info(hello.get("info"))
        self._capabilities = codec.decode_capabilities(hello.get("capabilities"))
        n_model, n_data = codec.check_list(hello.get("cache_files"), "cache files", length=2)
        self._cache_files = (codec.check_int(n_model, "model cache files"), codec.check_int(n_data, "data cache files"))
        self.staging = _RegionCache()

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
        return self.connection.call("status", 0, [])

    # --- IDevice ---------------------------------------------------------------------------------------------
    def get_info(self) -> DeviceInfo:
        return self._info

    def get_capabilities(self) -> Capabilities:
        return self._capabilities

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return self._cache_files

    @_hal
    def get_supported_operations(self, model: Model) -> list[bool]:
        enc = Encoder()
        args = [_encode_model(enc, model)]
        flags = codec.check_list(self.connection.call("get_supported_operations", 0, args, enc), "supported")
        return [bool(f) for f in flags]

    @_hal
    def prepare_model(self, model: Model, preference, priority, deadline: int | None, cache: CacheHandles | None,
                      token: bytes | None, *, client: ClientId | None = None) -> "ServicePreparedModel":
        enc = Encoder()
        try:
            args = [_encode_model(enc, model), codec._plain(preference), codec._plain(priority),
                    codec._plain(deadline), enc.cache(cache), None if token is None else bytes(token)]
        except BaseException:
            enc.close()
            raise
        result = self.connection.call("prepare_model", 0, args, enc)
        if isinstance(result, list):  # [id, where the driver took it from] (its fleet tier)
            oid, source = codec.check_list(result, "prepare_model result", length=2)
            prepared = ServicePreparedModel(self, oid)
            prepared.cache_source = codec.check_str(source, "prepare_model cache source")
            return prepared
        return ServicePreparedModel(self, result)

    @_hal
    def prepare_model_from_cache(self, deadline: int | None, cache: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> "ServicePreparedModel":
        enc = Encoder()
        args = [codec._plain(deadline), enc.cache(cache), bytes(token)]
        return ServicePreparedModel(self, self.connection.call("prepare_model_from_cache", 0, args, enc))

    @_hal
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple["ServiceBuffer", int]:
        ids = [m.oid if isinstance(m, ServicePreparedModel) and m.device is self else -1 for m in prepared_models]
        args = [codec.encode_desc(desc), ids, [codec.encode_role(r) for r in input_roles],
                [codec.encode_role(r) for r in output_roles]]
        oid, token = codec.check_list(self.connection.call("allocate", 0, args), "allocate result", length=2)
        return ServiceBuffer(self, oid), token


class _Remote:
    """A service object owned through this connection; released when the proxy goes away."""

    def __init__(self, device: ServiceDevice, oid: Any) -> None:
        self.device = device
        self.oid = codec.check_int(oid, "object id", 1)
        self._finalizer = weakref.finalize(self, device.connection.release, self.oid)

    def release(self) -> None:
        """Free the service's object now (it is freed anyway when this proxy is collected)."""
        self._finalizer()


class ServicePreparedModel(_Remote, IPreparedModel):
    """A model prepared by a served driver."""

    #: Where the served driver took it from, when not from the app's cache (its fleet tier), or why not.
    cache_source: str | None = None

    def __init__(self, device: ServiceDevice, oid: Any) -> None:
        super().__init__(device, oid)
        self._durations = Durations()  # of synchronous executions (their answers are polled for then)

    @_hal
    def execute_synchronously(self, request: Request, measure, deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        staged = _Staged(request, self.device.staging)
        try:
            enc = Encoder()
            args = [enc.request(staged.request), codec._plain(measure), codec._plain(deadline),
                    codec._plain(loop_timeout_ns)]
            durations = self._durations
            self.device.connection.sent_pools(staged.request.pools)
            start = time.monotonic_ns()
            shapes, timing = _shapes_timing(self.device.connection.call("execute_synchronously", self.oid, args, enc,
                                                                        usual_ns=durations.usual()))
            durations.record(time.monotonic_ns() - start)
            staged.finish()
            return shapes, timing
        finally:
            staged.release()

    @_hal
    def execute(self, request: Request, measure, deadline: int | None, loop_timeout_ns: int | None,
                callback: Callable[[ErrorStatus, list[OutputShape], Timing], None], *,
                client: ClientId | None = None) -> None:
        staged = _Staged(request, self.device.staging)

        def on_event(payload: Any, error: NnError | None) -> None:
            try:
                if error is not None:
                    status, shapes, timing = error.status, [], Timing()
                else:
                    status, shapes, timing = codec.check_list(payload, "execution completion", length=3)
                    status = ErrorStatus(status)
                    shapes, timing = codec.decode_shapes(shapes) or [], codec.decode_timing(timing)
                    if status == ErrorStatus.NONE:
                        staged.finish()
            except (NnError, ValueError):
                status, shapes, timing = ErrorStatus.GENERAL_FAILURE, [], Timing()
            finally:
                staged.release()
            callback(status, shapes, timing)

        try:
            enc = Encoder()
            args = [enc.request(staged.request), codec._plain(measure), codec._plain(deadline),
                    codec._plain(loop_timeout_ns)]
            self.device.connection.sent_pools(staged.request.pools)
            self.device.connection.call("execute", self.oid, args, enc, on_event=on_event)
        except BaseException:
            staged.release()
            raise

    @_hal
    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure, deadline: int | None,
                       loop_timeout_ns: int | None, timeout_after_fence_ns: int | None, *,
                       client: ClientId | None = None) -> tuple[int, IFencedExecutionCallback]:
        """Sync fences cross to the service as descriptors; the service waits on them and runs. The answer
        is the completion (or the service's own sync fence and a callback to ask later). In-process
        (pointer) inputs are read once the fences are signalled, as in-process: the proxy waits on the
        fences before staging them."""
        if wait_for and any(p.pointer is not None for p in request.pools):
            _wait_fences(wait_for, deadline)
        staged = _Staged(request, self.device.staging)
        try:
            enc = Encoder()
            args = [enc.request(staged.request), [enc.fd(f) for f in wait_for], codec._plain(measure),
                    codec._plain(deadline), codec._plain(loop_timeout_ns), codec._plain(timeout_after_fence_ns)]
            self.device.connection.sent_pools(staged.request.pools)
            result, fds = self.device.connection.call_fds("execute_fenced", self.oid, args, enc)
            fence_ref, oid, info = codec.check_list(result, "execute_fenced result", length=3)
            if fence_ref is None:
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

    @_hal
    def configure_execution_burst(self) -> "ServiceBurst":
        """A burst with a channel of its own: one end of a socket pair goes to the service."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        enc = Encoder()
        try:
            result = self.device.connection.call("configure_execution_burst", self.oid, [enc.fd(theirs.fileno())],
                                                 enc)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        oid, has_channel = codec.check_list(result, "configure_execution_burst result", length=2)
        if not has_channel:  # the service has no room for another channel: the connection carries it
            mine.close()
            mine = None
        return ServiceBurst(self.device, oid, mine)


def _wait_fence(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll()


def _wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Wait for every valid sync fence (invalid ones are left for the driver to refuse);
    MISSED_DEADLINE_TRANSIENT when the deadline passes first."""
    import time
    for fd in fences:
        if not codec._fd_open(fd):
            continue
        left = None if deadline is None else max(0, (deadline - time.monotonic_ns()) // 1_000_000)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(left):
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "the deadline passed while waiting for fences")


class _DoneCallback(IFencedExecutionCallback):
    """The completion that came with a fenced execution's answer."""

    def __init__(self, info: Any) -> None:
        status, launched, fenced = codec.check_list(info, "fenced execution info", length=3)
        try:
            self._info = (ErrorStatus(status), codec.decode_timing(launched), codec.decode_timing(fenced))
        except ValueError:
            self._info = (ErrorStatus.GENERAL_FAILURE, Timing(), Timing())

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self._info


class ServiceFencedCallback(_Remote, IFencedExecutionCallback):
    """The callback of a fenced execution still running in the service."""

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return _DoneCallback(self.device.connection.call("get_execution_info", self.oid, []))._info


class ServiceBuffer(_Remote, IBuffer):
    """A driver-managed buffer (memory domain) in the service."""

    @_hal
    def copy_to(self, dst: MemoryHandle) -> None:
        enc = Encoder()
        self.device.connection.call("copy_to", self.oid, [enc.handle(dst)], enc)

    @_hal
    def copy_from(self, src: MemoryHandle, dimensions: Sequence[int]) -> None:
        enc = Encoder()
        dims = [codec._plain(d) for d in dimensions] if isinstance(dimensions, (list, tuple)) else dimensions
        self.device.connection.call("copy_from", self.oid, [enc.handle(src), dims], enc)


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


class ServiceBurst(_Remote, IBurst):
    """A burst in the service: pools named by a memory identifier token, and the one staging region of
    the pointer (numpy) pools, are sent once and then referred to by slot."""

    def __init__(self, device: ServiceDevice, oid: Any, channel: socket.socket | None = None) -> None:
        super().__init__(device, oid)
        self._channel = channel
        self._decoder = FrameDecoder()
        self._rids = itertools.count(1)
        self._durations = Durations()  # of its executions: their answers are polled for around then
        if channel is not None:
            weakref.finalize(self, channel.close)
        self._lock = threading.Lock()
        self._slots = itertools.count()
        self._by_token: dict[int, tuple[int, tuple]] = {}  # memory identifier token -> (slot, identity)
        self._staging: list = [None, None, False]           # [slot, region, sent]
        weakref.finalize(self, _close_staging, self._staging)

    def _staging_region(self, size: int) -> _Region:
        """The burst's staging region, grown (under a new slot) when a call needs more."""
        slot, region, _ = self._staging
        if region is not None and region.capacity >= size:
            return region
        if region is not None:
            self._notify([slot])
            region.close()
        region = _Region(max(4096, 1 << (max(size, 1) - 1).bit_length()))
        self._staging[:] = [next(self._slots), region, False]
        return region

    @_hal
    def execute_synchronously(self, request: Request, memory_identifier_tokens: Sequence[int], measure,
                              deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        check_burst_tokens(request, memory_identifier_tokens)
        with self._lock:  # one execution at a time per burst, as the HAL's burst channel
            staged = _Staged(request, self.device.staging, self._staging_region)
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
                enc = Encoder()
                args = [enc.request(Request(staged.request.inputs, staged.request.outputs, pools)), slots,
                        codec._plain(measure), codec._plain(deadline), codec._plain(loop_timeout_ns)]
                try:
                    shapes, timing = _shapes_timing(self._call("burst_execute", args, enc))
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

    @_hal
    def release_memory_resource(self, token: int) -> None:
        with self._lock:
            known = self._by_token.pop(token, None)
            if known is not None:
                self._notify([known[0]])

    def release(self) -> None:
        """Free the burst in the service now: its channel closes, and its thread there ends."""
        if self._channel is not None:
            try:
                self._channel.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        super().release()

    # --- the channel ---------------------------------------------------------------------------------------
    def _call(self, method: str, args: list, enc: Encoder) -> Any:
        """One call on the burst's channel (callers hold the burst's lock): send, then poll for the
        answer for a moment when executions are short, then sleep until it comes."""
        if self._channel is None:
            return self.device.connection.call(method, self.oid, args, enc)
        try:
            if not self.device.connection.alive:
                raise self.device.connection._error
            rid = next(self._rids)
            body = codec.pack([CALL, rid, method, self.oid, args])
            start = time.monotonic_ns()
            try:
                send_frame(self._channel, body, enc.fds)
                connection = self.device.connection
                connection.frames_sent += 1
                connection.fds_sent += len(enc.fds)
                usual = self._durations.usual()
                poll, due = poll_window(usual), start + usual
                while True:
                    data, fds = receive(self._channel, poll, due)
                    if not data:
                        raise _unavailable(f"the {self.device.connection.label} closed the burst channel")
                    for frame_body, frame_fds in self._decoder.feed(data, fds):
                        message = codec.unpack(frame_body, len(frame_fds))
                        close_fds(frame_fds)
                        if type(message) is list and len(message) >= 3 and message[1] == rid:
                            self._durations.record(time.monotonic_ns() - start)
                            if message[0] == ERROR:
                                raise codec.decode_error(*message[2:5])
                            return message[2]
            except (OSError, ProtocolError) as e:
                raise _unavailable(f"the burst channel to the {self.device.connection.label} broke: {e}") \
                    from None
        finally:
            enc.close()

    def _notify(self, slots: list[int]) -> None:
        """Forget cached pools in the service (no answer)."""
        if self._channel is None:
            self.device.connection.notify("burst_release", self.oid, slots)
            return
        try:
            send_frame(self._channel, codec.pack([CALL, 0, "burst_release", self.oid, slots]))
        except (OSError, NnError):
            pass


def _close_staging(staging: list) -> None:
    if staging[1] is not None:
        staging[1].close()
    staging[:] = [None, None, False]


def connect(path: str, timeout: float = CONNECT_TIMEOUT) -> ServiceDevice:
    """The device served on socket `path`; DEVICE_UNAVAILABLE when no service answers there."""
    return ServiceDevice(Connection(path, timeout))


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
