"""The XLA driver's IDevice: compiles partitions with XLA through JAX (CPU, or a GPU when JAX has one).

Options: `optimize_after` (or NNAPI_XLA_OPTIMIZE_AFTER; default 8) is the number of executions
after which the optimised executable is compiled in the background (0: compile the optimised one
at preparation, single stage). Preference SUSTAINED_SPEED always compiles optimised at once.
`segments` (or NNAPI_XLA_SEGMENTS) is the number of sub-models a partition is split into, with a
QoS checkpoint between them (default: one per `program.WORK_PER_SEGMENT` of estimated work, at
most 4, balanced by work). `scheduler`: the `qos.Scheduler` executions run through (default: one
per device). `engine` (or NNAPI_XLA_ENGINE=1)
caches compilations made without app caching information in the driver's own caching engine (C12):
the same artifacts as the app cache, keyed by the SHA-256 of the partition and its preference, so a
process that compiles the same model again loads the executable instead.
"""
from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from importlib.metadata import PackageNotFoundError, version as package_version
from pathlib import Path

from ..._version import __version__
from ...caching import CachingEngine, IntegrityRegistry, load_artifacts, save_artifacts
from ...hal import (BufferDesc, CacheHandles, Capabilities, DeviceInfo, DeviceType, ErrorStatus,
                    ExecutionPreference, IDevice, Model, NnError, Priority)
from ...hal.constants import NO_DEADLINE
from ...validation import validate_model, validate_preference, validate_priority
from .claims import ClaimMemo

NAME = "xla"
#: One model-cache file (header, structure, executable) and one data-cache file (constants); see cache.py.
NUM_MODEL_CACHE, NUM_DATA_CACHE = 1, 1
DEFAULT_OPTIMIZE_AFTER = 8


def _jax_version() -> str:
    try:
        return package_version("jaxlib")
    except PackageNotFoundError:  # pragma: no cover - jax is a dependency
        return "unknown"


@functools.lru_cache(maxsize=1)
def _source_fingerprint() -> str:
    """8 hex digits of the code that decides what is claimed and compiled (this driver, `ops/`,
    `validation/`, `hal/`): an edited checkout is a new driver version."""
    import xxhash
    root = Path(__file__).resolve().parents[2]
    h = xxhash.xxh3_64()
    for folder in ("drivers/xla", "ops", "validation", "hal"):
        for path in sorted((root / folder).glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:8]


def _check_deadline(deadline: int | None, what: str) -> None:
    if deadline is not None and deadline < NO_DEADLINE and time.monotonic_ns() > deadline:
        raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"deadline had passed when {what} started")


class XlaDevice(IDevice):
    """Lowers a partition to one jitted function and compiles it ahead of time for its shapes."""

    def __init__(self, *, optimize_after: int | None = None, segments: int | None = None,
                 scheduler=None, engine: bool | None = None) -> None:
        if optimize_after is None:
            env = os.environ.get("NNAPI_XLA_OPTIMIZE_AFTER", "").strip()
            optimize_after = int(env) if env.isdigit() else DEFAULT_OPTIMIZE_AFTER
        self.optimize_after = optimize_after
        if segments is None:
            env = os.environ.get("NNAPI_XLA_SEGMENTS", "").strip()
            segments = int(env) if env.isdigit() and int(env) > 0 else None
        #: Sub-models per partition (None: by estimated work, see program.segment_bounds).
        self.segments = segments
        if scheduler is None:
            from ...qos import Scheduler
            scheduler = Scheduler()
        self.scheduler = scheduler
        # A new XLA, or changed lowering code, never trusts old executables or claims (C9).
        self.version = f"{__version__}+jaxlib{_jax_version()}+src{_source_fingerprint()}"
        self.registry = IntegrityRegistry(NAME, self.version)
        use_engine = _env_flag("NNAPI_XLA_ENGINE") if engine is None else engine
        self.engine = CachingEngine(NAME, self.version) if use_engine else None
        self._capabilities: Capabilities | None = None
        #: Answers of get_supported_operations by model fingerprint (the analysis traces abstractly),
        #: in this process and, across processes, in the state directory.
        self._support_memo: dict[bytes, list[bool]] = {}
        self.claims = ClaimMemo(self.version)
        self._last_analysis: tuple | None = None
        self._lock = threading.Lock()

    def get_info(self) -> DeviceInfo:
        from .calibration import backend
        return DeviceInfo(NAME, self.version, DeviceType.GPU if backend() == "gpu" else DeviceType.CPU, 30)

    def get_capabilities(self) -> Capabilities:
        if self._capabilities is None:
            from .calibration import capabilities
            self._capabilities = capabilities(self)
        return self._capabilities

    def get_supported_operations(self, model: Model) -> list[bool]:
        """Remembered by content fingerprint, in this process and in the state directory: the same
        bytes were validated and analysed before (analysis traces the lowering abstractly, so a
        compilation from a cache, also in a new process, skips it)."""
        try:
            key = _fingerprint(model)
        except Exception:  # malformed: validation below names the fault
            key = None
        with self._lock:
            flags = self._support_memo.get(key) if key is not None else None
        if flags is None and key is not None:
            flags = self.claims.get(key)  # answered in an earlier process
            if flags is not None and len(flags) == len(model.main.operations):
                with self._lock:
                    self._support_memo[key] = flags
            else:
                flags = None
        if flags is not None:
            return list(flags)
        validate_model(model)
        from .analysis import analyze
        try:
            dims, lowered = analyze(model)
            flags = [lop is not None for lop in lowered]
        except NnError:
            raise
        except Exception:  # an analysis failure claims nothing
            dims, lowered, flags = None, None, [False] * len(model.main.operations)
        if key is not None:
            self.claims.put(key, flags)
        with self._lock:
            if key is not None:
                self._support_memo[key] = flags
                # The runtime prepares what it just asked about: keep the last analysis for it (one
                # entry, as it references the caller's constant memory until then).
                self._last_analysis = (key, dims, lowered) if lowered is not None else None
            while len(self._support_memo) > 256:
                self._support_memo.pop(next(iter(self._support_memo)))
        return list(flags)

    def _take_analysis(self, model: Model) -> tuple | None:
        """(dims, lowered) that get_supported_operations made for these very bytes, once."""
        with self._lock:
            last, self._last_analysis = self._last_analysis, None
        if last is None:
            return None
        try:
            return last[1:] if _fingerprint(model) == last[0] else None
        except Exception:
            return None

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return NUM_MODEL_CACHE, NUM_DATA_CACHE

    # --- preparation ------------------------------------------------------------------------------------
    def prepare_model(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: int | None = None,
                      cache_handles: CacheHandles | None = None, token: bytes | None = None, *, client=None):
        from . import program as prog
        from .prepared_model import CacheRewriter, XlaPreparedModel
        validate_model(model)
        validate_preference(preference)
        validate_priority(priority)
        preference, priority = ExecutionPreference(preference), Priority(priority)
        _check_deadline(deadline, "preparation")
        relocated, data = prog.relocate(model)
        has_cache = cache_handles is not None and token is not None and (
            cache_handles.model_cache or cache_handles.data_cache)
        engine_key = None
        if not has_cache and self.engine is not None:
            engine_key = _engine_key(relocated, data, preference)
            prepared = self._from_engine(engine_key, priority, client)
            if prepared is not None:
                return prepared
        dims, lowered = prog.analyze_supported(relocated, self._take_analysis(model))
        sig = prog.signature(relocated, dims, lowered)
        single = self.optimize_after <= 0 or preference == ExecutionPreference.SUSTAINED_SPEED
        parts = prog.split(relocated, dims, lowered, sig, self.segments)
        try:
            segments = prog.compile_segments(relocated, parts, optimized=single)
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla compilation failed: {type(e).__name__}: {e}") from None
        stage = "optimized" if single else "quick"
        rewriter = None
        if not single and has_cache:
            rewriter = CacheRewriter(cache_handles, token, self._save)
        elif not single and engine_key is not None:
            rewriter = functools.partial(self._engine_put, engine_key)
        prepared = XlaPreparedModel(relocated, sig, segments, stage, preference, priority,
                                    optimize_after=self.optimize_after, on_optimized=rewriter,
                                    scheduler=self.scheduler, client_uid=_uid(client))
        if has_cache:
            self._save(cache_handles, token, prepared)
        elif engine_key is not None:
            self._engine_put(engine_key, prepared)
        return prepared

    # --- the caching engine (C12) ---------------------------------------------------------------------
    def _from_engine(self, key: str, priority: Priority, client):
        """The prepared model the engine holds for `key` (None on a miss or an unusable entry)."""
        try:
            hit = self.engine.get(key)  # integrity-checked against the engine's SHA-256 index
            if hit is None:
                return None
            (model_blob,), (data_blob,) = hit
            return self._from_artifacts(model_blob, data_blob, lambda: functools.partial(self._engine_put, key),
                                        client, priority)
        except (OSError, NnError, sqlite3.Error, ValueError):
            return None

    def _engine_put(self, key: str, prepared) -> None:
        """Store (or, after the optimised compile, replace) the engine's entry; failing only means no entry."""
        try:
            self.engine.put(key, *([blob] for blob in _artifacts(prepared)))
        except Exception:
            pass

    # --- the app's cache files ------------------------------------------------------------------------
    def _save(self, handles: CacheHandles, token: bytes, prepared) -> None:
        """Write the cache (the record and both files under one exclusive lock, so a reader sees the
        old cache or the new one, never a mix); failing to write only means no cache."""
        try:
            save_artifacts(handles, token, self.registry, self.get_number_of_cache_files_needed(),
                           *([blob] for blob in _artifacts(prepared)))
        except Exception:  # e.g. an executable XLA cannot serialize: prepared, just not cached
            pass

    def prepare_model_from_cache(self, deadline: int | None, cache_handles: CacheHandles, token: bytes, *,
                                 client=None):
        from .prepared_model import CacheRewriter
        _check_deadline(deadline, "preparation from cache")
        try:
            (model_blob,), (data_blob,) = load_artifacts(cache_handles, token, self.registry,
                                                         self.get_number_of_cache_files_needed())
        except sqlite3.Error as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"integrity registry unavailable: {e}") from None
        return self._from_artifacts(model_blob, data_blob, lambda: CacheRewriter(cache_handles, token, self._save),
                                    client)

    def _from_artifacts(self, model_blob, data_blob, rewriter, client, priority: Priority | None = None):
        """A prepared model from verified artifacts; `rewriter()` makes what rewrites them after the
        optimised compile (only a quick-stage model gets one). `priority`: the cached one if None."""
        from . import cache
        from .prepared_model import XlaPreparedModel
        model, sig, segments, stage, preference, cached_priority, constants = cache.from_artifacts(model_blob,
                                                                                                   data_blob)
        return XlaPreparedModel(model, sig, segments, stage, preference,
                                cached_priority if priority is None else priority,
                                optimize_after=self.optimize_after,
                                on_optimized=rewriter() if stage == "quick" else None,
                                scheduler=self.scheduler, client_uid=_uid(client), constants=constants)

    def allocate(self, desc: BufferDesc, prepared_models, input_roles, output_roles):
        """Memory domains (M6-M12) on the shared toolkit: any non-OEM operand type, up to 2 GiB."""
        from . import buffers
        return buffers.allocate(desc, prepared_models, input_roles, output_roles)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _engine_key(relocated: Model, data, preference: ExecutionPreference) -> str:
    """The engine key of a partition: its structure, its constants, the preference and the backend."""
    import dataclasses

    import jax

    from ...hal.serialize import model_to_bytes
    return CachingEngine.key_for(model_to_bytes(dataclasses.replace(relocated, pools=[])), bytes(data),
                                 bytes([int(preference)]), jax.default_backend().encode())


def _uid(client) -> int | None:
    return None if client is None else int(getattr(client, "uid", client))


def _fingerprint(model: Model) -> bytes:
    """xxh3-128 of the model's structure and constant bytes (not of its pool handles)."""
    import dataclasses

    import xxhash

    from ...hal.serialize import model_to_bytes
    from ...memory import map_pool
    h = xxhash.xxh3_128(model_to_bytes(dataclasses.replace(model, pools=[])))
    for pool in model.pools:
        h.update(map_pool(pool).buffer)
    return h.digest()


def _artifacts(prepared) -> tuple[bytes, bytes]:
    """(model blob, data blob) of a prepared model, for the app's cache files or the engine."""
    from . import cache
    return cache.to_artifacts(prepared.model, _data_of(prepared.model), prepared.signature, prepared.segments,
                              prepared.stage, prepared.preference, prepared.priority)


def _data_of(model: Model) -> bytes:
    return bytes(model.pools[0].pointer) if model.pools else b""
