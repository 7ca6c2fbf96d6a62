"""The service: one driver's `IDevice` hosted in its own process, reached over a Unix stream socket.

Every service thread waits on one epoll instance holding every socket; the kernel wakes one thread
per event, which reads the call and runs it itself on behalf of the caller, answering with the same
request id (a new thread starts only when no other is left waiting). So one client's calls run
concurrently, answers come back in any order, and a call costs no handoff between threads. A burst
may bring a channel of its own (a socket pair end), served by a dedicated thread that polls it for
a moment after each answer, as Android's burst polls its message queue.

One user cannot lock out the others (`budget`): connections, calls in flight, service threads and
burst channels are counted by uid, a uid's work beyond its thread share waits in its queue, a few
threads are kept for accepting and answering the others, and a connection that does not say hello
within `HELLO_TIMEOUT` seconds is closed. No service thread waits for a sync fence: fenced calls
wait with the one waiting thread (`fences`) until their fences are signalled. A connection that
goes takes its queued calls (they never start) and its waiting ones with it.

The caller is who the kernel says it is (SO_PEERCRED): every driver call runs under
`memory.domains.calling_client(uid, pid)` and with `client=ClientId(uid)` (QoS queues, memory-domain
token ownership); nothing in a message can change that. Each connection owns the objects it created
(prepared models, buffers, bursts, fenced callbacks) and the descriptors they keep; they are freed
when it releases them or disconnects.

Bad input never takes the service down: a malformed frame drops that connection, a malformed or
unknown call is answered INVALID_ARGUMENT, a driver failure GENERAL_FAILURE, and every received
descriptor is either kept by an object of that connection or closed.
"""
from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import os
import resource
import select
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..hal import (ClientId, ErrorStatus, ExecutionPreference, IDevice, MeasureTiming, MemoryPool, NnError, Priority,
                   Request, invalid)
from ..memory import FileCopy, MappingCache, file_identity
from ..memory.domains import calling_client
from ..qos import Scheduler
from ..qos.fences import wait_fences
from ..qos.scheduler import normalize_deadline
from . import codec
from .budget import HELLO_TIMEOUT, Budget, Task
from .codec import (CALL, EVENT, REPLY, Decoder, Encoder, check_bytes, check_int, check_list, check_opt_int,
                    check_str)
from .fences import Waiter, check_sync_fence, signalled
from .peer import Credentials, peer_credentials
from .wire import (BURST_POLL_NS, FrameDecoder, ProtocolError, close_fds, poll_until, poll_window, receive,
                   recv_chunk, send_frame)

log = logging.getLogger("nnapi.service")

PREPARED, BUFFER, BURST, FENCED = "prepared model", "buffer", "burst", "fenced execution callback"


_ARMED = select.EPOLLIN | select.EPOLLONESHOT


class _Retire(Exception):
    """An idle service thread leaves."""


class _Foreign:
    """Stands for a prepared model the caller does not own (the driver then refuses it as foreign)."""


@dataclass
class _Entry:
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


@dataclass
class _Call:
    """One call as a handler sees it: who, its request id, its descriptors in and out."""

    client: "_Client"
    rid: int
    dec: Decoder
    enc: Encoder


class _Deferred:
    """A handler's result plus work to do once the reply is on its way (asynchronous completions)."""

    def __init__(self, value: Any, after: Callable[[], None]) -> None:
        self.value = value
        self.after = after


class _Parked:
    """A handler's answer that must wait for sync fences: `launch()` gives the result once they are
    signalled (`fences`: those not signalled yet; `deadline_s`: monotonic seconds, or None)."""

    def __init__(self, fences: set[int], deadline_s: float | None, launch: Callable[[], Any]) -> None:
        self.fences = fences
        self.deadline_s = deadline_s
        self.launch = launch


class _Burst:
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
            try:
                self.channel.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for slot in list(self.slots):
            self.forget(slot)


class _Client:
    """One connection: its socket, the caller's credentials, its objects and its calls in flight."""

    def __init__(self, service: "Service", sock: socket.socket, creds: Credentials) -> None:
        self.service = service
        self.sock = sock
        self.creds = creds
        self.decoder = FrameDecoder()
        self.send_lock = threading.Lock()
        self.io_lock = threading.RLock()   # held while a thread reads this connection or drops it
        self.lock = threading.Lock()
        self.objects: dict[int, _Entry] = {}
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
    def add(self, entry: _Entry) -> int:
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

    def counts(self) -> dict[str, int]:
        with self.lock:
            kinds = [e.kind for e in self.objects.values()]
        return {kind: kinds.count(kind) for kind in (PREPARED, BUFFER, BURST, FENCED)}

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


class _Foreground:
    """The service's answer to `qos.Scheduler.foreground`: LOW work gives way while a call waits for a
    service thread (an event on the service's epoll) or is being read, and while a synchronous
    execution of other work is handled, from its reading to its answer (its decoding, write-back and
    answer need the interpreter lock too). Work of other priorities never does: the scheduler
    arbitrates it (fair shares between apps)."""

    def __init__(self, epoll_fd: int) -> None:
        self._fd = epoll_fd
        self._local = threading.local()  # a poll object per thread (one must not be polled concurrently)
        self._lock = threading.Lock()
        self._held = 0  # calls being read, and executions of other work being handled

    def __call__(self, priority: Priority) -> bool:
        if priority != Priority.LOW:
            return False
        if self._held:
            return True
        poller = getattr(self._local, "poller", None)
        if poller is None:
            poller = self._local.poller = select.poll()
            poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Around a call being read (and, through `execution`, an execution of other work)."""
        with self._lock:
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1

    def execution(self, obj: Any) -> contextlib.AbstractContextManager:
        """Around a synchronous execution on `obj` (a prepared model or a burst), unless it is LOW work."""
        prepared = getattr(getattr(obj, "driver_burst", None), "prepared", obj)
        return contextlib.nullcontext() if getattr(prepared, "priority", None) == Priority.LOW else self.held()


def _read_call(body: bytes, n_fds: int) -> tuple[int, Any, Any, Any]:
    """(request id, method, target, args) of a call frame; INVALID_ARGUMENT naming what is wrong."""
    message = codec.unpack(body, n_fds)
    if type(message) is not list or len(message) != 5 or message[0] != CALL:
        raise invalid("a call must be [0, request id, method, target, args]")
    _, rid, method, target, args = message
    return check_int(rid, "request id", 0, 2**63 - 1), method, target, args


#: Calls whose handling makes LOW work give way (`_Foreground.execution`).
_EXECUTIONS = frozenset({"execute_synchronously", "burst_execute"})


def _accepts_client(fn: Callable) -> bool:
    """Whether a driver method takes the `client` keyword (drivers without QoS need not)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "client" or p.kind == p.VAR_KEYWORD for p in params)


def _enum(cls, value: int):
    """An enum member, or the raw integer when it names none (the driver then reports it)."""
    try:
        return cls(value)
    except ValueError:
        return value


class Service:
    """Serves `driver` on the Unix socket `socket_path` (see the module doc). `start` binds, then
    `serve_forever` runs until `stop` (thread- and signal-safe). Limits: connections, calls in flight
    per connection (beyond: RESOURCE_EXHAUSTED_TRANSIENT), objects per connection, service threads
    (`workers`), burst channels (beyond: the burst runs over its connection), and seconds a client may
    take to receive an answer before it is dropped (`send_timeout`); and each uid's share (`budget`)."""

    def __init__(self, driver: IDevice, socket_path: str, *, max_connections: int = 4096,
                 max_calls_per_client: int = 64, max_objects: int = 1 << 16, workers: int = 512,
                 max_burst_channels: int = 256, send_timeout: float = 10.0, idle_retire_s: float = 30.0) -> None:
        self.driver = driver
        #: Seconds a service thread waits with nothing to do before it leaves (one always stays waiting).
        self.idle_retire_s = idle_retire_s
        self.socket_path = os.path.abspath(socket_path)
        self.max_connections = max_connections
        self.max_calls_per_client = max_calls_per_client
        self.max_objects = max_objects
        self.max_burst_channels = max_burst_channels
        self.send_timeout = send_timeout
        self._channels = 0
        self._stopping = threading.Event()
        self._clients: dict[int, _Client] = {}
        self._to_close: list[_Client] = []
        self._budget = Budget(workers, exempt=frozenset({0, os.geteuid()}))
        self._waiter = Waiter()
        self._refusals: dict[int, tuple[float, int]] = {}  # uid -> (when its refusals were last logged, since)
        self._lock = threading.Lock()
        self._threads = 0          # service threads
        self._waiting = 0          # of them, waiting for I/O
        self._max_threads = workers
        self._polling = False  # a thread polls for the next call (one at a time: each takes a core)
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll = select.epoll()
        self._foreground = _Foreground(self._epoll.fileno())
        scheduler = getattr(driver, "scheduler", None)
        #: The driver base's scheduler, whose LOW work gives way to calls (None: the driver has none).
        self._scheduler = scheduler if isinstance(scheduler, Scheduler) else None
        if self._scheduler is not None:
            self._scheduler.foreground = self._foreground
        self._watched = -1
        self._hello: dict | None = None
        self._takes_client = {name: _accepts_client(getattr(driver, name)) for name in (
            "prepare_model", "prepare_model_from_cache")}
        self._methods: dict[str, tuple[str | None, Callable, bool]] = {
            "hello": (None, self._hello_call, True),
            "release": (None, self._release, True),
            "forget_memory": (None, self._forget_memory, True),
            "status": (None, self._status, True),
            "get_supported_operations": (None, self._get_supported_operations, False),
            "prepare_model": (None, self._prepare_model, False),
            "prepare_model_from_cache": (None, self._prepare_model_from_cache, False),
            "allocate": (None, self._allocate, False),
            "execute_synchronously": (PREPARED, self._execute_synchronously, False),
            "execute": (PREPARED, self._execute, False),
            "execute_fenced": (PREPARED, self._execute_fenced, False),
            "configure_execution_burst": (PREPARED, self._configure_burst, False),
            "burst_execute": (BURST, self._burst_execute, False),
            "burst_release": (BURST, self._burst_release, True),
            "copy_to": (BUFFER, self._copy_to, False),
            "copy_from": (BUFFER, self._copy_from, False),
            "get_execution_info": (FENCED, self._get_execution_info, False),
        }

    # --- lifetime -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Ask the driver what it is (so the first client is answered at once), then bind and listen."""
        info = self.driver.get_info()
        caps = self.driver.get_capabilities()
        n_model, n_data = self.driver.get_number_of_cache_files_needed()
        self._hello = {"version": codec.PROTOCOL_VERSION, "pid": os.getpid(), "info": codec.encode_info(info),
                       "capabilities": codec.encode_capabilities(caps), "cache_files": [int(n_model), int(n_data)]}
        _raise_fd_limit()
        self._listener = _bind(self.socket_path)
        st = os.stat(self.socket_path)
        self._inode = (st.st_dev, st.st_ino)
        self._listener.setblocking(False)
        self._epoll.register(self._listener.fileno(), _ARMED)
        self._epoll.register(self._wake_r, select.EPOLLIN)  # level-triggered: wakes every thread once set
        self._waiter.start()
        log.info("serving %s %s on %s (pid %d)", info.name, info.version, self.socket_path, os.getpid())

    def stop(self) -> None:
        """Make `serve_forever` return (safe from signal handlers and other threads)."""
        self._stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def stop_when_exits(self, pid: int) -> None:
        """Stop when process `pid` exits (a service started for one tool's run does not outlive it)."""
        self._watched = os.pidfd_open(pid)
        self._epoll.register(self._watched, select.EPOLLIN)

    def request_close(self, client: _Client) -> None:
        """Have a thread drop `client` (a connection that cannot take its answers)."""
        with self._lock:
            self._to_close.append(client)
        self._wake()

    def _wake(self) -> None:
        """Wake one waiting thread (a queued call, a connection to close)."""
        try:
            os.write(self._wake_w, b"w")
        except OSError:
            pass

    def serve_forever(self) -> None:
        """Serve until `stop`; the calling (main) thread only waits, so signal handlers run promptly."""
        self._spawn()
        try:
            while not self._stopping.wait(0.5):
                pass
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._scheduler is not None and self._scheduler.foreground is self._foreground:
            self._scheduler.foreground = None  # the driver may outlive the service (in-process hosts, tests)
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:
            self._drop(client)
        self._waiter.stop()
        if self._listener is not None:
            try:
                self._epoll.unregister(self._listener.fileno())
            except (OSError, ValueError):
                pass
            self._listener.close()
            self._listener = None
            try:  # remove the socket only if it is still ours (a restarted service may have replaced it)
                st = os.stat(self.socket_path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.socket_path)
            except OSError:
                pass
        log.info("stopped serving %s", self.socket_path)

    @property
    def connections(self) -> int:
        return len(self._clients)

    # --- threads ----------------------------------------------------------------------------------------
    # Every service thread waits on the one epoll instance; the kernel wakes one of them per event and
    # EPOLLONESHOT keeps a connection with that thread until it has read it. The thread that reads a
    # call runs it (no handoff) in a thread slot of the caller's uid; before it does, it makes sure
    # another thread is left waiting (a new one starts only when none is). Without a slot, the reading
    # waits in the uid's queue (`budget`); calls read together are queued, and a queued call wakes a
    # thread.
    def _spawn(self) -> None:
        with self._lock:
            self._threads += 1
        threading.Thread(target=self._thread, name="nnapi-service", daemon=True).start()

    def _keep_one_waiting(self) -> None:
        """Start a thread if none is left waiting for I/O (this one is about to read or run a call)."""
        if self._waiting:  # (the common case, seen without the lock)
            return
        with self._lock:
            spawn = self._waiting == 0 and self._threads < self._max_threads
        if spawn:
            self._spawn()

    def _thread(self) -> None:
        ran_ns = 0  # how long the call this thread last ran took (0: it ran none)
        try:
            while not self._stopping.is_set():
                try:
                    task = self._next_task(poll_window(ran_ns) if ran_ns else 0)
                except _Retire:
                    return
                ran_ns = 0
                if task is None:
                    continue
                self._keep_one_waiting()
                start = time.monotonic_ns()
                try:
                    task.run()
                except Exception:
                    log.exception("a service call failed outside its error handling")
                finally:
                    self._budget.release(task.uid)
                ran_ns = max(1, time.monotonic_ns() - start)
        finally:
            with self._lock:
                self._threads -= 1

    def _next_task(self, poll_ns: int = 0) -> Task | None:
        """A queued task that may run now, else wait for one event and handle it (accept, read, inline
        calls); the task returned holds a thread slot of its uid. A thread that just answered a call
        polls for `poll_ns` first, unless another thread already polls: a client's next call usually
        follows its answer at once, and then finds a thread awake."""
        task = self._budget.next()
        if task is not None:
            return task
        with self._lock:
            self._waiting += 1
            poll = poll_ns and not self._polling
            if poll:
                self._polling = True
        try:
            events = None
            if poll:
                try:
                    events = poll_until(time.monotonic_ns() + poll_ns, lambda: self._epoll.poll(0, 1) or None)
                finally:
                    self._polling = False
            if not events:
                events = self._epoll.poll(self.idle_retire_s, 1)
        finally:
            with self._lock:
                self._waiting -= 1
        if not events:  # idle: retire while another thread is left waiting (not merely busy in a call)
            with self._lock:
                if self._waiting > 0 and not self._stopping.is_set():
                    raise _Retire()
            return None
        fd, _ = events[0]
        if fd == self._wake_r:
            self._woken()
        elif fd == self._watched:
            log.info("the watched process exited: stopping")
            self.stop()
        elif self._listener is not None and fd == self._listener.fileno():
            self._accept()
            self._arm(fd)
        else:
            client = self._clients.get(fd)
            if client is not None:
                return self._on_readable(client)
        return None

    def _on_readable(self, client: _Client) -> Task | None:
        """Read `client` in a thread slot of its uid (inline calls are answered here); the first call
        read is returned to run in that slot, the others are queued. Without a slot the reading waits
        in the uid's queue (the connection is not re-armed meanwhile, so it sends nothing more)."""
        uid = client.creds.uid
        if not self._budget.take(uid):
            self._queue(Task(uid, client, lambda: self._read_queued(client)))
            return None
        self._keep_one_waiting()
        tasks: list[Task] = []
        try:
            with self._foreground.held():  # LOW work gives way while a call is read
                self._readable(client, tasks)
        except BaseException:
            self._budget.release(uid)
            raise
        if not tasks:
            self._budget.release(uid)
            return None
        for task in tasks[1:]:
            self._queue(task)
        return tasks[0]

    def _read_queued(self, client: _Client) -> None:
        """A reading that waited for a slot of its uid (it runs in that slot, and so does its first call)."""
        tasks: list[Task] = []
        with self._foreground.held():
            self._readable(client, tasks)
        for task in tasks[1:]:
            self._queue(task)
        if tasks:
            tasks[0].run()

    def _queue(self, task: Task) -> None:
        self._budget.submit(task)
        self._wake()

    def _woken(self) -> None:
        try:
            os.read(self._wake_r, 1)  # one byte: one thread's worth of news
        except OSError:
            pass
        if self._stopping.is_set():
            self._wake()  # pass the news on to every other thread
            return
        with self._lock:
            closing, self._to_close = self._to_close, []
        for client in closing:
            self._drop(client)

    def _arm(self, fd: int) -> None:
        try:
            self._epoll.modify(fd, _ARMED)
        except (OSError, ValueError):
            pass

    # --- I/O ------------------------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: refuse this one, keep serving the others
                log.warning("accept failed: %s", e)
                return
            try:
                creds = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            if len(self._clients) >= self.max_connections:
                self._refuse(creds, f"the service holds {len(self._clients)} connections already")
                sock.close()
                continue
            if not self._budget.connect(creds.uid):
                self._refuse(creds, f"uid {creds.uid} holds {self._budget.max_connections} connections already")
                sock.close()
                continue
            sock.settimeout(self.send_timeout)
            client = _Client(self, sock, creds)
            with self._lock:
                self._clients[sock.fileno()] = client
            self._epoll.register(sock.fileno(), _ARMED)
            self._waiter.at(time.monotonic() + HELLO_TIMEOUT, lambda c=client: self._hello_due(c))
            log.debug("connected: %s", client)

    def _refuse(self, creds: Credentials, why: str) -> None:
        """Log a refused connection: at most once per uid every 10 s, with how many were refused since."""
        now = time.monotonic()
        with self._lock:
            last, since = self._refusals.get(creds.uid, (-1e9, 0))
            if now - last < 10.0:
                self._refusals[creds.uid] = (last, since + 1)
                return
            self._refusals[creds.uid] = (now, 0)
        log.warning("refusing a connection of pid %d uid %d: %s%s", creds.pid, creds.uid, why,
                    f" ({since} more refused in the last 10 s)" if since else "")

    def _hello_due(self, client: _Client) -> None:
        """(the waiting thread) A connection that has not said hello by now is closed."""
        if not client.greeted and not client.closed:
            log.info("%s: no hello within %g s; closing the connection", client, HELLO_TIMEOUT)
            self.request_close(client)

    def _drop(self, client: _Client) -> None:
        """Close a connection: free what it owns, cancel its queued calls and end its waiting ones."""
        if not client.io_lock.acquire(timeout=0.05):  # a thread reads it (and answers): not for long...
            try:
                client.sock.shutdown(socket.SHUT_RDWR)  # ...unless an answer is stuck: it returns at once
            except OSError:
                pass
            client.io_lock.acquire()
        counted = False
        try:
            fd = client.sock.fileno()
            if fd < 0:
                return
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass
            with self._lock:
                if self._clients.get(fd) is client:
                    del self._clients[fd]
                    counted = True
            log.debug("disconnected: %s", client)
            client.close()
        finally:
            client.io_lock.release()
        if counted:
            self._budget.disconnect(client.creds.uid)
        for task in self._budget.cancel(client):  # queued calls never start
            if task.cancel is not None:
                task.cancel()
        for cancel in self._waiter.drop(client):  # waits for fences end
            cancel()

    def _readable(self, client: _Client, tasks: list[Task]) -> None:
        """Read what `client` sent: calls to run go to `tasks`; re-arm it, or drop it."""
        with client.io_lock:
            if client.closed:
                return
            keep = self._read(client, tasks)
            if keep:
                self._arm(client.sock.fileno())
        if not keep:
            self._drop(client)

    def _read(self, client: _Client, tasks: list[Task]) -> bool:
        try:
            data, fds = recv_chunk(client.sock)
        except (BlockingIOError, InterruptedError, socket.timeout):
            return True
        except (OSError, ProtocolError) as e:
            log.info("%s: receive failed (%s); dropping the connection", client, e)
            return False
        if not data:
            close_fds(fds)
            return False
        try:
            frames = client.decoder.feed(data, fds)
        except ProtocolError as e:
            log.info("%s: %s; dropping the connection", client, e)
            return False
        for body, frame_fds in frames:
            if not self._dispatch(client, body, frame_fds, tasks):
                return False
        return True

    def _dispatch(self, client: _Client, body: bytes, fds: list[int], tasks: list[Task]) -> bool:
        """Read one call: answer it at once (inline calls, errors) or add it to `tasks`; False when the
        connection must be dropped."""
        dec = Decoder(fds, stable=True)
        rid = 0
        try:
            rid, method, target, args = _read_call(body, len(fds))
            method = check_str(method, "method")
            if not client.greeted and method != "hello":
                raise invalid(f"the first call must be hello, not {method!r}")
            spec = self._methods.get(method)
            if spec is None:
                raise invalid(f"unknown method {method!r}")
            args = check_list(args, f"{method} arguments")
        except NnError as e:
            dec.close()
            client.error(rid, e)
            return client.greeted
        kind, handler, inline = spec
        if inline:
            self._run(client, rid, kind, handler, target, args, dec, counted=False)
            return not client.closed
        uid = client.creds.uid
        with client.lock:
            busy = client.in_flight >= self.max_calls_per_client
            if not busy:
                client.in_flight += 1
        refusal = f"{method}: too many calls in flight on this connection; try again" if busy else None
        if not busy and not self._budget.admit(uid):
            with client.lock:
                client.in_flight -= 1
            refusal = f"{method}: uid {uid} has {self._budget.max_calls} calls in flight already; try again"
        if refusal is not None:
            dec.close()
            client.error(rid, NnError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, refusal))
        else:
            tasks.append(Task(uid, client, lambda: self._run(client, rid, kind, handler, target, args, dec,
                                                              execution=method in _EXECUTIONS),
                              lambda: (dec.close(), self._end_call(client))))
        return True

    # --- one call (any service thread) -----------------------------------------------------------------
    def _run(self, client: _Client, rid: int, kind: str | None, handler: Callable, target: Any, args: list,
             dec: Decoder, counted: bool = True, execution: bool = False) -> None:
        call = _Call(client, rid, dec, Encoder())

        def work(hold: contextlib.ExitStack) -> Any:
            obj = client.lookup(target, kind) if kind is not None else None
            if execution:
                hold.enter_context(self._foreground.execution(obj))
            return handler(call, obj, args)

        self._answer(call, work, counted)

    def _answer(self, call: _Call, work: Callable[[contextlib.ExitStack], Any], counted: bool = True) -> None:
        """Run `work` for the caller and answer; a parked answer (`_Parked`) waits for its fences with
        the waiting thread, the call still in flight."""
        client, rid = call.client, call.rid
        parked = False
        try:
            with contextlib.ExitStack() as hold:  # an execution: from its decoding to its answer
                if client.closed:  # (gone while the call was queued or waited)
                    return
                with calling_client(client.creds.uid, client.creds.pid):
                    result = work(hold)
                if isinstance(result, _Parked):
                    self._park(call, result)
                    parked = True
                elif isinstance(result, _Deferred):
                    client.reply(rid, result.value, call.enc)
                    result.after()
                else:
                    client.reply(rid, result, call.enc)
        except NnError as e:
            call.enc.close()
            client.error(rid, e)
        except (MemoryError, RecursionError) as e:
            call.enc.close()
            client.error(rid, NnError(ErrorStatus.GENERAL_FAILURE, f"the service ran out of resources: "
                                                                   f"{type(e).__name__}"))
        except Exception as e:  # a driver bug never takes the service down
            call.enc.close()
            log.exception("%s: call failed", client)
            client.error(rid, NnError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}"))
        finally:
            if not parked:
                call.dec.close()
                if counted:
                    self._end_call(client)

    def _end_call(self, client: _Client) -> None:
        with client.lock:
            client.in_flight -= 1
        self._budget.end(client.creds.uid)

    def _park(self, call: _Call, parked: _Parked) -> None:
        """Hand a call to the waiting thread until its fences are signalled; then it runs in a slot of its
        uid, as a queued call. A disconnect ends the wait (the call is never run)."""
        client = call.client

        def abandon() -> None:
            call.enc.close()
            call.dec.close()
            self._end_call(client)

        def ready(error: NnError | None) -> None:
            def resume(hold: contextlib.ExitStack) -> Any:
                if error is not None:
                    raise error
                return parked.launch()
            self._queue(Task(client.creds.uid, client, lambda: self._answer(call, resume), abandon))

        self._waiter.park(client, parked.fences, parked.deadline_s, ready, abandon)
        if client.closed:  # (it went while the call was parked: `_drop` may have missed it)
            for cancel in self._waiter.drop(client):
                cancel()

    def _client_kw(self, client: _Client, method: str) -> dict:
        return {"client": ClientId(client.creds.uid)} if self._takes_client.get(method, True) else {}

    # --- device calls ---------------------------------------------------------------------------------
    def _hello_call(self, call: _Call, obj, args) -> dict:
        version = args[0] if args else None
        if version != codec.PROTOCOL_VERSION:
            self.request_close(call.client)
            raise invalid(f"protocol version {version!r} is not supported (this service speaks "
                          f"{codec.PROTOCOL_VERSION})")
        call.client.greeted = True
        return dict(self._hello, uid=call.client.creds.uid, client_pid=call.client.creds.pid)

    def _release(self, call: _Call, obj, args) -> None:
        for oid in args[:codec.MAX_ITEMS]:
            call.client.release(oid)

    def _forget_memory(self, call: _Call, obj, args) -> None:
        """The app seals or frees memory it sent: let go of this connection's mappings of those files,
        and of the burst slots that hold them (args: a list of [st_dev, st_ino])."""
        client = call.client
        files = set()
        items = check_list(check_list(args, "forget_memory arguments", length=1)[0], "forget_memory files")
        for item in items[:codec.MAX_ITEMS]:
            dev, ino = check_list(item, "forget_memory file", length=2)
            files.add((check_int(dev, "st_dev", 0, 2**64 - 1), check_int(ino, "st_ino", 0, 2**64 - 1)))
        for dev, ino in files:
            client.mappings.forget_file(dev, ino)
        with client.lock:
            bursts = [e.obj for e in client.objects.values() if e.kind == BURST]
        for burst in bursts:
            with burst.lock:
                held = [slot for slot, (pool, _, copy) in burst.slots.items()
                        if pool.handle is not None and file_identity(pool.handle) in files
                        or copy is not None and copy.source_identity() in files]
            for slot in held:
                burst.forget(slot)

    def _status(self, call: _Call, obj, args) -> dict:
        """What this connection owns; service-wide figures only for the service's own user or root."""
        client = call.client
        status = {"pid": os.getpid(), "uid": client.creds.uid, "gid": client.creds.gid, "objects": client.counts(),
                  "mappings": len(client.mappings)}
        with client.lock:
            status["prepared_client_uids"] = [getattr(e.obj, "client_uid", None) for e in client.objects.values()
                                              if e.kind == PREPARED]
        status["budget"] = self._budget.figures(client.creds.uid)
        if client.creds.uid in (0, os.getuid()):
            status["budgets"] = self._budget.all_figures()
            status["parked"] = self._waiter.parked
            status["connections"] = len(self._clients)
            status["fds"] = len(os.listdir("/proc/self/fd"))
            status["threads"] = threading.active_count()
            status["rss_bytes"] = _rss_bytes()
        return status

    def _get_supported_operations(self, call: _Call, obj, args) -> list[bool]:
        (model,) = check_list(args, "get_supported_operations arguments", length=1)
        return [bool(f) for f in self.driver.get_supported_operations(call.dec.model(model))]

    @staticmethod
    def _adopt_model_fds(model, dec: Decoder) -> list[int]:
        """The model's pool descriptors stay open as long as its prepared model (a driver may map them late)."""
        return [dec.adopt(fd) for p in model.pools if p.handle is not None for fd in p.handle.fds if fd >= 0]

    def _prepare_model(self, call: _Call, obj, args) -> int:
        model, preference, priority, deadline, cache, token = check_list(args, "prepare_model arguments", length=6)
        model = call.dec.model(model)
        prepared = self.driver.prepare_model(
            model, _enum(ExecutionPreference, check_int(preference, "preference")),
            _enum(Priority, check_int(priority, "priority")), check_opt_int(deadline, "deadline"), call.dec.cache(cache),
            None if token is None else check_bytes(token, "token"), **self._client_kw(call.client, "prepare_model"))
        oid = call.client.add(_Entry(PREPARED, prepared, self._adopt_model_fds(model, call.dec)))
        source = getattr(prepared, "cache_source", None)  # (the fleet tier's word: [id, source] then)
        return oid if source is None else [oid, str(source)]

    def _prepare_model_from_cache(self, call: _Call, obj, args) -> int:
        deadline, cache, token = check_list(args, "prepare_model_from_cache arguments", length=3)
        handles = call.dec.cache(cache)
        if handles is None:
            raise invalid("prepare_model_from_cache: cache handles are required")
        prepared = self.driver.prepare_model_from_cache(check_opt_int(deadline, "deadline"), handles,
                                                        check_bytes(token, "token"),
                                                        **self._client_kw(call.client, "prepare_model_from_cache"))
        return call.client.add(_Entry(PREPARED, prepared))

    def _allocate(self, call: _Call, obj, args) -> list:
        desc, prepared_ids, input_roles, output_roles = check_list(args, "allocate arguments", length=4)
        models = []
        for oid in check_list(prepared_ids, "allocate prepared models"):
            try:
                models.append(call.client.lookup(oid, PREPARED))
            except NnError:
                models.append(_Foreign())
        buffer, token = self.driver.allocate(
            codec.decode_desc(desc), models,
            [codec.decode_role(r, f"input role {k}") for k, r in enumerate(check_list(input_roles, "input roles"))],
            [codec.decode_role(r, f"output role {k}") for k, r in enumerate(check_list(output_roles, "output roles"))])
        release = getattr(buffer, "release", None)
        oid = call.client.add(_Entry(BUFFER, buffer, on_release=release if callable(release) else None))
        return [oid, int(token)]

    # --- prepared-model calls ---------------------------------------------------------------------------
    def _exec_args(self, args, what: str, n: int) -> list:
        return check_list(args, f"{what} arguments", length=n)

    def _execute_synchronously(self, call: _Call, prepared, args) -> list:
        request, measure, deadline, loop_timeout = self._exec_args(args, "execute_synchronously", 4)
        shapes, timing = prepared.execute_synchronously(
            call.client.in_place(call.dec.request(request)), _enum(MeasureTiming, check_int(measure, "measure")),
            check_opt_int(deadline, "deadline"), check_opt_int(loop_timeout, "loop timeout"),
            client=ClientId(call.client.creds.uid))
        call.dec.write_back()  # (outputs in copies of the app's files go back into them)
        return [codec.encode_shapes(shapes), codec.encode_timing(timing)]

    def _execute(self, call: _Call, prepared, args) -> _Deferred:
        """Launch; the completion comes back later as an EVENT with the same request id."""
        request, measure, deadline, loop_timeout = self._exec_args(args, "execute", 4)
        rid = call.rid
        request = call.client.in_place(call.dec.request(request))
        kept = call.dec.adopt_all()  # the request's memory must outlive the call until the callback
        lock = threading.Lock()
        state: dict[str, Any] = {"replied": False, "result": None}

        def deliver(result: list) -> None:
            close_fds(kept)
            call.client.send([EVENT, rid, result])

        def callback(status, shapes, timing) -> None:
            if status == ErrorStatus.NONE:
                try:
                    call.dec.write_back()
                except NnError as e:
                    status, shapes = e.status, []
            result = [int(status), codec.encode_shapes(list(shapes or [])), codec.encode_timing(timing)]
            with lock:
                if not state["replied"]:
                    state["result"] = result
                    return
            deliver(result)

        def after() -> None:
            with lock:
                state["replied"] = True
                result = state["result"]
            if result is not None:
                deliver(result)

        try:
            prepared.execute(request, _enum(MeasureTiming, check_int(measure, "measure")),
                             check_opt_int(deadline, "deadline"), check_opt_int(loop_timeout, "loop timeout"),
                             callback, client=ClientId(call.client.creds.uid))
        except BaseException:
            close_fds(kept)
            raise
        return _Deferred(None, after)

    def _execute_fenced(self, call: _Call, prepared, args) -> list | _Parked:
        """Runs once every sync fence of wait_for is signalled: at once if they are, else the call waits
        with the waiting thread (no service thread waits) and its request is read when they are."""
        request, wait_for, measure, deadline, loop_timeout, after_fence = self._exec_args(args, "execute_fenced", 6)
        fences = [call.dec.fd(f, f"wait_for {k}") for k, f in enumerate(check_list(wait_for, "wait_for", 1024))]
        for k, fd in enumerate(fences):
            check_sync_fence(fd, f"execute_fenced: wait_for {k}")
        measure = _enum(MeasureTiming, check_int(measure, "measure"))
        deadline, loop_timeout = check_opt_int(deadline, "deadline"), check_opt_int(loop_timeout, "loop timeout")
        after_fence = check_opt_int(after_fence, "timeout after fence")

        def launch() -> list:
            return self._launch_fenced(call, prepared, request, fences, measure, deadline, loop_timeout, after_fence)

        pending = {fd for fd in fences if not signalled(fd)}
        if not pending:
            return launch()
        due = normalize_deadline(deadline)
        if due is not None and time.monotonic_ns() >= due:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "execute_fenced: the deadline had passed before "
                                                                  "the call")
        return _Parked(pending, None if due is None else due / 1e9, launch)

    def _launch_fenced(self, call: _Call, prepared, request, fences: list[int], measure, deadline: int | None,
                       loop_timeout: int | None, after_fence: int | None) -> list:
        """The fenced execution, its fences signalled (the driver gets none to wait for: an app could reset
        an eventfd it signalled, and a service thread would wait on it)."""
        request = call.client.in_place(call.dec.request(request))
        fence, callback = prepared.execute_fenced(request, [], measure, deadline, loop_timeout, after_fence,
                                                  client=ClientId(call.client.creds.uid))
        if fence is not None and fence >= 0 and call.dec.writes_back:
            wait_fences([fence], None)  # outputs in copies of the app's files go back before the answer
            os.close(fence)
            fence = -1
        if fence is None or fence < 0:  # done: the completion is this reply
            status, launched, fenced = callback.get_execution_info()
            if status == ErrorStatus.NONE:
                call.dec.write_back()
            return [None, 0, [int(status), codec.encode_timing(launched), codec.encode_timing(fenced)]]
        # Still running: the client gets the sync fence and asks the callback later; the request's
        # memory stays open until it releases the callback.
        kept = [fd for fd in call.dec.adopt_all() if fd not in fences]
        close_fds(fences)
        call.enc.owned.append(fence)
        oid = call.client.add(_Entry(FENCED, callback, kept))
        return [call.enc.fd(fence), oid, None]

    def _get_execution_info(self, call: _Call, callback, args) -> list:
        status, launched, fenced = callback.get_execution_info()
        return [int(status), codec.encode_timing(launched), codec.encode_timing(fenced)]

    def _configure_burst(self, call: _Call, prepared, args) -> list:
        """A burst; with a channel (one end of a socket pair the client made) its executions come on
        that channel, served by a thread of their own that polls it for a moment after each answer
        (Android's burst polls its message queue the same way), so back-to-back executions cost no
        wake-up. Without one (or past the service's limit) they come on the connection."""
        channel = None
        uid = call.client.creds.uid
        if args:
            (ref,) = check_list(args, "configure_execution_burst arguments", length=1)
            fd = call.dec.fd(ref, "burst channel")
            if fd < 0:
                raise invalid("configure_execution_burst: the burst channel is not a valid descriptor")
            try:
                channel = socket.socket(fileno=call.dec.adopt(fd))
            except OSError as e:
                raise invalid(f"configure_execution_burst: the burst channel is not a socket: {e}") from None
            if channel.type != socket.SOCK_STREAM or channel.family != socket.AF_UNIX:
                channel.close()
                raise invalid("configure_execution_burst: the burst channel must be a Unix stream socket")
            with self._lock:  # (the service's channels, and the uid's share of them)
                full = self._channels >= self.max_burst_channels or not self._budget.open_channel(uid)
                if not full:
                    self._channels += 1
            if full:
                channel.close()
                channel = None
        try:
            burst = _Burst(prepared.configure_execution_burst(), channel)
            oid = call.client.add(_Entry(BURST, burst, on_release=burst.close))
        except BaseException:
            if channel is not None:
                channel.close()
                self._channel_closed(uid)
            raise
        if channel is not None:
            threading.Thread(target=self._serve_channel, args=(call.client, oid, burst), daemon=True,
                             name="nnapi-service-burst").start()
        return [oid, channel is not None]

    def _serve_channel(self, client: _Client, oid: int, burst: "_Burst") -> None:
        """The thread of one burst channel: burst calls only, run here, answered on the channel."""
        channel = burst.channel
        decoder = FrameDecoder()
        send_lock = threading.Lock()
        try:
            channel.setblocking(True)  # (a timeout would make every receive wait in poll() first)
            while not client.closed:
                data, fds = receive(channel, BURST_POLL_NS)
                if not data:
                    close_fds(fds)
                    return
                for body, frame_fds in decoder.feed(data, fds):
                    self._channel_call(client, oid, burst, channel, send_lock, body, frame_fds)
        except (OSError, ProtocolError, ValueError) as e:
            log.debug("%s: burst channel closed (%s)", client, e)
        finally:
            decoder.close()
            self._channel_closed(client.creds.uid)
            client.release(oid)  # the burst goes with its channel

    def _channel_closed(self, uid: int) -> None:
        with self._lock:
            self._channels -= 1
        self._budget.close_channel(uid)

    def _channel_call(self, client: _Client, oid: int, burst: "_Burst", channel: socket.socket,
                      send_lock: threading.Lock, body: bytes, fds: list[int]) -> None:
        dec = Decoder(fds, stable=True)
        rid = 0
        with contextlib.ExitStack() as hold:  # an execution: from its decoding to its answer
            try:
                rid, method, target, args = _read_call(body, len(fds))
                if method not in ("burst_execute", "burst_release") or target != oid:
                    raise invalid(f"a burst channel takes burst_execute and burst_release of burst {oid}, not "
                                  f"{method!r} on {target!r}")
                args = check_list(args, f"{method} arguments")
                if method in _EXECUTIONS:
                    hold.enter_context(self._foreground.execution(burst))
                handler = self._burst_execute if method == "burst_execute" else self._burst_release
                with calling_client(client.creds.uid, client.creds.pid):
                    result = handler(_Call(client, rid, dec, Encoder()), burst, args)
                answer = [REPLY, rid, result]
            except NnError as e:
                answer = codec.error_message(rid, e)
            except Exception as e:  # a driver bug never takes the service down
                log.exception("%s: burst call failed", client)
                answer = codec.error_message(rid, NnError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}"))
            finally:
                dec.close()
            if rid:
                with send_lock:
                    send_frame(channel, codec.pack(answer))

    def _burst_execute(self, call: _Call, burst: _Burst, args) -> list:
        """A burst execution: pools the client cached are named by slot, new ones come with their fds."""
        request, slots, measure, deadline, loop_timeout = self._exec_args(args, "burst_execute", 5)
        request: Request = call.dec.request(request)
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
        shapes, timing = burst.driver_burst.execute_synchronously(
            request, tokens, _enum(MeasureTiming, check_int(measure, "measure")), check_opt_int(deadline, "deadline"),
            check_opt_int(loop_timeout, "loop timeout"), client=ClientId(call.client.creds.uid))
        call.dec.write_back()
        codec.write_back(kept)
        return [codec.encode_shapes(shapes), codec.encode_timing(timing)]

    def _burst_release(self, call: _Call, burst: _Burst, args) -> None:
        for slot in args[:codec.MAX_ITEMS]:
            if type(slot) is int:
                burst.forget(slot)

    # --- buffer calls -----------------------------------------------------------------------------------
    def _copy_to(self, call: _Call, buffer, args) -> None:
        (handle,) = check_list(args, "copy_to arguments", length=1)
        buffer.copy_to(call.dec.handle(handle, "copy_to memory"))
        call.dec.write_back()

    def _copy_from(self, call: _Call, buffer, args) -> None:
        handle, dims = check_list(args, "copy_from arguments", length=2)
        dims = [check_int(d, "copy_from dimension") for d in check_list(dims, "copy_from dimensions", codec.MAX_RANK)]
        buffer.copy_from(call.dec.handle(handle, "copy_from memory"), dims)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _raise_fd_limit() -> None:
    """Use the hard limit of open descriptors: every connection and kept pool holds some."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def _bind(path: str) -> socket.socket:
    """Listen on `path`, replacing a stale socket a dead service left (never a live one, never a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
            raise OSError(errno.EADDRINUSE, f"a service already listens on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # stale: its service is gone
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)  # any app may connect; who it is comes from SO_PEERCRED
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock
