"""The reference driver's IDevice: supports every registered operation on the CPU."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...hal import (Capabilities, DataLocation, ErrorStatus, Model, NnError, Operand, OperandLifeTime,
                    OperandPerformance, OperandType, Operation, OperationType, PerformanceInfo, Subgraph)
from ...qos import Calibration, calibrate, model_cost_ns
from ..base import CompileJob, DriverDevice, Option, once
from . import cache

if TYPE_CHECKING:  # (the interpreter is imported when a model is first prepared, not when devices are listed)
    from .prepared_model import ReferencePreparedModel

NAME = "reference"


def _supported(model: Model, op: Operation) -> bool:
    """Registered, and for IF/WHILE every operation of the referenced subgraphs too."""
    return _supported_in(model, model.main, op, frozenset())


def _supported_in(model: Model, sub: Subgraph, op: Operation, seen: frozenset[int]) -> bool:
    from ...ops import find_operation
    if find_operation(op.type) is None:
        return False
    if op.type not in (OperationType.IF, OperationType.WHILE):
        return True
    for i in op.inputs:
        operand = sub.operands[i]
        if operand.lifetime == OperandLifeTime.SUBGRAPH and operand.location.offset not in seen:
            body = model.referenced[operand.location.offset]
            if not all(_supported_in(model, body, o, seen | {operand.location.offset}) for o in body.operations):
                return False
    return True


class ReferenceDevice(DriverDevice):
    """The numpy interpreter device: the runtime's fallback, with performance 1.0 everywhere (the CPU baseline).

    Options: `jit` (or NNAPI_REFERENCE_JIT=1) builds the plan at the first execution and writes the
    cache then; `engine` (or NNAPI_REFERENCE_ENGINE=1) caches compilations made without app caching
    information in the driver's own caching engine (off by default: planning is cheaper than a lookup).

    Quality of service (`nnapi.qos`, through the driver base): every preparation and execution goes
    through `scheduler` (default: `workers` slots, or NNAPI_REFERENCE_WORKERS, else the CPU count;
    `queue_capacity` waiting tasks). `memory_limit_bytes` (or NNAPI_REFERENCE_MEMORY_LIMIT): a model
    whose estimated peak memory is larger is refused at preparation with RESOURCE_EXHAUSTED_PERSISTENT,
    and so is a tensor larger than it whose size is known only at run time.
    """

    NAME = "reference"
    CACHE_FILES = (cache.NUM_MODEL_CACHE, cache.NUM_DATA_CACHE)
    #: Its claims are cheap, but validating the model first is not (mobilenet_v2: tens of ms): a cached
    #: start in a new process asks the state directory instead.
    REMEMBER_CLAIMS = True

    OPTIONS = {"jit": Option("NNAPI_REFERENCE_JIT", bool, False)}
    #: The baseline compiling drivers calibrate against: planned at preparation, no caching engine.
    CALIBRATION_OPTIONS = {"jit": False}

    @once
    def speed(self) -> Calibration:
        """This machine's cost model, measured at first use: the interpreter's own cost per operation (a
        chain of 16 one-element ADDs) and numpy's element and MAC speeds."""
        import numpy as np
        from .interpreter import SubgraphPlan
        f32, tmp, n = OperandType.TENSOR_FLOAT32, OperandLifeTime.TEMPORARY_VARIABLE, 16
        operands = [Operand(f32, (1,), lifetime=OperandLifeTime.SUBGRAPH_INPUT),
                    Operand(OperandType.INT32, (), lifetime=OperandLifeTime.CONSTANT_COPY,
                            location=DataLocation(0, 0, 4)),
                    *(Operand(f32, (1,), lifetime=OperandLifeTime.SUBGRAPH_OUTPUT if k == n - 1 else tmp)
                      for k in range(n))]
        operations = [Operation(OperationType.ADD, (k + 1 if k else 0, 0, 1), (k + 2,)) for k in range(n)]
        probe = Model(Subgraph(operands, operations, (0,), (n + 1,)), operand_values=bytes(4))
        plan, x = SubgraphPlan(probe, probe.main, []), np.ones(1, np.float32)
        return calibrate(lambda: plan.run({0: x}), n)

    def estimate_run_ns(self, prepared: ReferencePreparedModel) -> int:
        return model_cost_ns(prepared.model, self.speed)

    def capabilities(self) -> Capabilities:
        one = PerformanceInfo(1.0, 1.0)
        types = sorted(t for t in OperandType if t not in (OperandType.SUBGRAPH, OperandType.OEM,
                                                           OperandType.TENSOR_OEM_BYTE))
        return Capabilities(one, one, tuple(OperandPerformance(t, one) for t in types), one, one)

    def supported(self, model: Model) -> list[bool]:
        return [_supported(model, op) for op in model.main.operations]

    def compile(self, job: CompileJob) -> ReferencePreparedModel:
        from .prepared_model import ReferencePreparedModel
        if self.option("jit"):  # plan at the first execution, and write the cache then (C11)
            return ReferencePreparedModel(job.model, job.preference, job.priority, lazy=True,
                                          on_planned=job.defer_cache())
        return ReferencePreparedModel(job.model, job.preference, job.priority)

    def save(self, prepared: ReferencePreparedModel) -> tuple[list[bytes], list[bytes]]:
        model_blob, data_blob = cache.to_artifacts(prepared.model, prepared.preference, prepared.priority)
        return [model_blob], [data_blob]

    def load(self, model_blobs, data_blobs, job: CompileJob) -> ReferencePreparedModel:
        from .prepared_model import ReferencePreparedModel
        model, preference, priority = cache.from_artifacts(model_blobs[0], data_blobs[0])
        try:
            return ReferencePreparedModel(model, preference, priority)
        except NnError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"cached model cannot be planned: {e.message}") from None


