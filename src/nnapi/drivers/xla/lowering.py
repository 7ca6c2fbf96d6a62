"""The XLA driver's one lowering table: NNAPI operation -> jax.numpy / jax.lax expression.

Each entry takes the operation's compile-time `OpContext` (built by `validation.build_operation_context`
with the shapes `validation.infer_model_shapes` propagated, so constants carry their values) and
the operation's inputs as traced jax values, and returns the outputs. Parameters are read with the
operation's own helpers in `ops/` (`_geometry`, `_axes`, `_plan`, ...): validation, shape
inference and parameter resolution live there once; only the kernels are written here.

IF and WHILE (`control_flow`) register here too; what the driver claims is decided in `analysis`.
Quantized operations stay on the reference driver.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from ...hal import FusedActivationFunc, OperandType as T, OperationType as Op
from ...ops import OpContext, numpy_dtype, resolve
from ...ops import (_activation, _lstm_cell as lstm_cell, _rnn as rnn_cell, batch_matmul, channel_shuffle,
                    concatenation, conv2d, depth_space, depthwise_conv2d, expand_dims, fill, fully_connected,
                    gather, grouped_conv2d, l2_normalization, lstm, pad, pooling, reduce, reshape, resize, rnn,
                    sequence_lstm, sequence_rnn, slice as slice_op, softmax, space_batch, split, squeeze,
                    strided_slice, tile, transpose, transpose_conv2d)
from ...ops._axis import scalar_axis
from ...ops._padding import split_dims

F32, F16, I32, B8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
FLOAT = (F32, F16)
#: Tensor types an operand of a lowered operation may have (anything quantized stays on reference).
TENSOR_TYPES = frozenset({F32, F16, I32, B8})
HIGHEST = lax.Precision.HIGHEST


@dataclass(frozen=True)
class Lowering:
    """One table entry: `fn(ctx, inputs) -> outputs`; control-flow entries (IF, WHILE) instead
    take `fn(ctx, inputs, lowered_op, loop_budget)` and have `control`, which lowers their
    referenced subgraphs at analysis (see `control_flow`)."""

    fn: Callable
    #: Types input 0 may have.
    types: tuple[T, ...] = FLOAT
    control: Callable | None = None


LOWERINGS: dict[Op, Lowering] = {}


def lowers(*ops: Op, types: tuple[T, ...] = FLOAT, control: Callable | None = None):
    def wrap(fn: Callable) -> Callable:
        for op in ops:
            if op in LOWERINGS:
                raise RuntimeError(f"{op.name} lowered twice")
            LOWERINGS[op] = Lowering(fn, types, control)
        return fn
    return wrap


# --- shared helpers ------------------------------------------------------------------------------
def f32(x):
    """Float16 is computed in float32 (as the reference kernels do); the result is cast back."""
    x = jnp.asarray(x)
    return x.astype(jnp.float32) if x.dtype == jnp.float16 else x


def activation(y, code: int):
    lo, hi = _activation._FLOAT_RANGES[FusedActivationFunc(int(code))]
    if lo is not None:
        y = jnp.maximum(y, jnp.asarray(lo, y.dtype))
    if hi is not None:
        y = jnp.minimum(y, jnp.asarray(hi, y.dtype))
    return y


def out_dims(ctx: OpContext, k: int = 0) -> tuple[int, ...]:
    return tuple(ctx.outputs[k].dims)


def to_nhwc(x, nchw: bool):
    return jnp.transpose(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x, nchw: bool):
    return jnp.transpose(x, (0, 3, 1, 2)) if nchw else x


# --- element-wise --------------------------------------------------------------------------------
_BINARY = {Op.ADD: jnp.add, Op.SUB: jnp.subtract, Op.MUL: jnp.multiply, Op.DIV: jnp.divide}


@lowers(Op.ADD, Op.SUB, Op.MUL, Op.DIV, types=FLOAT + (I32,))
def _arith(ctx, xs):
    a, b = xs[0], xs[1]
    if ctx.inputs[0].type == I32:
        a, b = jnp.asarray(a, jnp.int32), jnp.asarray(b, jnp.int32)
        if ctx.op == Op.DIV:  # floor division, x / 0 = 0 (Android's Broadcast.cpp)
            zero = b == 0
            y = jnp.where(zero, 0, jnp.floor_divide(a, jnp.where(zero, 1, b)))
        else:
            y = _BINARY[ctx.op](a, b)  # int32 wraps like C++
    else:
        y = activation(_BINARY[ctx.op](f32(a), f32(b)), ctx.scalar(2))
    return [jnp.broadcast_to(y, out_dims(ctx))]


@lowers(Op.MAXIMUM, Op.MINIMUM, types=FLOAT + (I32,))
def _max_min(ctx, xs):
    fn = jnp.maximum if ctx.op == Op.MAXIMUM else jnp.minimum
    return [jnp.broadcast_to(fn(xs[0], xs[1]), out_dims(ctx))]


@lowers(Op.POW)
def _pow(ctx, xs):
    return [jnp.broadcast_to(jnp.power(f32(xs[0]), f32(xs[1])), out_dims(ctx))]


@lowers(Op.PRELU)
def _prelu(ctx, xs):
    x, a = f32(xs[0]), f32(xs[1])
    return [jnp.broadcast_to(jnp.where(x >= 0, x, x * a), out_dims(ctx))]


_UNARY = {Op.ABS: jnp.abs, Op.NEG: jnp.negative, Op.EXP: jnp.exp, Op.FLOOR: jnp.floor, Op.LOG: jnp.log,
          Op.RSQRT: lax.rsqrt, Op.SIN: jnp.sin, Op.SQRT: jnp.sqrt}


@lowers(Op.ABS, Op.NEG, types=FLOAT + (I32,))
@lowers(Op.EXP, Op.FLOOR, Op.LOG, Op.RSQRT, Op.SIN, Op.SQRT)
def _unary(ctx, xs):
    return [_UNARY[ctx.op](f32(xs[0]))]


# --- activations -------------------------------------------------------------------------------
@lowers(Op.RELU, Op.RELU1, Op.RELU6)
def _relu(ctx, xs):
    code = {Op.RELU: FusedActivationFunc.RELU, Op.RELU1: FusedActivationFunc.RELU1,
            Op.RELU6: FusedActivationFunc.RELU6}[ctx.op]
    return [activation(xs[0], code)]


@lowers(Op.LOGISTIC, Op.TANH)
def _logistic_tanh(ctx, xs):
    x = f32(xs[0])
    return [jnp.tanh(x) if ctx.op == Op.TANH else jax.nn.sigmoid(x)]


@lowers(Op.ELU)
def _elu(ctx, xs):
    x = f32(xs[0])
    # Android reads alpha as the tensor's element type, then promotes it to float.
    alpha = np.float32(np.asarray(ctx.scalar(1), dtype=ctx.inputs[0].dtype))
    return [jnp.maximum(0.0, x) + jnp.minimum(0.0, alpha * (jnp.exp(x) - 1.0))]


@lowers(Op.HARD_SWISH)
def _hard_swish(ctx, xs):
    x = f32(xs[0])
    return [x * jnp.minimum(6.0, jnp.maximum(0.0, x + 3.0)) / 6.0]


@lowers(Op.SOFTMAX)
def _softmax(ctx, xs):
    beta = softmax._check_beta(ctx)
    axis = softmax._axis(ctx)
    x = f32(xs[0])
    e = jnp.exp((x - jnp.max(x, axis=axis, keepdims=True)) * beta)
    return [e / jnp.sum(e, axis=axis, keepdims=True)]


@lowers(Op.LOG_SOFTMAX)
def _log_softmax(ctx, xs):
    axis = scalar_axis(ctx, 2, len(ctx.inputs[0].dims))
    beta = float(ctx.scalar(1))
    x = f32(xs[0])
    shifted = (x - jnp.max(x, axis=axis, keepdims=True)) * beta
    return [shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))]


# --- convolutions ---------------------------------------------------------------------------------
def _conv(x, w, p, *, rhs_spec: str, groups: int = 1):
    return lax.conv_general_dilated(
        x, w, window_strides=(p.stride_h, p.stride_w),
        padding=((p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right)),
        rhs_dilation=(p.dilation_h, p.dilation_w), dimension_numbers=("NHWC", rhs_spec, "NHWC"),
        feature_group_count=groups, precision=HIGHEST)


@lowers(Op.CONV_2D)
def _conv2d(ctx, xs):
    g = resolve(ctx)
    p = g.params
    x, w = to_nhwc(f32(xs[0]), p.nchw), f32(xs[1])
    if g.filter_h == g.filter_w == 1 and p.stride_h == p.stride_w == 1 and not (
            p.pad_top or p.pad_bottom or p.pad_left or p.pad_right):
        # A pointwise convolution is one matrix product over every pixel (a plain GEMM for XLA).
        n, h, wd, c = x.shape
        y = jnp.dot(jnp.reshape(x, (n * h * wd, c)), jnp.reshape(w, (g.channels_out, c)).T, precision=HIGHEST)
        y = jnp.reshape(y, (n, h, wd, g.channels_out)) + f32(xs[2])
    else:
        y = _conv(x, w, p, rhs_spec="OHWI") + f32(xs[2])
    return [from_nhwc(activation(y, p.activation), p.nchw)]


@lowers(Op.DEPTHWISE_CONV_2D)
def _depthwise(ctx, xs):
    g = depthwise_conv2d._geometry(ctx)
    p = g.params
    x = to_nhwc(f32(xs[0]), p.nchw)
    n, _, _, c = x.shape
    multiplier = g.channels_out // c
    if multiplier > 1:  # output channel c*M + m reads input channel c
        x = jnp.repeat(x, multiplier, axis=3)
    # One multiply-add per filter tap over strided views of the padded input: XLA fuses the taps
    # into one loop, where a grouped convolution with C groups runs far slower on the CPU backend.
    xp = jnp.pad(x, ((0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right), (0, 0)))
    w = jnp.reshape(f32(xs[1]), (g.filter_h, g.filter_w, g.channels_out))
    acc = None
    for i in range(g.filter_h):
        for j in range(g.filter_w):
            y0, x0 = i * p.dilation_h, j * p.dilation_w
            view = lax.slice(xp, (0, y0, x0, 0),
                             (n, y0 + (g.out_h - 1) * p.stride_h + 1, x0 + (g.out_w - 1) * p.stride_w + 1,
                              g.channels_out), (1, p.stride_h, p.stride_w, 1))
            tap = view * w[i, j]
            acc = tap if acc is None else acc + tap
    y = acc + f32(xs[2])
    return [from_nhwc(activation(y, p.activation), p.nchw)]


@lowers(Op.GROUPED_CONV_2D)
def _grouped(ctx, xs):
    g = grouped_conv2d._geometry(ctx)
    p = g.params
    y = _conv(to_nhwc(f32(xs[0]), p.nchw), f32(xs[1]), p, rhs_spec="OHWI", groups=g.groups) + f32(xs[2])
    return [from_nhwc(activation(y, p.activation), p.nchw)]


@lowers(Op.TRANSPOSE_CONV_2D)
def _transpose_conv(ctx, xs):
    g = transpose_conv2d._geometry(ctx)
    p = g.params
    x = to_nhwc(f32(xs[0]), p.nchw)
    fh, fw = g.filter_h, g.filter_w
    # Dilate the input by the stride, pad it so a VALID convolution with the flipped filter
    # adds tap (i, j) of input pixel (y, x) into output (y*s - pad_top + i, x*s - pad_left + j);
    # negative padding crops, as Android drops contributions outside the output.
    xd = lax.pad(x, jnp.asarray(0, x.dtype),
                 ((0, 0, 0), (fh - 1 - p.pad_top, fh - 1 - p.pad_bottom, p.stride_h - 1),
                  (fw - 1 - p.pad_left, fw - 1 - p.pad_right, p.stride_w - 1), (0, 0, 0)))
    w = f32(xs[1])[:, ::-1, ::-1, :]
    y = lax.conv_general_dilated(xd, w, (1, 1), "VALID", dimension_numbers=("NHWC", "OHWI", "NHWC"),
                                 precision=HIGHEST) + f32(xs[2])
    return [from_nhwc(activation(y, p.activation), p.nchw)]


@lowers(Op.FULLY_CONNECTED)
def _fully_connected(ctx, xs):
    batch, _ = fully_connected._output_dims(ctx, zeros_unknown=False)
    w = f32(xs[1])
    x = jnp.reshape(f32(xs[0]), (batch, w.shape[1]))
    y = jnp.dot(x, w.T, precision=HIGHEST) + f32(xs[2])
    return [activation(y, ctx.scalar(3))]


# --- pooling -----------------------------------------------------------------------------------------
@lowers(Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)
def _pool(ctx, xs):
    g = pooling._geometry(ctx)
    p = g.params
    x = to_nhwc(f32(xs[0]), p.nchw)
    window, strides = (1, g.filter_h, g.filter_w, 1), (1, p.stride_h, p.stride_w, 1)
    padding = ((0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right), (0, 0))
    if ctx.op == Op.MAX_POOL_2D:
        y = lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)
    else:
        counts = jnp.asarray(pooling._counts(g), jnp.float32)  # real elements under each window
        if ctx.op == Op.AVERAGE_POOL_2D:
            y = lax.reduce_window(x, 0.0, lax.add, window, strides, padding) / counts
        else:
            y = jnp.sqrt(lax.reduce_window(x * x, 0.0, lax.add, window, strides, padding) / counts)
    return [from_nhwc(activation(y, p.activation), p.nchw)]


# --- normalization ---------------------------------------------------------------------------------
@lowers(Op.L2_NORMALIZATION)
def _l2_norm(ctx, xs):
    axis = scalar_axis(ctx, 1, len(ctx.inputs[0].dims), default=-1)
    x = f32(xs[0])
    norm = jnp.maximum(jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True)), l2_normalization._EPSILON)
    return [x / norm]


@lowers(Op.LOCAL_RESPONSE_NORMALIZATION)
def _lrn(ctx, xs):
    rank = len(ctx.inputs[0].dims)
    axis = scalar_axis(ctx, 5, rank, default=-1)
    radius = int(ctx.scalar(1))
    bias, alpha, beta = (float(np.float32(ctx.scalar(i))) for i in (2, 3, 4))
    x = f32(xs[0])
    window = [1] * rank
    window[axis] = 2 * radius + 1
    pads = [(0, 0)] * rank
    pads[axis] = (radius, radius)
    sums = lax.reduce_window(x * x, 0.0, lax.add, tuple(window), (1,) * rank, tuple(pads))
    return [x * jnp.power(bias + alpha * sums, -beta)]


@lowers(Op.INSTANCE_NORMALIZATION)
def _instance_norm(ctx, xs):
    gamma, beta, epsilon = (float(ctx.scalar(i)) for i in (1, 2, 3))
    nchw = bool(ctx.scalar(4))
    x = to_nhwc(f32(xs[0]), nchw)
    mean = jnp.mean(x, axis=(1, 2), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True)
    return [from_nhwc((x - mean) * gamma / jnp.sqrt(var + epsilon) + beta, nchw)]


# --- reductions -------------------------------------------------------------------------------------
@lowers(Op.MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD)
@lowers(Op.REDUCE_ALL, Op.REDUCE_ANY, types=(B8,))
def _reduce(ctx, xs):
    x = xs[0]
    axes = tuple(sorted(set(reduce._axes(ctx, len(ctx.inputs[0].dims)))))
    op = ctx.op
    if op == Op.REDUCE_ALL:
        y = jnp.all(x, axis=axes)
    elif op == Op.REDUCE_ANY:
        y = jnp.any(x, axis=axes)
    else:
        x = f32(x)
        if op == Op.MEAN:
            y = jnp.sum(x, axis=axes) / np.float32(math.prod(x.shape[a] for a in axes))
        elif op == Op.REDUCE_SUM:
            y = jnp.sum(x, axis=axes)
        elif op == Op.REDUCE_PROD:  # Android maps 0 * anything to 0
            y = jnp.where(jnp.any(x == 0, axis=axes), 0.0, jnp.prod(x, axis=axes))
        else:
            limit = 65504.0 if ctx.inputs[0].type == F16 else float(np.finfo(np.float32).max)
            if op == Op.REDUCE_MAX:
                y = jnp.maximum(jnp.max(x, axis=axes), -limit)
            else:
                y = jnp.minimum(jnp.min(x, axis=axes), limit)
    return [jnp.reshape(y, out_dims(ctx))]


@lowers(Op.ARGMAX, Op.ARGMIN, types=FLOAT + (I32,))
def _argminmax(ctx, xs):
    axis = scalar_axis(ctx, 1, len(ctx.inputs[0].dims))
    fn = jnp.argmax if ctx.op == Op.ARGMAX else jnp.argmin  # first occurrence on ties
    return [jnp.reshape(fn(xs[0], axis=axis).astype(jnp.int32), out_dims(ctx))]


# --- shape and data movement -------------------------------------------------------------------------
@lowers(Op.RESHAPE, Op.SQUEEZE, Op.EXPAND_DIMS, types=FLOAT + (I32,))
def _reshape(ctx, xs):
    (dims,) = {Op.RESHAPE: reshape._prepare, Op.SQUEEZE: squeeze._prepare,
               Op.EXPAND_DIMS: expand_dims._prepare}[ctx.op](ctx)
    return [jnp.reshape(xs[0], dims)]


@lowers(Op.TRANSPOSE)
def _transpose(ctx, xs):
    return [jnp.transpose(xs[0], transpose._perm(ctx))]


@lowers(Op.CONCATENATION)
def _concatenation(ctx, xs):
    n = len(ctx.inputs) - 1
    concatenation._output_dims(ctx, zeros_unknown=False)
    axis = ctx.scalar(n) % len(ctx.inputs[0].dims)
    return [jnp.concatenate([jnp.asarray(x) for x in xs[:n]], axis=axis)]


@lowers(Op.PAD, Op.PAD_V2)
def _pad(ctx, xs):
    pads = pad._paddings(ctx)
    value = pad._pad_value(ctx)
    x = xs[0]
    return [jnp.pad(x, [tuple(int(v) for v in p) for p in pads],
                    constant_values=np.asarray(value, dtype=ctx.outputs[0].dtype))]


@lowers(Op.SLICE, types=FLOAT + (I32,))
def _slice(ctx, xs):
    bounds = slice_op._bounds(ctx)
    return [lax.slice(xs[0], [b for b, _ in bounds], [b + s for b, s in bounds])]


@lowers(Op.STRIDED_SLICE)
def _strided_slice(ctx, xs):
    plan, _, dims = strided_slice._plan(ctx)
    x = jnp.asarray(xs[0])
    if all(s > 0 for _, s, _ in plan):
        y = lax.slice(x, [b for b, _, _ in plan], [b + s * (n - 1) + 1 for b, s, n in plan],
                      [s for _, s, _ in plan])
    else:
        y = x[np.ix_(*[b + s * np.arange(n, dtype=np.int64) for b, s, n in plan])]
    return [jnp.reshape(y, dims)]


@lowers(Op.SPLIT, types=FLOAT + (I32,))
def _split(ctx, xs):
    axis = scalar_axis(ctx, 1, len(ctx.inputs[0].dims))
    return list(jnp.split(xs[0], split._num_splits(ctx), axis=axis))


@lowers(Op.GATHER, types=FLOAT + (I32,))
def _gather(ctx, xs):
    (dims,) = gather._prepare(ctx)
    axis = scalar_axis(ctx, 1, len(ctx.inputs[0].dims))
    indices = ctx.inputs[2].value
    if indices is not None:
        gather._check_indices(ctx, indices)
        return [jnp.reshape(jnp.take(xs[0], np.asarray(indices, np.int32), axis=axis), dims)]
    return [jnp.reshape(jnp.take(xs[0], xs[2], axis=axis, mode="clip"), dims)]


@lowers(Op.TILE, types=FLOAT + (I32,))
def _tile(ctx, xs):
    return [jnp.tile(xs[0], tile._multiples(ctx))]


@lowers(Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH)
def _depth_space(ctx, xs):
    nchw, b = depth_space._nchw(ctx), depth_space._block(ctx)
    x = to_nhwc(xs[0], nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.DEPTH_TO_SPACE:
        y = jnp.reshape(x, (n, h, w, b, b, c // (b * b))).transpose(0, 1, 3, 2, 4, 5)
        y = jnp.reshape(y, (n, h * b, w * b, c // (b * b)))
    else:
        y = jnp.reshape(x, (n, h // b, b, w // b, b, c)).transpose(0, 1, 3, 2, 4, 5)
        y = jnp.reshape(y, (n, h // b, w // b, b * b * c))
    return [from_nhwc(y, nchw)]


@lowers(Op.BATCH_TO_SPACE_ND, Op.SPACE_TO_BATCH_ND)
def _space_batch(ctx, xs):
    nchw = space_batch._nchw(ctx)
    bh, bw = space_batch._block(ctx)
    x = to_nhwc(xs[0], nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.BATCH_TO_SPACE_ND:
        y = jnp.reshape(x, (bh, bw, n // (bh * bw), h, w, c)).transpose(2, 3, 0, 4, 1, 5)
        y = jnp.reshape(y, (n // (bh * bw), h * bh, w * bw, c))
    else:
        top, bottom, left, right = space_batch._paddings(ctx)
        xp = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        ph, pw = xp.shape[1], xp.shape[2]
        y = jnp.reshape(xp, (n, ph // bh, bh, pw // bw, bw, c)).transpose(2, 4, 0, 1, 3, 5)
        y = jnp.reshape(y, (bh * bw * n, ph // bh, pw // bw, c))
    return [from_nhwc(y, nchw)]


@lowers(Op.CHANNEL_SHUFFLE)
def _channel_shuffle(ctx, xs):
    (dims,) = channel_shuffle._prepare(ctx)
    axis = scalar_axis(ctx, 2, len(dims))
    g = channel_shuffle._groups(ctx)
    y = jnp.reshape(xs[0], dims[:axis] + (g, dims[axis] // g) + dims[axis + 1:])
    return [jnp.reshape(jnp.swapaxes(y, axis, axis + 1), dims)]


@lowers(Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR)
def _resize(ctx, xs):
    (dims,) = resize._prepare(ctx)
    nchw, align, half = resize._flags(ctx)
    x = to_nhwc(f32(xs[0]), nchw)
    _, out_h, out_w, _ = split_dims(dims, nchw)
    in_h, in_w = x.shape[1], x.shape[2]
    if ctx.op == Op.RESIZE_NEAREST_NEIGHBOR:
        iy = resize.nearest_indices(in_h, out_h, align, half)
        ix = resize.nearest_indices(in_w, out_w, align, half)
        y = jnp.take(jnp.take(x, iy, axis=1), ix, axis=2)
    else:
        y0, y1, fy = resize.bilinear_terms(in_h, out_h, align, half)
        x0, x1, fx = resize.bilinear_terms(in_w, out_w, align, half)
        wy0, wy1 = (1 - fy)[None, :, None, None], fy[None, :, None, None]
        wx0, wx1 = (1 - fx)[None, None, :, None], fx[None, None, :, None]
        r0, r1 = jnp.take(x, y0, axis=1), jnp.take(x, y1, axis=1)
        y = (jnp.take(r0, x0, axis=2) * wy0 * wx0 + jnp.take(r1, x0, axis=2) * wy1 * wx0
             + jnp.take(r0, x1, axis=2) * wy0 * wx1 + jnp.take(r1, x1, axis=2) * wy1 * wx1)
    return [from_nhwc(y, nchw)]


# --- types, comparisons, selection ------------------------------------------------------------------
@lowers(Op.CAST, types=FLOAT + (I32,))
def _cast(ctx, xs):
    x, out = xs[0], ctx.outputs[0].type
    if out == I32 and ctx.inputs[0].type in FLOAT:
        f = jnp.trunc(f32(x))
        f = jnp.where(jnp.isnan(f), 0.0, jnp.clip(f, -2.0**31, 2.0**31 - 128))
        return [f.astype(jnp.int32)]
    return [jnp.asarray(x).astype(numpy_dtype(out))]


_COMPARE = {Op.EQUAL: jnp.equal, Op.NOT_EQUAL: jnp.not_equal, Op.GREATER: jnp.greater,
            Op.GREATER_EQUAL: jnp.greater_equal, Op.LESS: jnp.less, Op.LESS_EQUAL: jnp.less_equal}


@lowers(*_COMPARE, types=FLOAT + (I32, B8))
def _compare(ctx, xs):
    return [jnp.broadcast_to(_COMPARE[ctx.op](xs[0], xs[1]), out_dims(ctx))]


@lowers(Op.LOGICAL_AND, Op.LOGICAL_OR, types=(B8,))
def _logical(ctx, xs):
    fn = jnp.logical_and if ctx.op == Op.LOGICAL_AND else jnp.logical_or
    return [jnp.broadcast_to(fn(xs[0], xs[1]), out_dims(ctx))]


@lowers(Op.LOGICAL_NOT, types=(B8,))
def _logical_not(ctx, xs):
    return [jnp.logical_not(xs[0])]


@lowers(Op.SELECT, types=(B8,))
def _select(ctx, xs):
    if ctx.inputs[1].type not in FLOAT + (I32,):
        raise NotImplementedError("SELECT on quantized values")
    return [jnp.where(xs[0], xs[1], xs[2])]


@lowers(Op.FILL, types=(I32,))
def _fill(ctx, xs):
    (dims,) = fill._prepare(ctx)
    return [jnp.full(dims, xs[1], numpy_dtype(ctx.outputs[0].type))]


@lowers(Op.RANK, types=FLOAT + (I32, B8))
def _rank(ctx, xs):
    return [np.int32(len(ctx.inputs[0].dims))]


# --- matrix products and recurrent cells ------------------------------------------------------------
@lowers(Op.BATCH_MATMUL, types=FLOAT + (I32,))
def _batch_matmul(ctx, xs):
    batch_matmul._output_dims(ctx)
    adj_x, adj_y = batch_matmul._flags(ctx)
    a, b = xs[0], xs[1]
    a = jnp.swapaxes(a, -1, -2) if adj_x else a
    b = jnp.swapaxes(b, -1, -2) if adj_y else b
    if ctx.inputs[0].type == I32:  # wraps like C++ int32 arithmetic
        return [jnp.matmul(jnp.asarray(a, jnp.int32), jnp.asarray(b, jnp.int32))]
    return [jnp.matmul(f32(a), f32(b), precision=HIGHEST)]


def _time_major(x, time_major: bool):
    return x if time_major else jnp.swapaxes(x, 0, 1)


def _lstm_scan(w, x, aux, h0, c0, *, forward: bool = True):
    """The shared LSTM cell (`ops._lstm_cell.step`, traced with jax.numpy) over a time-major
    sequence: (outputs [T, B, n_output], final output state, final cell state)."""
    def body(carry, xt):
        h, c = carry
        x_t, aux_t = xt
        h, c, _ = lstm_cell.step(w, x_t, aux_t, h, c, xp=jnp)
        return (h, c), h

    (h, c), outs = lax.scan(body, (f32(h0), f32(c0)), (x, aux), reverse=not forward)
    return outs, h, c


@lowers(Op.LSTM)
def _lstm(ctx, xs):
    cfg = lstm._config(ctx)
    params = lstm_cell.check_params(ctx, lstm._ACTIVATION, lstm._CELL_CLIP, lstm._PROJ_CLIP)
    w = lstm_cell.load_weights(ctx, lstm._IX, cfg, *params, value=lambda i: f32(xs[i]))
    h, c, scratch = lstm_cell.step(w, f32(xs[0]), None, f32(xs[lstm._IX.output_state_in]),
                                   f32(xs[lstm._IX.cell_state_in]), xp=jnp)
    return [scratch, h, c, h]


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_LSTM)
def _sequence_lstm(ctx, xs):
    ix = sequence_lstm._UNI
    cfg, time_major, _ = sequence_lstm._uni_config(ctx)
    params = lstm_cell.check_params(ctx, sequence_lstm._UNI_ACT, sequence_lstm._UNI_CELL_CLIP,
                                    sequence_lstm._UNI_PROJ_CLIP)
    w = lstm_cell.load_weights(ctx, ix, cfg, *params, value=lambda i: f32(xs[i]))
    outs, h, c = _lstm_scan(w, _time_major(f32(xs[0]), time_major), None, xs[ix.output_state_in],
                            xs[ix.cell_state_in])
    return [_time_major(outs, time_major), h, c][:len(ctx.outputs)]


@lowers(Op.BIDIRECTIONAL_SEQUENCE_LSTM)
def _bidirectional_lstm(ctx, xs):
    sl = sequence_lstm
    fw, bw, time_major, merge, parallel, cross, _ = sl._bi_config(ctx)
    params = lstm_cell.check_params(ctx, sl._BI_ACT, sl._BI_CELL_CLIP, sl._BI_PROJ_CLIP)
    x = _time_major(f32(xs[0]), time_major)
    aux = _time_major(f32(xs[sl._AUX_INPUT]), time_major) if ctx.has_input(sl._AUX_INPUT) else None
    value = lambda i: f32(xs[i])  # noqa: E731
    w_fw = lstm_cell.load_weights(ctx, sl._FW, fw, *params, use_aux=cross, value=value)
    w_bw = lstm_cell.load_weights(ctx, sl._BW, bw, *params, use_aux=cross, value=value)
    fw_out, fw_h, fw_c = _lstm_scan(w_fw, x, aux if cross else None, xs[sl._FW.output_state_in],
                                    xs[sl._FW.cell_state_in])
    bw_out, bw_h, bw_c = _lstm_scan(w_bw, aux if parallel else x, aux if cross else None,
                                    xs[sl._BW.output_state_in], xs[sl._BW.cell_state_in], forward=False)
    fw_out, bw_out = _time_major(fw_out, time_major), _time_major(bw_out, time_major)
    outs = [jnp.concatenate([fw_out, bw_out], axis=-1)] if merge else [fw_out, bw_out]
    return outs + ([fw_h, fw_c, bw_h, bw_c] if len(ctx.outputs) in (5, 6) else [])


@lowers(Op.RNN)
def _rnn(ctx, xs):
    rnn._prepare(ctx)
    h = rnn_cell.rnn_step(f32(xs[0]), f32(xs[4]), f32(xs[1]), f32(xs[2]), f32(xs[3]), ctx.scalar(5), xp=jnp)
    return [h, h]


@lowers(Op.UNIDIRECTIONAL_SEQUENCE_RNN)
def _sequence_rnn(ctx, xs):
    sequence_rnn._uni_prepare(ctx)
    time_major, act = sequence_rnn._uni_time_major(ctx), ctx.scalar(5)
    w, r, b = f32(xs[1]), f32(xs[2]), f32(xs[3])

    def body(h, x_t):
        h = rnn_cell.rnn_step(x_t, h, w, r, b, act, xp=jnp)
        return h, h

    h, outs = lax.scan(body, f32(xs[4]), _time_major(f32(xs[0]), time_major))
    return [_time_major(outs, time_major), h][:len(ctx.outputs)]


# --- lowered operations ------------------------------------------------------------------------------
@dataclass
class LoweredOp:
    """One operation ready to lower: its index, operand indexes, context and entry; for IF and
    WHILE also their referenced subgraphs lowered for this operation's shapes (`analysis`)."""

    index: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ctx: OpContext
    lowering: Lowering
    graphs: tuple = ()


def run_op(lop: LoweredOp, values: dict, consts: dict, env=None) -> list:
    """Lower one operation: constants come from `consts` (executable arguments) or the context;
    `env` is the program's `control_flow.LoopBudget` (control-flow entries only)."""
    xs = []
    for k, i in enumerate(lop.inputs):
        t = lop.ctx.inputs[k]
        if t.omitted:
            xs.append(None)
        elif i in values:
            xs.append(values[i])
        elif i in consts:
            xs.append(consts[i])
        elif t.value is not None:
            xs.append(t.value)
        else:
            raise ValueError(f"operand {i} has no value")
    if lop.lowering.control is not None:
        outs = lop.lowering.fn(lop.ctx, xs, lop, env)
    else:
        outs = lop.lowering.fn(lop.ctx, xs)
    if len(outs) != len(lop.outputs):
        raise ValueError(f"{lop.ctx.op.name}: lowering gave {len(outs)} outputs for {len(lop.outputs)}")
    return [jnp.asarray(o) for o in outs]


__all__ = ["LOWERINGS", "Lowering", "LoweredOp", "lowers", "run_op"]

# IF and WHILE register their entries in the same table (they need LoweredOp and run_op above).
from . import control_flow  # noqa: E402,F401
