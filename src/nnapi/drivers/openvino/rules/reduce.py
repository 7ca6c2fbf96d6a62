"""Reductions: MEAN, REDUCE_SUM / PROD / MAX / MIN / ALL / ANY, ARGMAX / ARGMIN, in the input's layout
(axes mapped to where they are held)."""
from __future__ import annotations

import numpy as np
from ..backend import ov, ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import B8, F16, FLOAT_Q8, I32, QUANT8, Value, f32, i64, lowers, out, out_shape, reshape


def _reduced(ctx: OpContext, xs, fn) -> list[Value]:
    rank = xs[0].rank
    g = resolve(ctx)
    axes, keep = sorted(set(g.axes)), g.keep_dims
    node, perm = xs[0].physical()
    held = perm or tuple(range(rank))
    y = out(fn(node, i64([xs[0].axis(a) for a in axes]), keep))
    if keep:
        return [Value(y, perm)]
    remaining = [a for a in held if a not in axes]  # logical axes in held order
    if not remaining:
        return [reshape(y, out_shape(ctx))]
    order = sorted(remaining)
    return [Value(y, [order.index(a) for a in remaining])]


@lowers(Op.MEAN, types=FLOAT_Q8)
def mean(ctx: OpContext, xs):
    return _reduced(ctx, xs, ops.reduce_mean)


@lowers(Op.REDUCE_SUM)
def reduce_sum(ctx: OpContext, xs):
    return _reduced(ctx, xs, ops.reduce_sum)


@lowers(Op.REDUCE_PROD)
def reduce_prod(ctx: OpContext, xs):
    def prod(x, axes, keep):  # Android maps 0 * anything (inf included) to 0
        zero = ops.reduce_logical_or(ops.equal(x, f32(0.0)), axes, keep)
        return ops.select(zero, f32(0.0), ops.reduce_prod(x, axes, keep))
    return _reduced(ctx, xs, prod)


@lowers(Op.REDUCE_MAX, Op.REDUCE_MIN, types=FLOAT_Q8)
def reduce_max_min(ctx: OpContext, xs):
    """Float results are clamped to the type's finite range (Android starts from lowest() / max())."""
    if ctx.inputs[0].type in QUANT8:
        return _extreme_by_topk(ctx, xs, "max" if ctx.op == Op.REDUCE_MAX else "min")
    limit = 65504.0 if ctx.inputs[0].type == F16 else float(np.finfo(np.float32).max)
    if ctx.op == Op.REDUCE_MAX:
        return _reduced(ctx, xs, lambda x, a, k: ops.maximum(ops.reduce_max(x, a, k), f32(-limit)))
    return _reduced(ctx, xs, lambda x, a, k: ops.minimum(ops.reduce_min(x, a, k), f32(limit)))


def _extreme_by_topk(ctx: OpContext, xs, mode: str) -> list[Value]:
    """A quantized REDUCE_MAX / REDUCE_MIN as TopK(k=1) over the reduced axes moved last and merged: the
    CPU plugin's ReduceMax / ReduceMin with the FakeQuantize that follows fused into it (OpenVINO 2026.4)
    wrote the zero point to some or all slices, for most axis choices once its input is itself rounded
    (a clamp in between only changed which)."""
    rank = xs[0].rank
    axes = sorted({a % rank for a in resolve(ctx).axes})
    rest = [a for a in range(rank) if a not in axes]
    x = reshape(xs[0].laid_out(rest + axes), [xs[0].shape[a] for a in rest] + [-1])
    y = ops.topk(x, ops.constant(np.int64(1)), -1, mode, "none", ov.Type.i32).output(0)
    return [reshape(y, out_shape(ctx))]


@lowers(Op.REDUCE_ALL, Op.REDUCE_ANY, types=(B8,))
def reduce_logical(ctx: OpContext, xs):
    return _reduced(ctx, xs, ops.reduce_logical_and if ctx.op == Op.REDUCE_ALL else ops.reduce_logical_or)


@lowers(Op.ARGMAX, Op.ARGMIN, types=FLOAT_Q8 + (I32,))
def argminmax(ctx: OpContext, xs):
    axis = resolve(ctx).axis
    mode = "max" if ctx.op == Op.ARGMAX else "min"
    k = ops.constant(np.int64(1))
    y = ops.topk(xs[0].node, k, axis, mode, "value", ov.Type.i32, stable=True)
    return [reshape(y.output(1), out_shape(ctx))]


@lowers(Op.TOPK_V2, types=FLOAT_Q8 + (I32,), keeps_grid=True)
def topk(ctx: OpContext, xs):
    """Equal values by decreasing index, as the reference (Android's reversed sort of (value, index)
    pairs): a stable TopK, which puts the lower index first, of the last axis reversed."""
    k = resolve(ctx).k
    n = xs[0].shape[-1]
    flipped = ops.gather(xs[0].node, i64(list(range(n - 1, -1, -1))), i64(-1))
    y = ops.topk(flipped, ops.constant(np.int64(k)), -1, "max", "value", ov.Type.i32, stable=True)
    index = ops.subtract(ops.constant(np.int32(n - 1)), y.output(1))
    return [y.output(0), out(index)]
