"""The reference driver's IDevice: supports every registered operation on the CPU."""
from __future__ import annotations

import threading

from ...hal import (Capabilities, DataLocation, ErrorStatus, Model, NnError, Operand, OperandLifeTime,
                    OperandPerformance, OperandType, Operation, OperationType, PerformanceInfo, Subgraph)
from ...ops import find_operation
from ...qos import Calibration, Scheduler, calibrate
from ..base import CompileJob, DriverDevice, env_flag
from . import cache
from .prepared_model import ReferencePreparedModel

NAME = "reference"


_calibration_lock = threading.Lock()
_calibration: Calibration | None = None


def calibration() -> Calibration:
    """The cost model of this machine, measured once per process before any run: the interpreter's
    own cost per operation (a chain of 1-element ADDs) and numpy's element and MAC speeds."""
    global _calibration
    with _calibration_lock:
        if _calibration is None:
            import numpy as np
            from .interpreter import SubgraphPlan
            n = 16
            f32, tmp = OperandType.TENSOR_FLOAT32, OperandLifeTime.TEMPORARY_VARIABLE
            operands = [Operand(f32, (1,), lifetime=OperandLifeTime.SUBGRAPH_INPUT),
                        Operand(OperandType.INT32, (), lifetime=OperandLifeTime.CONSTANT_COPY,
                                location=DataLocation(0, 0, 4))]
            operations = []
            for k in range(n):
                operands.append(Operand(f32, (1,), lifetime=OperandLifeTime.SUBGRAPH_OUTPUT if k == n - 1 else tmp))
                operations.append(Operation(OperationType.ADD, (len(operands) - 2 if k else 0, 0, 1),
                                            (len(operands) - 1,)))
            probe = Model(Subgraph(operands, operations, (0,), (len(operands) - 1,)), operand_values=bytes(4))
            plan = SubgraphPlan(probe, probe.main, [])
            x = np.ones(1, np.float32)
            _calibration = calibrate(lambda: plan.run({0: x}), n)
        return _calibration


def _supported(model: Model, op: Operation) -> bool:
    """Registered, and for IF/WHILE every operation of the referenced subgraphs too."""
    return _supported_in(model, model.main, op, frozenset())


def _supported_in(model: Model, sub: Subgraph, op: Operation, seen: frozenset[int]) -> bool:
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

    def __init__(self, *, jit: bool | None = None, engine: bool | None = None,
                 memory_limit_bytes: int | None = None, workers: int | None = None, queue_capacity: int = 256,
                 scheduler: Scheduler | None = None) -> None:
        super().__init__(scheduler=scheduler, workers=workers, queue_capacity=queue_capacity,
                         memory_limit_bytes=memory_limit_bytes, engine=engine)
        self.jit = env_flag("NNAPI_REFERENCE_JIT") if jit is None else jit

    def calibration_twin(self) -> "ReferenceDevice":
        """The baseline compiling drivers calibrate against: planned at preparation, no caching engine."""
        return ReferenceDevice(jit=False, engine=False)

    def capabilities(self) -> Capabilities:
        one = PerformanceInfo(1.0, 1.0)
        types = sorted(t for t in OperandType if t not in (OperandType.SUBGRAPH, OperandType.OEM,
                                                           OperandType.TENSOR_OEM_BYTE))
        return Capabilities(one, one, tuple(OperandPerformance(t, one) for t in types), one, one)

    def supported(self, model: Model) -> list[bool]:
        return [_supported(model, op) for op in model.main.operations]

    def compile(self, job: CompileJob) -> ReferencePreparedModel:
        if self.jit:  # plan at the first execution, and write the cache then (C11)
            return ReferencePreparedModel(job.model, job.preference, job.priority, lazy=True,
                                          on_planned=job.defer_cache())
        return ReferencePreparedModel(job.model, job.preference, job.priority)

    def save(self, prepared: ReferencePreparedModel) -> tuple[list[bytes], list[bytes]]:
        model_blob, data_blob = cache.to_artifacts(prepared.model, prepared.preference, prepared.priority)
        return [model_blob], [data_blob]

    def load(self, model_blobs, data_blobs, job: CompileJob) -> ReferencePreparedModel:
        model, preference, priority = cache.from_artifacts(model_blobs[0], data_blobs[0])
        try:
            return ReferencePreparedModel(model, preference, priority)
        except NnError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"cached model cannot be planned: {e.message}") from None


