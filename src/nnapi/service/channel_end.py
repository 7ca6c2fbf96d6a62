"""The app's end of a channel of its own to the service: one end of a socket pair whose other end went to
the service, where a thread of its own serves it (`channel.Channels`). A burst's calls and a reusable
execution's computations go there, one at a time: each answer is polled for for a moment around when it
is due (as Android's burst polls its message queue), so back-to-back executions cost no wake-up, and
none waits behind the connection's other calls or the service's event loop.
"""
from __future__ import annotations

import itertools
import socket
import time
import weakref
from typing import TYPE_CHECKING, Any

from ..hal import NnError
from . import codec
from .codec import CALL, ERROR, Encoder
from .discovery import unavailable
from .protocol import Method
from .wire import Durations, FrameDecoder, ProtocolError, close_fds, poll_window, receive, send_frame, shutdown

if TYPE_CHECKING:
    from .connection import Connection


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(this end, the end that goes to the service)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)


class ChannelEnd:
    """Calls on one object's channel (`what` names it in errors); callers make one call at a time."""

    def __init__(self, sock: socket.socket, connection: "Connection", what: str) -> None:
        self.sock = sock
        self._connection = connection
        self._what = what
        self._decoder = FrameDecoder()
        self._rids = itertools.count(1)
        self._durations = Durations()  # of its calls: their answers are polled for around then
        weakref.finalize(self, sock.close)

    def call(self, spec: Method, oid: int, values: list) -> Any:
        """Send one call on `oid`, then poll for the answer for a moment when calls are short, then sleep
        until it comes; DEVICE_UNAVAILABLE when the channel breaks."""
        connection = self._connection
        enc = Encoder()
        try:
            connection.raise_if_dead()
            connection.settle()  # (memory the app freed is let go of first, as before a call on the connection)
            rid = next(self._rids)
            body = codec.pack([CALL, rid, spec.name, oid, spec.encode(enc, values)])
            start = time.monotonic_ns()
            try:
                send_frame(self.sock, body, enc.fds)
                connection.count_sent(len(enc.fds))
                usual = self._durations.usual()
                poll, due = poll_window(usual), start + usual
                while True:
                    data, fds = receive(self.sock, poll, due)
                    if not data:
                        raise unavailable(f"the {connection.label} closed the {self._what} channel")
                    for frame_body, frame_fds in self._decoder.feed(data, fds):
                        message = codec.unpack(frame_body, len(frame_fds))
                        close_fds(frame_fds)
                        if type(message) is list and len(message) >= 3 and message[1] == rid:
                            self._durations.record(time.monotonic_ns() - start)
                            if message[0] == ERROR:
                                raise codec.decode_error(*message[2:5])
                            return spec.decode_result(message[2])
            except (OSError, ProtocolError) as e:
                raise unavailable(f"the {self._what} channel to the {connection.label} broke: {e}") from None
        finally:
            enc.close()

    def notify(self, spec: Method, oid: int, values: list) -> None:
        """A call that wants no answer (ignored when the channel is gone)."""
        try:
            send_frame(self.sock, codec.pack([CALL, 0, spec.name, oid, spec.encode(Encoder(), values)]))
        except (OSError, NnError):
            pass

    def shutdown(self) -> None:
        """End the channel: the service's thread sees the end and releases the object."""
        shutdown(self.sock)
