"""Test fixtures of the runtime-side caching tests (not checks: the checks every driver must pass live in
the certification kit, `nnapi.conformance.vts.caching`, with the VTS fixture and the parameter models).

- `RecordingDriver`: Android's `CachingDriver` of TestCompilationCaching.cpp, for the runtime's side.
- `VersionedReference`: the reference driver reporting another version string (a driver update).
- `reference()` / `device_for()`: runtime devices for driver objects, without discovering every plug-in.
- The workers of the multi-process tests (importable by spawned children).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

import nnapi
from nnapi.conformance.vts import device_for
from nnapi.conformance.vts.models import float_model
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (CacheHandles, Capabilities, DeviceInfo, DeviceType, ErrorStatus, IDevice, NnError,
                       OperandPerformance, PerformanceInfo)


def reference(**kwargs) -> nnapi.Device:
    """The reference driver as a runtime device, without discovering every installed driver (which may
    import heavy toolkits), so these tests do not depend on what else is installed."""
    return device_for(ReferenceDevice(**kwargs))


class VersionedReference(ReferenceDevice):
    """The reference driver reporting another version string (a driver update)."""

    def __init__(self, version: str, **kwargs) -> None:
        self._reported_version = version
        super().__init__(**kwargs)

    def driver_version(self) -> str:
        return self._reported_version


# --- Android's CachingDriver ----------------------------------------------------------------------------
KNOWN_BYTES = bytes(range(256))


class RecordingDriver(IDevice):
    """Writes 256 known bytes to every cache fd in prepare_model, checks them in prepare_model_from_cache,
    records each call, and answers prepare_model_from_cache with `from_cache_status` (NONE: success)."""

    def __init__(self, n_model: int, n_data: int, from_cache_status: ErrorStatus = ErrorStatus.NONE,
                 files_status: ErrorStatus = ErrorStatus.NONE, name: str = "caching-driver",
                 supported: Callable[[object], bool] | None = None) -> None:
        self.counts = (n_model, n_data)
        self.from_cache_status = from_cache_status
        self.files_status = files_status
        self.name = name
        self.supported = supported
        self.calls: list[tuple[str, bool]] = []    # ("prepare_model", with handles) / ("prepare_model_from_cache", ok)
        self.tokens: list[bytes | None] = []
        self.reference = ReferenceDevice()
        self._prepared: dict[bytes, object] = {}

    def get_info(self) -> DeviceInfo:
        return DeviceInfo(self.name, "1.0", DeviceType.ACCELERATOR, 30)

    def get_capabilities(self):
        """Twice as fast as the reference device for every type, so the partitioner prefers it."""
        caps = self.reference.get_capabilities()
        fast = PerformanceInfo(0.5, 0.5)
        return Capabilities(fast, fast, tuple(OperandPerformance(p.type, fast) for p in caps.operand_performance),
                            fast, fast)

    def get_supported_operations(self, model) -> list[bool]:
        return [True if self.supported is None else self.supported(op) for op in model.main.operations]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        if self.files_status != ErrorStatus.NONE:
            raise NnError(self.files_status, "cache file counts unavailable")
        return self.counts

    def _check_handles(self, handles: CacheHandles) -> None:
        assert (len(handles.model_cache), len(handles.data_cache)) == self.counts, \
            f"runtime passed {len(handles.model_cache)}/{len(handles.data_cache)} handles, expected {self.counts}"

    def prepare_model(self, model, preference, priority, deadline, cache, token):
        with_handles = cache is not None and bool(cache.model_cache or cache.data_cache)
        if with_handles:
            self._check_handles(cache)
            for fd in (*cache.model_cache, *cache.data_cache):
                os.ftruncate(fd, 0)
                os.pwrite(fd, KNOWN_BYTES, 0)
        self.calls.append(("prepare_model", with_handles))
        self.tokens.append(token)
        prepared = self.reference.prepare_model(model, preference, priority, deadline, None, None)
        if token is not None:
            self._prepared[bytes(token)] = prepared
        return prepared

    def prepare_model_from_cache(self, deadline, cache, token):
        self._check_handles(cache)
        for fd in (*cache.model_cache, *cache.data_cache):
            assert os.pread(fd, 512, 0) == KNOWN_BYTES
        ok = self.from_cache_status == ErrorStatus.NONE
        self.calls.append(("prepare_model_from_cache", ok))
        self.tokens.append(token)
        if not ok:
            raise NnError(self.from_cache_status, "the caching driver was told to fail")
        return self._prepared[bytes(token)]

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "no memory domains")


# --- workers of the multi-process tests (importable by spawned children) -----------------------------
def compile_and_run_worker(cache_dir: str, token: bytes, rounds: int, barrier, results) -> None:
    """Compile the float32 model `rounds` times with the cache and report outcomes and output errors."""
    try:
        test = float_model()
        barrier.wait(timeout=60)
        outcomes, errors = [], []
        for _ in range(rounds):
            c = nnapi.Compilation(test.model, devices=[reference()], cache_dir=cache_dir, token=token).finish()
            outcomes.append(c.cache_outcomes[0].outcome)
            (out,) = c.execute(test.inputs)
            errors.append(float(np.abs(out.astype(np.float64) - test.golden[0]).max()))
        results.put((os.getpid(), outcomes, errors, None))
    except BaseException as e:   # report, never hang the parent
        results.put((os.getpid(), [], [], f"{type(e).__name__}: {e}"))


def engine_worker(root: str, worker: int, rounds: int, max_bytes: int, barrier, results) -> None:
    """put/get ten keys with known content in a shared engine directory; every get must be exact or None."""
    from nnapi.caching import CachingEngine
    try:
        engine = CachingEngine("test", "1", root=Path(root), max_bytes=max_bytes)
        barrier.wait(timeout=60)
        bad, hits = [], 0
        for r in range(rounds):
            for k in range(10):
                key = f"key{k}"
                want = (bytes([k]) * (1000 + 37 * k), bytes([255 - k]) * (500 + k))
                if (r + worker + k) % 2:
                    engine.put(key, [want[0]], [want[1]])
                got = engine.get(key)
                if got is not None:
                    hits += 1
                    if (bytes(got[0][0]), bytes(got[1][0])) != want:
                        bad.append(key)
        results.put((worker, hits, bad, None))
    except BaseException as e:
        results.put((worker, 0, [], f"{type(e).__name__}: {e}"))


def engine_compile_worker(state_dir: str, barrier, results) -> None:
    """Compile the float32 model without caching information on a driver with its caching engine."""
    os.environ["NNAPI_STATE_DIR"] = state_dir
    try:
        test = float_model()
        driver = ReferenceDevice(engine=True)
        barrier.wait(timeout=60)
        errs = []
        for _ in range(3):
            c = nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
            (out,) = c.execute(test.inputs)
            errs.append(float(np.abs(out.astype(np.float64) - test.golden[0]).max()))
        results.put((os.getpid(), dict(driver.engine.stats), errs, None))
    except BaseException as e:
        results.put((os.getpid(), {}, [], f"{type(e).__name__}: {e}"))
