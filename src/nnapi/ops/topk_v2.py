"""TOPK_V2: the k largest values along the last axis, with their indices.

Inputs: the tensor (float32, float16, int32, quant8 asymm or signed; rank >= 1) and k (INT32,
1 <= k <= last dimension). Outputs: the values (input type and quantization) and TENSOR_INT32
indices, both with the last dimension replaced by k, sorted by decreasing value. Equal values
come out in decreasing index order, as Android's reference (sort of (value, index) pairs,
reversed) orders them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32,
          T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class TopKParams:
    """TOPK_V2: k and the shape of both outputs (the last dimension replaced by k); equal values come
    out in decreasing index order."""

    k: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 2)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32], [t, T.TENSOR_INT32])
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    dims = ctx.inputs[0].dims
    try:
        _k(ctx, dims[-1] if dims and dims[-1] > 0 else None)
    except UnknownValue:
        pass


def _k(ctx: OpContext, last: int | None) -> int:
    k = ctx.scalar(1)
    if k <= 0 or (last is not None and k > last):
        bound = "" if last is None else f" and at most the last dimension {last}"
        raise ctx.fail(f"input 1 (k) must be positive{bound}, got {k}")
    return k


@resolver
def params(ctx: OpContext) -> TopKParams:
    """The resolved TopKParams; INVALID_ARGUMENT unless 1 <= k <= the last dimension, UnknownValue
    while k (input 1) is not constant."""
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank at least 1")
    k = _k(ctx, dims[-1])
    return TopKParams(k, tuple(dims[:-1]) + (k,))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    out = params(ctx).out_dims
    return [out, out]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    out_dims, k = g.out_dims, g.k
    x = ctx.input(0)
    if x.size == 0:
        return [np.zeros(out_dims, ctx.outputs[0].dtype), np.zeros(out_dims, np.int32)]
    rows = x.reshape(-1, x.shape[-1])
    idx = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
    # Ascending by (value, index), then reversed: descending values, ties by descending index.
    order = np.lexsort((idx, rows), axis=-1)[:, ::-1][:, :k]
    values = np.take_along_axis(rows, order, axis=-1)
    return [values.reshape(out_dims).astype(ctx.outputs[0].dtype),
            order.astype(np.int32).reshape(out_dims)]


register(Op.TOPK_V2, validate=_validate, prepare=_prepare, execute=_execute, params=params)
