"""One preparation as a driver's `compile` / `load` sees it (`CompileJob`), the writer that saves its
cache later (`CacheWriter`), and the cache-handle helpers they use."""
from __future__ import annotations

import contextvars
import os
import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from ...hal import CacheHandles, ErrorStatus, ExecutionPreference, Model, NnError, Priority
from ...qos import threads

R = TypeVar("R")

if TYPE_CHECKING:
    from .prepared import DriverPreparedModel


class Claims(list):
    """What a driver's `supported` may return instead of a list of flags: the flags, and what its
    analysis found (`analysis`), which the base hands to the `compile` of the same model content
    (`CompileJob.analysis`) so a preparation right after the claim does not analyse again."""

    def __init__(self, flags, analysis: object) -> None:
        super().__init__(bool(f) for f in flags)
        self.analysis = analysis


class CompileJob:
    """One preparation as the driver's `compile` / `load` sees it: the model (None when loading from a
    cache), preference, priority and deadline, a checkpoint, and the cache writer for later saves."""

    def __init__(self, model: Model | None, preference: ExecutionPreference, priority: Priority,
                 deadline: int | None, writer: Callable[[], "CacheWriter | None"] | None = None, *,
                 uid: int = 0, analysis: object = None) -> None:
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
        #: What the driver's `supported` found for this very model (`Claims.analysis`), when it asked
        #: just before, else None: `compile` need not analyse it again.
        self.analysis = analysis
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


__all__ = ["CacheWriter", "Claims", "CompileJob", "close_handles", "dup_handles", "handles_empty", "within_deadline"]


def within_deadline(deadline: int, fn: Callable[[], R], label: str, abort: Callable[[], None] | None = None,
                    what: str = "") -> R:
    """`fn()` on a worker thread (in the caller's context), waited for until `deadline` at most: past it,
    `abort()` is called and MISSED_DEADLINE_TRANSIENT raised ("`label`: the deadline passed after N ms;
    `what`"), while `fn` goes on until its next checkpoint. `fn`'s own exception is raised as it is."""
    box: dict[str, object] = {}
    context = contextvars.copy_context()

    def work() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    started = time.monotonic_ns()
    thread = threads.start(work, name=f"nnapi-{label.split()[0]}-prepare", stop=abort)
    thread.join(min(threading.TIMEOUT_MAX, max(0.0, (deadline - time.monotonic_ns()) / 1e9)))
    if thread.is_alive():
        if abort is not None:
            abort()
        raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                      f"{label}: the deadline passed after {(time.monotonic_ns() - started) / 1e6:.1f} ms"
                      + (f"; {what}" if what else ""))
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
