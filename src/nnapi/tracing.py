"""Where the time went: Chrome / Perfetto trace events of imports, compilations, queueing and executions.

    with nnapi.trace("run.json"):
        c = nnapi.Compilation(model).finish()
        c.execute(inputs)

writes a JSON trace (open it in https://ui.perfetto.dev or chrome://tracing) with one track per app
(the process id is the app's uid) and device (a thread per device name): slices for the import, each
partition's preparation (device, cache outcome), the time a request waited in a driver's queue, each
partition's execution, each operation of the reference driver and each sub-model of a compiled one,
and instants for preemptions and deadline aborts. Recording costs nothing when no trace is open:
`span` and `instant` return at once. `--trace FILE.json` on `nnapi run`, `bench` and `cts` does the same.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any, Iterator

__all__ = ["trace", "span", "instant", "active", "Recorder"]


class Recorder:
    """Trace events of one recording (thread-safe; events are appended, written once at the end)."""

    def __init__(self) -> None:
        self.start_ns = time.perf_counter_ns()
        self.events: list[dict[str, Any]] = []
        self._tracks: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def now_us(self) -> float:
        return (time.perf_counter_ns() - self.start_ns) / 1000.0

    def track(self, app: int, device: str) -> tuple[int, int]:
        """(pid, tid) of the track of `device` in app `app`, named once with metadata events."""
        key = (app, device)
        with self._lock:
            tid = self._tracks.get(key)
            if tid is None:
                if all(a != app for a, _ in self._tracks):
                    self.events.append({"name": "process_name", "ph": "M", "pid": app, "tid": 0,
                                        "args": {"name": f"app uid {app}"}})
                tid = self._tracks[key] = len(self._tracks) + 1
                self.events.append({"name": "thread_name", "ph": "M", "pid": app, "tid": tid,
                                    "args": {"name": device}})
        return app, tid

    def add(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            events = list(self.events)
        return {"traceEvents": events, "displayTimeUnit": "ms"}


_recorder: Recorder | None = None
_recorder_lock = threading.Lock()


def active() -> bool:
    """True while a trace is being recorded."""
    return _recorder is not None


def _app(app: int | None) -> int:
    if app is not None:
        return int(app)
    from .hal.identity import current_client
    return current_client()[0]


@contextlib.contextmanager
def span(name: str, category: str, device: str = "runtime", app: int | None = None,
         **args: Any) -> Iterator[dict[str, Any]]:
    """A complete ("X") slice on the track of `device` in app `app` (the caller's uid by default). The
    yielded dict takes arguments known only at the end (a cache outcome, a status)."""
    recorder = _recorder
    if recorder is None:
        yield args
        return
    pid, tid = recorder.track(_app(app), device)
    start = recorder.now_us()
    try:
        yield args
    except BaseException as e:
        args.setdefault("error", f"{type(e).__name__}: {e}"[:200])
        raise
    finally:
        recorder.add({"name": name, "cat": category, "ph": "X", "ts": start, "dur": recorder.now_us() - start,
                      "pid": pid, "tid": tid, "args": _plain(args)})


def complete(name: str, category: str, start_us: float, end_us: float, device: str = "runtime",
             app: int | None = None, **args: Any) -> None:
    """A slice whose start and end were measured elsewhere (a wait in a queue), in trace microseconds."""
    recorder = _recorder
    if recorder is None:
        return
    pid, tid = recorder.track(_app(app), device)
    recorder.add({"name": name, "cat": category, "ph": "X", "ts": start_us, "dur": max(0.0, end_us - start_us),
                  "pid": pid, "tid": tid, "args": _plain(args)})


def now_us() -> float | None:
    """The trace clock (microseconds since the recording started), None when not recording."""
    recorder = _recorder
    return None if recorder is None else recorder.now_us()


def instant(name: str, category: str, device: str = "runtime", app: int | None = None, **args: Any) -> None:
    """A point event ("i") on a track: a preemption, a deadline abort."""
    recorder = _recorder
    if recorder is None:
        return
    pid, tid = recorder.track(_app(app), device)
    recorder.add({"name": name, "cat": category, "ph": "i", "s": "t", "ts": recorder.now_us(), "pid": pid,
                  "tid": tid, "args": _plain(args)})


def _plain(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in args.items()}


@contextlib.contextmanager
def trace(path: str | os.PathLike | None = None) -> Iterator[Recorder]:
    """Record trace events while the block runs, then write them to `path` (JSON) if given. One
    recording at a time (a nested `trace` is an error)."""
    global _recorder
    with _recorder_lock:
        if _recorder is not None:
            raise RuntimeError("a trace is already being recorded")
        recorder = _recorder = Recorder()
    try:
        yield recorder
    finally:
        with _recorder_lock:
            _recorder = None
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(recorder.to_json(), f)
