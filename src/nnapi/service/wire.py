"""Framing of the service protocol: length-prefixed frames over a Unix stream socket, with file
descriptors passed alongside (SCM_RIGHTS).

A frame is a 16-byte header, then the body (one msgpack message, see `codec`):

    magic b"NNSV" | u16 flags (0) | u16 descriptor count | u64 body length     (little-endian)

The descriptors of a frame travel in the ancillary data of the `sendmsg` that carries the frame's
first byte, so the kernel hands them over no later than that byte. The reader keeps arrived
descriptors in order and gives each completed frame the number its header declares. Anything that
breaks these rules (bad magic, a body longer than `MAX_BODY`, more than `MAX_FDS` descriptors,
descriptors missing when their frame completes, descriptors with no frame to carry them) is a
`ProtocolError`: the stream cannot be trusted any more and the connection is dropped.
"""
from __future__ import annotations

import array
import os
import select
import socket
import struct
import time
from collections import deque
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

MAGIC = b"NNSV"
HEADER = struct.Struct("<4sHHQ")
#: Largest body of one frame: messages are small (tensor bytes travel in shared memory and large
#: serialized models in a sealed memfd), so anything bigger is an attack or a bug.
MAX_BODY = 16 << 20
#: The kernel's limit of descriptors in one SCM_RIGHTS message (SCM_MAX_FD).
MAX_FDS = 253
#: Bytes asked of the kernel per receive.
RECV_BYTES = 256 << 10
#: How long each end of a burst channel polls for the other's next message before it sleeps (ns).
#: Android's burst polls its message queue for 50 us; Python's side of a call takes longer, so the
#: default window is wider (NNAPI_BURST_POLL_US; 0 turns polling off).
BURST_POLL_NS = int(float(os.environ.get("NNAPI_BURST_POLL_US", "200")) * 1000)
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)


class ProtocolError(Exception):
    """The byte stream broke the framing rules; the connection must be dropped."""


def close_fds(fds: Sequence[int]) -> None:
    """Close every descriptor, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def shutdown(sock: socket.socket) -> None:
    """Shut both directions of `sock` (a thread blocked reading it, at either end, sees the end at once);
    quiet when it is closed already."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class FrameDecoder:
    """Incremental frame decoder: `feed` bytes and descriptors as they arrive, get complete frames.

    The decoder owns descriptors until it hands them out with a frame; `close` closes the ones it
    still holds. After a `ProtocolError` the decoder is unusable (close it and the connection).
    """

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self.max_body = max_body
        self._buf = bytearray()
        self._fds: deque[int] = deque()
        self._header: tuple[int, int] | None = None  # (descriptor count, body length) of the frame in progress

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes, fds: Sequence[int] = ()) -> list[tuple[bytes, list[int]]]:
        """Add received bytes and descriptors; return every frame completed, as (body, descriptors)."""
        self._fds.extend(fds)
        self._buf += data
        frames: list[tuple[bytes, list[int]]] = []
        buf = self._buf
        while True:
            if self._header is None:
                if len(buf) < HEADER.size:
                    break
                magic, flags, n_fds, length = HEADER.unpack_from(buf)
                if magic != MAGIC:
                    raise ProtocolError(f"bad frame magic {bytes(magic)!r} (expected {MAGIC!r})")
                if flags:
                    raise ProtocolError(f"unknown frame flags {flags:#x}")
                if n_fds > MAX_FDS:
                    raise ProtocolError(f"frame declares {n_fds} descriptors (at most {MAX_FDS})")
                if length > self.max_body:
                    raise ProtocolError(f"frame body of {length} bytes is over the limit of {self.max_body}")
                del buf[:HEADER.size]
                self._header = (n_fds, length)
            n_fds, length = self._header
            if len(buf) < length:
                break
            if len(self._fds) < n_fds:
                raise ProtocolError(f"frame declares {n_fds} descriptors but {len(self._fds)} arrived with it")
            body = bytes(buf[:length])
            del buf[:length]
            frames.append((body, [self._fds.popleft() for _ in range(n_fds)]))
            self._header = None
        if self._fds and self._header is None and not buf:
            raise ProtocolError(f"{len(self._fds)} descriptors arrived without a frame to carry them")
        if len(self._fds) > 4 * MAX_FDS:
            raise ProtocolError(f"{len(self._fds)} descriptors arrived ahead of their frames")
        return frames

    def close(self) -> None:
        """Close every descriptor not handed out with a frame."""
        fds, self._fds = list(self._fds), deque()
        close_fds(fds)
        self._buf = bytearray()
        self._header = None


def frame(body: bytes, n_fds: int = 0) -> bytes:
    """The header of a frame with this body and descriptor count."""
    if n_fds > MAX_FDS:
        raise ValueError(f"{n_fds} descriptors in one frame (at most {MAX_FDS})")
    if len(body) > MAX_BODY:
        raise ValueError(f"a message of {len(body)} bytes is over the frame limit of {MAX_BODY}")
    return HEADER.pack(MAGIC, 0, n_fds, len(body))


def send_frame(sock: socket.socket, body: bytes, fds: Sequence[int] = ()) -> None:
    """Send one frame; its descriptors go with its first byte. Callers serialize sends per socket."""
    data = frame(body, len(fds)) + body
    if fds:
        sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sent = sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


def recv_chunk(sock: socket.socket, flags: int = 0) -> tuple[bytes, list[int]]:
    """One receive: bytes (b"" at end of stream) and the descriptors that came with them (close-on-exec).

    ProtocolError when the kernel had to drop descriptors (more than fit in the ancillary buffer).
    """
    data, ancdata, flags, _ = sock.recvmsg(RECV_BYTES, _ANCILLARY, _CLOEXEC | flags)
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            items = array.array("i")
            items.frombytes(payload[:len(payload) - len(payload) % items.itemsize])
            fds.extend(items)
    if flags & socket.MSG_CTRUNC:
        close_fds(fds)
        raise ProtocolError("descriptors were truncated (more than one frame may carry)")
    return data, fds


def receive(sock: socket.socket, poll_ns: int, due_ns: int = 0) -> tuple[bytes, list[int]]:
    """`recv_chunk` on a blocking socket, polling (without sleeping) for up to `poll_ns` first: a reply
    that comes within the window costs no wake-up of a sleeping thread. The poll yields the CPU at
    each turn, so it only uses a core nothing else wants.

    With `due_ns` (when the answer is expected, on the monotonic clock: a call's usual duration from
    its start), the window is `poll_ns` either side of it, and the thread sleeps until it opens: a
    long call's answer also finds its reader awake (waking a thread that slept for milliseconds costs
    this machine 100 us and more)."""
    if poll_ns > 0:
        now = time.monotonic_ns()
        if due_ns - now > 2 * poll_ns:  # sleep until the window opens (the answer may come sooner)
            poller = select.poll()  # (not select.select: any descriptor number, beyond FD_SETSIZE too)
            poller.register(sock, select.POLLIN)
            if poller.poll(max(0, (due_ns - poll_ns - now) // 1_000_000)):
                return recv_chunk(sock)

        def attempt() -> tuple[bytes, list[int]] | None:
            try:
                return recv_chunk(sock, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return None

        got = poll_until(max(now, due_ns) + poll_ns, attempt)
        if got is not None:
            return got
    return recv_chunk(sock)


def poll_until(end_ns: int, attempt: Callable[[], T | None]) -> T | None:
    """`attempt()` until it gives something or `end_ns` (monotonic) passes, without sleeping: the
    CPU is yielded at each turn, so polling only uses a core nothing else wants."""
    while True:
        got = attempt()
        if got is not None or time.monotonic_ns() >= end_ns:
            return got
        os.sched_yield()


_CLOEXEC, _DONTWAIT = int(socket.MSG_CMSG_CLOEXEC), int(socket.MSG_DONTWAIT)  # (plain ints: cheaper)


class Durations:
    """How long a kind of call usually takes: the least of its last few durations. (A wait that woke
    late only lengthens a call, so the least is not fooled by the polling it steers.)"""

    __slots__ = ("_last", "_next")

    def __init__(self, keep: int = 8) -> None:
        self._last = [0] * keep
        self._next = 0

    def usual(self) -> int:
        return min(self._last)

    def record(self, ns: int) -> None:
        self._last[self._next] = ns
        self._next = (self._next + 1) % len(self._last)


def poll_window(usual_ns: int) -> int:
    """How long either side of a call's usual duration its caller polls for the answer: the burst
    window, wider for long calls (whose durations vary more; waking after a long sleep costs this
    machine 100-200 us), at most 2 ms (a polling thread takes a core other work may want)."""
    return max(BURST_POLL_NS, min(usual_ns // 16, 2_000_000)) if BURST_POLL_NS > 0 else 0
