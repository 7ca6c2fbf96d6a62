"""The lowering rules, one module per operation family; each registers itself in `lowering.LOWERINGS`.

`load_all()` imports every rule module once (modules whose names start with an underscore are
helpers, not rules); whoever reads the table calls it first.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading

_lock = threading.Lock()
_loaded = False


def load_all() -> None:
    """Import every rule module once, so each registers its rules."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


__all__ = ["load_all"]
