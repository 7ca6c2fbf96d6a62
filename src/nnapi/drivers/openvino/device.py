"""The OpenVINO driver's device: lowers a partition to one `ov.Model`, compiles it for the CPU and caches
the exported compiled model.

- What it claims: `analysis` (the lowering table's verdict per operation), remembered by the base per
  model content in this process and across processes.
- Precision: OpenVINO's CPU default is bf16 where the CPU has it, which neither NNAPI's float32 nor a
  relaxed model's float16 allows: a compilation sets `INFERENCE_PRECISION_HINT` to f32, or to f16 for a
  relaxed model (`relax_computation_float32_to_float16`) on a CPU whose float16 matrix units OpenVINO's
  f16 kernels run on (`native_float16`: AMX-FP16); elsewhere a relaxed model runs in f32, which relaxation
  allows. Quantized models run
  on OpenVINO's int8 kernels (FakeQuantize, its low-precision pipeline) only on a CPU with int8 dot
  products (`native_int8`: VNNI); elsewhere they are lowered with plain rounding and computed in float.
- Execution preference -> performance hint: FAST_SINGLE_ANSWER -> LATENCY, SUSTAINED_SPEED ->
  THROUGHPUT, LOW_POWER -> LATENCY on one thread. Threads: `threads=` or NNAPI_OPENVINO_THREADS
  (read at each preparation; default: every CPU of this process; a small model: one), `pinning=` or
  NNAPI_OPENVINO_PINNING=1 pins them (`ENABLE_CPU_PINNING`).
- Cache: one model-cache file (`cache.py`): the partition's structure, preference and priority, and
  the exported compiled model, imported only from the verified bytes the base hands to `load`. No
  data-cache file: the export holds the weights in the layout the kernels read.
- The driver version holds the OpenVINO version, this CPU's features, whether relaxed models run in f16
  and a fingerprint of the lowering code (the base's identity hooks), so a change in any of them never
  trusts an older cache.
Nothing here uses the network; OpenVINO's telemetry lives in its conversion tools, never imported.
"""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from ...hal import ErrorStatus, ExecutionPreference, Model, NnError, OperandLifeTime, OperandType
from ...qos.estimate import operation_work
from ..base import CompileJob, DriverDevice, Option, once
from ..base.shared import cpu_flags

if TYPE_CHECKING:
    import openvino as ov

    from .prepared_model import OpenVinoPreparedModel

NAME = "openvino"
#: Below this much work (`qos.estimate.operation_work` over every subgraph, about multiply-adds) a model
#: runs on one thread: a second one costs more in hand-offs than it gains. On the shared models: the
#: text models (0.5 to 5.4 M) ran 5 to 40% faster on one thread of two, resnet_mini (46 M) 25% slower.
SMALL_MODEL_WORK = 10_000_000


def model_work(model: Model) -> int:
    """The work of one execution of `model`, each loop body counted once."""
    return sum(operation_work(sub, op) for sub in (model.main, *model.referenced) for op in sub.operations)



#: The CPU features on which a relaxed model runs in f16 by default: AMX-FP16, the float16 matrix units
#: OpenVINO's f16 kernels use (`NNAPI_OPENVINO_RELAXED_F16=1` adds AVX512-FP16). With AVX512-FP16 alone (a
#: Sapphire Rapids Xeon, OpenVINO 2026.4, its own reader, 2 threads) f16 was slower than f32 on every float
#: shared model it reads, 1.09-1.69x (mobilenet_v2_f32 1.48x), and mobilenet_v2_f32's output was 4e-2 of its
#: largest value off f32's; relaxation allows f32, so there relaxed models stay in f32
#: (`python benchmarks/vs_litert.py --targets openvino,openvino:relaxed` shows both).
FLOAT16_DEFAULT = frozenset({"amx_fp16"})
FLOAT16_FORCED = frozenset({"amx_fp16", "avx512_fp16"})


@functools.lru_cache(maxsize=1)
def native_float16() -> bool:
    """Whether a relaxed model runs in f16 on this CPU (never bf16, which lacks float16's precision): on
    float16 matrix units (`FLOAT16_DEFAULT`); NNAPI_OPENVINO_RELAXED_F16=1 also on float16 vector
    arithmetic (`FLOAT16_FORCED`), =0 nowhere."""
    setting = os.environ.get("NNAPI_OPENVINO_RELAXED_F16", "").strip()
    if setting == "0":
        return False
    return bool(cpu_flags() & (FLOAT16_FORCED if setting == "1" else FLOAT16_DEFAULT))


def native_int8() -> bool:
    """Whether this CPU has int8 dot products (VNNI: AVX512-VNNI, AVX-VNNI, AMX-INT8), which OpenVINO's
    int8 kernels need to compute right: without them its u8 x s8 products are summed in saturating 16-bit
    pairs (measured on an AVX2-only AMD EPYC: quantized chains 20 to 215 steps off the reference), so
    there a quantized model is lowered with plain rounding and computed in float (`graph.build`)."""
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})


def float16_safe(model: Model) -> bool:
    """Whether OpenVINO's f16 inference computes what a relaxed model allows: relaxation is about float32
    only, and f16 inference also runs quantized arithmetic in f16 (2-3 steps off) and saturates a float32
    constant that is NaN or infinite to +-65504. Such models stay in f32."""
    import numpy as np
    for sub in (model.main, *model.referenced):
        for operand in sub.operands:
            if OperandType(operand.type).is_quantized:
                return False
            if operand.type in (OperandType.TENSOR_FLOAT32, OperandType.FLOAT32) \
                    and operand.lifetime == OperandLifeTime.CONSTANT_COPY:
                loc = operand.location
                values = np.frombuffer(model.operand_values, np.float32, loc.length // 4, loc.offset)
                if not np.all(np.isfinite(values)):
                    return False
    return True


class OpenVinoDevice(DriverDevice):
    """See the module doc."""

    NAME = NAME
    CACHE_FILES = (1, 0)
    REMEMBER_CLAIMS = True  # proving claims lowers every operation on stand-in inputs
    #: The code that decides what is claimed and how it lowers (an edited checkout is a new driver version).
    VERSION_SOURCES = ("drivers/openvino", "drivers/openvino/rules", "drivers/base", "ops", "validation", "hal")
    VERSION_PACKAGES = {"ov": "openvino"}  # (its release: no import of OpenVINO)
    CPU_SPECIFIC = True  # compiled kernels depend on this CPU's model and instruction set
    HANDOFF_NS = 0  # inference is native and stopped by cancellation: higher-priority work starts at once
    OPTIONS = {"threads": Option("NNAPI_OPENVINO_THREADS"),
               "pinning": Option("NNAPI_OPENVINO_PINNING", bool, False)}
    #: Measured at first use; quantized types get the float ratio (the reference's integer kernels are slower).
    CALIBRATED = True
    CALIBRATED_TYPES = tuple(t for t in OperandType if t not in (OperandType.SUBGRAPH, OperandType.OEM,
                                                                 OperandType.TENSOR_OEM_BYTE))

    @once
    def core(self) -> "ov.Core":
        """The OpenVINO core this device compiles and imports with (made at first use)."""
        from .backend import ov
        return ov.Core()

    def version_parts(self) -> dict[str, str]:
        """Relaxed models compiled in f16 (`native_float16`): an import keeps the precision its export was
        compiled in, whatever the import asks, so a cache written under the other setting is not trusted."""
        return {"f16": ""} if native_float16() else {}

    # --- claims --------------------------------------------------------------------------------------
    def supported(self, model: Model) -> list[bool]:
        """The lowering table's verdict per operation (the base remembers it by content, across
        processes too: REMEMBER_CLAIMS)."""
        from .analysis import analyze
        return analyze(model)

    # --- preparation ---------------------------------------------------------------------------------
    def config(self, preference: ExecutionPreference, model: Model | None = None) -> dict:
        """Compile (and import) properties for an execution preference (and the model: a small one
        runs on one thread, see `SMALL_MODEL_WORK`)."""
        threads = self.option("threads")
        if not threads:
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if model is not None and model_work(model) < SMALL_MODEL_WORK:
            threads = 1
        pinning = self.option("pinning")
        hint = "LATENCY"
        if preference == ExecutionPreference.SUSTAINED_SPEED:
            hint = "THROUGHPUT"
        elif preference == ExecutionPreference.LOW_POWER:
            threads = 1
        relaxed = (model is not None and model.relax_computation_float32_to_float16 and native_float16()
                   and float16_safe(model))
        return {"INFERENCE_PRECISION_HINT": "f16" if relaxed else "f32", "PERFORMANCE_HINT": hint,
                "INFERENCE_NUM_THREADS": int(threads), "ENABLE_CPU_PINNING": bool(pinning)}

    def estimate_compile_ns(self, model: Model) -> int:
        # A lower bound: even one small operation takes OpenVINO a few milliseconds to compile.
        return 1_000_000 + 10_000 * len(model.main.operations)

    def compile(self, job: CompileJob) -> "OpenVinoPreparedModel":
        from .graph import build
        from .prepared_model import OpenVinoPreparedModel
        config = self.config(job.preference, job.model)
        job.checkpoint("lowering")
        # SUSTAINED_SPEED (successive frames) unrolls recurrences: slower to load, faster once loaded.
        loops = "unrolled" if job.preference == ExecutionPreference.SUSTAINED_SPEED else "compact"
        built = build(job.model, rounding="fq" if native_int8() else "plain", loops=loops)
        job.checkpoint("compiling")
        try:
            compiled = self.core.compile_model(built.model, "CPU", config)
        except Exception as first:
            # A quantized pattern OpenVINO's low-precision pipeline fails on: the same graph with plain
            # rounding (no FakeQuantize, so no int8 rewrite) computes the same values in float.
            if "FakeQuantize" not in {op.get_type_name() for op in built.model.get_ordered_ops()}:
                raise _compile_error(first) from None
            job.checkpoint("lowering again")
            built = build(job.model, rounding="plain", loops=loops)
            job.checkpoint("compiling again")
            try:
                compiled = self.core.compile_model(built.model, "CPU", config)
            except Exception as e:
                raise _compile_error(e) from None
        job.checkpoint("after compiling")
        return OpenVinoPreparedModel(job.model, job.preference, job.priority, compiled, keep_alive=built.keep_alive,
                                     has_budget=built.has_budget)

    # --- cache -----------------------------------------------------------------------------------------
    def save(self, prepared: "OpenVinoPreparedModel") -> tuple[list[bytes], list[bytes]]:
        from . import cache
        export = prepared.export
        if export is None:
            export = prepared.compiled.export_model()
            if hasattr(export, "getbuffer"):  # an io.BytesIO
                export = export.getbuffer()
        return [cache.to_blob(prepared.model, prepared.preference, prepared.priority, export)], []

    def saved(self, prepared: "OpenVinoPreparedModel", digest: bytes, uid: int) -> None:
        """A later load of this content with the same properties imports nothing (`base.verified`)."""
        self.content.keep(digest, (prepared.compiled, prepared.keep_alive),
                          _variant(self.config(prepared.preference, prepared.model)))

    def load(self, model_blobs, data_blobs, job: CompileJob) -> "OpenVinoPreparedModel":
        from . import cache
        from .prepared_model import OpenVinoPreparedModel
        model, preference, priority, export = cache.from_blob(model_blobs[0])
        config = self.config(preference, model)
        variant = _variant(config)
        hit = self.content.decoded(job.verified, variant)
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
            self.content.keep(job.verified, (compiled, keep_alive), variant)
        has_budget = len(compiled.inputs) == len(model.main.input_indexes) + 1
        return OpenVinoPreparedModel(model, preference, priority, compiled, export=export, has_budget=has_budget,
                                     keep_alive=keep_alive)


def _variant(config: dict) -> str:
    """The compile properties as the key under which verified content is reused (`base.verified`): the same
    content compiled with other properties is another compiled model."""
    return repr(sorted(config.items()))


def _compile_error(e: Exception) -> NnError:
    return NnError(ErrorStatus.GENERAL_FAILURE,
                   f"openvino compilation failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")


__all__ = ["OpenVinoDevice", "NAME"]
