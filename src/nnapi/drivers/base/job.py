"""One preparation as a driver's `compile` / `load` sees it (`CompileJob`), the writer that saves its
cache later (`CacheWriter`), and the cache-handle helpers they use."""
from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Callable

from ...hal import CacheHandles, ErrorStatus, ExecutionPreference, Model, NnError, Priority

if TYPE_CHECKING:
    from .prepared import DriverPreparedModel


class CompileJob:
    """One preparation as the driver's `compile` / `load` sees it: the model (None when loading from a
    cache), preference, priority and deadline, a checkpoint, and the cache writer for later saves."""

    def __init__(self, model: Model | None, preference: ExecutionPreference, priority: Priority,
                 deadline: int | None, writer: Callable[[], "CacheWriter | None"] | None = None, *,
                 uid: int = 0) -> None:
        self.model = model
        self.preference = preference
        self.priority = priority
        self.deadline = deadline
        self._writer = writer
        #: The app the preparation is for (what a driver shares between preparations stays within it).
        self.uid = uid
        #: When loading from the app's cache: the SHA-256 the integrity registry vouched for, which
        #: names the cached content (a driver may reuse what it decoded from the same content before).
        self.verified: bytes | None = None
        #: What the driver's `holds` found it already holds of that content (given to `load`, which then
        #: gets no data blobs).
        self.held: object | None = None
        self.deferred = False
        self._aborted = threading.Event()

    def checkpoint(self, where: str = "") -> None:
        """Between units of compile work: MISSED_DEADLINE_TRANSIENT once the deadline has passed or the
        preparation was abandoned."""
        if self._aborted.is_set() or (self.deadline is not None and time.monotonic_ns() > self.deadline):
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                          "preparation: the deadline passed" + (f" before {where}" if where else ""))

    def abort(self) -> None:
        self._aborted.set()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def set_writer(self, writer: Callable[[], "CacheWriter | None"] | None) -> None:
        """Where later saves go (the app's cache files or the caching engine)."""
        self._writer = writer

    def keep_cache(self) -> "CacheWriter | None":
        """A writer that saves the prepared model's artifacts again later (multi-stage compilation);
        None without caching information. The cache is also written at preparation."""
        return self._writer() if self._writer is not None else None

    def defer_cache(self) -> "CacheWriter | None":
        """As `keep_cache`, but the base does not write the cache at preparation: the driver writes it
        with the writer once it has what to save (just-in-time compilation, C11)."""
        writer = self.keep_cache()
        self.deferred = writer is not None
        return writer


class CacheWriter:
    """Duplicated cache handles (or an engine key) kept to save a prepared model's artifacts later (C11)."""

    def __init__(self, save: Callable[[DriverPreparedModel], None], handles: CacheHandles | None = None) -> None:
        self._save = save
        self.handles = handles

    def __call__(self, prepared: DriverPreparedModel) -> None:
        """Save (once); failing to save only means no cache."""
        try:
            self._save(prepared)
        finally:
            self.close()

    def close(self) -> None:
        handles, self.handles = self.handles, None
        if handles is not None:
            close_handles(handles)

    def __del__(self) -> None:
        self.close()


def handles_empty(handles: CacheHandles) -> bool:
    """Whether every cache file is empty (nothing was ever written to them: C3)."""
    try:
        return all(os.fstat(fd).st_size == 0 for fd in (*handles.model_cache, *handles.data_cache))
    except OSError:
        return False


def dup_handles(handles: CacheHandles) -> CacheHandles:
    dups: list[int] = []
    try:
        for fd in (*handles.model_cache, *handles.data_cache):
            dups.append(os.dup(fd))
    except (OSError, TypeError):
        for fd in dups:
            os.close(fd)
        raise
    n = len(handles.model_cache)
    return CacheHandles(tuple(dups[:n]), tuple(dups[n:]))


def close_handles(handles: CacheHandles) -> None:
    for fd in (*handles.model_cache, *handles.data_cache):
        try:
            os.close(fd)
        except OSError:
            pass


__all__ = ["CacheWriter", "CompileJob", "close_handles", "dup_handles", "handles_empty"]
