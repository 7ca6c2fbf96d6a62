"""Cache-file I/O on descriptors handed over by the runtime.

Writers truncate first and write from offset 0 (never trusting the fd position) under an
exclusive `fcntl` lock; readers copy the whole file into memory under a shared lock, so a reader
never sees a half-written file written by a cooperating writer. A file changed behind the locks
is caught by the integrity check of its content.
"""
from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import stat
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from ..hal import ErrorStatus, NnError

#: Alignment of buffers read back from cache files (a cache line; what XLA's CPU client aliases).
ALIGN = 64


#: How long a cache lock is waited for when the caller has no deadline (a cooperating writer holds
#: one for the time it takes to write the files; anyone else holding it longer costs a miss, not a hang).
LOCK_WAIT_S = 2.0
#: How a lock not had in time starts its error: a miss, not a rejection.
BUSY = "cache busy"


@contextmanager
def locked(fds: Sequence[int], exclusive: bool, deadline_ns: int | None = None) -> Iterator[None]:
    """Hold shared (readers) or exclusive (writers) locks on every fd, taken in a fixed order. Each is
    taken without blocking and retried until `deadline_ns` (monotonic; default LOCK_WAIT_S from now):
    whoever else holds a lock, a file's lock never keeps a compilation past its deadline. GENERAL_FAILURE
    starting with BUSY when the locks cannot be had in time."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    end = deadline_ns if deadline_ns is not None else time.monotonic_ns() + int(LOCK_WAIT_S * 1e9)
    taken: list[int] = []
    try:
        for fd in _lock_order(fds):
            pause = 0.0005
            while True:
                try:
                    fcntl.flock(fd, mode)
                    break
                except BlockingIOError:
                    left = (end - time.monotonic_ns()) / 1e9
                    if left <= 0:
                        raise NnError(ErrorStatus.GENERAL_FAILURE,
                                      f"{BUSY}: another process held the cache files' lock for longer than "
                                      f"{'the deadline allowed' if deadline_ns is not None else f'{LOCK_WAIT_S:g} s'}")
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, 0.02)
            taken.append(fd)
        yield
    finally:
        for fd in taken:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass


def _lock_order(fds: Sequence[int]) -> list[int]:
    """One fd per file, ordered by file identity (device, inode): every process and thread then takes
    the locks of a set of files in the same order, whatever its descriptor numbers are (no deadlock)."""
    by_file: dict[tuple[int, int], int] = {}
    for fd in fds:
        st = os.fstat(fd)
        by_file.setdefault((st.st_dev, st.st_ino), fd)
    return [by_file[k] for k in sorted(by_file)]


def check_fds(fds: Sequence[int], what: str) -> None:
    """Every descriptor must be an open regular file (GENERAL_FAILURE naming the slot otherwise)."""
    for i, fd in enumerate(fds):
        if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{what} {i}: {fd!r} is not a file descriptor")
        try:
            mode = os.fstat(fd).st_mode
        except OSError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{what} {i}: not a usable file descriptor ({e})") from None
        if not stat.S_ISREG(mode):
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{what} {i}: not a regular file")


def check_read_write(fds: Sequence[int], what: str) -> None:
    """Cache files must be regular files open read-write (C8); anything else is GENERAL_FAILURE (VTS requires
    exactly that)."""
    check_fds(fds, what)
    for i, fd in enumerate(fds):
        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{what} {i}: not a usable file descriptor ({e})") from None
        if mode != os.O_RDWR:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{what} {i}: file is not open for reading and writing")


#: Buffers from this size on get their pages in one call, as small pages (`_prefault`).
PREFAULTED_BYTES = 1 << 20


def aligned_buffer(size: int) -> memoryview:
    """A fresh writable buffer of `size` bytes starting on an ALIGN-byte boundary; one of
    PREFAULTED_BYTES and more has its pages before anything is written to it (`_prefault`)."""
    raw = np.empty(size + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    if size >= PREFAULTED_BYTES:
        _prefault(raw.ctypes.data, raw.nbytes)
    return memoryview(raw[start:start + size])


_PAGE = mmap.PAGESIZE
_MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", 15)
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # (Linux 5.14)
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _madvise = _libc.madvise
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _mincore = _libc.mincore
    _mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
except (OSError, AttributeError):
    _madvise = _mincore = None


def _resident(first: int, length: int) -> bool:
    """Whether every page of the page-aligned [first, first + length) is in memory already (`mincore`)."""
    if _mincore is None:
        return False
    pages = np.zeros(length // _PAGE, np.uint8)
    return _mincore(first, length, pages.ctypes.data) == 0 and bool(np.all(pages & 1))


def _prefault(address: int, length: int) -> None:
    """Give the whole pages of [address, address + length) small pages, faulted in by one call.

    numpy asks for transparent huge pages on large arrays, and a huge-page fault may first wait for
    the kernel to compact memory: reading a 14 MB cache file took 3.4-7.7 ms, and 26-32 ms now and
    then. Small pages faulted in at once take a steady 5-6 ms. Memory numpy reuses from its heap is
    left as it is, its pages all there (asking again for small pages cost 0.6 ms of a 4.6 ms cached
    prepare). Best effort: an older kernel faults on demand."""
    if _madvise is None:
        return
    first = -(-address // _PAGE) * _PAGE
    end = (address + length) // _PAGE * _PAGE
    if end > first and not _resident(first, end - first):
        _madvise(first, end - first, _MADV_NOHUGEPAGE)
        _madvise(first, end - first, _MADV_POPULATE_WRITE)


def read_file(fd: int, limit: int) -> memoryview:
    """The whole content of `fd` from offset 0 (at most `limit` bytes, else GENERAL_FAILURE), read
    into a fresh 64-byte aligned buffer: constants laid out aligned in a data cache can then be
    used in place (numpy views, zero-copy device arrays) without another copy."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"cache file of {size} bytes exceeds the limit of {limit}")
    view = aligned_buffer(size)
    offset = 0
    while offset < size:
        n = os.preadv(fd, [view[offset:offset + (1 << 24)]], offset)
        if not n:  # the file shrank under us: what was read
            return view[:offset]
        offset += n
    return view


def write_file(fd: int, data: bytes | memoryview) -> None:
    """Replace the content of `fd`: truncate, then write everything from offset 0."""
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:offset + (1 << 24)], offset)
