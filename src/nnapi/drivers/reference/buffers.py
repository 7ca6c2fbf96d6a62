"""The reference driver's memory domain on the shared toolkit `nnapi.memory.domains`: one tracker
per driver process, so tokens are unique among the live buffers of every ReferenceDevice here."""
from __future__ import annotations

from ...memory.domains import DriverDomain


def _prepared_class() -> type:
    from .prepared_model import ReferencePreparedModel
    return ReferencePreparedModel


DOMAIN = DriverDomain(_prepared_class)
allocate, resolve = DOMAIN.allocate, DOMAIN.resolve
