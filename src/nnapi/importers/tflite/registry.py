"""The importer's one operator table: TFLite builtin operator (or custom code) -> mapping function.

Mappings register themselves per operator family in `operators/` with `@register(*names)` (or
`@register_custom(*codes)` for a custom operator), as `ops/` registers operations; this module
imports none of them. Importing `nnapi.importers.tflite` loads every family, so the table is
complete once that package is imported.

A mapping is `fn(graph, op) -> None`: it reads the operator's inputs, outputs and options through
the graph's checked accessors and emits NNAPI operations on the graph. It raises `Unsupported`
with the reason when the operator (or this use of it) has no mapping, and `BadModel` (BAD_DATA)
when the model itself is wrong.
"""
from __future__ import annotations

from typing import Any, Callable

from .imported import Unsupported
from .schema import FlatOperator

#: `fn(graph, op)`: maps one TFLite operator onto the graph (a `graph.Graph`).
Mapping = Callable[[Any, FlatOperator], None]

_BUILTIN: dict[str, Mapping] = {}
_CUSTOM: dict[str, Mapping] = {}


class UnmappedOperator(Unsupported):
    """No mapping is registered for the operator `operator` (a builtin name, or CUSTOM's code)."""

    def __init__(self, operator: str, reason: str) -> None:
        super().__init__(reason)
        self.operator = operator


def _add(table: dict[str, Mapping], names: tuple[str, ...], what: str) -> Callable[[Mapping], Mapping]:
    if not names:
        raise TypeError(f"register a {what} mapping under at least one name")

    def wrap(fn: Mapping) -> Mapping:
        for name in names:
            if name in table:
                raise RuntimeError(f"TFLite {what} operator {name} registered twice")
            table[name] = fn
        return fn
    return wrap


def register(*names: str) -> Callable[[Mapping], Mapping]:
    """Register the decorated function as the mapping of the TFLite builtin operators `names`
    (e.g. "ADD", "SUB"); a second registration of a name is a bug."""
    return _add(_BUILTIN, names, "builtin")


def register_custom(*codes: str) -> Callable[[Mapping], Mapping]:
    """Register the decorated function as the mapping of the CUSTOM operators with these custom
    codes (e.g. MediaPipe's "Convolution2DTransposeBias")."""
    return _add(_CUSTOM, codes, "custom")


def mapping_of(op: FlatOperator) -> Mapping:
    """The mapping of operator `op`: `UnmappedOperator` (an `Unsupported`, which the graph records as
    the operator's `Problem`) when none is registered for its name or custom code."""
    if op.name == "CUSTOM":
        fn = _CUSTOM.get(op.custom_code or "")
        if fn is None:
            raise UnmappedOperator(op.label, "custom operator; NNAPI has no equivalent")
        return fn
    fn = _BUILTIN.get(op.name)
    if fn is None:
        raise UnmappedOperator(op.name, "no NNAPI mapping for this builtin operator")
    return fn


def registered_operators() -> list[str]:
    """The builtin operator names with a mapping, sorted, then the custom codes as "CUSTOM <code>"."""
    return sorted(_BUILTIN) + [f"CUSTOM {code}" for code in sorted(_CUSTOM)]
