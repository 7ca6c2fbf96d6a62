"""The kit's machinery: checks, their outcomes, and guarded calls into the driver under test.

A check is one behaviour of `VTS-BEHAVIOURS.md` applied to one driver: it passes (returns), fails
(`Fail`: what the driver did instead) or is skipped (`Skip`: a feature the driver does not claim).
Every call into the driver goes through `Kit.call`, which runs it on a worker thread with a time
limit: a call that hangs fails its check after a bounded wait (the stuck thread is abandoned), and a
plain Python exception is a failure of the driver, never an error of the kit.
"""
from __future__ import annotations

import contextvars
import hashlib
import os
import queue
import shutil
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ...hal import ErrorStatus, IDevice, NnError
from ...runtime import Device

#: The suites, in the order they run.
SUITES = ("caching", "memory", "domains", "qos", "validation", "execution", "vectors")


class Fail(Exception):
    """The driver did not behave: the message says what it did instead."""


class Skip(Exception):
    """The check needs a feature the driver does not claim; the message says which."""


class DriverCrash(Fail):
    """The driver raised something other than `NnError`."""


class DriverHang(Fail):
    """A driver call (or a callback it owed) did not come back within the kit's time limit."""


@dataclass
class Check:
    """One check: `id` is "suite/name[param]"; `behaviour` names the section and test it mirrors."""

    id: str
    suite: str
    behaviour: str
    run: Callable[["Kit"], None]


@dataclass
class CheckResult:
    id: str
    suite: str
    behaviour: str
    status: str             # passed | failed | skipped
    message: str = ""
    seconds: float = 0.0
    detail: str = ""        # a traceback, when the check stopped on something unexpected

    def describe(self) -> str:
        """One line for people: the check, the behaviour it mirrors and what happened."""
        if self.status == "passed":
            return f"PASSED {self.id}"
        head = "FAILED" if self.status == "failed" else "SKIPPED"
        return f"{head} {self.id} [{self.behaviour}]: {self.message}"


def status_name(status: ErrorStatus | None) -> str:
    return "NONE" if status is None else getattr(status, "name", str(status))


def names(statuses: Iterable[ErrorStatus]) -> str:
    return " or ".join(status_name(s) for s in statuses)


class _Worker:
    """A daemon thread that runs driver calls one at a time (abandoned if a call never returns)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="nnapi-vts-driver-call").start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        """End the thread once it is idle (a thread stuck in a driver call stays stuck)."""
        self._jobs.put(None)


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


@dataclass
class Options:
    """How the kit runs: `quick` samples the corpus and repeats less; `timeout` bounds every driver
    call and every awaited callback (seconds); `vectors` is the test-vector corpus (None: not found)."""

    quick: bool = False
    timeout: float = 60.0
    vectors: Path | None = None
    seed: int = 0


class Kit:
    """The driver under test and what checks share: guarded calls, options, a scratch directory and
    a memo of prepared models (built once per run)."""

    def __init__(self, device: Device, options: Options | None = None) -> None:
        self.device = device
        self.driver: IDevice = device.driver
        self.options = options or Options()
        self._worker = _Worker()
        self._workers = [self._worker]
        weakref.finalize(self, _stop_all, self._workers)   # a kit never closed still ends its thread
        self._memo: dict[Any, Any] = {}
        self._tmp: Path | None = None
        self._cleanup: list[Callable[[], None]] = []
        self._nonce = os.urandom(16)

    # --- settings -------------------------------------------------------------------------------
    @property
    def quick(self) -> bool:
        return self.options.quick

    @property
    def timeout(self) -> float:
        return self.options.timeout

    @property
    def name(self) -> str:
        return self.device.name

    # --- guarded driver calls ---------------------------------------------------------------------
    def call(self, what: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None,
             **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on the worker thread, in the caller's context (its client identity).

        NnError passes through (the check judges the status); any other exception is a `DriverCrash`;
        no answer within the time limit is a `DriverHang`.
        """
        limit = self.timeout if timeout is None else timeout
        box: dict[str, Any] = {}
        done = threading.Event()
        context = contextvars.copy_context()

        def job() -> None:
            try:
                box["value"] = context.run(fn, *args, **kwargs)
            except BaseException as e:  # handed to the waiting check below
                box["error"] = e
            finally:
                done.set()

        self._worker.submit(job)
        if not done.wait(limit):
            self._worker = _Worker()  # the old one is stuck inside the driver
            self._workers.append(self._worker)
            raise DriverHang(f"{what} did not return within {limit:g} s (a driver call must never hang)")
        error = box.get("error")
        if error is None:
            return box.get("value")
        if isinstance(error, NnError):
            raise error
        raise DriverCrash(f"{what} raised {type(error).__name__}: {error} (a driver reports every failure as "
                          "NnError with an ErrorStatus)") from error

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
                ) -> tuple[ErrorStatus, Any, str]:
        """(NONE, result, "") or (the NnError's status, None, its message)."""
        try:
            return ErrorStatus.NONE, self.call(what, fn, *args, **kwargs), ""
        except NnError as e:
            return e.status, None, e.message

    def wait(self, event: threading.Event, what: str, timeout: float | None = None) -> None:
        """Wait for something the driver owes (a callback); a `DriverHang` after the time limit."""
        limit = self.timeout if timeout is None else timeout
        if not event.wait(limit):
            raise DriverHang(f"{what} never came (waited {limit:g} s)")

    def token(self, label: str) -> bytes:
        """A 32-byte cache token unique to `label` and this run (a driver's integrity registry outlives
        runs, and Android's token is unique per model: reusing one across models is the app's collision)."""
        return hashlib.sha256(self._nonce + label.encode()).digest()

    # --- shared state -----------------------------------------------------------------------------
    def memo(self, key: Any, factory: Callable[[], Any]) -> Any:
        """`factory()` once per run; a failure is remembered and raised again for every later use."""
        if key not in self._memo:
            try:
                self._memo[key] = ("ok", factory())
            except (Fail, Skip, NnError) as e:
                self._memo[key] = ("error", e)
        kind, value = self._memo[key]
        if kind == "error":
            raise value
        return value

    def forget(self, key: Any) -> None:
        self._memo.pop(key, None)

    @property
    def tmp(self) -> Path:
        """A scratch directory for this run (cache files), removed at `close`."""
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="nnapi-vts-"))
        return self._tmp

    def scratch(self, name: str) -> Path:
        """A fresh empty directory under `tmp`."""
        path = self.tmp / name
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def on_close(self, fn: Callable[[], None]) -> None:
        self._cleanup.append(fn)

    def close(self) -> None:
        for fn in reversed(self._cleanup):
            try:
                fn()
            except Exception:  # cleanup never hides results
                pass
        self._cleanup.clear()
        self._memo.clear()
        _stop_all(self._workers)
        self._worker = _Worker()   # still usable after close (a fresh thread, stopped by the finalizer)
        self._workers.append(self._worker)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # --- feature claims --------------------------------------------------------------------------
    def cache_files(self) -> tuple[int, int]:
        """What the driver reports from get_number_of_cache_files_needed (checked by the caching suite)."""
        def ask() -> tuple[int, int]:
            counts = self.call("get_number_of_cache_files_needed", self.driver.get_number_of_cache_files_needed)
            try:
                n_model, n_data = counts
                return int(n_model), int(n_data)
            except (TypeError, ValueError):
                raise Fail(f"get_number_of_cache_files_needed returned {counts!r}, not two integers") from None
        return self.memo("cache-files", ask)

    def supports(self, model, what: str = "the model") -> None:
        """Skip unless the driver reports every operation of `model`'s main graph as supported."""
        status, flags, message = self.attempt("get_supported_operations", self.driver.get_supported_operations,
                                              model)
        if status != ErrorStatus.NONE:
            raise Fail(f"get_supported_operations rejected {what}, a valid model, with {status_name(status)}: "
                       f"{message}")
        if not isinstance(flags, (list, tuple)) or len(flags) != len(model.main.operations):
            raise Fail(f"get_supported_operations returned {flags!r} for {what}: expected one flag per operation "
                       f"({len(model.main.operations)})")
        missing = sorted({model.main.operations[i].type.name for i, ok in enumerate(flags) if not ok})
        if missing:
            raise Skip(f"the driver does not support {', '.join(missing)} ({what})")


def run_checks(kit: Kit, checks: Sequence[Check],
               progress: Callable[[CheckResult, int, int], None] | None = None) -> list[CheckResult]:
    """Run each check once, in order; never raises for what a check finds."""
    results = []
    for n, check in enumerate(checks, 1):
        start = time.perf_counter()
        status, message, detail = "passed", "", ""
        try:
            check.run(kit)
        except Skip as e:
            status, message = "skipped", str(e)
        except Fail as e:
            status, message = "failed", str(e)
        except NnError as e:  # a driver error the check did not expect at that point
            status, message = "failed", f"the driver failed with {status_name(e.status)}: {e.message}"
            detail = traceback.format_exc(limit=6)
        except Exception as e:  # the driver's answer was not what the HAL says it returns
            status = "failed"
            message = f"unexpected {type(e).__name__} while checking: {e}"
            detail = traceback.format_exc(limit=8)
        result = CheckResult(check.id, check.suite, check.behaviour, status, message,
                             round(time.perf_counter() - start, 3), detail)
        results.append(result)
        if progress is not None:
            progress(result, n, len(checks))
    return results


def summarize(results: Sequence[CheckResult]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results:
        counts[r.status] += 1
    counts["total"] = len(results)
    return counts


def per_suite(results: Sequence[CheckResult]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in results:
        out.setdefault(r.suite, {"passed": 0, "failed": 0, "skipped": 0})[r.status] += 1
    return out


def make(suite: str, name: str, behaviour: str, fn: Callable[..., None], *args: Any, **kwargs: Any) -> Check:
    """A check running `fn(kit, *args, **kwargs)`."""
    return Check(f"{suite}/{name}", suite, behaviour, lambda kit: fn(kit, *args, **kwargs))


def skipped(suite: str, name: str, behaviour: str, reason: str) -> Check:
    """A check that can only be skipped (e.g. the corpus it needs is missing), so the report says why."""
    def run(kit: "Kit") -> None:
        raise Skip(reason)
    return Check(f"{suite}/{name}", suite, behaviour, run)
