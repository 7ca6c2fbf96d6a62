"""The operation registry: one entry per operation type with its validate / prepare / execute triple.

Drivers look operations up here, never in a switch (Android's OperationResolver). A lookup imports only the
module of the operation asked for (`index.MODULES`, the registrations' own record of where each lives,
checked against them by the tests), so a start that reads a model of a dozen operation types imports a
dozen modules, not all 64; an operation the index does not name loads them all.
- `validate(ctx)` checks counts, types and constant parameters; raises NnError(INVALID_ARGUMENT).
- `prepare(ctx)` returns the output dimensions from input dimensions and scalar parameters.
- `execute(ctx)` returns the output values as numpy arrays (the reference kernels).
- `params(ctx)` (optional) returns the operation's resolved parameters as a frozen dataclass
  (padding made explicit, axes normalised, flags decoded): what a compiling driver's lowering
  rule reads, through the one public resolver `resolve(ctx)`, instead of re-deriving it.
"""
from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..hal import OperationType
from .context import OpContext
from .index import MODULES

ValidateFn = Callable[[OpContext], None]
PrepareFn = Callable[[OpContext], list[tuple[int, ...]]]
ExecuteFn = Callable[[OpContext], list[np.ndarray]]
ParamsFn = Callable[[OpContext], Any]


@dataclass(frozen=True)
class OperationRegistration:
    type: OperationType
    validate: ValidateFn
    prepare: PrepareFn
    execute: ExecuteFn
    #: Optional inputs may be NO_VALUE (otherwise an omitted operand is invalid).
    allow_omitted_operand: bool = False
    #: Inputs may have a 0 dimension (zero-sized tensors).
    allow_zero_sized_input: bool = False
    #: The resolved parameters of one operation (see the module doc); None: nothing to resolve.
    params: ParamsFn | None = None
    #: The module that registered it (what `index.MODULES` records).
    module: str = ""


_REGISTRY: dict[OperationType, OperationRegistration] = {}


def resolver(fn: ParamsFn) -> ParamsFn:
    """Decorator of an operation's params function: its result is remembered on the context, so
    prepare, execute (the reference interpreter calls both on one context per run) and a lowering
    rule reading the same context resolve the parameters once."""
    @functools.wraps(fn)
    def params(ctx: OpContext) -> Any:
        return ctx.resolved(fn)
    return params


def register(*types: OperationType, validate: ValidateFn, prepare: PrepareFn, execute: ExecuteFn,
             allow_omitted_operand: bool = False, allow_zero_sized_input: bool = False,
             params: ParamsFn | None = None) -> None:
    """Register one triple for one or more operation types; a second registration is a bug."""
    module = sys._getframe(1).f_globals.get("__name__", "").rpartition(".")[2]
    for op_type in types:
        if op_type in _REGISTRY:
            raise RuntimeError(f"operation {op_type.name} registered twice")
        _REGISTRY[op_type] = OperationRegistration(op_type, validate, prepare, execute,
                                                   allow_omitted_operand, allow_zero_sized_input, params, module)


def find_operation(op_type: OperationType) -> OperationRegistration | None:
    """The registration of `op_type`, or None when no module implements it."""
    found = _REGISTRY.get(op_type)
    if found is not None or _loaded:
        return found
    module = MODULES.get(getattr(op_type, "name", ""))
    if module is not None:  # (the import lock: the module is whole once imported)
        import importlib
        importlib.import_module(f"{__package__}.{module}")
        found = _REGISTRY.get(op_type)
        if found is not None:
            return found
    _load_all()
    return _REGISTRY.get(op_type)


def resolve(ctx: OpContext) -> Any:
    """The resolved parameters of the operation `ctx` describes (its registration's `params`), read
    at compile time from constant inputs. INVALID_ARGUMENT when they are invalid; LookupError when
    the operation has no resolver."""
    registration = find_operation(ctx.op)
    if registration is None or registration.params is None:
        raise LookupError(f"{ctx.op.name} has no parameter resolver")
    return registration.params(ctx)


def registered_operations() -> list[OperationType]:
    _load_all()
    return sorted(_REGISTRY)


_loaded = False
_load_lock = threading.RLock()


def index_of_registrations() -> dict[str, str]:
    """{operation name: module} of every registration, as `index.MODULES` must say (a test checks it)."""
    _load_all()
    return {op.name: reg.module for op, reg in sorted(_REGISTRY.items(), key=lambda kv: kv[0].name)}


def write_index() -> None:
    """Write `index.py`'s table from the registrations (after adding or moving an operation)."""
    import pathlib
    path = pathlib.Path(__file__).with_name("index.py")
    text = path.read_text()
    rows = "".join(f'    "{op}": "{module}",\n' for op, module in index_of_registrations().items())
    path.write_text(text[:text.index("MODULES: dict")] + "MODULES: dict[str, str] = {\n" + rows + "}\n")


def _load_all() -> None:
    """Import every operation module once, so each registers itself. Threads that ask while another
    imports wait for the whole registry: a lookup never sees it half filled (a service's first two
    concurrent preparations had an operation reported unsupported, and that claim remembered)."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        import importlib
        import pkgutil

        from .. import ops
        for info in pkgutil.iter_modules(ops.__path__):
            if info.name not in ("registry", "context", "tensor", "index") and not info.name.startswith("_"):
                importlib.import_module(f"{ops.__name__}.{info.name}")
        _loaded = True
