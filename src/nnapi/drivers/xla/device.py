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

import importlib.util
import os
import pkgutil

from ...hal import DeviceType, Model
from ..base import Claims, CompileJob, DriverDevice, Option

NAME = "xla"


def backend() -> str:
    """"gpu" when JAX will find a CUDA/ROCm plugin (or JAX_PLATFORMS names one), else "cpu" (or the
    platform JAX_PLATFORMS names first); decided without importing JAX, so listing devices stays cheap."""
    first = os.environ.get("JAX_PLATFORMS", "").strip().lower().split(",")[0]
    if first:
        return "gpu" if first in ("cuda", "rocm", "gpu") else first
    spec = importlib.util.find_spec("jax_plugins")  # (a namespace package: found, not imported)
    plugins = spec.submodule_search_locations if spec is not None else None
    return "gpu" if plugins and any(n in m.name for m in pkgutil.iter_modules(plugins) for n in ("cuda", "rocm")) \
        else "cpu"


class XlaDevice(DriverDevice):
    """Lowers a partition to one jitted function and compiles it ahead of time for its shapes."""

    NAME = NAME
    CACHE_FILES = (1, 1)  # model cache: header, structure, executable; data cache: the constants (cache.py)
    OPTIONS = {"optimize_after": Option("NNAPI_XLA_OPTIMIZE_AFTER", int, 8),
               "segments": Option("NNAPI_XLA_SEGMENTS")}
    CALIBRATION_OPTIONS = {"optimize_after": 0}  # the steady state: the optimised executable at once
    CALIBRATED = True
    REMEMBER_CLAIMS = True  # the analysis traces the lowering: about a third of a compilation
    #: The code that decides what is claimed and compiled (an edited checkout is a new driver version).
    VERSION_SOURCES = ("drivers/xla", "drivers/xla/rules", "drivers/base", "ops", "validation", "hal")
    VERSION_PACKAGES = {"jaxlib": "jaxlib"}  # a new XLA never trusts old executables or claims (C9)
    HANDOFF_NS = 0  # a running sub-model reaches no checkpoint: higher-priority work starts at once
    LEARN_COMPILE_NS = True  # admission's lower bound: half the fastest compile seen per operation

    def device_type(self) -> DeviceType:
        """A GPU where JAX runs on one (its calibration is then stored apart from the CPU's)."""
        return DeviceType.GPU if backend() == "gpu" else DeviceType.CPU

    def supported(self, model: Model) -> Claims:
        """Every operation the lowering table lowers for these shapes (traced abstractly; the base
        remembers the answer by content, across processes too, and hands the analysis to `compile`)."""
        from .analysis import analyze
        dims, lowered = analyze(model)
        return Claims([lop is not None for lop in lowered], (dims, lowered))

    # --- preparation ------------------------------------------------------------------------------------
    def compile(self, job: CompileJob):
        from . import program as prog
        from .prepared_model import XlaPreparedModel
        relocated, _ = prog.relocate(job.model)
        dims, lowered = prog.analyze_supported(relocated, job.analysis)
        sig = prog.signature(relocated, dims, lowered)
        single = self.option("optimize_after") <= 0 or job.preference == job.preference.SUSTAINED_SPEED
        parts = prog.split(relocated, dims, lowered, sig, self.option("segments") or None)
        job.checkpoint("compiling")
        segments = prog.compile_segments(relocated, parts, optimized=single, checkpoint=job.checkpoint)
        return XlaPreparedModel(relocated, sig, segments, "optimized" if single else "quick", job.preference,
                                job.priority, optimize_after=self.option("optimize_after"),
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
                                optimize_after=self.option("optimize_after"),
                                on_optimized=job.keep_cache() if stage == "quick" else None, constants=constants)
