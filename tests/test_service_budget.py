"""One uid's share of `nnapi serve` (the audit's S2, S3 and item 5, issue 31): fenced calls on fences
that never signal, idle and hello-less connections, answers never read, and a fake service planted
where apps look for one. Each attack is bounded in time; another uid's ADD is still served by the
service with its usual latency, and what the attacker left behind is gone once it disconnects."""
from __future__ import annotations

import collections
import fcntl
import logging
import mmap
import os
import resource
import select
import shutil
import socket
import struct
import tempfile
import termios
import threading
import time
from typing import Callable

import numpy as np
import pytest

import nnapi
from nnapi import OperationType as Op
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError, Priority,
                       Request, RequestArgument)
from nnapi.memory import allocate_ashmem
from nnapi.service import codec, connect, sockets
from nnapi.service.budget import HELLO_TIMEOUT, MAX_CALLS_PER_UID, MAX_CONNECTIONS_PER_UID, MAX_THREADS_PER_UID
from nnapi.service.cli import served
from nnapi.service.wire import frame, send_frame

from test_service_attacks import assert_served_as_usual, victim_latency
from test_service_security import APP_A, APP_B, binary_model, fork_as, run_as

pytestmark = [pytest.mark.timing, pytest.mark.filterwarnings("ignore:os.fork"), pytest.mark.filterwarnings("ignore:This process"),
              pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")]


@pytest.fixture
def service():
    """A service of its own for each test: an attack that works leaves it broken."""
    with served(["reference"]) as services:
        nnapi.devices()  # in-process drivers found before forking: children only connect
        yield services["reference"]


_NOTHING = {"connections": 0, "calls": 0, "running": 0, "queued": 0}


def _usage(service, uid: int, timeout: float = 10.0) -> dict:
    """The service's budget figures for `uid` (asked as root, who sees every uid's)."""
    device = connect(service.socket, timeout=timeout)
    try:
        return device.status().get("budgets", {}).get(str(uid), _NOTHING)
    finally:
        device.close()


def _while_attacked(service, attack: Callable[[Callable[[], None]], dict], ready: Callable[[dict], bool],
                    seconds: float = 1.5) -> tuple[dict, dict, list[dict | None]]:
    """APP_B's ADD (`victim_latency`) while `attack(hold)` runs as APP_A, measured once the attack is in
    place: it calls `hold()` (which returns once the victim is done), and `ready(APP_A's figures)` (or
    5 s passed). The victim's figures, the attack's result, and APP_A's figures as root saw them
    meanwhile (None: root's status went unanswered for a second)."""
    done_r, done_w = os.pipe()
    ready_r, ready_w = os.pipe()

    def hold() -> None:
        os.write(ready_w, b"r")
        select.select([done_r], [], [], 30.0)

    attacked = fork_as(APP_A, lambda: attack(hold))
    samples: list[dict | None] = []

    def sample() -> dict | None:
        try:
            samples.append(_usage(service, APP_A, timeout=1.0))
        except NnError:
            samples.append(None)
        return samples[-1]

    try:
        select.select([ready_r], [], [], 20.0)
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            usage = sample()
            if usage is not None and ready(usage):
                break
            time.sleep(0.05)
        loaded, _ = victim_latency(service, APP_B, seconds)
        sample()  # (the attack still in place)
    finally:
        os.write(done_w, b"x")
    result = attacked()
    for fd in (done_r, done_w, ready_r, ready_w):
        os.close(fd)
    return loaded, result, samples


def _settles(service, uid: int, seconds: float = 3.0) -> dict:
    """`uid`'s figures once they are all zero (or as they are after `seconds`)."""
    end = time.monotonic() + seconds
    while True:
        usage = _usage(service, uid)
        if not any(usage[k] for k in _NOTHING) or time.monotonic() > end:
            return usage
        time.sleep(0.05)


def _add_request() -> tuple[Request, mmap.mmap]:
    """ADD of two ones into an output, all in one shared-memory pool (the output starts at zero)."""
    pool = allocate_ashmem(48)
    view = mmap.mmap(pool.fds[0], 48)
    view[:32] = np.ones(8, np.float32).tobytes()
    request = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(0, 16, 16))],
                      [RequestArgument(False, DataLocation(0, 32, 16))], [MemoryPool(handle=pool)])
    return request, view


def _status_of(call: Callable[[], object]) -> str:
    """NONE, or the status of the NnError `call()` raised."""
    try:
        call()
        return ErrorStatus.NONE.name
    except NnError as e:
        return e.status.name


def _prepare(device):
    return device.prepare_model(binary_model(Op.ADD).to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                None, None, None)


# --- S2: fenced executions ------------------------------------------------------------------------------------
def test_fenced_calls_on_fences_that_never_signal_hold_no_service_thread(service):
    """10 connections x 64 fenced calls on a fence nobody signals took every service thread: the
    fences are waited for by one poller, the calls count against their uid's budget (the rest are
    refused RESOURCE_EXHAUSTED_TRANSIENT), and a disconnect ends the waits."""
    alone, _ = victim_latency(service, APP_B, 1.0)

    def attack(hold: Callable[[], None]) -> dict:
        never = os.eventfd(0, os.EFD_CLOEXEC)
        request, _ = _add_request()
        devices = [connect(service.socket) for _ in range(10)]
        outcomes: collections.Counter = collections.Counter()
        lock = threading.Lock()

        def call(prepared) -> None:
            outcome = _status_of(lambda: prepared.execute_fenced(request, [never], MeasureTiming.NO, None, None, None))
            with lock:
                outcomes[outcome] += 1

        callers = []
        for prepared in [_prepare(device) for device in devices]:
            for _ in range(64):
                callers.append(threading.Thread(target=call, args=(prepared,), daemon=True))
                callers[-1].start()
        hold()
        with lock:
            during = dict(outcomes)
        for device in devices:
            device.close()
        for t in callers:
            t.join(10)
        return {"during": during, "after": dict(outcomes), "stuck": sum(t.is_alive() for t in callers)}

    loaded, attacked, _ = _while_attacked(service, attack, lambda usage: usage["calls"] >= MAX_CALLS_PER_UID)
    print(f"victim p99 alone {alone['p99']:.2f} ms, under 640 never-signalled fenced calls {loaded['p99']:.2f} ms")
    assert_served_as_usual(service, loaded, alone)
    refused = ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT.name
    assert attacked["during"] == {refused: 640 - MAX_CALLS_PER_UID}, attacked  # the others wait, on no thread
    assert attacked["after"] == {refused: 640 - MAX_CALLS_PER_UID,
                                 ErrorStatus.DEVICE_UNAVAILABLE.name: MAX_CALLS_PER_UID}, attacked
    assert attacked["stuck"] == 0
    assert _settles(service, APP_A)["calls"] == 0  # its waits ended with its connections


def test_a_dropped_connections_fenced_waits_end_and_never_run(service):
    """An app that disconnects with fenced calls waiting: they end; the fence signalled afterwards
    runs none of them (before, service threads stayed blocked, then wrote into the app's memory)."""
    def app() -> dict:
        gate = os.eventfd(0, os.EFD_CLOEXEC)
        request, view = _add_request()
        device = connect(service.socket)
        prepared = _prepare(device)
        errors = []

        def call() -> None:
            errors.append(_status_of(lambda: prepared.execute_fenced(request, [gate], MeasureTiming.NO, None, None,
                                                                     None)))

        callers = [threading.Thread(target=call, daemon=True) for _ in range(8)]
        for t in callers:
            t.start()
        time.sleep(0.5)
        waiting = device.status().get("budget", {}).get("calls")
        device.close()
        time.sleep(0.3)
        os.eventfd_write(gate, 1)
        time.sleep(0.5)
        for t in callers:
            t.join(5)
        return {"waiting": waiting, "errors": errors, "output": np.frombuffer(view[32:48], np.float32).tolist()}

    result = run_as(APP_A, app)
    assert result["output"] == [0.0] * 4, result  # no execution ran after the disconnect
    assert result["errors"] == [ErrorStatus.DEVICE_UNAVAILABLE.name] * 8, result
    assert result["waiting"] == 8, result  # (its own figures: every call waiting, none running)
    assert _settles(service, APP_A)["calls"] == 0


def test_only_sync_fences_are_waited_for(service):
    """A directory, a regular file, a pipe or a socket with data (all poll readable) are not sync
    fences: INVALID_ARGUMENT naming the fence (before, each was taken as already signalled)."""
    device = connect(service.socket)
    prepared = _prepare(device)
    request, view = _add_request()
    folder = tempfile.mkdtemp()
    r, w = os.pipe()
    os.write(w, b"x")
    a, b = socket.socketpair()
    b.send(b"x")
    signalled = os.eventfd(1, os.EFD_CLOEXEC)
    not_fences = {"directory": os.open(folder, os.O_RDONLY | os.O_DIRECTORY),
                  "regular file": os.open(os.path.join(folder, "f"), os.O_RDWR | os.O_CREAT, 0o600),
                  "pipe": r, "socket": a.fileno(), "timerfd": _timerfd()}
    try:
        for kind, fd in not_fences.items():
            if fd is None:
                continue
            for wait_for, index in (([fd], 0), ([signalled, fd], 1)):
                with pytest.raises(NnError) as err:
                    prepared.execute_fenced(request, wait_for, MeasureTiming.NO, None, None, None)
                message = err.value.message
                assert err.value.status == ErrorStatus.INVALID_ARGUMENT, (kind, message)
                assert f"wait_for {index}" in message and "not a sync fence" in message, (kind, message)
        assert np.frombuffer(view[32:48], np.float32).tolist() == [0.0] * 4  # nothing ran
        fence, callback = prepared.execute_fenced(request, [signalled], MeasureTiming.NO, None, None, None)
        assert fence == -1 and callback.get_execution_info()[0] == ErrorStatus.NONE
        assert np.frombuffer(view[32:48], np.float32).tolist() == [2.0] * 4
    finally:
        device.close()
        for fd in (not_fences["directory"], not_fences["regular file"], r, w, signalled):
            os.close(fd)
        if not_fences["timerfd"] is not None:
            os.close(not_fences["timerfd"])
        a.close()
        b.close()
        shutil.rmtree(folder, ignore_errors=True)


def _timerfd() -> int | None:
    """A timer descriptor that has fired (readable), or None where Python has no timerfd."""
    if not hasattr(os, "timerfd_create"):
        return None
    fd = os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_CLOEXEC)
    os.timerfd_settime(fd, initial=0.001)
    time.sleep(0.01)
    return fd


# --- S3: connections and threads of one uid --------------------------------------------------------------------
def test_idle_connections_of_one_uid_do_not_lock_out_another(service):
    """5,000 idle connections from one uid took the service's 4,096: one uid may hold at most its
    share; the rest are refused at once, and another uid still connects and is served as usual."""
    alone, _ = victim_latency(service, APP_B, 1.0)

    def attack(hold: Callable[[], None]) -> dict:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 5200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 5200), hard))
        held, failed = [], 0
        for _ in range(5000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5.0)
            try:
                s.connect(service.socket)
                held.append(s)
            except OSError:
                s.close()
                failed += 1
        hold()
        open_ = sum(1 for s in held if not _closed_by_peer(s))
        for s in held:
            s.close()
        return {"connected": len(held), "failed": failed, "open": open_}

    loaded, attacked, _ = _while_attacked(service, attack,
                                          lambda usage: usage["connections"] >= MAX_CONNECTIONS_PER_UID)
    print(f"victim p99 alone {alone['p99']:.2f} ms, beside 5,000 idle connections {loaded['p99']:.2f} ms; "
          f"{attacked}")
    assert_served_as_usual(service, loaded, alone)
    assert attacked["connected"] + attacked["failed"] == 5000
    assert attacked["open"] <= MAX_CONNECTIONS_PER_UID, attacked
    assert _settles(service, APP_A)["connections"] == 0


def _closed_by_peer(s: socket.socket) -> bool:
    poller = select.poll()
    poller.register(s, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_connection_that_never_says_hello_is_closed(service):
    """A connection that sends no hello is closed after HELLO_TIMEOUT seconds; one that said hello
    stays open."""
    greeted = connect(service.socket)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(service.socket)
    start_ = time.monotonic()
    try:
        poller = select.poll()
        poller.register(silent, select.POLLIN)
        assert poller.poll(int((HELLO_TIMEOUT + 5) * 1000)), f"still open after {HELLO_TIMEOUT + 5} s"
        waited = time.monotonic() - start_
        assert silent.recv(1) == b"" and HELLO_TIMEOUT - 0.5 <= waited <= HELLO_TIMEOUT + 3, waited
        assert greeted.status()["uid"] == 0  # said hello: still served
    finally:
        silent.close()
        greeted.close()


def _raw_call(rid: int, method: str, target: int, args: list) -> bytes:
    """One call frame, as bytes."""
    body = codec.pack([codec.CALL, rid, method, target, args])
    return frame(body) + body


def test_a_uid_that_never_reads_its_answers_holds_at_most_its_share_of_threads(service):
    """12 connections that fill their socket with answers they never read, then send 48 calls more:
    each answer blocks a service thread until the socket takes it (before, 12 x up to 64 of them took
    the 512). A uid's work runs on at most MAX_THREADS_PER_UID threads, the rest waits in its queue,
    and all of it ends when it disconnects."""
    alone, _ = victim_latency(service, APP_B, 1.0)
    calls = [_raw_call(k, "execute_synchronously", 10**6, [[[], [], []], 0, None, None]) for k in range(1, 49)]
    few, more = b"".join(calls[:16]), b"".join(calls)

    def attack(hold: Callable[[], None]) -> dict:
        conns = []
        for _ in range(12):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(service.socket)
            send_frame(s, codec.pack([codec.CALL, 1, "hello", 0, [codec.PROTOCOL_VERSION]]))
            s.recv(65536)  # its answer; nothing is read after it
            conns.append(s)

        def send(s: socket.socket) -> None:
            try:
                unread, end = -1, time.monotonic() + 5.0
                while time.monotonic() < end:  # a few calls at a time until no more answers come
                    s.sendall(few)
                    time.sleep(0.03)
                    now = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]
                    if now == unread:
                        break
                    unread = now
                s.sendall(more)  # (at most 64 in flight: none refused, so each holds a thread)
            except OSError:
                pass

        senders = [threading.Thread(target=send, args=(s,), daemon=True) for s in conns]
        for t in senders:
            t.start()
        for t in senders:
            t.join(10)
        hold()
        for s in conns:
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        return {}

    loaded, _, samples = _while_attacked(service, attack, lambda usage: usage["running"] >= MAX_THREADS_PER_UID)
    print(f"victim p99 alone {alone['p99']:.2f} ms, beside 12 connections never reading {loaded['p99']:.2f} ms; "
          f"the attacker's figures {samples[-1]}")
    assert None not in samples, samples  # (before, root's status went unanswered for the whole attack)
    assert_served_as_usual(service, loaded, alone)
    assert max(u["running"] for u in samples) == MAX_THREADS_PER_UID and samples[-1]["queued"] > 0, samples
    settled = _settles(service, APP_A)  # its blocked answers ended, its queued calls never ran
    assert [settled[k] for k in _NOTHING] == [0, 0, 0, 0], settled


# --- item 5: a fake service --------------------------------------------------------------------------------------
def _listening(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o666)
    s.listen(8)
    s.setblocking(False)
    return s


def _pending(listener: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_fake_service_socket_is_refused_before_connecting():
    """A socket in a folder others may write, or a socket another user owns, may be anyone's: the app
    never connects to it (it would hand that process its cache files opened read-write)."""
    base = tempfile.mkdtemp(prefix="nnapi-test-fake-")
    os.chmod(base, 0o755)
    open_dir = os.path.join(base, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o777)  # anyone may plant a socket here
    theirs_dir = os.path.join(base, "theirs")
    os.mkdir(theirs_dir)
    os.chown(theirs_dir, APP_A, APP_A)
    owned_dir = os.path.join(base, "owned")
    os.mkdir(owned_dir)
    os.chmod(owned_dir, 0o755)
    planted = {"open": _listening(os.path.join(open_dir, "reference.sock")),
               "theirs": _listening(os.path.join(theirs_dir, "reference.sock")),
               "owned": _listening(os.path.join(owned_dir, "reference.sock"))}
    os.chown(os.path.join(owned_dir, "reference.sock"), APP_A, APP_A)  # a socket of another user
    reasons = {"open": "writable by other users", "theirs": f"belongs to uid {APP_A}",
               "owned": f"belongs to uid {APP_A}"}

    def app() -> dict:
        handler = _Warnings()
        logging.getLogger("nnapi.service").addHandler(handler)
        out: dict = {}
        for name, folder in (("open", open_dir), ("theirs", theirs_dir), ("owned", owned_dir)):
            path = os.path.join(folder, "reference.sock")
            try:
                connect(path, timeout=2.0)
                out[name] = ["connected", ""]
            except NnError as e:
                out[name] = [e.status.name, e.message]
            out[name + " listed"] = sockets(folder)
        out["warnings"] = handler.messages
        return out

    try:
        result = run_as(APP_B, app)
        for name, reason in reasons.items():
            path = os.path.join(base, name, "reference.sock")
            status, message = result[name]
            assert status == ErrorStatus.DEVICE_UNAVAILABLE.name and path in message and reason in message, result
            assert result[name + " listed"] == [], result
            assert any(path in w and reason in w for w in result["warnings"]), result
            assert _pending(planted[name]) == 0, name  # never even connected
    finally:
        for s in planted.values():
            s.close()
        shutil.rmtree(base, ignore_errors=True)


def test_a_service_running_as_another_user_is_refused():
    """A socket root owns in a folder only root may write, but listened on by a process of another
    user (SO_PEERCRED says who): refused once connected, before hello."""
    base = tempfile.mkdtemp(prefix="nnapi-test-fake-")
    os.chmod(base, 0o755)
    path = os.path.join(base, "reference.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o666)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fake service: listens as APP_A, counts hellos
        try:
            os.setgid(APP_A)
            os.setuid(APP_A)
            s.listen(8)
            os.write(w, b"l")
            s.settimeout(8.0)
            conn, _ = s.accept()
            conn.settimeout(3.0)
            got = conn.recv(65536)
            os.write(w, b"h" if got else b"-")
        except BaseException:
            os.write(w, b"-")
        os._exit(0)
    s.close()
    os.close(w)
    try:
        assert os.read(r, 1) == b"l"

        def app() -> dict:
            try:
                connect(path, timeout=2.0)
                return {"status": "connected", "message": ""}
            except NnError as e:
                return {"status": e.status.name, "message": e.message}

        result = run_as(APP_B, app)
        assert result["status"] == ErrorStatus.DEVICE_UNAVAILABLE.name, result
        assert path in result["message"] and f"uid {APP_A}" in result["message"], result
        assert os.read(r, 1) == b"-"  # the fake never got a hello (nor anything else)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
        shutil.rmtree(base, ignore_errors=True)
