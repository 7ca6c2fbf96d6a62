"""The XLA driver's memory domain: `allocate` and the driver-managed buffers of requests, on the
shared toolkit `nnapi.memory.domains` (one tracker per driver process)."""
from __future__ import annotations

from typing import Sequence

from ...hal import BufferDesc, BufferRole, Operand, Request
from ...memory.domains import BufferTracker, DriverBuffer, RequestBuffers, allocate as _allocate

#: Tokens of this process's live xla-driver buffers.
TRACKER = BufferTracker()


def _io_operands(prepared_model: object) -> tuple[Sequence[Operand], Sequence[Operand]] | None:
    from .prepared_model import XlaPreparedModel
    if not isinstance(prepared_model, XlaPreparedModel):
        return None  # a foreign object, or another driver's prepared model
    main = prepared_model.model.main
    return [main.operands[i] for i in main.input_indexes], [main.operands[i] for i in main.output_indexes]


def allocate(desc: BufferDesc, prepared_models: Sequence[object], input_roles: Sequence[BufferRole],
             output_roles: Sequence[BufferRole]) -> tuple[DriverBuffer, int]:
    return _allocate(TRACKER, desc, prepared_models, input_roles, output_roles, _io_operands)


def resolve(request: Request, prepared_model: object) -> RequestBuffers:
    ios = _io_operands(prepared_model)
    assert ios is not None
    return RequestBuffers.resolve(TRACKER, request, prepared_model, *ios)
