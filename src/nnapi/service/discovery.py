"""Where services live: sockets `<name>.sock` in the service directory (`NNAPI_SERVICE_DIR`).

Only a socket that nobody but root or the app itself could have put there is a service (`untrusted`):
the socket and every folder above it belong to root or to the app's uid, its folder is writable by
no one else, and a folder above it only with the sticky bit (as /tmp). Anyone else's socket may be a
fake service, which would receive the app's cache files opened read-write: it is skipped, with a
warning. Also here: connecting to a service (`connect_trusted`) and listening as one (`bind`).
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import time
from typing import TYPE_CHECKING

from ..hal import ErrorStatus, NnError

if TYPE_CHECKING:  # (the socket module is imported where a socket is made: finding none needs none)
    import socket

log = logging.getLogger("nnapi.service")

ENV = "NNAPI_SERVICE_DIR"
SUFFIX = ".sock"


def service_dir() -> str | None:
    """The service directory from the environment, or None (no services: drivers run in-process)."""
    return os.environ.get(ENV) or None


def default_socket(name: str, directory: str | None = None) -> str:
    """`<directory>/<name>.sock` (the directory defaults to `NNAPI_SERVICE_DIR`); ValueError without one."""
    directory = directory or service_dir()
    if not directory:
        raise ValueError(f"no socket path: give --socket or set {ENV}")
    return os.path.join(os.path.abspath(directory), name + SUFFIX)


def sockets(directory: str) -> list[str]:
    """The service sockets in `directory`, sorted by name (nothing when it does not exist)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                continue
        except OSError:
            continue
        path = os.path.abspath(path)
        reason = untrusted(path)
        if reason is not None:
            warn_untrusted(path, reason)
            continue
        found.append(path)
    return found


def untrusted(path: str) -> str | None:
    """Why the service socket at `path` may be someone else's (None: only root or this app could have
    put it there; see the module doc)."""
    uid = os.geteuid()
    chain = [os.path.realpath(path)]  # the socket, its folder, and every folder above
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    for k, place in enumerate(chain):
        what = "it" if k == 0 else f"its folder {place}"
        try:
            st = os.stat(place)
        except OSError as e:
            return f"{what} cannot be examined ({e.strerror})"
        if st.st_uid not in (0, uid):
            return f"{what} belongs to uid {st.st_uid}, not to root or to this app's uid {uid}"
        if k and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and (k == 1 or not st.st_mode & stat.S_ISVTX):
            return f"{what} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_warned: set[tuple[str, str]] = set()


def warn_untrusted(path: str, reason: str) -> None:
    """Log that the socket at `path` is not used (once per path and reason in a process)."""
    if (path, reason) not in _warned:
        if len(_warned) < 1024:
            _warned.add((path, reason))
        log.warning("not using the service socket %s: %s (it may be another user's fake service)", path, reason)


def socket_key(path: str) -> tuple[int, int, int] | None:
    """What changes when a service binds its socket anew (device, inode, change time), None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def unavailable(message: str) -> NnError:
    """DEVICE_UNAVAILABLE (Android's DEAD_OBJECT): no service, or no longer one."""
    return NnError(ErrorStatus.DEVICE_UNAVAILABLE, message)


def connect_trusted(path: str, timeout: float) -> socket.socket:
    """A socket connected to the service at `path`, which only root or this app could have put there and
    whose process runs as root or as this app's uid (SO_PEERCRED); DEVICE_UNAVAILABLE naming the path
    and why otherwise (a fake service would get the app's cache files opened read-write)."""
    reason = untrusted(path)
    if reason is not None:
        warn_untrusted(path, reason)
        raise unavailable(f"not connecting to the service socket {path}: {reason}")
    import socket

    from .peer import peer_credentials
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    deadline = time.monotonic() + timeout
    try:
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                sock.connect(path)
                break
            except BlockingIOError:  # its backlog is full (a flood of connections): try again until the timeout
                if time.monotonic() >= deadline:
                    raise TimeoutError("its queue of connections stayed full") from None
                time.sleep(0.005)
        uid, mine = peer_credentials(sock).uid, os.geteuid()
    except OSError as e:
        sock.close()
        raise unavailable(f"cannot connect to the service at {path}: {e.strerror or e}") from None
    if uid not in (0, mine):
        sock.close()
        reason = f"its process runs as uid {uid}, not as root or as this app's uid {mine}"
        warn_untrusted(path, reason)
        raise unavailable(f"not using the service at {path}: {reason}")
    sock.settimeout(None)
    return sock


def bind(path: str) -> socket.socket:
    """Listen on `path`, replacing a stale socket a dead service left (never a live one, never a file)."""
    import socket
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
            raise OSError(errno.EADDRINUSE, f"a service already listens on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # stale: its service is gone
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)  # any app may connect; who it is comes from SO_PEERCRED
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock
