"""Who is calling a driver: (uid, pid) of the client process.

A service handling a remote caller's call sets it with `calling_client`; in-process callers are this
process. The driver base, memory domains, tracing, the service and the kit all read it, so it lives
here, below all of them."""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

_client: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("nnapi_client", default=None)


def current_client() -> tuple[int, int]:
    """The calling client: (uid, pid) set by `calling_client`, else this process."""
    return _client.get() or (os.getuid(), os.getpid())


@contextlib.contextmanager
def calling_client(uid: int, pid: int) -> Iterator[None]:
    """Run driver calls on behalf of client (uid, pid), as a service does for a remote caller."""
    token = _client.set((int(uid), int(pid)))
    try:
        yield
    finally:
        _client.reset(token)
