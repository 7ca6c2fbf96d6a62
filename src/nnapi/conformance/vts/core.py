"""The kit's machinery: checks, their outcomes, and guarded calls into the driver under test.

A check is one behaviour of `VTS-BEHAVIOURS.md` applied to one driver: it passes (returns), fails
(`Fail`: what the driver did instead) or is skipped (`Skip`: a feature the driver does not claim).
Every call into the driver goes through `Kit.call`, which runs it on a worker thread with a time
limit: a call that hangs fails its check after a bounded wait (the stuck thread is abandoned), and a
plain Python exception is a failure of the driver, never an error of the kit. The waits share one
budget (`Hangs`): after the first hang, the same kind of call or callback fails fast, naming that hang,
so a driver that hangs everywhere costs minutes, not one `--timeout` per check.
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


#: How a driver hosted by the kit (`host`) reports a plain exception of the driver: GENERAL_FAILURE with
#: a message starting with this (the service would otherwise make it an ordinary GENERAL_FAILURE).
HOST_CRASH = "nnapi vts host: the driver raised "
#: ... and an exception the driver base swallowed in `supported()` (`claim_failure`).
HOST_CLAIM = "nnapi vts host: supported() raised "


def model_operations(model: Any) -> str:
    """The operation types of a model's main graph, for messages ("ADD, RELU")."""
    try:
        kinds = {getattr(op.type, "name", str(op.type)) for op in model.main.operations}
    except (AttributeError, TypeError):
        return "?"
    return ", ".join(sorted(kinds)) or "no operation"


def claim_failure(driver: Any, model: Any, flags: Any) -> str | None:
    """The exception a driver built on `nnapi.drivers.base` raised in `supported()`, which the base
    logs and turns into "nothing supported" (so every check of the model would be skipped); None when
    there was none. Asked only when some operation came back unsupported."""
    if not isinstance(flags, (list, tuple)) or all(flags):
        return None
    from ...drivers.base import DriverDevice
    if not isinstance(driver, DriverDevice):
        return None
    try:
        driver.supported(model)
    except NnError:
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def _claim_crash(what: str, error: str, model: Any) -> DriverCrash:
    return DriverCrash(f"{what}: the driver's supported() raised {error} on a model of {model_operations(model)} "
                       "(the driver base logs it and claims no operation, so every check of the model would be "
                       "skipped)")


class Hangs:
    """The budget of time the kit spends waiting on a driver that hangs, shared by every check.

    The first hang waits the full limit (`--timeout`). After it, a call or callback of a kind that hung
    fails fast, naming the first hang of its kind: it waits `GRACE_S` while the kit's `GRACE_TOTAL_S`
    (at most the limit itself) last, then `FAST_S`. Other kinds share what is left of `timeout / 4`, each
    at least `FLOOR_S`."""

    GRACE_S = 1.0
    GRACE_TOTAL_S = 10.0
    FAST_S = 0.02
    FLOOR_S = 5.0

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.first: tuple[str, str] | None = None          # (what, check id) of the first hang
        self.kinds: dict[str, list[Any]] = {}              # kind -> [what, check id, first wait]
        self.shared_left = timeout / 4
        self.grace_used = 0.0

    def limit(self, kind: str, timeout: float | None = None) -> tuple[float, str]:
        """How long to wait for a call of `kind` and what a hang's message then adds."""
        base = self.timeout if timeout is None else timeout
        hung = self.kinds.get(kind)
        if hung is not None:
            what, check, waited = hung
            grace = self.GRACE_S if self.grace_used < min(self.GRACE_TOTAL_S, self.timeout) else self.FAST_S
            return min(base, grace), (f"; not waited for longer: {what} already hung in {check} "
                                      f"(waited {waited:g} s there)")
        if self.first is not None:
            what, check = self.first
            return (min(base, max(self.FLOOR_S, self.shared_left)),
                    f"; waited less than the full limit: the driver already hung in {check} ({what})")
        return base, ""

    def hung(self, kind: str, what: str, check: str, waited: float) -> None:
        """Record a hang of `kind` that cost `waited` seconds."""
        if kind in self.kinds:
            self.grace_used += waited
            return
        if self.first is None:
            self.first = (what, check)
        else:
            self.shared_left = max(0.0, self.shared_left - waited)
        self.kinds[kind] = [what, check, round(waited, 2)]

    def summary(self) -> list[dict[str, Any]]:
        """Every kind that hung: what, the check where it first did, how long the kit waited there."""
        return [{"kind": kind, "what": e[0], "check": e[1], "waited_s": e[2]} for kind, e in self.kinds.items()]


def _kind(fn: Callable[..., Any], what: str) -> str:
    """What a hang is counted against: the HAL method (`Class.method`) of a bound method, else `what`."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", None)
    if owner is not None and name:
        return f"{type(owner).__name__}.{name}"
    return what


@dataclass
class Check:
    """One check: `id` is "suite/name[param]"; `behaviour` names the section and test it mirrors."""

    id: str
    suite: str
    behaviour: str
    run: Callable[["Kit"], None]
    #: Run in the driver's own process when the kit hosts it (what the service boundary would otherwise
    #: answer for the driver: burst tokens, wait fences), through `Supervisor.inside`.
    inside: bool = False


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


class Supervisor:
    """Watches where the driver runs, around each check (`host.Host` for a driver in a process of its
    own): `before` may fail a check without running it, `after` may fail one that passed (the driver's
    process died or left a process behind)."""

    def before(self, kit: "Kit", check: "Check") -> str | None:
        return None

    def refuse(self, kind: str) -> str | None:
        """Before each driver call: why not to make it (None: make it)."""
        return None

    def inside(self, kit: "Kit", check: "Check") -> tuple[str, str, str] | None:
        """(status, message, detail) of a `Check.inside` check run where the driver is; None: run it here."""
        return None

    def after(self, kit: "Kit", result: "CheckResult") -> "CheckResult":
        return result

    def close(self) -> None:
        pass


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
        self.hangs = Hangs(self.options.timeout)
        #: The id of the check running now (hang messages name where a kind first hung).
        self.current = ""
        #: Driver calls the kit gave up waiting for (they may still be stuck in the driver).
        self.abandoned = 0
        self.supervisor: Supervisor | None = None

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
             kind: str | None = None, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on the worker thread, in the caller's context (its client identity).

        NnError passes through (the check judges the status); any other exception is a `DriverCrash`,
        and so is an exception the driver base swallowed in `supported()`; no answer within the time
        limit (`Hangs`: `kind` defaults to the method called) is a `DriverHang`.
        """
        kind = kind or _kind(fn, what)
        refused = self.supervisor.refuse(kind) if self.supervisor is not None else None
        if refused:
            raise DriverCrash(f"{what}: {refused}")
        limit, note = self.hangs.limit(kind, timeout)
        box: dict[str, Any] = {}
        done = threading.Event()
        context = contextvars.copy_context()
        claims = getattr(fn, "__name__", "") == "get_supported_operations" and bool(args)

        def job() -> None:
            try:
                box["value"] = context.run(fn, *args, **kwargs)
                if claims:
                    box["claim"] = context.run(claim_failure, getattr(fn, "__self__", None), args[0], box["value"])
            except BaseException as e:  # handed to the waiting check below
                box["error"] = e
            finally:
                done.set()

        self._worker.submit(job)
        if not done.wait(limit):
            self._worker = _Worker()  # the old one is stuck inside the driver
            self._workers.append(self._worker)
            self.abandoned += 1
            self.hangs.hung(kind, what, self.current, limit)
            raise DriverHang(f"{what} did not return within {limit:g} s (a driver call must never hang){note}")
        on = f" on a model of {model_operations(args[0])}" if claims else ""
        error = box.get("error")
        if error is None:
            if box.get("claim"):
                raise _claim_crash(what, box["claim"], args[0])
            return box.get("value")
        if isinstance(error, NnError):
            message = error.message or ""
            if claims and error.status == ErrorStatus.GENERAL_FAILURE and message.startswith(HOST_CLAIM):
                raise _claim_crash(what, message[len(HOST_CLAIM):], args[0]) from None
            if error.status == ErrorStatus.GENERAL_FAILURE and message.startswith(HOST_CRASH):
                raise DriverCrash(f"{what} raised {message[len(HOST_CRASH):]}{on} (a driver reports every failure "
                                  "as NnError with an ErrorStatus)") from None
            raise error
        raise DriverCrash(f"{what} raised {type(error).__name__}: {error}{on} (a driver reports every failure as "
                          "NnError with an ErrorStatus)") from error

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
                ) -> tuple[ErrorStatus, Any, str]:
        """(NONE, result, "") or (the NnError's status, None, its message)."""
        try:
            return ErrorStatus.NONE, self.call(what, fn, *args, **kwargs), ""
        except NnError as e:
            return e.status, None, e.message

    def wait(self, event: threading.Event, what: str, timeout: float | None = None, kind: str | None = None) -> None:
        """Wait for something the driver owes (a callback); a `DriverHang` after the time limit (`Hangs`)."""
        ok, limit, note = self.wait_until(event.wait, kind or what, timeout, what)
        if not ok:
            raise DriverHang(f"{what} never came (waited {limit:g} s){note}")

    def wait_until(self, ready: Callable[[float], bool], kind: str, timeout: float | None = None,
                   what: str | None = None) -> tuple[bool, float, str]:
        """`ready(seconds)` (a wait that says whether it ended in time) within the hang budget: whether it
        did, how long it could take and what a hang's message adds (a hang is recorded)."""
        limit, note = self.hangs.limit(kind, timeout)
        if ready(limit):
            return True, limit, note
        self.hangs.hung(kind, what or kind, self.current, limit)
        return False, limit, note

    def token(self, label: str) -> bytes:
        """A 32-byte cache token unique to `label` and this run (a driver's integrity registry outlives
        runs, and Android's token is unique per model: reusing one across models is the app's collision)."""
        return hashlib.sha256(self._nonce + label.encode()).digest()

    # --- shared state -----------------------------------------------------------------------------
    def memo(self, key: Any, factory: Callable[[], Any]) -> Any:
        """`factory()` once per run; a failure is remembered and raised again for every later use (a
        failure of the driver naming the check that met it)."""
        if key not in self._memo:
            try:
                self._memo[key] = ("ok", factory(), self.current)
            except (Fail, Skip, NnError) as e:
                self._memo[key] = ("error", e, self.current)
        kind, value, check = self._memo[key]
        if kind == "error":
            if isinstance(value, Fail) and check and check != self.current:
                raise type(value)(f"{value} (met in {check}; the kit prepares this once per run)")
            raise value
        return value

    def forget(self, key: Any) -> None:
        self._memo.pop(key, None)

    def replace_device(self, device: Device) -> None:
        """Go on with `device` (the driver started again in a new process): what was prepared on the old
        one is forgotten (the corpus is kept)."""
        self.device, self.driver = device, device.driver
        self._memo = {k: v for k, v in self._memo.items() if k in ("corpus", "corpus-sample")}

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
        if self.supervisor is not None:
            self.supervisor.close()

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
        kit.current = check.id
        try:
            refused = kit.supervisor.before(kit, check) if kit.supervisor is not None else None
            if refused:
                raise Fail(refused)
            remote = kit.supervisor.inside(kit, check) if check.inside and kit.supervisor is not None else None
            if remote is None:
                check.run(kit)
            else:
                status, message, detail = remote
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
        if kit.supervisor is not None:
            result = kit.supervisor.after(kit, result)
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


def make(suite: str, name: str, behaviour: str, fn: Callable[..., None], *args: Any, inside: bool = False,
         **kwargs: Any) -> Check:
    """A check running `fn(kit, *args, **kwargs)` (`inside`: see `Check.inside`)."""
    return Check(f"{suite}/{name}", suite, behaviour, lambda kit: fn(kit, *args, **kwargs), inside)


def skipped(suite: str, name: str, behaviour: str, reason: str) -> Check:
    """A check that can only be skipped (e.g. the corpus it needs is missing), so the report says why."""
    def run(kit: "Kit") -> None:
        raise Skip(reason)
    return Check(f"{suite}/{name}", suite, behaviour, run)
