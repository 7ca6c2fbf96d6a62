"""The reference driver's IDevice: supports every registered operation on the CPU."""
from __future__ import annotations

import os
import sqlite3
import threading

from ..._version import __version__
from ...hal import (BufferDesc, CacheHandles, Capabilities, ClientId, DataLocation, DeviceInfo, DeviceType,
                    ErrorStatus, ExecutionPreference, IDevice, Model, NnError, Operand, OperandLifeTime,
                    OperandPerformance, OperandType, Operation, OperationType, PerformanceInfo, Priority, Subgraph)
from ...ops import find_operation
from ...memory import mappable_constant_flags
from ...caching import CachingEngine, IntegrityRegistry, load_artifacts, save_artifacts
from ...qos import Calibration, DurationStats, Scheduler, Ticket, calibrate, estimate_peak_bytes, model_cost_ns
from ...validation import validate_model, validate_preference, validate_priority
from . import cache
from .prepared_model import ReferencePreparedModel, client_uid

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


class ReferenceDevice(IDevice):
    """The numpy interpreter device: the runtime's fallback, with performance 1.0 everywhere (the CPU baseline).

    Options: `jit` (or NNAPI_REFERENCE_JIT=1) builds the plan at the first execution and writes the
    cache then; `engine` (or NNAPI_REFERENCE_ENGINE=1) caches compilations made without app caching
    information in the driver's own caching engine.

    Quality of service (`nnapi.qos`): every preparation and execution goes through `scheduler`
    (default: `workers` slots, or NNAPI_REFERENCE_WORKERS, else the CPU count; `queue_capacity`
    waiting tasks). `memory_limit_bytes` (or NNAPI_REFERENCE_MEMORY_LIMIT): a model whose estimated
    peak memory is larger is refused at preparation with RESOURCE_EXHAUSTED_PERSISTENT.
    """

    def __init__(self, *, jit: bool | None = None, engine: bool | None = None,
                 memory_limit_bytes: int | None = None, workers: int | None = None, queue_capacity: int = 256,
                 scheduler: Scheduler | None = None) -> None:
        limit = os.environ.get("NNAPI_REFERENCE_MEMORY_LIMIT", "").strip()
        self.memory_limit_bytes = memory_limit_bytes if memory_limit_bytes is not None else (
            int(limit) if limit.isdigit() else None)
        env_workers = os.environ.get("NNAPI_REFERENCE_WORKERS", "").strip()
        self.scheduler = scheduler if scheduler is not None else Scheduler(
            workers if workers is not None else (int(env_workers) if env_workers.isdigit() else None),
            queue_capacity)
        self.jit = _flag("NNAPI_REFERENCE_JIT") if jit is None else jit
        version = self.get_info().version
        self.registry = IntegrityRegistry(NAME, version)
        self.engine = CachingEngine(NAME, version) if (_flag("NNAPI_REFERENCE_ENGINE") if engine is None
                                                      else engine) else None

    def get_info(self) -> DeviceInfo:
        return DeviceInfo(NAME, __version__, DeviceType.CPU, 30)

    def get_capabilities(self) -> Capabilities:
        one = PerformanceInfo(1.0, 1.0)
        types = sorted(t for t in OperandType if t not in (OperandType.SUBGRAPH, OperandType.OEM,
                                                           OperandType.TENSOR_OEM_BYTE))
        return Capabilities(one, one, tuple(OperandPerformance(t, one) for t in types), one, one)

    def get_supported_operations(self, model: Model) -> list[bool]:
        validate_model(model)
        mappable = mappable_constant_flags(model)  # M5: a constant whose handle cannot be mapped is unsupported
        return [_supported(model, op) and ok for op, ok in zip(model.main.operations, mappable)]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return cache.NUM_MODEL_CACHE, cache.NUM_DATA_CACHE

    def prepare_model(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: int | None = None,
                      cache_handles: CacheHandles | None = None, token: bytes | None = None, *,
                      client: ClientId | None = None) -> ReferencePreparedModel:
        validate_model(model)
        validate_preference(preference)
        validate_priority(priority)
        unsupported = [f"{i} ({op.type.name})" for i, op in enumerate(model.main.operations)
                       if not _supported(model, op)]
        if unsupported:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"the reference driver does not implement operations {', '.join(unsupported)}")
        self._check_memory(model)
        ticket = self._submit(client, Priority(priority), deadline, "preparation")
        return self._bind(ticket, ticket.run(lambda: self._prepare(model, preference, priority, cache_handles, token)))

    def _prepare(self, model: Model, preference, priority, cache_handles: CacheHandles | None,
                 token: bytes | None) -> ReferencePreparedModel:
        preference, priority = ExecutionPreference(preference), Priority(priority)
        has_cache = cache_handles is not None and token is not None and (
            cache_handles.model_cache or cache_handles.data_cache)
        if not has_cache and self.engine is not None:
            return self._prepare_with_engine(model, preference, priority)
        if self.jit:
            saver = _CacheSaver(self, cache_handles, token) if has_cache else None
            return ReferencePreparedModel(model, preference, priority, lazy=True,
                                          on_planned=saver.save if saver else None)
        prepared = ReferencePreparedModel(model, preference, priority)
        if has_cache:
            self._save(cache_handles, token, model, preference, priority)
        return prepared

    def _save(self, handles: CacheHandles, token: bytes, model: Model, preference, priority) -> None:
        """Write the cache; failing to write only means no cache (C: cache errors never fail preparation)."""
        try:
            save_artifacts(handles, token, self.registry, self.get_number_of_cache_files_needed(),
                           *_split(cache.to_artifacts(model, preference, priority)))
        except (OSError, NnError, sqlite3.Error, ValueError, TypeError):
            pass

    def _prepare_with_engine(self, model: Model, preference, priority) -> ReferencePreparedModel:
        model_blob, data_blob = cache.to_artifacts(model, preference, priority)
        key = self.engine.key_for(model_blob, data_blob)
        try:
            hit = self.engine.get(key)
            if hit is not None:
                cached, preference, priority = cache.from_artifacts(hit[0][0], hit[1][0])
                return ReferencePreparedModel(cached, preference, priority)
            self.engine.put(key, [model_blob], [data_blob])
        except (OSError, NnError, sqlite3.Error):
            pass
        return ReferencePreparedModel(model, preference, priority)

    def prepare_model_from_cache(self, deadline: int | None, cache_handles: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> ReferencePreparedModel:
        # The priority is in the cache (Q2): the preparation itself queues at the default.
        ticket = self._submit(client, Priority.MEDIUM, deadline, "preparation from cache")
        prepared = ticket.run(lambda: self._prepare_from_cache(cache_handles, token))
        self._check_memory(prepared.model)
        return self._bind(ticket, prepared)

    def _prepare_from_cache(self, cache_handles: CacheHandles, token: bytes) -> ReferencePreparedModel:
        try:
            (model_blob,), (data_blob,) = load_artifacts(cache_handles, token, self.registry,
                                                         self.get_number_of_cache_files_needed())
        except sqlite3.Error as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"integrity registry unavailable: {e}") from None
        model, preference, priority = cache.from_artifacts(model_blob, data_blob)
        try:
            return ReferencePreparedModel(model, preference, priority)
        except NnError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"cached model cannot be planned: {e.message}") from None

    # --- quality of service ------------------------------------------------------------------------
    def _submit(self, client: ClientId | None, priority: Priority, deadline: int | None, label: str) -> Ticket:
        """Admission of a preparation: refused at once when the deadline has passed (PERSISTENT) or
        the queue is full (RESOURCE_EXHAUSTED_TRANSIENT)."""
        return self.scheduler.submit(client=client_uid(client), priority=priority, deadline=deadline, label=label)

    def _check_memory(self, model: Model) -> None:
        if self.memory_limit_bytes is None:
            return
        peak = estimate_peak_bytes(model)
        if peak > self.memory_limit_bytes:
            raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                          f"the model needs at least {peak} bytes at its peak (constants and live tensors), "
                          f"more than the reference driver's limit of {self.memory_limit_bytes} bytes")

    def _bind(self, ticket: Ticket, prepared: ReferencePreparedModel) -> ReferencePreparedModel:
        """Executions of `prepared` run on this device's scheduler for the preparing app, with the cost
        model's estimate until past runs are known."""
        prepared.bind_qos(self.scheduler, ticket.uid, DurationStats(model_cost_ns(prepared.model, calibration())))
        return prepared

    def allocate(self, desc: BufferDesc, prepared_models, input_roles, output_roles):
        """A driver-managed buffer for the roles (memory domains, VTS-BEHAVIOURS 3.1): IBuffer and token."""
        from . import buffers
        return buffers.allocate(desc, prepared_models, input_roles, output_roles)


class _CacheSaver:
    """JIT mode: keeps duplicates of the cache fds and writes the cache once the plan is built (C11)."""

    def __init__(self, device: ReferenceDevice, handles: CacheHandles, token: bytes) -> None:
        self.device = device
        self.token = bytes(token)
        self.handles = CacheHandles(tuple(os.dup(fd) for fd in handles.model_cache),
                                    tuple(os.dup(fd) for fd in handles.data_cache))

    def save(self, prepared: ReferencePreparedModel) -> None:
        try:
            self.device._save(self.handles, self.token, prepared.model, prepared.preference, prepared.priority)
        finally:
            for fd in (*self.handles.model_cache, *self.handles.data_cache):
                os.close(fd)
            self.handles = CacheHandles()

    def __del__(self) -> None:
        for fd in (*self.handles.model_cache, *self.handles.data_cache):
            try:
                os.close(fd)
            except OSError:
                pass


def _split(artifacts: tuple[bytes, bytes]) -> tuple[list[bytes], list[bytes]]:
    model_blob, data_blob = artifacts
    return [model_blob], [data_blob]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
