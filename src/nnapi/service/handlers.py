"""The server's handlers: the calls with behaviour of their own (the service's own calls, preparing,
allocating, asynchronous and fenced executions) and the generic one, which runs any other call by
its declaration in `protocol`: the driver method of that name on the call's target, with the
decoded arguments (and the caller as `client` where declared), its result encoded as declared.

A handler gets the call (`Call`), its target object (None: the device) and the arguments decoded by
the call's declaration; it returns the answer, a `Deferred` one (asynchronous completions) or a
`Parked` one (waiting for sync fences)."""
from __future__ import annotations

import inspect
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..hal import ClientId, ErrorStatus, NnError, invalid
from ..memory import file_identity
from ..qos.fences import wait_fences
from ..qos.scheduler import normalize_deadline
from . import protocol
from .codec import EVENT, PROTOCOL_VERSION, Decoder, Encoder, check_int, check_list
from .fences import check_sync_fence, signalled
from .objects import Client, Entry, Foreign
from .protocol import BURST, EXECUTION, PREPARED, Method
from .reusable import create_served
from .values import MAX_ITEMS
from .wire import close_fds

if TYPE_CHECKING:
    from .server import Service


@dataclass
class Call:
    """One call as a handler sees it: who, its declaration, its request id, its descriptors in and out."""

    client: Client
    spec: Method
    rid: int
    dec: Decoder
    enc: Encoder


class Deferred:
    """A handler's result plus work to do once the reply is on its way (asynchronous completions)."""

    def __init__(self, value: Any, after: Callable[[], None]) -> None:
        self.value = value
        self.after = after


class Parked:
    """A handler's answer that must wait for sync fences: `launch()` gives the result once they are
    signalled (`fences`: those not signalled yet; `deadline_s`: monotonic seconds, or None)."""

    def __init__(self, fences: set[int], deadline_s: float | None, launch: Callable[[], Any]) -> None:
        self.fences = fences
        self.deadline_s = deadline_s
        self.launch = launch


Handler = Callable[[Call, Any, list], Any]


def accepts_client(fn: Callable) -> bool:
    """Whether a driver method takes the `client` keyword (drivers without QoS need not)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "client" or p.kind == p.VAR_KEYWORD for p in params)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Handlers:
    """The handlers of one service, by call name (`handler`: the call's own, else the generic one)."""

    def __init__(self, service: "Service", hello: dict) -> None:
        self.service = service
        self.hello = hello
        driver = service.driver
        #: The device's methods that take `client` (an object's always do).
        self.takes_client = {m.name: accepts_client(getattr(driver, m.name)) for m in protocol.METHODS.values()
                             if m.target is None and m.client and hasattr(driver, m.name)}
        self.own: dict[str, Handler] = {
            "hello": self.hello_call, "release": self.release, "forget_memory": self.forget_memory,
            "status": self.status, "prepare_model": self.prepare_model, "allocate": self.allocate,
            "execute": self.execute, "execute_fenced": self.execute_fenced,
            "configure_execution_burst": service.channels.configure, "burst_execute": service.channels.execute,
            "burst_release": service.channels.release,
            "create_reusable_execution": self.create_reusable_execution, "execution_compute": self.execution_compute,
        }

    def handler(self, name: str) -> Handler:
        return self.own.get(name, self.generic)

    def client_kw(self, call: Call) -> dict:
        wanted = call.spec.client and self.takes_client.get(call.spec.name, True)
        return {"client": ClientId(call.client.creds.uid)} if wanted else {}

    def generic(self, call: Call, obj: Any, args: list) -> Any:
        """The driver method of the call's name on its target, as declared."""
        spec = call.spec
        result = getattr(self.service.driver if spec.target is None else obj, spec.name)(*args,
                                                                                         **self.client_kw(call))
        if spec.writes_back:
            call.dec.write_back()  # (outputs in copies of the app's files go back into them)
        if spec.makes is not None:
            return call.client.add(Entry(spec.makes, result))
        return spec.encode_result(result)

    # --- the service's own calls --------------------------------------------------------------------
    def hello_call(self, call: Call, obj: Any, args: list) -> dict:
        (version,) = args
        if version != PROTOCOL_VERSION:
            self.service.request_close(call.client)
            raise invalid(f"protocol version {version!r} is not supported (this service speaks "
                          f"{PROTOCOL_VERSION})")
        call.client.greeted = True
        return dict(self.hello, uid=call.client.creds.uid, client_pid=call.client.creds.pid)

    def release(self, call: Call, obj: Any, args: list) -> None:
        for oid in args[:MAX_ITEMS]:
            call.client.release(oid)

    def forget_memory(self, call: Call, obj: Any, args: list) -> None:
        """The app seals or frees memory it sent: let go of this connection's mappings of those files,
        of the burst slots that hold them, and of the reusable executions that map them (args: a list of
        [st_dev, st_ino])."""
        client = call.client
        files = set()
        for item in args[0][:MAX_ITEMS]:
            dev, ino = check_list(item, "forget_memory file", length=2)
            files.add((check_int(dev, "st_dev", 0, 2**64 - 1), check_int(ino, "st_ino", 0, 2**64 - 1)))
        for dev, ino in files:
            client.mappings.forget_file(dev, ino)
        for execution in client.objects_of(EXECUTION):
            execution.forget(files)
        for burst in client.objects_of(BURST):
            with burst.lock:
                held = [slot for slot, (pool, _, copy) in burst.slots.items()
                        if pool.handle is not None and file_identity(pool.handle) in files
                        or copy is not None and copy.source_identity() in files]
            for slot in held:
                burst.forget(slot)

    def status(self, call: Call, obj: Any, args: list) -> dict:
        """What this connection owns; service-wide figures only for the service's own user or root."""
        client, service = call.client, self.service
        status = {"pid": os.getpid(), "uid": client.creds.uid, "gid": client.creds.gid, "objects": client.counts(),
                  "mappings": len(client.mappings),
                  "prepared_client_uids": [getattr(p, "client_uid", None) for p in client.objects_of(PREPARED)],
                  "budget": service.budget.figures(client.creds.uid)}
        if client.creds.uid in (0, os.getuid()):
            status["budgets"] = service.budget.all_figures()
            status["parked"] = service.waiter.parked
            status["connections"] = service.connections
            status["fds"] = len(os.listdir("/proc/self/fd"))
            status["threads"] = threading.active_count()
            status["rss_bytes"] = _rss_bytes()
        return status

    # --- the device ------------------------------------------------------------------------------------
    def prepare_model(self, call: Call, obj: Any, args: list) -> int | list:
        """The model's pool descriptors stay open as long as its prepared model (a driver may map them late)."""
        model = args[0]
        prepared = self.service.driver.prepare_model(*args, **self.client_kw(call))
        fds = [call.dec.adopt(fd) for p in model.pools if p.handle is not None for fd in p.handle.fds if fd >= 0]
        oid = call.client.add(Entry(PREPARED, prepared, fds))
        source = getattr(prepared, "cache_source", None)  # (the fleet tier's word: [id, source] then)
        return oid if source is None else [oid, str(source)]

    def create_reusable_execution(self, call: Call, prepared: Any, args: list) -> list:
        """The driver's reusable execution of the request, kept with its memory until the app releases it;
        with a channel its computations come on that channel."""
        request, measure, loop_timeout_ns, fd = args

        def make(channel: Any) -> tuple[Any, Callable[[], None]]:
            served = create_served(prepared, request, measure, loop_timeout_ns, call.dec, self.client_kw(call),
                                   channel)
            return served, served.release
        return self.service.channels.with_channel(call, EXECUTION, fd, make)

    def execution_compute(self, call: Call, served: Any, args: list) -> Any:
        (deadline,) = args
        return call.spec.encode_result(served.compute(deadline))

    def allocate(self, call: Call, obj: Any, args: list) -> list:
        desc, prepared_ids, input_roles, output_roles = args
        models = []
        for oid in prepared_ids:
            try:
                models.append(call.client.lookup(oid, PREPARED))
            except NnError:
                models.append(Foreign())
        buffer, token = self.service.driver.allocate(desc, models, input_roles, output_roles)
        release = getattr(buffer, "release", None)
        oid = call.client.add(Entry(protocol.BUFFER, buffer, on_release=release if callable(release) else None))
        return [oid, int(token)]

    # --- prepared models ---------------------------------------------------------------------------------
    def execute(self, call: Call, prepared: Any, args: list) -> Deferred:
        """Launch; the completion comes back later as an EVENT with the same request id."""
        request, measure, deadline, loop_timeout = args
        rid = call.rid
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
            result = protocol.encode_completion(status, shapes, timing)
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
            prepared.execute(request, measure, deadline, loop_timeout, callback, **self.client_kw(call))
        except BaseException:
            close_fds(kept)
            raise
        return Deferred(None, after)

    def execute_fenced(self, call: Call, prepared: Any, args: list) -> list | Parked:
        """Runs once every sync fence of wait_for is signalled: at once if they are, else the call waits
        with the waiting thread (no service thread waits) and its request is read when they are."""
        request, fences, measure, deadline, loop_timeout, after_fence = args
        for k, fd in enumerate(fences):
            check_sync_fence(fd, f"execute_fenced: wait_for {k}")

        def launch() -> list:
            return self._launch_fenced(call, prepared, request, fences, measure, deadline, loop_timeout, after_fence)

        pending = {fd for fd in fences if not signalled(fd)}
        if not pending:
            return launch()
        due = normalize_deadline(deadline)
        if due is not None and time.monotonic_ns() >= due:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "execute_fenced: the deadline had passed before "
                                                                  "the call")
        return Parked(pending, None if due is None else due / 1e9, launch)

    def _launch_fenced(self, call: Call, prepared: Any, request: Any, fences: list[int], measure: Any,
                       deadline: int | None, loop_timeout: int | None, after_fence: int | None) -> list:
        """The fenced execution, its fences signalled (the driver gets none to wait for: an app could reset
        an eventfd it signalled, and a service thread would wait on it)."""
        request = call.client.in_place(call.dec.request(request))
        fence, callback = prepared.execute_fenced(request, [], measure, deadline, loop_timeout, after_fence,
                                                  **self.client_kw(call))
        if fence is not None and fence >= 0 and call.dec.writes_back:
            wait_fences([fence], None)  # outputs in copies of the app's files go back before the answer
            os.close(fence)
            fence = -1
        if fence is None or fence < 0:  # done: the completion is this reply
            info = callback.get_execution_info()
            if info[0] == ErrorStatus.NONE:
                call.dec.write_back()
            return [None, 0, protocol.encode_info(info)]
        # Still running: the client gets the sync fence and asks the callback later; the request's
        # memory stays open until it releases the callback.
        kept = [fd for fd in call.dec.adopt_all() if fd not in fences]
        close_fds(fences)
        call.enc.owned.append(fence)
        oid = call.client.add(Entry(protocol.FENCED, callback, kept))
        return [call.enc.fd(fence), oid, None]
