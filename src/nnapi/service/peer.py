"""Who is on the other end of a Unix socket: the kernel's SO_PEERCRED (pid, uid, gid at connect time).

The service trusts only this for a caller's identity: it cannot be forged by the caller, unlike
anything the caller writes into a message.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("iII")  # struct ucred: pid_t pid, uid_t uid, gid_t gid


@dataclass(frozen=True)
class Credentials:
    """A connected peer's process id, user id and group id."""

    pid: int
    uid: int
    gid: int


def peer_credentials(sock: socket.socket) -> Credentials:
    """The credentials the kernel recorded for the process that connected `sock`."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Credentials(pid, uid, gid)
