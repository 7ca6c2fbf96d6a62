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

import threading

from ...caching import model_fingerprint
from ...hal import DeviceInfo, DeviceType, ErrorStatus, Model, NnError
from ..base import CompileJob, DriverDevice, env_int
from .calibration import backend

NAME = "xla"
#: One model-cache file (header, structure, executable) and one data-cache file (constants); see cache.py.
NUM_MODEL_CACHE, NUM_DATA_CACHE = 1, 1
DEFAULT_OPTIMIZE_AFTER = 8


class XlaDevice(DriverDevice):
    """Lowers a partition to one jitted function and compiles it ahead of time for its shapes."""

    NAME = NAME
    CACHE_FILES = (NUM_MODEL_CACHE, NUM_DATA_CACHE)
    REMEMBER_CLAIMS = True  # the analysis traces the lowering: about a third of a compilation
    #: The code that decides what is claimed and compiled (an edited checkout is a new driver version).
    VERSION_SOURCES = ("drivers/xla", "drivers/xla/rules", "drivers/base", "ops", "validation", "hal")
    VERSION_PACKAGES = {"jaxlib": "jaxlib"}  # a new XLA never trusts old executables or claims (C9)
    HANDOFF_NS = 0  # a running sub-model reaches no checkpoint: higher-priority work starts at once
    LEARN_COMPILE_NS = True  # admission's lower bound: half the fastest compile seen per operation

    def __init__(self, *, optimize_after: int | None = None, segments: int | None = None,
                 scheduler=None, engine: bool | None = None, memory_limit_bytes: int | None = None,
                 workers: int | None = None) -> None:
        super().__init__(scheduler=scheduler, workers=workers, memory_limit_bytes=memory_limit_bytes, engine=engine)
        if optimize_after is None:
            optimize_after = env_int("NNAPI_XLA_OPTIMIZE_AFTER")
        self.optimize_after = DEFAULT_OPTIMIZE_AFTER if optimize_after is None else optimize_after
        if segments is None:
            segments = env_int("NNAPI_XLA_SEGMENTS") or None
        #: Sub-models per partition (None: by estimated work, see program.segment_bounds).
        self.segments = segments
        self._last_analysis: tuple | None = None
        self._lock = threading.Lock()

    # --- identity and calibration (hooks of the base) ---------------------------------------------------
    def get_info(self) -> DeviceInfo:
        return DeviceInfo(NAME, self.version, DeviceType.GPU if backend() == "gpu" else DeviceType.CPU, 30)

    def capabilities(self):
        return self.calibrated_capabilities()

    def calibration_twin(self) -> "XlaDevice":
        return type(self)(optimize_after=0, engine=False, scheduler=self.scheduler)  # the optimised executable

    def calibration_variant(self) -> str:
        return backend()

    # --- claims ---------------------------------------------------------------------------------------
    def supported(self, model: Model) -> list[bool]:
        """Every operation the lowering table lowers for these shapes (traced abstractly; the base
        remembers the answer by content, across processes too: REMEMBER_CLAIMS)."""
        from .analysis import analyze
        dims, lowered = analyze(model)
        with self._lock:
            # The runtime prepares what it just asked about: keep the last analysis for it (one
            # entry, as it references the caller's constant memory until then).
            self._last_analysis = (model_fingerprint(model), dims, lowered)
        return [lop is not None for lop in lowered]

    def _take_analysis(self, model: Model) -> tuple | None:
        """(dims, lowered) that `supported` made for these very bytes, once."""
        with self._lock:
            last, self._last_analysis = self._last_analysis, None
        if last is None:
            return None
        try:
            return last[1:] if model_fingerprint(model) == last[0] else None
        except Exception:
            return None

    # --- preparation ------------------------------------------------------------------------------------
    def compile(self, job: CompileJob):
        from . import program as prog
        from .prepared_model import XlaPreparedModel
        relocated, _ = prog.relocate(job.model)
        dims, lowered = prog.analyze_supported(relocated, self._take_analysis(job.model))
        sig = prog.signature(relocated, dims, lowered)
        single = self.optimize_after <= 0 or job.preference == job.preference.SUSTAINED_SPEED
        parts = prog.split(relocated, dims, lowered, sig, self.segments)
        job.checkpoint("compiling")
        try:
            segments = prog.compile_segments(relocated, parts, optimized=single, checkpoint=job.checkpoint)
        except NnError:
            raise
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla compilation failed: {type(e).__name__}: {e}") from None
        return XlaPreparedModel(relocated, sig, segments, "optimized" if single else "quick", job.preference,
                                job.priority, optimize_after=self.optimize_after,
                                on_optimized=None if single else job.keep_cache())

    def save(self, prepared) -> tuple[list[bytes], list[bytes]]:
        """(model blob, data blob) of a prepared model, for the app's cache files or the engine."""
        from . import cache
        model = prepared.model
        data = bytes(model.pools[0].pointer) if model.pools else b""
        model_blob, data_blob = cache.to_artifacts(model, data, prepared.signature, prepared.segments,
                                                   prepared.stage, prepared.preference, prepared.priority)
        return [model_blob], [data_blob]

    def saved(self, prepared, digest: bytes, uid: int) -> None:
        """A later load of this content decodes and loads nothing, and one by the same app reuses the
        constants already on the device (`base.verified`)."""
        from . import cache
        self.content.keep(digest, cache.decoded_of(prepared))
        self.content.hold(digest, uid, prepared.constants)

    def load(self, model_blobs, data_blobs, job: CompileJob):
        """A prepared model from verified artifacts; a quick-stage model rewrites them after the
        optimised compile (through `job.keep_cache()`)."""
        from . import cache
        from .prepared_model import XlaPreparedModel
        model, sig, segments, stage, preference, priority, constants = cache.from_artifacts(
            model_blobs[0], data_blobs[0] if data_blobs is not None else None, job.verified, job.uid, job.held,
            self.content)
        return XlaPreparedModel(model, sig, segments, stage, preference, priority,
                                optimize_after=self.optimize_after,
                                on_optimized=job.keep_cache() if stage == "quick" else None, constants=constants)
