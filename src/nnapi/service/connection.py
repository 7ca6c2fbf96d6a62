"""The client's connection to a service: its transport (`transport`), the version handshake, and the
calls declared in `protocol`, encoded by their declaration (`Connection.call`). Service objects seen
from the app (`Remote`) are freed with their proxies; the app's shared memory the service may keep
mapped is tracked, so that sealing or freeing it first has the service let go.
"""
from __future__ import annotations

import functools
import os
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..hal import MemoryHandle, MemoryPool, NnError, invalid
from ..memory import MAPPED_ONCE_BYTES, file_identity, on_forget
from . import codec, protocol
from .codec import CALL, PROTOCOL_VERSION, Encoder, check_int
from .discovery import connect_trusted
from .protocol import Method
from .transport import LINGER, Transport
from .wire import close_fds

if TYPE_CHECKING:
    from .proxies import ServiceDevice

__all__ = ["CONNECT_TIMEOUT", "Connection", "LINGER", "Remote", "hal"]

#: Seconds to wait for a service to answer `hello` when connecting.
CONNECT_TIMEOUT = 10.0


class Connection(Transport):
    """One connection to the service at `path` (see the module doc); DEVICE_UNAVAILABLE when no trusted
    service answers there."""

    def __init__(self, path: str, timeout: float = CONNECT_TIMEOUT) -> None:
        path = os.path.abspath(path)
        self._releases: list[int] = []
        self._files: set[tuple[int, int]] = set()  # app memory the service may keep mapped (dev, ino)
        self._forgets: list[list[int]] = []        # freed memory of those, told with the next call
        self.pid: int | None = None
        super().__init__(connect_trusted(path, timeout), path)
        on_forget(self._forget_memory)
        try:
            self.hello: dict = self.call(protocol.HELLO, 0, [PROTOCOL_VERSION], timeout=timeout)
        except NnError:
            self.close()
            raise
        self.pid = self.hello.get("pid")
        self.label = f"service at {self.path} (pid {self.pid})"

    def call(self, method: Method | str, target: int, args: Sequence = (), enc: Encoder | None = None, *,
             timeout: float | None = None,
             on_event: Callable[[Any, NnError | None], None] | None = None, usual_ns: int = 0) -> Any:
        """Call `method` on object `target` (0: the device) and wait for the answer (NnError on failure).
        A declared call (`protocol.Method`) takes its HAL values in `args`, encodes them by its
        declaration and decodes its answer so; a name sends `args` as they are (tests, raw calls).
        `usual_ns`, how long such a call usually takes, lets the wait poll when the answer is due."""
        return self.call_fds(method, target, args, enc, timeout=timeout, on_event=on_event, usual_ns=usual_ns)[0]

    def call_fds(self, method: Method | str, target: int, args: Sequence = (), enc: Encoder | None = None, *,
                 timeout: float | None = None,
                 on_event: Callable[[Any, NnError | None], None] | None = None,
                 usual_ns: int = 0) -> tuple[Any, list[int]]:
        """As `call`, also returning the descriptors that came with the answer (the caller owns them)."""
        spec = method if isinstance(method, Method) else None
        if spec is not None:
            enc = enc if enc is not None else Encoder()
            try:
                args = spec.encode(enc, args)
            except BaseException:
                enc.close()
                raise
            method = spec.name
        result, fds = self.exchange(method, target, args, enc, timeout=timeout, on_event=on_event,
                                    usual_ns=usual_ns)
        if spec is None:
            return result, fds
        try:
            return spec.decode_result(result), fds
        except BaseException:
            close_fds(fds)
            raise

    def notify(self, spec: Method, target: int, args: Sequence) -> None:
        """A declared call that wants no answer (request id 0, no descriptors); ignored when dead."""
        if self.alive:
            try:
                self.send(codec.pack([CALL, 0, spec.name, target, spec.encode(Encoder(), args)]))
            except (OSError, NnError):
                pass

    def release(self, oid: int) -> None:
        """Free a service object; sent with the next call (safe from finalizers on any thread)."""
        self._releases.append(oid)

    def sent_pools(self, pools: Sequence[MemoryPool], min_bytes: int = MAPPED_ONCE_BYTES) -> None:
        """Note the app's shared memory a request sends that the service may keep mapped between calls,
        so that sealing or freeing it first has the service let go (`_forget_memory`)."""
        for pool in pools:
            handle = pool.handle
            if handle is not None and handle.size >= min_bytes and handle.name in ("ashmem", "mmap_fd"):
                ident = file_identity(handle)
                if ident is not None:
                    self._files.add(ident)

    def _forget_memory(self, handle: MemoryHandle, wait: bool) -> None:
        """Memory being sealed (`wait`: the service lets go of it before this returns) or freed (told
        with the next call: this may run in a finalizer, on any thread)."""
        if not self._files or not self.alive:
            return
        ident = file_identity(handle)
        if ident is None or ident not in self._files:
            return
        self._files.discard(ident)
        if wait:
            self.call(protocol.FORGET_MEMORY, 0, [[list(ident)]], timeout=CONNECT_TIMEOUT)
        else:
            self._forgets.append(list(ident))

    def settle(self) -> None:
        """Have the service let go of the memory freed since the last call, now: a call on a channel of its
        own (`channel_end`) would not wait for the connection's next call to tell it."""
        if self._forgets and self.alive:
            forgets, self._forgets = self._forgets, []
            self.call(protocol.FORGET_MEMORY, 0, [forgets], timeout=CONNECT_TIMEOUT)

    def before_send(self) -> list[bytes]:
        """The releases and forgotten memory gathered since the last call, told ahead of the next one."""
        early = []
        if self._releases:
            releases, self._releases = self._releases, []
            early.append(codec.pack([CALL, 0, protocol.RELEASE.name, 0, protocol.RELEASE.encode(Encoder(), releases)]))
        if self._forgets:
            forgets, self._forgets = self._forgets, []
            early.append(codec.pack([CALL, 0, protocol.FORGET_MEMORY.name, 0, [forgets]]))
        return early


class Remote:
    """A service object owned through this connection; released when the proxy goes away."""

    def __init__(self, device: "ServiceDevice", oid: Any) -> None:
        self.device = device
        self.oid = check_int(oid, "object id", 1)
        self._finalizer = weakref.finalize(self, device.connection.release, self.oid)

    def release(self) -> None:
        """Free the service's object now (it is freed anyway when this proxy is collected)."""
        self._finalizer()


def hal(method: Callable) -> Callable:
    """A proxy method: arguments that cannot even be sent (a None handle, a wrong type) are
    INVALID_ARGUMENT, as a driver would answer, never another exception."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (AttributeError, TypeError, ValueError, OverflowError, KeyError, IndexError) as e:
            raise invalid(f"{method.__name__}: cannot send the arguments: {type(e).__name__}: {e}") from None

    return call
