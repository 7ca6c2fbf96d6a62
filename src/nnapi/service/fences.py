"""Sync fences in the service, and its one waiting thread.

A fence an app sends with `execute_fenced` must be a sync fence: an eventfd (what the runtime makes,
`Execution.get_sync_fence_fd`) or a kernel sync_file. Anything else is INVALID_ARGUMENT naming it; a
directory or a file polls readable at once and would pass for an already signalled fence.

No service thread waits for a fence: a call whose fences are not all signalled is parked with the
`Waiter`, one thread polling every parked fence (epoll), which hands the call back to the service
once they are (or its deadline passes), and ends it if its connection goes. The same thread keeps
the service's timers (a connection's hello deadline).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import stat
import threading
import time
from typing import Callable, Iterable

from ..hal import ErrorStatus, NnError, invalid

log = logging.getLogger("nnapi.service")

#: What /proc/self/fd/N reads for a sync fence: an eventfd, or a kernel sync_file.
SYNC_FENCES = ("anon_inode:[eventfd]", "anon_inode:sync_file")


def _describe(fd: int, target: str) -> str:
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        return f"unreadable ({e.strerror})"
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a pipe"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return target or "of an unknown kind"


def check_sync_fence(fd: int, what: str) -> None:
    """INVALID_ARGUMENT naming `what` unless `fd` is an open sync fence (an eventfd or a sync_file)."""
    if fd < 0:
        raise invalid(f"{what} is not a sync fence (no descriptor: {fd})")
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as e:
        raise invalid(f"{what} is not a sync fence (descriptor {fd}: {e.strerror})") from None
    if target not in SYNC_FENCES:
        raise invalid(f"{what} is not a sync fence (an eventfd or a sync_file): it is {_describe(fd, target)}")


def signalled(fd: int) -> bool:
    """Whether sync fence `fd` is signalled now (readable)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _Wait:
    """One parked call: the fences it still waits for, its deadline and what ends it."""

    __slots__ = ("owner", "pending", "ready", "cancel", "over")

    def __init__(self, owner: object, pending: set[int], ready: Callable[[NnError | None], None],
                 cancel: Callable[[], None]) -> None:
        self.owner = owner
        self.pending = pending
        self.ready = ready
        self.cancel = cancel
        self.over = False


class Waiter:
    """The service's waiting thread: parked fenced calls and timers (see the module doc). Callbacks run
    on its thread and must not block (they hand work to service threads)."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._lock = threading.Lock()
        self._by_fd: dict[int, _Wait] = {}
        self._by_owner: dict[int, set[_Wait]] = {}  # id(owner) -> its waits
        self._timers: list[tuple[float, int, object]] = []  # (monotonic s, seq, _Wait or callable)
        self._seq = itertools.count()
        self._floor = 1024  # the timers are swept of ended waits when they grow past twice this
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="nnapi-service-waiter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._poke()

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except OSError:
            pass

    @property
    def parked(self) -> int:
        """Calls waiting for their fences now."""
        with self._lock:
            return sum(len(waits) for waits in self._by_owner.values())

    # --- parking ---------------------------------------------------------------------------------------
    def park(self, owner: object, fences: Iterable[int], deadline_s: float | None,
             ready: Callable[[NnError | None], None], cancel: Callable[[], None]) -> None:
        """Call `ready(None)` once every fence is signalled, `ready(MISSED_DEADLINE_TRANSIENT)` if the
        deadline (monotonic seconds) passes first, or `cancel()` if `drop(owner)` comes first. The
        fences stay open (and the caller's) until then; INVALID_ARGUMENT if one cannot be polled."""
        wait = _Wait(owner, set(fences), ready, cancel)
        with self._lock:
            registered = []
            try:
                for fd in wait.pending:
                    self._epoll.register(fd, select.EPOLLIN)
                    registered.append(fd)
                    self._by_fd[fd] = wait
            except OSError as e:
                for fd in registered:
                    self._forget(fd)
                raise invalid(f"execute_fenced: a sync fence cannot be waited on: {e.strerror}") from None
            self._by_owner.setdefault(id(owner), set()).add(wait)
            if deadline_s is not None:
                self._timer(deadline_s, wait)
                if len(self._timers) > 2 * self._floor:  # (waits that ended early keep their deadline)
                    self._timers = [t for t in self._timers if not (isinstance(t[2], _Wait) and t[2].over)]
                    heapq.heapify(self._timers)
                    self._floor = max(1024, len(self._timers))

    def at(self, when_s: float, callback: Callable[[], None]) -> None:
        """Call `callback()` on the waiting thread at `when_s` (monotonic seconds)."""
        with self._lock:
            self._timer(when_s, callback)

    def _timer(self, when_s: float, item: object) -> None:
        """(under the lock) A timer; the thread is woken only when it is the next one (new fences need no
        waking: epoll reports them to the thread waiting on it)."""
        heapq.heappush(self._timers, (when_s, next(self._seq), item))
        if self._timers[0][2] is item:
            self._poke()

    def drop(self, owner: object) -> list[Callable[[], None]]:
        """End every wait of `owner` (a connection that went): their `cancel`s, for the caller to run."""
        with self._lock:
            waits = self._by_owner.pop(id(owner), set())
            for wait in waits:
                self._end(wait)
        return [wait.cancel for wait in waits]

    def _forget(self, fd: int) -> None:
        self._by_fd.pop(fd, None)
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):
            pass

    def _end(self, wait: _Wait) -> None:
        """(under the lock) The wait is over: its fences leave the poller (the caller closes them later)."""
        wait.over = True
        for fd in wait.pending:
            self._forget(fd)
        wait.pending = set()

    def _finish(self, wait: _Wait) -> None:
        """(under the lock) Over, and no longer the owner's."""
        self._end(wait)
        waits = self._by_owner.get(id(wait.owner))
        if waits is not None:
            waits.discard(wait)
            if not waits:
                del self._by_owner[id(wait.owner)]

    # --- the thread ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            with self._lock:
                timeout = -1.0 if not self._timers else max(0.0, self._timers[0][0] - time.monotonic())
            try:
                events = self._epoll.poll(timeout, 1024)
            except InterruptedError:
                continue
            due: list[Callable[[], None]] = []
            with self._lock:
                for fd, _ in events:
                    if fd == self._wake_r:
                        try:
                            os.read(self._wake_r, 4096)
                        except OSError:
                            pass
                        continue
                    wait = self._by_fd.get(fd)
                    if wait is None or not signalled(fd):  # (a number reused since the event was reported)
                        continue
                    self._forget(fd)
                    wait.pending.discard(fd)
                    if not wait.pending:
                        self._finish(wait)
                        due.append(lambda w=wait: w.ready(None))
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, _, item = heapq.heappop(self._timers)
                    if isinstance(item, _Wait):
                        if not item.over:
                            self._finish(item)
                            due.append(lambda w=item: w.ready(NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                                                      "deadline passed while waiting for fences")))
                    else:
                        due.append(item)
            for callback in due:
                try:
                    callback()
                except Exception:
                    log.exception("a service timer failed")
