"""`Compilation`: partition a finished model over devices and prepare each partition (with caching)."""
from __future__ import annotations

import logging
import os
import time
from typing import Sequence

import numpy as np

from .. import hal, tracing as trace
from . import latency
from ..caching import remembered_fingerprints
from ..caching.artifacts import MISSES
from ..hal import BYTE_SIZE_OF_CACHE_TOKEN, ErrorStatus, ExecutionPreference, NnError, Priority, ResultCode
from .burst import Burst
from .cache_files import (CacheOutcome, cache_paths, close_cache_files, content_fingerprint, device_token,
                          mark_used, open_cache_files, open_cached, untrusted_folder)
from .deadlines import deadline_after, timeout_ns
from .devices import Device, devices as all_devices, find_device, guest_call
from .execution import Execution
from .model import Model
from .partitioner import Step, partition
from .plan import ExecutionPlan

log = logging.getLogger("nnapi.runtime")

_NDK_PRIORITY = {90: Priority.LOW, 100: Priority.MEDIUM, 110: Priority.HIGH}


_MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)


def _cache_directory(cache_dir: str | os.PathLike) -> str:
    """The cache directory, created (0700) when missing; BAD_DATA when it is not a usable directory."""
    try:
        path = os.path.expanduser(os.fspath(cache_dir))
    except TypeError:
        raise NnError(ResultCode.BAD_DATA, f"Compilation: cache_dir must be a path, got {cache_dir!r}") from None
    if not path:
        raise NnError(ResultCode.BAD_DATA, "Compilation: cache_dir is empty")
    if os.path.exists(path) and not os.path.isdir(path):
        raise NnError(ResultCode.BAD_DATA, f"Compilation: cache_dir {path!r} is not a directory")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise NnError(ResultCode.BAD_DATA, f"Compilation: cache_dir {path!r} cannot be created: "
                                           f"{e.strerror or e}") from None
    if not os.path.isdir(path):
        raise NnError(ResultCode.BAD_DATA, f"Compilation: cache_dir {path!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):  # readable only: cache hits still work, nothing is written
        log.warning("cache directory %s is not writable: new compilations are "
                                                   "not cached", path)
    return path


def _priority(value) -> Priority:
    if isinstance(value, Priority):
        return value
    if value in _NDK_PRIORITY:
        return _NDK_PRIORITY[value]
    raise NnError(ResultCode.BAD_DATA, f"Compilation: invalid priority {value!r} (LOW, MEDIUM, HIGH or 90/100/110)")


class Compilation:
    """A model compiled for a set of devices. Settings are fixed at `finish`, where compile errors surface."""

    def __init__(self, model: Model, devices: Sequence[Device | str] | None = None,
                 preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                 priority: Priority | int = Priority.MEDIUM, cache_dir: str | os.PathLike | None = None,
                 token: bytes | None = None, timeout: float | None = None) -> None:
        if not isinstance(model, Model) or not model.finished:
            raise NnError(ResultCode.BAD_STATE, "Compilation: the model must be finished")
        self.model = model
        self._explicit = devices is not None
        if devices is None:
            self._devices = all_devices()
        else:
            self._devices = [find_device(d) if isinstance(d, str) else d for d in devices]
            if not self._devices or len({d.name for d in self._devices}) != len(self._devices):
                raise NnError(ResultCode.BAD_DATA, "Compilation: devices must be a non-empty list without duplicates")
        self._finished = False
        self._untrusted: str | None = None  # why the cache folder is not used (set at finish)
        #: How executions run it: made at `finish` (None before).
        self.plan: ExecutionPlan | None = None
        self.prepare_time_s: float | None = None
        self.set_preference(preference)
        self.set_priority(priority)
        self.set_caching(cache_dir, token)
        self.set_timeout(timeout)

    # --- settings -----------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._finished:
            raise NnError(ResultCode.BAD_STATE, f"Compilation.{what}: the compilation is already finished")

    def set_preference(self, preference: ExecutionPreference | int) -> None:
        self._check_open("set_preference")
        try:
            self.preference = ExecutionPreference(preference)
        except ValueError:
            raise NnError(ResultCode.BAD_DATA, f"Compilation: invalid preference {preference!r}") from None

    def set_priority(self, priority: Priority | int) -> None:
        self._check_open("set_priority")
        self.priority = _priority(priority)

    def set_caching(self, cache_dir: str | os.PathLike | None, token: bytes | None) -> None:
        self._check_open("set_caching")
        if (cache_dir is None) != (token is None):
            raise NnError(ResultCode.BAD_DATA, "Compilation: cache_dir and token go together")
        if token is not None and (not isinstance(token, (bytes, bytearray)) or len(token) != BYTE_SIZE_OF_CACHE_TOKEN):
            raise NnError(ResultCode.BAD_DATA, f"Compilation: token must be {BYTE_SIZE_OF_CACHE_TOKEN} bytes")
        self.cache_dir = None if cache_dir is None else _cache_directory(cache_dir)
        self.token = None if token is None else bytes(token)

    def set_timeout(self, timeout: float | None) -> None:
        """Compile timeout in seconds (None or 0: none). Unlike Android it also works with several
        devices: every partition is prepared against the same absolute deadline."""
        self._check_open("set_timeout")
        self._timeout_ns = timeout_ns(timeout, "Compilation.set_timeout")
        self.timeout = None if self._timeout_ns is None else timeout

    # --- finish -------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def steps(self) -> list[Step]:
        """The plan's steps, each a partition on its device with its prepared model ([] before `finish`)."""
        return [] if self.plan is None else self.plan.steps

    @property
    def cache_outcomes(self) -> list[CacheOutcome]:
        """What the cache did for each step (hit, miss, rejected, disabled, fleet) and why."""
        return [step.cache for step in self.steps]

    @property
    def explicit_devices(self) -> bool:
        """Whether the app chose the devices (then nothing falls back to another device)."""
        return self._explicit

    def finish(self) -> "Compilation":
        self._check_open("finish")
        start = time.perf_counter()
        deadline = deadline_after(self._timeout_ns)  # one absolute deadline for every step
        hal_model = self.model.to_hal()
        self._untrusted = None if self.cache_dir is None else untrusted_folder(self.cache_dir)
        if self._untrusted is not None:
            log.warning("%s", self._untrusted)
        try:
            with remembered_fingerprints():  # the model's content, hashed once for every device
                steps, tried = self._single_device_hit(hal_model, deadline)
                if steps is None:
                    with trace.span("partition", "compile", devices=",".join(d.name for d in self._devices)) as args:
                        measured = (latency.measured(content_fingerprint(hal_model), self._devices)
                                    if len(self._devices) > 1 else None)
                        steps = partition(self._devices, hal_model, self.preference, measured)
                        args["steps"] = len(steps)
                    for step in steps:  # (the cache is tried once: a single step is the one tried)
                        self._prepare(step, deadline, compound=len(steps) > 1,
                                      tried=tried if len(steps) == 1 else None)
        except NnError as e:  # a missed deadline never falls back: another device would miss it too
            reference = next((d for d in all_devices() if d.name == "reference"), None)
            fallback = (not self._explicit and e.code not in (ResultCode.BAD_DATA, ResultCode.UNEXPECTED_NULL)
                        and reference is not None and e.status.name.startswith(("GENERAL", "DEVICE")))
            if not fallback:
                raise
            steps = [Step.whole(reference, hal_model)]
            self._prepare(steps[0], deadline, compound=False)
        if len(steps) == 1:  # (what later placements of this model go by: `latency`)
            steps[0].observer = latency.Observer(lambda: content_fingerprint(hal_model), steps[0].device)
        self.plan = ExecutionPlan(hal_model.main, steps)
        self.prepare_time_s = time.perf_counter() - start
        self._finished = True
        return self

    def _prepare(self, step: Step, deadline: int | None, compound: bool, tried: str | None = None) -> None:
        with trace.span("prepare", "compile", device=step.device.name, operations=len(step.operations)) as args:
            self._prepare_step(step, deadline, compound, tried)
            args.update(outcome=step.cache.outcome, reason=step.cache.reason)
        log.info("%s, %d operations: cache %s%s", step.device.name, len(step.operations), step.cache.outcome,
                 f" ({step.cache.reason})" if step.cache.reason else "")

    def _single_device_hit(self, hal_model: hal.Model, deadline: int | None) -> tuple[list[Step] | None, str | None]:
        """With a single device and a cache, the cache is tried before anything is partitioned, as
        Android's runtime gives a single device the whole model without asking what it supports: a
        hit proves it (the driver prepared this very content before; the token holds its
        fingerprint) and costs no `get_supported_operations` (through a service, the model's trip
        there). (the step, None) on a hit; else (None, why not, or None when not tried), and the
        compilation partitions and prepares as usual."""
        main = hal_model.main
        if len(self._devices) != 1 or self.token is None or not self._devices[0].supports_caching \
                or not main.operations or self._untrusted is not None:
            return None, None
        step = Step.whole(self._devices[0], hal_model)
        start = trace.now_us()
        reason = self._load(step, deadline, *self._cache_place(step, compound=False))
        log.info("%s, the whole model (a single device, looked up before partitioning): cache %s", step.device.name,
                 "hit" if reason is None else f"miss ({reason})")
        if start is not None:  # a hit is the step's preparation; a miss only a look before partitioning
            trace.complete("prepare" if reason is None else "cache lookup", "compile", start, trace.now_us(),
                           device=step.device.name, operations=len(step.operations),
                           outcome="hit" if reason is None else "miss", reason=reason or "")
        return (None, reason) if reason is not None else ([step], None)

    def _cache_place(self, step: Step, compound: bool) -> tuple[bytes, list[str]]:
        """The token the step's device sees and its cache files."""
        device = step.device
        token = device_token(self.token, step.operations if compound else None, device.name, device.version,
                             self.preference, self.priority, content_fingerprint(step.model))
        return token, cache_paths(self.cache_dir, token, device.cache_files)

    def _load(self, step: Step, deadline: int | None, token: bytes, paths: list[str]) -> str | None:
        """Prepare `step` from its cache files: None on a hit, else why not (a missed deadline raises)."""
        handles = open_cached(paths)
        if isinstance(handles, str):
            return handles
        try:
            step.prepared = guest_call(step.device, "prepare_model_from_cache",
                                       step.device.driver.prepare_model_from_cache, deadline, handles, token)
            step.cache = CacheOutcome(step.device.name, "hit")
            mark_used(handles)
            return None
        except NnError as e:
            if e.status in _MISSED:  # out of time: a full compile would only miss it again
                raise
            return f"rejected by {step.device.name}: {e.message}"
        finally:
            close_cache_files(handles)

    def _prepare_step(self, step: Step, deadline: int | None, compound: bool, tried: str | None = None) -> None:
        """Prepare from the cache, else compile and write it (`tried`: why the cache, already tried, missed)."""
        device = step.device
        driver = device.driver
        if self.token is None or not device.supports_caching:
            step.cache = CacheOutcome(device.name, "disabled", "no cache directory" if self.token is None
                                      else f"{device.name} does not cache")
            step.prepared = guest_call(device, "prepare_model", driver.prepare_model, step.model, self.preference,
                                       self.priority, deadline, None, None)
            return
        if self._untrusted is not None:  # (another user could have planted its files: not even written)
            step.cache = CacheOutcome(device.name, "miss", self._untrusted)
            step.prepared = guest_call(device, "prepare_model", driver.prepare_model, step.model, self.preference,
                                       self.priority, deadline, None, None)
            return
        token, paths = self._cache_place(step, compound)
        reason = tried if tried is not None else self._load(step, deadline, token, paths)
        if reason is None:
            return
        handles = open_cache_files(paths, create=True)
        try:
            step.prepared = guest_call(device, "prepare_model", driver.prepare_model, step.model, self.preference,
                                       self.priority, deadline, handles, token if handles is not None else None)
        finally:
            close_cache_files(handles)
        # A cache another compilation has not finished writing (or whose write was killed) is a miss.
        outcome = "rejected" if reason.startswith("rejected") and not any(m in reason for m in MISSES) else "miss"
        source = getattr(step.prepared, "cache_source", None)  # (a driver's fleet tier: `caching.fleet`)
        if source is not None and source.startswith("fleet:"):
            outcome, reason = "fleet", source
        elif source is not None:
            reason = f"{reason}; {source}"
        step.cache = CacheOutcome(device.name, outcome, reason if handles is not None
                                  else f"{reason}; cache files could not be created")

    # --- convenience ----------------------------------------------------------------------------
    def execute(self, inputs: Sequence[np.ndarray | None], timeout: float | None = None) -> list[np.ndarray]:
        """Run once on numpy inputs and return the outputs (sized from the model, grown if needed)."""
        plan = self.plan
        if plan is not None:  # (unfinished: Execution says so)
            deadline = deadline_after(timeout_ns(timeout, "Execution.set_timeout")) if timeout else None
            outputs = plan.execute_arrays(inputs, deadline)
            if outputs is not None:
                return outputs
        return Execution(self).run(inputs, timeout=timeout)

    def create_burst(self) -> "Burst":
        """A burst for consecutive executions of this compilation (ANeuralNetworksBurst_create): run them
        with `Execution.burst_compute(burst)` or `burst.compute(execution)`."""
        return Burst(self)
