"""The operation registry: one entry per operation type with its validate / prepare / execute triple.

Drivers look operations up here, never in a switch (Android's OperationResolver).
- `validate(ctx)` checks counts, types and constant parameters; raises NnError(INVALID_ARGUMENT).
- `prepare(ctx)` returns the output dimensions from input dimensions and scalar parameters.
- `execute(ctx)` returns the output values as numpy arrays (the reference kernels).
- `params(ctx)` (optional) returns the operation's resolved parameters as a frozen dataclass
  (padding made explicit, axes normalised, flags decoded): what a compiling driver's lowering
  rule reads, through the one public resolver `resolve(ctx)`, instead of re-deriving it.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..hal import OperationType
from .context import OpContext

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
    for op_type in types:
        if op_type in _REGISTRY:
            raise RuntimeError(f"operation {op_type.name} registered twice")
        _REGISTRY[op_type] = OperationRegistration(op_type, validate, prepare, execute,
                                                   allow_omitted_operand, allow_zero_sized_input, params)


def find_operation(op_type: OperationType) -> OperationRegistration | None:
    """The registration of `op_type`, or None when no module implements it."""
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
            if info.name not in ("registry", "context", "tensor") and not info.name.startswith("_"):
                importlib.import_module(f"{ops.__name__}.{info.name}")
        _loaded = True
