"""A fast content fingerprint of a HAL model: what caches key by and what tells two models apart."""
from __future__ import annotations

import dataclasses

import xxhash

from ..hal import Model
from ..hal.serialize import model_to_bytes
from ..memory import map_pool


def model_fingerprint(model: Model) -> bytes:
    """xxh3-128 of the model's structure and constant bytes (not of its pool handles, which differ
    between processes for the same content)."""
    h = xxhash.xxh3_128(model_to_bytes(dataclasses.replace(model, pools=[])))
    for pool in model.pools:
        h.update(map_pool(pool).buffer)
    return h.digest()
