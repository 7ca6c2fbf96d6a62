"""The OpenVINO lowering rules, one module per operation family; each registers itself in
`lowering.LOWERINGS`. `load_all()` imports every rule module once (modules whose names start with an
underscore are helpers, not rules); whoever reads the table calls it.
"""
from __future__ import annotations

from ...base import RuleModules

load_all = RuleModules(__name__).load

__all__ = ["load_all"]
