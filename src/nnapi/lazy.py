"""Package exports imported on first use (PEP 562), so that importing a package costs only what is used:
a cached start imports neither the operation helpers, nor the validator, nor the driver base's
compile-time modules, until something asks for them."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, Mapping


def exports(package: str, names: Mapping[str, str], before: Callable[[], None] | None = None,
            submodules: bool = False) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `names` maps each export to the submodule that defines it
    (".binding", or ".binding:other_name" where the export is named otherwise there); the first access
    imports that submodule (after `before`, when given) and keeps the value in the package, so later
    accesses cost nothing. With `submodules`, any other name that is a submodule of `package` is imported
    on first access too (`import nnapi` then `nnapi.hal`, as when the package imported it itself)."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            if submodules and not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}"):
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before()
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__all__ = ["exports"]
