"""The XLA driver's memory domain on the shared toolkit `nnapi.memory.domains` (one tracker per
driver process)."""
from __future__ import annotations

from ...memory.domains import DriverDomain


def _prepared_class() -> type:
    from .prepared_model import XlaPreparedModel
    return XlaPreparedModel


DOMAIN = DriverDomain(_prepared_class)
allocate, resolve = DOMAIN.allocate, DOMAIN.resolve
