"""The reference driver's IDevice: supports every registered operation on the CPU."""
from __future__ import annotations

import os
import sqlite3
import time

from ..._version import __version__
from ...hal import (BufferDesc, CacheHandles, Capabilities, DeviceInfo, DeviceType, ErrorStatus,
                    ExecutionPreference, IDevice, Model, NnError, OperandLifeTime, OperandPerformance,
                    OperandType, Operation, OperationType, PerformanceInfo, Priority, Subgraph)
from ...hal.constants import NO_DEADLINE
from ...ops import find_operation
from ...caching import CachingEngine, IntegrityRegistry, load_artifacts, save_artifacts
from ...validation import validate_model, validate_preference, validate_priority
from . import cache
from .prepared_model import ReferencePreparedModel

NAME = "reference"


def _check_deadline(deadline: int | None, what: str) -> None:
    if deadline is not None and deadline < NO_DEADLINE and time.monotonic_ns() > deadline:
        raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"deadline had passed when {what} started")


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
    """

    def __init__(self, *, jit: bool | None = None, engine: bool | None = None) -> None:
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
        return [_supported(model, op) for op in model.main.operations]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return cache.NUM_MODEL_CACHE, cache.NUM_DATA_CACHE

    def prepare_model(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: int | None = None,
                      cache_handles: CacheHandles | None = None, token: bytes | None = None) -> ReferencePreparedModel:
        validate_model(model)
        validate_preference(preference)
        validate_priority(priority)
        unsupported = [f"{i} ({op.type.name})" for i, op in enumerate(model.main.operations)
                       if not _supported(model, op)]
        if unsupported:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"the reference driver does not implement operations {', '.join(unsupported)}")
        _check_deadline(deadline, "preparation")
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
        except (OSError, NnError, sqlite3.Error):
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

    def prepare_model_from_cache(self, deadline: int | None, cache_handles: CacheHandles,
                                 token: bytes) -> ReferencePreparedModel:
        _check_deadline(deadline, "preparation from cache")
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

    def allocate(self, desc: BufferDesc, prepared_models, input_roles, output_roles):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "the reference driver does not allocate driver-managed buffers yet")


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
