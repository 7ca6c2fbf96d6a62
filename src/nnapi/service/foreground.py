"""LOW work of the driver gives way to the service's calls (`qos.Scheduler.foreground`)."""
from __future__ import annotations

import contextlib
import select
import threading
from typing import Any, Iterator

from ..hal import Priority


class Foreground:
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
