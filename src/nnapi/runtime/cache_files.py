"""Per-partition cache tokens and cache-file names (Android's TokenHasher and getCacheHandles).

The device token hashes the app token, the partition's operation indexes (compound plans),
the device name and version, preference and priority, and a fingerprint of the partition's
content, so an app that reuses a token for a changed model gets a miss, never a stale hit.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import time
from typing import Callable

from dataclasses import dataclass

from .. import hal
from ..caching import model_fingerprint
from ..hal import BYTE_SIZE_OF_CACHE_TOKEN, CacheHandles
from ..memory import map_pool_kept


@dataclass(frozen=True)
class CacheOutcome:
    """What happened to one partition's cache: `hit`, `miss`, `fleet` (prepared from a verified fleet
    artifact, the signer in the reason), `disabled` or `rejected`, and why."""

    device: str
    outcome: str
    reason: str = ""


#: The suffix of the importer's memo files in an app cache folder (`importers.tflite.remembered`).
IMPORT_MEMO_SUFFIX = ".tflite-import"
#: Checks of the other files an app cache folder holds, by suffix: why such a file would never be used
#: again (None: it would be). Their owners register them (the import memo's module registers its own),
#: and `nnapi cache` lists, verifies and prunes the files of each registered suffix.
FILE_CHECKS: dict[str, Callable[[str], str | None]] = {}

#: NDK priority codes, which Android hashes into the token.
NDK_PRIORITY = {0: 90, 1: 100, 2: 110}


def content_fingerprint(model: hal.Model) -> bytes:
    """A fast (xxh3-128) hash of the partition's structure and constant values, not of pool handles.
    The app's weights are hashed at every compilation, so their memory stays mapped (`map_pool_kept`:
    a fresh mapping of 14 MB costs 1 ms of page faults each time); the structure of a finished model
    never changes, so it is hashed once per model object."""
    return model_fingerprint(model, map_pool_kept, fixed=True)


def device_token(app_token: bytes, operations: list[int] | None, device_name: str, device_version: str,
                 preference: int, priority: int, fingerprint: bytes) -> bytes:
    """The 32-byte token the driver sees for one partition (Android's TokenHasher, plus the fingerprint).

    SHA-256 of the app token; for partitioned plans each operation as (model index, operation index);
    the device name and version; preference and NDK priority as int32; then the content fingerprint.
    """
    h = hashlib.sha256(app_token)
    for index in operations or ():
        h.update(struct.pack("<II", 0, index))
    h.update(device_name.encode())
    h.update(device_version.encode())
    h.update(struct.pack("<ii", int(preference), NDK_PRIORITY[int(priority)]))
    h.update(fingerprint)
    digest = h.digest()
    assert len(digest) == BYTE_SIZE_OF_CACHE_TOKEN
    return digest


def base_name(token: bytes) -> str:
    """64 letters A-P, low nibble first, as Android names cache files."""
    return "".join(chr(ord("A") + (b & 0xF)) + chr(ord("A") + (b >> 4)) for b in token)


def token_from_name(name: str) -> bytes | None:
    """The token a cache file's base name encodes (inverse of `base_name`), or None if it is not one."""
    if len(name) < 64 or any(not "A" <= c <= "P" for c in name[:64]):
        return None
    return bytes((ord(name[i]) - 65) | ((ord(name[i + 1]) - 65) << 4) for i in range(0, 64, 2))


def cache_paths(cache_dir: str, token: bytes, counts: tuple[int, int]) -> tuple[list[str], list[str]]:
    base = os.path.join(cache_dir, base_name(token))
    return ([f"{base}1{i}" for i in range(counts[0])], [f"{base}2{i}" for i in range(counts[1])])


def untrusted_folder(path: str) -> str | None:
    """Why the cache folder `path` cannot be trusted, or None: a folder that another user owns, or may
    write to, lets that user plant cache files under names it can work out from its own compile of a
    public model (the files would then be another app's to vouch for). Root's folders are trusted."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cache folder {path} cannot be read: {e.strerror or e}"
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return f"cache folder {path} belongs to uid {st.st_uid}, not to this app (uid {uid}): not used"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"cache folder {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}): not used; "
                "give the app a private one (mode 700)")
    return None


def _foreign(st: os.stat_result) -> str | None:
    """Why an open cache file is not this app's own, or None."""
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this app"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open_regular(path: str, create: bool) -> int:
    """Open one cache file read-write without following a link (C8), only if it is a regular file.

    With `create`, a missing file is created, and an entry that is not a regular file of this app's own
    (a planted symlink, a fifo, another user's file) is replaced by a new empty file: the entry is ours,
    whatever it points at is not touched. OSError when the file cannot be used."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                raise
            try:
                return _exclusive(path)
            except FileExistsError:  # another compilation created it first: open that one
                continue
        except OSError as e:
            if not create or e.errno not in (errno.ELOOP, errno.ENXIO):
                raise
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise
            os.unlink(path)  # a link or a special file named like our cache file
            continue
        st = os.fstat(fd)
        foreign = _foreign(st)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and foreign is None:
            os.set_blocking(fd, True)
            return fd
        os.close(fd)  # not a regular file, a hard link to some other file, or another user's: not ours
        if not create:
            raise OSError(errno.EPERM if foreign else errno.EINVAL,
                          f"{path} {foreign}" if foreign else f"{path} is not a regular file of its own")
        os.unlink(path)
    raise OSError(errno.EAGAIN, f"{path} keeps changing")


def _exclusive(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_CREAT | os.O_EXCL, 0o600)


def open_cached(paths: tuple[list[str], list[str]]) -> CacheHandles | str:
    """Open every existing cache file read-write for a hit, as `open_cache_files`; else why not."""
    fds: list[int] = []
    try:
        for path in (*paths[0], *paths[1]):
            fds.append(_open_regular(path, create=False))
    except OSError as e:
        for fd in fds:
            os.close(fd)
        return "cache files missing" if isinstance(e, FileNotFoundError) else f"cache file not used: {e.strerror}"
    n = len(paths[0])
    return CacheHandles(tuple(fds[:n]), tuple(fds[n:]))


def open_cache_files(paths: tuple[list[str], list[str]], create: bool) -> CacheHandles | None:
    """Open every cache file read-write (C8), never through a link and only regular files; None if any is
    missing (hit path) or cannot be created or used (then the compilation runs without its cache)."""
    fds: list[int] = []
    try:
        for path in (*paths[0], *paths[1]):
            fds.append(_open_regular(path, create))
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    n = len(paths[0])
    return CacheHandles(tuple(fds[:n]), tuple(fds[n:]))


def mark_used(handles: CacheHandles) -> None:
    """Set the access time of cache files to now (their modification time kept), so that `nnapi cache prune
    --max-size` can drop the least recently used entries whatever the file system's atime policy."""
    now = time.time_ns()
    for fd in (*handles.model_cache, *handles.data_cache):
        try:
            os.utime(fd, ns=(now, os.fstat(fd).st_mtime_ns))
        except OSError:
            pass


def close_cache_files(handles: CacheHandles | None) -> None:
    if handles is None:
        return
    for fd in (*handles.model_cache, *handles.data_cache):
        try:
            os.close(fd)
        except OSError:
            pass
