"""The OpenVINO lowering rules, one module per operation family; each registers itself in
`lowering.LOWERINGS`. `load_all()` imports every rule module once (modules whose names start with an
underscore are helpers, not rules); whoever reads the table calls it.
"""
from __future__ import annotations


def load_all() -> None:
    """Import every rule module once (`base.lowering.LoweringTable.load`)."""
    from ..lowering import LOWERINGS
    LOWERINGS.load()


__all__ = ["load_all"]
