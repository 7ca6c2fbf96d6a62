"""Shape and data-movement rules: RESHAPE / SQUEEZE / EXPAND_DIMS, TRANSPOSE, CONCATENATION, PAD,
SLICE, STRIDED_SLICE, SPLIT, GATHER, TILE, depth / space / batch rearrangements, CHANNEL_SHUFFLE,
RESIZE_*, FILL."""
from __future__ import annotations

import numpy as np

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import OpContext, numpy_dtype, resolve
from ....ops.resize import bilinear_terms, nearest_indices
from ..lowering import FLOAT, I32, f32, from_nhwc, lowers, runtime_check, to_nhwc


@lowers(Op.RESHAPE, Op.SQUEEZE, Op.EXPAND_DIMS, types=FLOAT + (I32,))
def _reshape(ctx: OpContext, xs: list) -> list:
    return [jnp.reshape(xs[0], resolve(ctx).out_dims)]


@lowers(Op.TRANSPOSE)
def _transpose(ctx: OpContext, xs: list) -> list:
    return [jnp.transpose(xs[0], resolve(ctx).perm)]


@lowers(Op.CONCATENATION)
def _concatenation(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    return [jnp.concatenate([jnp.asarray(x) for x in xs[:p.n_inputs]], axis=p.axis)]


@lowers(Op.PAD, Op.PAD_V2)
def _pad(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    return [jnp.pad(xs[0], p.paddings, constant_values=np.asarray(p.value, dtype=ctx.outputs[0].dtype))]


@lowers(Op.SLICE, types=FLOAT + (I32,))
def _slice(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    return [lax.slice(xs[0], p.begins, [b + s for b, s in zip(p.begins, p.sizes)])]


@lowers(Op.STRIDED_SLICE)
def _strided_slice(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = jnp.asarray(xs[0])
    plan = list(zip(p.begins, p.strides, p.extents))
    if all(s > 0 for s in p.strides):
        y = lax.slice(x, p.begins, [b + s * (n - 1) + 1 for b, s, n in plan], p.strides)
    else:
        y = x[np.ix_(*[b + s * np.arange(n, dtype=np.int64) for b, s, n in plan])]
    return [jnp.reshape(y, p.out_dims)]


@lowers(Op.SPLIT, types=FLOAT + (I32,))
def _split(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    return list(jnp.split(xs[0], p.num_splits, axis=p.axis))


@lowers(Op.GATHER, types=FLOAT + (I32,))
def _gather(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)  # checks constant indices against the axis
    indices = ctx.inputs[2].value
    if indices is not None:
        return [jnp.reshape(jnp.take(xs[0], np.asarray(indices, np.int32), axis=p.axis), p.out_dims)]
    # XLA clamps an index out of range; NNAPI fails the execution, as the reference kernel does.
    runtime_check((xs[2] < 0) | (xs[2] >= p.size), p.range_error)
    return [jnp.reshape(jnp.take(xs[0], xs[2], axis=p.axis, mode="clip"), p.out_dims)]


@lowers(Op.TILE, types=FLOAT + (I32,))
def _tile(ctx: OpContext, xs: list) -> list:
    return [jnp.tile(xs[0], resolve(ctx).multiples)]


@lowers(Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH)
def _depth_space(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    b = p.block
    x = to_nhwc(xs[0], p.nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.DEPTH_TO_SPACE:
        y = jnp.reshape(x, (n, h, w, b, b, c // (b * b))).transpose(0, 1, 3, 2, 4, 5)
        y = jnp.reshape(y, (n, h * b, w * b, c // (b * b)))
    else:
        y = jnp.reshape(x, (n, h // b, b, w // b, b, c)).transpose(0, 1, 3, 2, 4, 5)
        y = jnp.reshape(y, (n, h // b, w // b, b * b * c))
    return [from_nhwc(y, p.nchw)]


@lowers(Op.BATCH_TO_SPACE_ND, Op.SPACE_TO_BATCH_ND)
def _space_batch(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    bh, bw = p.block_h, p.block_w
    x = to_nhwc(xs[0], p.nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.BATCH_TO_SPACE_ND:
        y = jnp.reshape(x, (bh, bw, n // (bh * bw), h, w, c)).transpose(2, 3, 0, 4, 1, 5)
        y = jnp.reshape(y, (n // (bh * bw), h * bh, w * bw, c))
    else:
        top, bottom, left, right = p.paddings
        xp = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        ph, pw = xp.shape[1], xp.shape[2]
        y = jnp.reshape(xp, (n, ph // bh, bh, pw // bw, bw, c)).transpose(2, 4, 0, 1, 3, 5)
        y = jnp.reshape(y, (bh * bw * n, ph // bh, pw // bw, c))
    return [from_nhwc(y, p.nchw)]


@lowers(Op.CHANNEL_SHUFFLE)
def _channel_shuffle(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    dims, axis, g = p.out_dims, p.axis, p.groups
    y = jnp.reshape(xs[0], dims[:axis] + (g, dims[axis] // g) + dims[axis + 1:])
    return [jnp.reshape(jnp.swapaxes(y, axis, axis + 1), dims)]


@lowers(Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR)
def _resize(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    align, half = p.align_corners, p.half_pixel_centers
    x = to_nhwc(f32(xs[0]), p.nchw)
    in_h, in_w = x.shape[1], x.shape[2]
    if ctx.op == Op.RESIZE_NEAREST_NEIGHBOR:
        iy = nearest_indices(in_h, p.out_h, align, half)
        ix = nearest_indices(in_w, p.out_w, align, half)
        y = jnp.take(jnp.take(x, iy, axis=1), ix, axis=2)
    else:
        y0, y1, fy = bilinear_terms(in_h, p.out_h, align, half)
        x0, x1, fx = bilinear_terms(in_w, p.out_w, align, half)
        wy0, wy1 = (1 - fy)[None, :, None, None], fy[None, :, None, None]
        wx0, wx1 = (1 - fx)[None, None, :, None], fx[None, None, :, None]
        r0, r1 = jnp.take(x, y0, axis=1), jnp.take(x, y1, axis=1)
        y = (jnp.take(r0, x0, axis=2) * wy0 * wx0 + jnp.take(r1, x0, axis=2) * wy1 * wx0
             + jnp.take(r0, x1, axis=2) * wy0 * wx1 + jnp.take(r1, x1, axis=2) * wy1 * wx1)
    return [from_nhwc(y, p.nchw)]


@lowers(Op.FILL, types=(I32,))
def _fill(ctx: OpContext, xs: list) -> list:
    return [jnp.full(resolve(ctx).out_dims, xs[1], numpy_dtype(ctx.outputs[0].type))]
