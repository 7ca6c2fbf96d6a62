"""The client's transport to a service: one Unix socket, calls multiplexed by request id.

One thread at a time reads the socket: a caller waiting for its answer reads it itself (answers to
other calls it hands over), so a call costs no handoff between threads; when no call waits, a
background thread reads (asynchronous completions, the service going away). It yields the socket to
a caller through a wake-up pipe. Asynchronous completions (EVENT messages) go to their callbacks in
order on an event thread. If the service goes away every pending call ends at once with
DEVICE_UNAVAILABLE (Android's DEAD_OBJECT), so does every later call, and the death callbacks run.
"""
from __future__ import annotations

import itertools
import logging
import os
import queue
import select
import socket
import threading
import time
import weakref
from typing import Any, Callable, Sequence

from ..hal import ErrorStatus, NnError
from . import codec
from .codec import CALL, ERROR, EVENT, REPLY, Encoder
from .discovery import unavailable
from .wire import FrameDecoder, ProtocolError, close_fds, poll_window, receive, recv_chunk, send_frame

log = logging.getLogger("nnapi.service")

class _Waiter:
    """One pending call: `done` once its answer (or the connection's death) is in."""

    __slots__ = ("done", "result", "error", "fds")

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.error: NnError | None = None
        self.fds: list[int] = []


_transports: "weakref.WeakSet[Transport]" = weakref.WeakSet()
#: How long the background reader leaves the socket to callers after the last call (seconds): calls
#: in a row never wake it, and an answer to no call (an asynchronous completion) waits at most this.
LINGER = 0.005


class Transport:
    """One Unix-socket connection's frames and answers (see the module doc)."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.path = path
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
        self._death_callbacks: list[Callable[[], None]] = []
        self._events: queue.SimpleQueue | None = None
        #: Frames and descriptors sent to the service so far, burst channels included (a burst sends a
        #: pool's descriptor once: tests check it).
        self.frames_sent = 0
        self.fds_sent = 0
        self.label = f"service at {self.path}"
        self._background = threading.Thread(target=self._background_loop, name="nnapi-service-reader", daemon=True)
        self._background.start()
        _transports.add(self)

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
        error = unavailable(f"the {self.label} is gone: {reason}")
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
    def exchange(self, method: str, target: int, args: list, enc: Encoder | None = None, *,
                 timeout: float | None = None, on_event: Callable[[Any, NnError | None], None] | None = None,
                 usual_ns: int = 0) -> tuple[Any, list[int]]:
        """Send one call and wait for its answer: (the result, the descriptors that came with it); NnError
        on failure. `usual_ns`, how long such a call usually takes, lets the wait poll when it is due."""
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
                self.send(body, enc.fds if enc is not None else ())
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

    def send(self, body: bytes, fds: Sequence[int] = ()) -> None:
        """Send one frame (after those `before_send` gives); OSError when the socket fails."""
        with self._send_lock:
            for early in self.before_send():
                send_frame(self._sock, early)
            send_frame(self._sock, body, fds)
            self.frames_sent += 1
            self.fds_sent += len(fds)

    def before_send(self) -> list[bytes]:
        """Frames to send ahead of the next one (none here)."""
        return []

    def raise_if_dead(self) -> None:
        """DEVICE_UNAVAILABLE once the connection is lost."""
        if self._error is not None:
            raise self._error

    def count_sent(self, n_fds: int) -> None:
        """Count a frame sent on a channel of this connection (a burst's)."""
        self.frames_sent += 1
        self.fds_sent += n_fds

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


def _forget_transports_in_child() -> None:
    """After fork the child must not talk on its parent's connections (and would carry the parent's
    credentials): they are dead in the child, which connects anew."""
    for conn in list(_transports):
        if conn._error is not None:  # already closed: its descriptor numbers may be in use again
            continue
        conn._error = unavailable(f"the {conn.label} connection belongs to the parent process")
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


os.register_at_fork(after_in_child=_forget_transports_in_child)
