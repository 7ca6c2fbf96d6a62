"""REDUCE_ALL/ANY/MAX/MIN/PROD/SUM and MEAN: reductions over a list of axes.

Input 1 is a 1-D TENSOR_INT32 of axes (negative counts from the end, duplicates allowed),
input 2 keep-dims (BOOL for REDUCE_*, INT32 > 0 for MEAN). Reduced axes are dropped, or
kept as 1; when every axis is dropped the output has shape (1,).

Types (Android's Reduce.cpp / MEAN): PROD and SUM float32/float16; MAX and MIN also quant8
asymm and signed (raw values, output quantization equal to the input's); ALL and ANY bool8;
MEAN float32/float16/quant8 asymm and signed. Quantized MEAN is TFLite's reference Mean as
Android runs it: the raw values are summed in int32 and divided by the element count with
C++ integer division (truncation toward zero), without rescaling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import normalize_axes, reduced_dims
from .context import OpContext
from .registry import register, resolver

_FLOAT = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_TYPES = {
    Op.REDUCE_PROD: _FLOAT, Op.REDUCE_SUM: _FLOAT,
    Op.REDUCE_MAX: _FLOAT + _QUANT, Op.REDUCE_MIN: _FLOAT + _QUANT,
    Op.REDUCE_ALL: (T.TENSOR_BOOL8,), Op.REDUCE_ANY: (T.TENSOR_BOOL8,),
    Op.MEAN: _FLOAT + _QUANT,
}


@dataclass(frozen=True)
class ReduceParams:
    """A reduction: the reduced axes (non-negative, sorted, without duplicates), whether they are
    kept as 1, and the output shape ((1,) when every axis is dropped)."""

    axes: tuple[int, ...]
    keep_dims: bool
    out_dims: tuple[int, ...]


def _keep_dims_type(op: Op) -> T:
    return T.INT32 if op == Op.MEAN else T.BOOL


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES[ctx.op]:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, T.TENSOR_INT32, _keep_dims_type(ctx.op)], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    ctx.check_rank(1, 1)
    if t in _QUANT:
        ctx.check_same_quant(0, 0, j_output=True)
    rank = len(ctx.inputs[0].dims)
    if rank and ctx.inputs[1].value is not None:
        _axes(ctx, rank)


def _axes(ctx: OpContext, rank: int) -> list[int]:
    """Input 1 as non-negative axes (raises UnknownValue while it is not constant)."""
    axes = ctx.input(1)
    if axes.ndim != 1:
        raise ctx.fail(f"input 1 (axes) must be 1-D, got shape {tuple(axes.shape)}")
    return normalize_axes(ctx, axes.tolist(), rank, param="input 1 (axes) entry")


def _keep_dims(ctx: OpContext) -> bool:
    value = ctx.scalar(2)
    return bool(value > 0) if ctx.op == Op.MEAN else bool(value)


@resolver
def params(ctx: OpContext) -> ReduceParams:
    """The resolved ReduceParams of MEAN / REDUCE_*: axes from input 1, keep_dims from input 2 (BOOL,
    or INT32 > 0 for MEAN); INVALID_ARGUMENT naming the input at fault, UnknownValue while input 1 or
    2 is not constant."""
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    axes = _axes(ctx, len(dims))
    keep = _keep_dims(ctx)
    return ReduceParams(tuple(sorted(set(axes))), keep, reduced_dims(dims, axes, keep))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    dims, axes = g.out_dims, g.axes
    x, out = ctx.inputs[0], ctx.outputs[0]
    v = x.value
    if math.prod(dims) == 0:
        return [np.zeros(dims, out.dtype)]
    op = ctx.op
    if op == Op.MEAN:
        r = _mean(v, axes, x.type)
    elif op in (Op.REDUCE_ALL, Op.REDUCE_ANY):
        r = (np.all if op == Op.REDUCE_ALL else np.any)(v.astype(bool), axis=axes)
    elif op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
        r = _min_max(v, axes, x.type, op == Op.REDUCE_MAX)
    elif op == Op.REDUCE_SUM:
        r = np.sum(v.astype(np.float32), axis=axes)
    else:
        f = v.astype(np.float32)
        # Android's product maps 0 * anything to 0 (so 0 * inf is 0, not NaN).
        with np.errstate(all="ignore"):
            r = np.where(np.any(f == 0, axis=axes), np.float32(0), np.prod(f, axis=axes))
    return [np.asarray(r).astype(out.dtype).reshape(dims)]


def _min_max(v: np.ndarray, axes: tuple[int, ...], t: T, is_max: bool) -> np.ndarray:
    """Max/min with Android's initial values, so empty reductions give lowest/highest."""
    if t == T.TENSOR_FLOAT16:
        initial = -65504.0 if is_max else 65504.0
        v = v.astype(np.float32)
    elif t == T.TENSOR_FLOAT32:
        finfo = np.finfo(np.float32)
        initial = finfo.min if is_max else finfo.max
    else:
        info = np.iinfo(v.dtype)
        initial = info.min if is_max else info.max
    return (np.max if is_max else np.min)(v, axis=axes, initial=initial)


def _mean(v: np.ndarray, axes: tuple[int, ...], t: T) -> np.ndarray:
    count = math.prod(v.shape[a] for a in axes)
    if t in _QUANT:
        s = np.sum(v.astype(np.int64), axis=axes)
        if count == 0:
            return np.zeros_like(s)
        return np.sign(s) * (np.abs(s) // count)  # C++ int division truncates toward zero
    s = np.sum(v.astype(np.float32), axis=axes, dtype=np.float32)
    if count == 0:
        return np.zeros_like(s)
    return s / np.float32(count)


register(Op.REDUCE_ALL, Op.REDUCE_ANY, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.REDUCE_SUM,
         Op.MEAN, validate=_validate, prepare=_prepare, execute=_execute, params=params)
