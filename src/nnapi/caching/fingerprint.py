"""A fast content fingerprint of a HAL model: what caches key by and what tells two models apart."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
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


def model_fingerprint(model: Model, mapper: Callable[[MemoryPool], MappedPool] = map_pool) -> bytes:
    """xxh3-128 of the model's structure and constant bytes (not of its pool handles, which differ
    between processes for the same content); `mapper` maps its pools (the app's runtime keeps its own
    memory mapped: `memory.map_pool_kept`)."""
    memo = _REMEMBERED.get()
    if memo is not None:
        hit = memo.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
    h = xxhash.xxh3_128(model_to_bytes(dataclasses.replace(model, pools=[])))
    for pool in model.pools:
        h.update(mapper(pool).buffer)
    digest = h.digest()
    if memo is not None:
        memo[id(model)] = (model, digest)  # (the model held: its id is not reused meanwhile)
    return digest
