"""A fast content fingerprint of a HAL model: what caches key by and what tells two models apart."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import weakref
from typing import Callable, Iterator

import xxhash

from ..hal import MemoryPool, Model
from ..hal.serialize import model_to_bytes
from ..memory import MappedPool, map_pool


_REMEMBERED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("nnapi_fingerprints", default=None)


@contextlib.contextmanager
def remembered_fingerprints() -> Iterator[None]:
    """Within it, each model object is fingerprinted once: a compilation asks for it for its cache
    token and again for each device's claims, while nothing changes the model."""
    token = _REMEMBERED.set({})
    try:
        yield
    finally:
        _REMEMBERED.reset(token)


#: The hash state after the structure of models whose structure never changes (`fixed`), by object:
#: their later fingerprints hash only the pools' bytes, the one part an app may change (its memory).
_STRUCTURES: dict[int, tuple["weakref.ref[Model]", "xxhash.xxh3_128"]] = {}
_STRUCTURES_LOCK = threading.Lock()


def _structure_hash(model: Model, fixed: bool) -> "xxhash.xxh3_128":
    """A fresh hash state fed with the model's structure (pools left out)."""
    if not fixed:
        return xxhash.xxh3_128(model_to_bytes(dataclasses.replace(model, pools=[])))
    key = id(model)
    with _STRUCTURES_LOCK:
        hit = _STRUCTURES.get(key)
    if hit is not None and hit[0]() is model:
        return hit[1].copy()
    h = xxhash.xxh3_128(model_to_bytes(dataclasses.replace(model, pools=[])))
    ref = weakref.ref(model, lambda r, key=key: _forget(key, r))
    with _STRUCTURES_LOCK:
        _STRUCTURES[key] = (ref, h.copy())
    return h


def _forget(key: int, ref: "weakref.ref[Model]") -> None:
    with _STRUCTURES_LOCK:
        if key in _STRUCTURES and _STRUCTURES[key][0] is ref:
            del _STRUCTURES[key]


def model_fingerprint(model: Model, mapper: Callable[[MemoryPool], MappedPool] = map_pool, *,
                      fixed: bool = False) -> bytes:
    """xxh3-128 of the model's structure and constant bytes (not of its pool handles, which differ
    between processes for the same content); `mapper` maps its pools (the app's runtime keeps its own
    memory mapped: `memory.map_pool_kept`). `fixed`: nothing changes this model object's structure
    (a finished model's), so it is hashed once per object and only the pools' bytes each time."""
    memo = _REMEMBERED.get()
    if memo is not None:
        hit = memo.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
    h = _structure_hash(model, fixed)
    for pool in model.pools:
        h.update(mapper(pool).buffer)
    digest = h.digest()
    if memo is not None:
        memo[id(model)] = (model, digest)  # (the model held: its id is not reused meanwhile)
    return digest
