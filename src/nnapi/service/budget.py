"""What one user may take of `nnapi serve`: connections, calls in flight and service threads are
counted by the caller's uid (SO_PEERCRED), so that one misbehaving user cannot lock out the others.

A call (or the reading of a connection) runs on a service thread only while its uid has a thread
slot: beyond its share it waits in its uid's queue, and the queues take turns (round-robin between
uids) as slots free. A few threads are never given to anyone's work (`RESERVED_THREADS`): they accept
connections and read the calls of users that have nothing running yet. What a connection left
queued is cancelled when it goes (`cancel`): queued calls never start.

Root and the service's own user are counted but not limited (`exempt`): they could stop the service
anyway, and tools they run (tests, benchmarks) may open many connections.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable

#: Connections one uid may hold at once, over all its processes (the service holds 4,096 in all):
#: an app needs one per service, so a user with many apps stays well within it.
MAX_CONNECTIONS_PER_UID = 256
#: Calls one uid may have in flight at once over all its connections: queued, running, or waiting
#: for their sync fences (beyond: RESOURCE_EXHAUSTED_TRANSIENT; a connection may have 64).
MAX_CALLS_PER_UID = 256
#: Service threads one uid's work may occupy at once (of 512): as many as one connection may have
#: calls in flight, so that one app's calls all run at once; its other work waits in its queue.
MAX_THREADS_PER_UID = 64
#: Burst channels (a thread each) one uid may hold; beyond, its bursts run over their connection.
MAX_CHANNELS_PER_UID = 32
#: Service threads kept from everyone's work but a user's first: accepting connections, and reading
#: the calls (hello, status) of users who have nothing running, so another app is always answered.
RESERVED_THREADS = 4
#: Seconds a new connection has to say hello before it is closed (a client says it at once).
HELLO_TIMEOUT = 5.0

_FIGURES = ("connections", "calls", "running", "queued", "channels")


@dataclass(eq=False, slots=True)
class Task:
    """Work for a service thread on behalf of `uid`: `run` it, or `cancel` it if it never runs (a
    call's bookkeeping ends there). `owner` is the connection it belongs to."""

    uid: int
    owner: object
    run: Callable[[], None]
    cancel: Callable[[], None] | None = None


@dataclass
class _Usage:
    connections: int = 0
    calls: int = 0
    running: int = 0
    channels: int = 0
    queue: collections.deque = field(default_factory=collections.deque)

    def idle(self) -> bool:
        return not (self.connections or self.calls or self.running or self.channels or self.queue)


class Budget:
    """The per-uid counts and queues of one service with `threads` service threads (thread-safe); the
    uids in `exempt` are counted, never limited (but for the threads kept for accepting)."""

    def __init__(self, threads: int, *, connections: int = MAX_CONNECTIONS_PER_UID, calls: int = MAX_CALLS_PER_UID,
                 threads_per_uid: int = MAX_THREADS_PER_UID, channels: int = MAX_CHANNELS_PER_UID,
                 reserved: int = RESERVED_THREADS, exempt: frozenset[int] = frozenset()) -> None:
        self.max_connections, self.max_calls, self.max_channels = connections, calls, channels
        self.exempt = exempt
        self.max_threads = max(1, min(threads_per_uid, threads - 1))
        self._shared = max(1, threads - reserved)  # slots anyone's work may take
        self._last = max(1, threads - 1)            # the last thread only ever waits for events
        self._lock = threading.Lock()
        self._usage: dict[int, _Usage] = {}
        self._turns: collections.deque[int] = collections.deque()  # uids with queued work, in turn
        self._running = 0

    def _get(self, uid: int) -> _Usage:
        usage = self._usage.get(uid)
        if usage is None:
            usage = self._usage[uid] = _Usage()
        return usage

    def _tidy(self, uid: int, usage: _Usage) -> None:
        if usage.idle():
            self._usage.pop(uid, None)

    def _count(self, uid: int, what: str, limit: int) -> bool:
        with self._lock:
            usage = self._get(uid)
            if getattr(usage, what) >= limit and uid not in self.exempt:
                self._tidy(uid, usage)
                return False
            setattr(usage, what, getattr(usage, what) + 1)
            return True

    def _uncount(self, uid: int, what: str) -> None:
        with self._lock:
            usage = self._usage.get(uid)
            if usage is not None:
                setattr(usage, what, max(0, getattr(usage, what) - 1))
                self._tidy(uid, usage)

    # --- connections, calls, channels ---------------------------------------------------------------
    def connect(self, uid: int) -> bool:
        """Count a new connection of `uid`; False when it holds its share already."""
        return self._count(uid, "connections", self.max_connections)

    def disconnect(self, uid: int) -> None:
        self._uncount(uid, "connections")

    def admit(self, uid: int) -> bool:
        """Count a call in flight of `uid`; False when it has its share in flight already."""
        with self._lock:  # (what `_count` does, on every call: spelt out)
            usage = self._usage.get(uid) or self._get(uid)
            if usage.calls >= self.max_calls and uid not in self.exempt:
                self._tidy(uid, usage)
                return False
            usage.calls += 1
            return True

    def end(self, uid: int) -> None:
        """A call of `uid` is answered (or was cancelled)."""
        with self._lock:
            usage = self._usage.get(uid)
            if usage is not None:
                usage.calls -= 1
                if usage.calls <= 0:
                    usage.calls = 0
                    self._tidy(uid, usage)

    def open_channel(self, uid: int) -> bool:
        """Count a burst channel (a thread) of `uid`; False when it has its share."""
        return self._count(uid, "channels", self.max_channels)

    def close_channel(self, uid: int) -> None:
        self._uncount(uid, "channels")

    # --- thread slots -------------------------------------------------------------------------------
    def _may_run(self, uid: int, usage: _Usage) -> bool:
        if usage.running >= self.max_threads and uid not in self.exempt:
            return False
        return self._running < self._shared or (usage.running == 0 and self._running < self._last)

    def take(self, uid: int) -> bool:
        """A thread slot for `uid` now, unless its share (or every shared slot) is taken."""
        with self._lock:
            usage = self._usage.get(uid) or self._get(uid)
            if usage.queue or not self._may_run(uid, usage):  # (queued work of that uid goes first)
                self._tidy(uid, usage)
                return False
            usage.running += 1
            self._running += 1
            return True

    def release(self, uid: int) -> None:
        """Give back a slot taken by `take` or `next`."""
        with self._lock:
            self._running -= 1
            usage = self._usage.get(uid)
            if usage is not None:
                usage.running -= 1
                if not usage.running:
                    self._tidy(uid, usage)

    def submit(self, task: Task) -> None:
        """Queue `task` until its uid may run it (`next`)."""
        with self._lock:
            usage = self._get(task.uid)
            if not usage.queue:
                self._turns.append(task.uid)
            usage.queue.append(task)

    def next(self) -> Task | None:
        """The next queued task that may run now, its slot taken (uids take turns); None if none may."""
        if not self._turns:  # (nothing queued: the common case, seen without the lock)
            return None
        with self._lock:
            for _ in range(len(self._turns)):
                uid = self._turns[0]
                self._turns.rotate(-1)
                usage = self._usage.get(uid)
                if usage is None or not usage.queue:
                    self._turns.remove(uid)
                    continue
                if not self._may_run(uid, usage):
                    continue
                task = usage.queue.popleft()
                if not usage.queue:
                    self._turns.remove(uid)
                usage.running += 1
                self._running += 1
                return task
        return None

    def cancel(self, owner: object) -> list[Task]:
        """Take every queued task of `owner` (a closed connection) out of the queues; the caller cancels them."""
        taken: list[Task] = []
        with self._lock:
            for uid, usage in list(self._usage.items()):
                kept = [t for t in usage.queue if t.owner is not owner]
                if len(kept) != len(usage.queue):
                    taken.extend(t for t in usage.queue if t.owner is owner)
                    usage.queue = collections.deque(kept)
                    if not kept and uid in self._turns:
                        self._turns.remove(uid)
                    self._tidy(uid, usage)
        return taken

    # --- figures ------------------------------------------------------------------------------------
    def figures(self, uid: int) -> dict[str, int]:
        """What `uid` holds now, and its limits."""
        with self._lock:
            usage = self._usage.get(uid) or _Usage()
            return self._figures(usage)

    def all_figures(self) -> dict[str, dict[str, int]]:
        """Every uid's figures, by uid (as a string)."""
        with self._lock:
            return {str(uid): self._figures(usage) for uid, usage in self._usage.items()}

    def _figures(self, usage: _Usage) -> dict[str, int]:
        return {"connections": usage.connections, "calls": usage.calls, "running": usage.running,
                "queued": len(usage.queue), "channels": usage.channels, "max_connections": self.max_connections,
                "max_calls": self.max_calls, "max_threads": self.max_threads}
