"""EMBEDDING_LOOKUP and HASHTABLE_LOOKUP: gather rows of a value table.

EMBEDDING_LOOKUP: input 0 lookups (TENSOR_INT32 [n]), input 1 values [rows, ...] (float32,
float16, int32, quant8 asymm and signed); output [n, ...] = values[lookups[i]]. An index outside
[0, rows) fails at execution, as in Android's EmbeddingLookup::Eval.

HASHTABLE_LOOKUP: input 0 lookups (TENSOR_INT32 [n]), input 1 keys (TENSOR_INT32 [rows],
sorted ascending as Android's bsearch expects), input 2 values [rows, ...] (float32, int32,
quant8 asymm). Output 0 [n, ...]: the row whose key equals lookups[i], or zeros when there is
none; output 1 hits (TENSOR_QUANT8_ASYMM [n]): 1 where a key was found, else 0.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_EMBEDDING_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
                    T.TENSOR_QUANT8_ASYMM_SIGNED)
_HASHTABLE_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


def _check_value_type(ctx: OpContext, i: int, allowed: tuple[T, ...]) -> T:
    t = ctx.inputs[i].type
    if t not in allowed:
        raise ctx.fail(f"input {i} (values) has type {t.name}, expected {'/'.join(a.name for a in allowed)}")
    return t


# --- EMBEDDING_LOOKUP -----------------------------------------------------------------------------
def _embedding_validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = _check_value_type(ctx, 1, _EMBEDDING_TYPES)
    ctx.check_types([T.TENSOR_INT32, t], [t])
    ctx.check_rank(0, 1)
    if ctx.inputs[1].dims and len(ctx.inputs[1].dims) < 2:
        raise ctx.fail(f"input 1 (values) has rank {len(ctx.inputs[1].dims)}, expected at least 2")


def _embedding_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    lookups, values = ctx.inputs[0].dims, ctx.inputs[1].dims
    if len(lookups) != 1:
        raise ctx.fail(f"input 0 (lookups) has rank {len(lookups)}, expected 1")
    if len(values) < 2:
        raise ctx.fail(f"input 1 (values) has rank {len(values)}, expected at least 2")
    return [(lookups[0],) + tuple(values[1:])]


def _embedding_execute(ctx: OpContext) -> list[np.ndarray]:
    idx = np.asarray(ctx.input(0), np.int64).reshape(-1)
    values = ctx.input(1)
    rows = values.shape[0]
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        raise ctx.fail(f"input 0 (lookups) value {int(idx[bad][0])} is out of range [0, {rows})")
    return [values[idx].astype(ctx.outputs[0].dtype)]


register(Op.EMBEDDING_LOOKUP, validate=_embedding_validate, prepare=_embedding_prepare,
         execute=_embedding_execute)


# --- HASHTABLE_LOOKUP -----------------------------------------------------------------------------
def _hashtable_validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 2)
    t = _check_value_type(ctx, 2, _HASHTABLE_TYPES)
    ctx.check_types([T.TENSOR_INT32, T.TENSOR_INT32, t], [t, T.TENSOR_QUANT8_ASYMM])
    ctx.check_rank(0, 1)
    ctx.check_rank(1, 1)


def _hashtable_prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    lookups, keys, values = (ctx.inputs[i].dims for i in range(3))
    for i, d, what in ((0, lookups, "lookups"), (1, keys, "keys")):
        if len(d) != 1:
            raise ctx.fail(f"input {i} ({what}) has rank {len(d)}, expected 1")
    if len(values) < 1:
        raise ctx.fail("input 2 (values) must have rank at least 1")
    if values[0] != keys[0]:
        raise ctx.fail(f"input 2 (values) has {values[0]} rows but input 1 (keys) has {keys[0]} keys")
    return [(lookups[0],) + tuple(values[1:]), (lookups[0],)]


def _hashtable_execute(ctx: OpContext) -> list[np.ndarray]:
    lookups = np.asarray(ctx.input(0)).reshape(-1)
    keys = np.asarray(ctx.input(1)).reshape(-1)
    values = ctx.input(2)
    row_of: dict[int, int] = {}
    for row, key in enumerate(keys.tolist()):
        row_of.setdefault(key, row)
    rows = [row_of.get(k, -1) for k in lookups.tolist()]
    out = np.zeros((len(rows),) + values.shape[1:], ctx.outputs[0].dtype)
    hits = np.zeros(len(rows), np.uint8)
    for i, row in enumerate(rows):
        if row >= 0:
            out[i] = values[row]
            hits[i] = 1
    return [out, hits.astype(ctx.outputs[1].dtype)]


register(Op.HASHTABLE_LOOKUP, validate=_hashtable_validate, prepare=_hashtable_prepare,
         execute=_hashtable_execute)
