"""The OpenVINO driver's device: lowers a partition to one `ov.Model`, compiles it for the CPU and caches
the exported compiled model.

- What it claims: `analysis` (the lowering table's verdict per operation), remembered per model
  (object, then content fingerprint) in this process and across processes (`claims`).
- Precision: OpenVINO's CPU default is bf16 where the CPU has it, which neither NNAPI's float32 nor a
  relaxed model's float16 allows: every compilation sets `INFERENCE_PRECISION_HINT` to f32.
- Execution preference -> performance hint: FAST_SINGLE_ANSWER -> LATENCY, SUSTAINED_SPEED ->
  THROUGHPUT, LOW_POWER -> LATENCY on one thread. Threads: `threads=` or NNAPI_OPENVINO_THREADS
  (read at each preparation; default: every CPU of this process), `pinning=` or
  NNAPI_OPENVINO_PINNING=1 pins them (`ENABLE_CPU_PINNING`).
- Cache: one model-cache file (`cache.py`): the partition's structure, preference and priority, and
  the exported compiled model, imported only from the verified bytes the base hands to `load`. No
  data-cache file: the export holds the weights in the layout the kernels read.
- The driver version holds the OpenVINO version, this CPU's features and a fingerprint of the
  lowering code, so a change in any of them never trusts an older cache.
Nothing here uses the network; OpenVINO's telemetry lives in its conversion tools, never imported.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import weakref
from pathlib import Path

import openvino as ov

from ..._version import __version__
from ...caching import model_fingerprint
from ...hal import (Capabilities, DeviceType, ErrorStatus, ExecutionPreference, Model, NnError, OperandPerformance,
                    OperandType, PerformanceInfo)
from ..base import CompileJob, DriverDevice, env_flag, env_int
from . import cache
from .claims import ClaimMemo
from .prepared_model import OpenVinoPreparedModel

NAME = "openvino"
#: Reported speed relative to the reference driver (lower is better); NNAPI_OPENVINO_PERFORMANCE overrides.
DEFAULT_PERFORMANCE = 0.05
_MEMO_SIZE = 64


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """8 hex digits of the code that decides what is claimed and how it lowers (this driver with its
    rules, `ops/`, `validation/`, `hal/`)."""
    import xxhash
    root = Path(__file__).resolve().parents[2]
    h = xxhash.xxh3_64()
    for folder in ("drivers/openvino", "drivers/openvino/rules", "ops", "validation", "hal"):
        for path in sorted((root / folder).glob("*.py")):
            h.update(f"{folder}/{path.name}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:8]


@functools.lru_cache(maxsize=1)
def cpu_features() -> str:
    """8 hex digits of this CPU's model and instruction-set flags (compiled kernels depend on them)."""
    text = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                text += line + "\n"
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class _CompiledModels:
    """Compiled models of this process by a digest of their exported bytes and their properties: a
    cache hit on bytes this process exported or imported before (verified again by the integrity
    registry, so xxh3-128 identifies them; no adversary chooses them) reuses the compiled model
    instead of importing it anew. Each entry keeps what the compiled model's memory points into.
    Bounded, least recently used out first."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._entries: dict[bytes, tuple[ov.CompiledModel, list]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(export, config: dict) -> bytes:
        import xxhash
        h = xxhash.xxh3_128(export)
        h.update(repr(sorted(config.items())).encode())
        return h.digest()

    def get(self, key: bytes) -> tuple[ov.CompiledModel, list] | None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._entries[key] = entry  # most recently used last
            return entry

    def put(self, key: bytes, compiled: ov.CompiledModel, keep_alive: list) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (compiled, keep_alive)
            while len(self._entries) > self.capacity:
                self._entries.pop(next(iter(self._entries)))


COMPILED = _CompiledModels()


class OpenVinoDevice(DriverDevice):
    """See the module doc."""

    NAME = NAME
    CACHE_FILES = (1, 0)
    DEVICE_TYPE = DeviceType.CPU

    def __init__(self, *, threads: int | None = None, pinning: bool | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._threads = threads
        self._pinning = pinning
        self._core: ov.Core | None = None
        self._core_lock = threading.Lock()
        self._claims: ClaimMemo | None = None
        #: Claims by model content fingerprint, and by model object (no fingerprint to compute).
        self._memo: dict[bytes, list[bool]] = {}
        self._seen: dict[int, tuple[weakref.ref, list[bool]]] = {}
        self._memo_lock = threading.Lock()

    # --- identity ------------------------------------------------------------------------------------
    def driver_version(self) -> str:
        return f"{__version__}+ov{ov.get_version().split('-')[0]}+cpu{cpu_features()}+src{source_fingerprint()}"

    def capabilities(self) -> Capabilities:
        env = os.environ.get("NNAPI_OPENVINO_PERFORMANCE", "").strip()
        try:
            ratio = float(env) if env else DEFAULT_PERFORMANCE
        except ValueError:
            ratio = DEFAULT_PERFORMANCE
        fast = PerformanceInfo(ratio, ratio)
        types = sorted(t for t in OperandType if t not in (OperandType.SUBGRAPH, OperandType.OEM,
                                                           OperandType.TENSOR_OEM_BYTE))
        return Capabilities(fast, fast, tuple(OperandPerformance(t, fast) for t in types),
                            PerformanceInfo(), PerformanceInfo())

    @property
    def claims(self) -> ClaimMemo:
        """Claims remembered across processes (see `claims`)."""
        if self._claims is None:
            self._claims = ClaimMemo(self.version)
        return self._claims

    @property
    def core(self) -> ov.Core:
        if self._core is None:
            with self._core_lock:
                if self._core is None:
                    self._core = ov.Core()
        return self._core

    # --- claims --------------------------------------------------------------------------------------
    def supported(self, model: Model) -> list[bool]:
        with self._memo_lock:  # the very model object asked about before (runtime models are frozen)
            seen = self._seen.get(id(model))
        if seen is not None and seen[0]() is model:
            return list(seen[1])
        try:
            key = model_fingerprint(model)
        except Exception:
            key = None
        if key is not None:
            with self._memo_lock:
                flags = self._memo.get(key)
            if flags is None:
                flags = self.claims.get(key)  # answered in an earlier process
            if flags is not None and len(flags) == len(model.main.operations):
                with self._memo_lock:
                    self._seen[id(model)] = (weakref.ref(model), list(flags))
                return list(flags)
        from .analysis import analyze
        try:
            flags = analyze(model)
        except NnError:
            raise
        except Exception:  # an analysis failure claims nothing
            flags = [False] * len(model.main.operations)
        if key is not None:
            self.claims.put(key, flags)
        with self._memo_lock:
            if key is not None:
                self._memo[key] = list(flags)
                while len(self._memo) > _MEMO_SIZE:
                    self._memo.pop(next(iter(self._memo)))
            try:
                self._seen[id(model)] = (weakref.ref(model), list(flags))
            except TypeError:  # not weak-referenceable
                pass
            while len(self._seen) > _MEMO_SIZE:
                self._seen.pop(next(iter(self._seen)))
        return flags

    # --- preparation ---------------------------------------------------------------------------------
    def config(self, preference: ExecutionPreference) -> dict:
        """Compile (and import) properties for an execution preference."""
        threads = self._threads if self._threads is not None else env_int("NNAPI_OPENVINO_THREADS")
        if not threads:
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        pinning = self._pinning if self._pinning is not None else env_flag("NNAPI_OPENVINO_PINNING")
        hint = "LATENCY"
        if preference == ExecutionPreference.SUSTAINED_SPEED:
            hint = "THROUGHPUT"
        elif preference == ExecutionPreference.LOW_POWER:
            threads = 1
        return {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": hint,
                "INFERENCE_NUM_THREADS": int(threads), "ENABLE_CPU_PINNING": bool(pinning)}

    def estimate_compile_ns(self, model: Model) -> int:
        # A lower bound: even one small operation takes OpenVINO a few milliseconds to compile.
        return 1_000_000 + 10_000 * len(model.main.operations)

    def compile(self, job: CompileJob) -> OpenVinoPreparedModel:
        from .graph import build
        config = self.config(job.preference)
        job.checkpoint("lowering")
        built = build(job.model)
        job.checkpoint("compiling")
        try:
            compiled = self.core.compile_model(built.model, "CPU", config)
        except Exception as first:
            # A quantized pattern OpenVINO's low-precision pipeline fails on: the same graph with plain
            # rounding (no FakeQuantize, so no int8 rewrite) computes the same values in float.
            if "FakeQuantize" not in {op.get_type_name() for op in built.model.get_ordered_ops()}:
                raise _compile_error(first) from None
            job.checkpoint("lowering again")
            built = build(job.model, rounding="plain")
            job.checkpoint("compiling again")
            try:
                compiled = self.core.compile_model(built.model, "CPU", config)
            except Exception as e:
                raise _compile_error(e) from None
        job.checkpoint("after compiling")
        return OpenVinoPreparedModel(job.model, job.preference, job.priority, compiled, keep_alive=built.keep_alive,
                                     has_budget=built.has_budget)

    # --- cache -----------------------------------------------------------------------------------------
    def save(self, prepared: OpenVinoPreparedModel) -> tuple[list[bytes], list[bytes]]:
        export = prepared.export
        if export is None:
            export = prepared.compiled.export_model()
            if hasattr(export, "getbuffer"):  # an io.BytesIO
                export = export.getbuffer()
            COMPILED.put(COMPILED.key(export, self.config(prepared.preference)), prepared.compiled,
                         prepared.keep_alive)
        return [cache.to_blob(prepared.model, prepared.preference, prepared.priority, export)], []

    def load(self, model_blobs, data_blobs, job: CompileJob) -> OpenVinoPreparedModel:
        model, preference, priority, export = cache.from_blob(model_blobs[0])
        config = self.config(preference)
        key = COMPILED.key(export, config)
        hit = COMPILED.get(key)
        if hit is not None:
            compiled, keep_alive = hit
        else:
            job.checkpoint("importing")
            try:
                compiled = self.core.import_model(cache.as_tensor(export), "CPU", config)
            except Exception as e:
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"openvino cannot import the cached model: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:300]}") from None
            keep_alive = [export]  # the compiled model may read its weights from the blob in place
            COMPILED.put(key, compiled, keep_alive)
        has_budget = len(compiled.inputs) == len(model.main.input_indexes) + 1
        return OpenVinoPreparedModel(model, preference, priority, compiled, export=export, has_budget=has_budget,
                                     keep_alive=keep_alive)


def _compile_error(e: Exception) -> NnError:
    return NnError(ErrorStatus.GENERAL_FAILURE,
                   f"openvino compilation failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")


__all__ = ["OpenVinoDevice", "NAME", "cpu_features", "source_fingerprint"]
