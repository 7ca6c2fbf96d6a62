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
`hal.identity.calling_client(uid, pid)` and with `client=ClientId(uid)` (QoS queues, memory-domain
token ownership); nothing in a message can change that. Each connection owns the objects it created
(prepared models, buffers, bursts, fenced callbacks) and the descriptors they keep; they are freed
when it releases them or disconnects.

Bad input never takes the service down: a malformed frame drops that connection, a malformed or
unknown call is answered INVALID_ARGUMENT, a driver failure GENERAL_FAILURE, and every received
descriptor is either kept by an object of that connection or closed.

Here: `Service` (its lifetime, and reading, admitting and answering each call). Every call is
declared in `protocol` and decoded by that declaration before its handler (`handlers`) runs; the
event loop and its threads are in `loop`, the object table in `objects`, bursts and their channels
in `channel`.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable

from ..hal import ErrorStatus, IDevice, NnError, invalid
from ..hal.identity import calling_client
from ..qos import Scheduler
from .budget import Budget, Task
from .channel import Channels
from .codec import PROTOCOL_VERSION, Decoder, Encoder, check_list, check_str, read_call
from .fences import Waiter
from .foreground import Foreground
from .handlers import Call, Deferred, Handlers, Parked
from .loop import Loop
from .objects import Client
from .protocol import METHODS, Method
from .values import encode_capabilities, encode_info

log = logging.getLogger("nnapi.service")


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
        self.budget = Budget(workers, exempt=frozenset({0, os.geteuid()}))
        self.waiter = Waiter()
        self.loop = Loop(self, workers)
        self.channels = Channels(self, max_burst_channels)
        self.foreground = Foreground(self.loop.epoll.fileno())
        scheduler = getattr(driver, "scheduler", None)
        #: The driver base's scheduler, whose LOW work gives way to calls (None: the driver has none).
        self._scheduler = scheduler if isinstance(scheduler, Scheduler) else None
        if self._scheduler is not None:
            self._scheduler.foreground = self.foreground
        self.handlers: Handlers | None = None  # (once `start` has asked the driver what it is)

    # --- lifetime -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Ask the driver what it is (so the first client is answered at once), then bind and listen."""
        info = self.driver.get_info()
        caps = self.driver.get_capabilities()
        n_model, n_data = self.driver.get_number_of_cache_files_needed()
        self.handlers = Handlers(self, {"version": PROTOCOL_VERSION, "pid": os.getpid(), "info": encode_info(info),
                                        "capabilities": encode_capabilities(caps),
                                        "cache_files": [int(n_model), int(n_data)]})
        self.loop.listen(self.socket_path)
        self.waiter.start()
        log.info("serving %s %s on %s (pid %d)", info.name, info.version, self.socket_path, os.getpid())

    def stop(self) -> None:
        """Make `serve_forever` return (safe from signal handlers and other threads)."""
        self.loop.stop()

    def stop_when_exits(self, pid: int) -> None:
        """Stop when process `pid` exits (a service started for one tool's run does not outlive it)."""
        self.loop.watch(pid)

    def request_close(self, client: Client) -> None:
        """Have a thread drop `client` (a connection that cannot take its answers)."""
        self.loop.request_close(client)

    def serve_forever(self) -> None:
        """Serve until `stop`; the calling (main) thread only waits, so signal handlers run promptly."""
        self.loop.spawn()
        try:
            while not self.loop.stopping.wait(0.5):
                pass
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._scheduler is not None and self._scheduler.foreground is self.foreground:
            self._scheduler.foreground = None  # the driver may outlive the service (in-process hosts, tests)
        self.loop.close(self.socket_path)
        self.waiter.stop()
        log.info("stopped serving %s", self.socket_path)

    @property
    def connections(self) -> int:
        return len(self.loop.clients)

    # --- calls ------------------------------------------------------------------------------------------
    def dispatch(self, client: Client, body: bytes, fds: list[int], tasks: list[Task]) -> bool:
        """Read one call: answer it at once (inline calls, errors) or add it to `tasks`; False when the
        connection must be dropped."""
        dec = Decoder(fds, stable=True)
        rid = 0
        try:
            rid, method, target, args = read_call(body, len(fds))
            method = check_str(method, "method")
            if not client.greeted and method != "hello":
                raise invalid(f"the first call must be hello, not {method!r}")
            spec = METHODS.get(method)
            if spec is None:
                raise invalid(f"unknown method {method!r}")
            args = check_list(args, f"{method} arguments")
        except NnError as e:
            dec.close()
            client.error(rid, e)
            return client.greeted
        if spec.inline:
            self._run(client, rid, spec, target, args, dec, counted=False)
            return not client.closed
        uid = client.creds.uid
        with client.lock:
            busy = client.in_flight >= self.max_calls_per_client
            if not busy:
                client.in_flight += 1
        refusal = f"{method}: too many calls in flight on this connection; try again" if busy else None
        if not busy and not self.budget.admit(uid):
            with client.lock:
                client.in_flight -= 1
            refusal = f"{method}: uid {uid} has {self.budget.max_calls} calls in flight already; try again"
        if refusal is not None:
            dec.close()
            client.error(rid, NnError(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, refusal))
        else:
            tasks.append(Task(uid, client, lambda: self._run(client, rid, spec, target, args, dec),
                              lambda: (dec.close(), self._end_call(client))))
        return True

    # --- one call (any service thread) -----------------------------------------------------------------
    def _run(self, client: Client, rid: int, spec: Method, target: Any, args: list, dec: Decoder,
             counted: bool = True) -> None:
        """Run one call: its target looked up, its arguments decoded by its declaration, then its handler."""
        call = Call(client, spec, rid, dec, Encoder())
        handler = self.handlers.handler(spec.name)

        def work(hold: contextlib.ExitStack) -> Any:
            obj = client.lookup(target, spec.target) if spec.target is not None else None
            if spec.execution:
                hold.enter_context(self.foreground.execution(obj))
            return handler(call, obj, spec.decode(dec, args, client.in_place))

        self._answer(call, work, counted)

    def _answer(self, call: Call, work: Callable[[contextlib.ExitStack], Any], counted: bool = True) -> None:
        """Run `work` for the caller and answer; a parked answer (`Parked`) waits for its fences with
        the waiting thread, the call still in flight."""
        client, rid = call.client, call.rid
        parked = False
        try:
            with contextlib.ExitStack() as hold:  # an execution: from its decoding to its answer
                if client.closed:  # (gone while the call was queued or waited)
                    return
                with calling_client(client.creds.uid, client.creds.pid):
                    result = work(hold)
                if isinstance(result, Parked):
                    self._park(call, result)
                    parked = True
                elif isinstance(result, Deferred):
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

    def _end_call(self, client: Client) -> None:
        with client.lock:
            client.in_flight -= 1
        self.budget.end(client.creds.uid)

    def _park(self, call: Call, parked: Parked) -> None:
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
            self.loop.queue(Task(client.creds.uid, client, lambda: self._answer(call, resume), abandon))

        self.waiter.park(client, parked.fences, parked.deadline_s, ready, abandon)
        if client.closed:  # (it went while the call was parked: `_drop` may have missed it)
            for cancel in self.waiter.drop(client):
                cancel()
