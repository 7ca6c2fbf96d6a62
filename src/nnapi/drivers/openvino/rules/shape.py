"""Shape and data movement: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION, PAD, PAD_V2,
SLICE, STRIDED_SLICE, SPLIT, GATHER, TILE, DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND,
SPACE_TO_BATCH_ND, CHANNEL_SHUFFLE, FILL.

These move values only (`keeps_grid`): a quantized output with its input's quantization needs no
requantization. TRANSPOSE costs nothing: it changes the layout the value is held in. Concatenation
and padding work in their input's layout (the axis mapped); the rest take the logical layout.
"""
from __future__ import annotations

import numpy as np
from ..backend import ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import (B8, FLOAT_Q8, I32, NCHW, QUANT8, Unsupported, Value, constant, f32, i64, lowers, out,
                        out_shape, reshape, runtime_check)

_MOVABLE = FLOAT_Q8 + (I32,)


@lowers(Op.RESHAPE, Op.SQUEEZE, Op.EXPAND_DIMS, types=_MOVABLE + (B8,), keeps_grid=True)
def reshape_like(ctx: OpContext, xs):
    return [reshape(xs[0].node, out_shape(ctx))]


@lowers(Op.TRANSPOSE, types=_MOVABLE, keeps_grid=True)
def transpose(ctx: OpContext, xs):
    rank = xs[0].rank
    perm = list(resolve(ctx).perm)
    node, held = xs[0].physical()
    # Output axis j is input axis perm[j]; the held layout's axis i holds input axis held[i].
    held = held or tuple(range(rank))
    return [Value(node, [perm.index(a) for a in held])]


@lowers(Op.CONCATENATION, types=FLOAT_Q8, keeps_grid=True)
def concatenation(ctx: OpContext, xs):
    g = resolve(ctx)
    n, axis = g.n_inputs, g.axis
    lead = next((x for x in xs[:n] if not x.is_constant), xs[0])
    _, perm = lead.physical()
    parts = [x.laid_out(perm) for x in xs[:n]]
    return [Value(out(ops.concat(parts, lead.axis(axis))), perm)]


def _pad(ctx: OpContext, xs, value: float):
    pads = np.asarray(resolve(ctx).paddings, np.int64).reshape(-1, 2)
    node, perm = xs[0].physical()
    if perm is None and len(pads) == 4 and not pads[[0, 3]].any() and pads[1:3].any():
        # Spatial padding of an NHWC image, which a convolution or pool reads next: padded channel-first,
        # OpenVINO folds the Pad into that operation's own padding (pose_detection's input Pad otherwise
        # ran as a reference kernel over the NHWC input before its Transpose).
        node, perm = xs[0].laid_out(NCHW), NCHW
    if perm is not None:
        pads = pads[list(perm)]
    return [Value(_padded(node, pads, value, ctx.inputs[0].type in QUANT8), perm)]


def _padded(node, pads: np.ndarray, value: float, quantized: bool):
    """`node` padded by `pads` ([rank, 2], physical axes) with `value`."""
    pads = pads.copy()
    if quantized:
        # OpenVINO's low-precision PadTransformation moves the dequantization after a Pad of one
        # dimension, padding the integers with 0; for a dimension of size 1 it leaves the zero point's
        # Subtract scalar, so the padding came out as (0 - zero point) * scale, not the real value.
        # Those dimensions are padded by a Concat with constant blocks instead (computed in float).
        shape = [int(d) for d in node.get_partial_shape().to_shape()]
        for axis in [a for a in range(len(shape)) if shape[a] == 1 and pads[a].any()]:
            node = _concat_pad(node, shape, axis, pads[axis], value)
            shape[axis] += int(pads[axis].sum())
            pads[axis] = 0
        if not pads.any():
            return node
    return out(ops.pad(node, constant(np.ascontiguousarray(pads[:, 0])), constant(np.ascontiguousarray(pads[:, 1])),
                       "constant", f32(value)))


def _concat_pad(node, shape: list[int], axis: int, pad: np.ndarray, value: float):
    """`node` (of `shape`) padded along `axis` by (before, after) elements of `value`, as a Concat."""
    def block(n: int):
        return constant(np.full([n if a == axis else d for a, d in enumerate(shape)], value, np.float32))
    before, after = int(pad[0]), int(pad[1])
    parts = ([block(before)] if before else []) + [node] + ([block(after)] if after else [])
    return out(ops.concat(parts, axis))


@lowers(Op.PAD, types=FLOAT_Q8, keeps_grid=True)
def pad(ctx: OpContext, xs):
    return _pad(ctx, xs, 0.0)  # quantized: the zero point, real value 0


@lowers(Op.PAD_V2, types=FLOAT_Q8)
def pad_v2(ctx: OpContext, xs):
    v = resolve(ctx).value  # the raw quantized value for quantized tensors
    t = ctx.inputs[0]
    if t.type not in QUANT8:
        return _pad(ctx, xs, float(np.asarray(v, dtype=t.dtype)))
    # The pad value is a quantized integer. Padding with it directly, OpenVINO's low-precision pipeline
    # would move it to the integer domain unconverted; so pad (x - value) with zeros and add it back.
    value = float((np.float32(int(v)) - np.float32(t.zero_point)) * np.float32(t.scale))
    if value == 0.0:
        return _pad(ctx, xs, 0.0)
    node, perm = xs[0].physical()
    shifted = Value(out(ops.subtract(node, f32(value))), perm)
    (padded,) = _pad(ctx, [shifted] + list(xs[1:]), 0.0)
    node, perm = padded.physical()
    return [Value(out(ops.add(node, f32(value))), perm)]


def _slice(x, plan) -> object:
    """Slice `x` by per-axis (begin, stride, extent)."""
    starts, stops, steps = [], [], []
    for b, s, n in plan:
        if n <= 0:
            raise Unsupported("an empty slice")
        end = b + s * (n - 1)
        starts.append(b)
        steps.append(s)
        stops.append(end + 1 if s > 0 else (end - 1 if end > 0 else -(2 ** 62)))
    return out(ops.slice(x, i64(starts), i64(stops), i64(steps)))


@lowers(Op.SLICE, types=_MOVABLE, keeps_grid=True)
def slice_op(ctx: OpContext, xs):
    g = resolve(ctx)
    return [_slice(xs[0].node, [(b, 1, s) for b, s in zip(g.begins, g.sizes)])]


@lowers(Op.STRIDED_SLICE, types=FLOAT_Q8, keeps_grid=True)
def strided_slice(ctx: OpContext, xs):
    g = resolve(ctx)
    return [reshape(_slice(xs[0].node, list(zip(g.begins, g.strides, g.extents))), g.out_dims)]


@lowers(Op.SPLIT, types=_MOVABLE, keeps_grid=True)
def split(ctx: OpContext, xs):
    g = resolve(ctx)
    axis, n = g.axis, g.num_splits
    node, perm = xs[0].physical()
    y = ops.split(node, i64(xs[0].axis(axis)), n)
    return [Value(y.output(k), perm) for k in range(n)]


@lowers(Op.GATHER, types=_MOVABLE, keeps_grid=True)
def gather(ctx: OpContext, xs):
    p = resolve(ctx)
    axis = p.axis
    indices = ctx.inputs[2].value
    if indices is not None:
        if (indices < 0).any() or (indices >= ctx.inputs[0].dims[axis]).any():
            raise Unsupported("GATHER: constant indices out of range")
        idx = constant(np.ascontiguousarray(indices, np.int32))
    else:
        # OpenVINO gives zeros for an index out of range; NNAPI fails the execution (the reference
        # driver's ops.gather says which value): a run-time check says so here too.
        idx = xs[2].node
        n = ctx.inputs[0].dims[axis]
        bad = ops.logical_or(ops.less(idx, constant(np.array(0, np.int32))),
                             ops.greater_equal(idx, constant(np.array(n, np.int32))))
        rank = len(ctx.inputs[2].dims)
        runtime_check(out(ops.reduce_logical_or(bad, i64(list(range(rank))), False)), p.range_error)
    return [reshape(out(ops.gather(xs[0].node, idx, i64(axis))), out_shape(ctx))]


@lowers(Op.TILE, types=_MOVABLE, keeps_grid=True)
def tile(ctx: OpContext, xs):
    return [out(ops.tile(xs[0].node, i64(resolve(ctx).multiples)))]


@lowers(Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH, types=FLOAT_Q8, keeps_grid=True)
def depth_space(ctx: OpContext, xs):
    g = resolve(ctx)
    block = g.block
    layout = None if g.nchw else NCHW
    x = xs[0].laid_out(layout)
    if ctx.op == Op.DEPTH_TO_SPACE:
        y = ops.depth_to_space(x, "blocks_first", block)
    else:
        y = ops.space_to_depth(x, "blocks_first", block)
    return [Value(out(y), layout)]


@lowers(Op.BATCH_TO_SPACE_ND, Op.SPACE_TO_BATCH_ND, types=FLOAT_Q8, keeps_grid=True)
def batch_space(ctx: OpContext, xs):
    g = resolve(ctx)
    block = [g.block_h, g.block_w]
    pads = np.asarray(g.paddings, np.int64).reshape(2, 2)  # (top, bottom), (left, right)
    layout = None if g.nchw else NCHW
    x = xs[0].laid_out(layout)
    shape = i64([1, 1] + block)
    zeros = i64([0, 0, 0, 0])
    if ctx.op == Op.BATCH_TO_SPACE_ND:
        return [Value(out(ops.batch_to_space(x, shape, zeros, zeros)), layout)]
    if pads.any():
        # An explicit Pad of real zeros: OpenVINO moves a dequantizing Subtract across SpaceToBatch,
        # which would then pad with the raw integer 0 instead of the zero point (and across a Pad of a
        # dimension of size 1: `_padded` pads those with a Concat).
        x = _padded(x, np.concatenate([np.zeros((2, 2), np.int64), pads]), 0.0, ctx.inputs[0].type in QUANT8)
    return [Value(out(ops.space_to_batch(x, shape, zeros, zeros)), layout)]


@lowers(Op.CHANNEL_SHUFFLE, types=FLOAT_Q8, keeps_grid=True)
def channel_shuffle(ctx: OpContext, xs):
    dims = tuple(ctx.inputs[0].dims)
    g = resolve(ctx)
    groups, axis = g.groups, g.axis
    if dims[axis] % groups:
        raise Unsupported("CHANNEL_SHUFFLE: channels are not a multiple of the groups")
    split_shape = dims[:axis] + (groups, dims[axis] // groups) + dims[axis + 1:]
    y = reshape(xs[0].node, split_shape)
    perm = list(range(len(split_shape)))
    perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
    y = out(ops.transpose(y, i64(perm)))
    return [reshape(y, dims)]


@lowers(Op.FILL, types=(I32,))
def fill(ctx: OpContext, xs):
    value = resolve(ctx).value
    t = ctx.outputs[0].type
    dtype = np.int32 if t == I32 else np.float32
    return [out(ops.broadcast(constant(np.asarray(value, dtype)), i64(out_shape(ctx))))]
