"""The reference driver's IDevice: supports every registered operation on the CPU."""
from __future__ import annotations

import time

from ..._version import __version__
from ...hal import (BufferDesc, CacheHandles, Capabilities, DeviceInfo, DeviceType, ErrorStatus,
                    ExecutionPreference, IDevice, Model, NnError, OperandLifeTime, OperandPerformance,
                    OperandType, Operation, OperationType, PerformanceInfo, Priority, Subgraph)
from ...hal.constants import NO_DEADLINE
from ...ops import find_operation
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
    """The numpy interpreter device: the runtime's fallback, with performance 1.0 everywhere (the CPU baseline)."""

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
        prepared = ReferencePreparedModel(model, ExecutionPreference(preference), Priority(priority))
        if cache_handles is not None and token is not None:
            cache.save(cache_handles, token, model)
        return prepared

    def prepare_model_from_cache(self, deadline: int | None, cache_handles: CacheHandles,
                                 token: bytes) -> ReferencePreparedModel:
        _check_deadline(deadline, "preparation from cache")
        model = cache.load(cache_handles, token)
        validate_model(model)
        return ReferencePreparedModel(model)

    def allocate(self, desc: BufferDesc, prepared_models, input_roles, output_roles):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "the reference driver does not allocate driver-managed buffers yet")
