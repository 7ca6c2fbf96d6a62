"""Convolution and matrix-product rules: CONV_2D, DEPTHWISE / GROUPED / TRANSPOSE_CONV_2D,
FULLY_CONNECTED, BATCH_MATMUL."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import OpContext, WindowParams, resolve
from ..lowering import FLOAT, HIGHEST, I32, activation, f32, from_nhwc, lowers, to_nhwc


def _conv(x, w, p: WindowParams, *, rhs_spec: str, groups: int = 1):
    return lax.conv_general_dilated(
        x, w, window_strides=(p.stride_h, p.stride_w),
        padding=((p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right)),
        rhs_dilation=(p.dilation_h, p.dilation_w), dimension_numbers=("NHWC", rhs_spec, "NHWC"),
        feature_group_count=groups, precision=HIGHEST)


@lowers(Op.CONV_2D)
def _conv2d(ctx: OpContext, xs: list) -> list:
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
def _depthwise(ctx: OpContext, xs: list) -> list:
    g = resolve(ctx)
    p = g.params
    x = to_nhwc(f32(xs[0]), p.nchw)
    n = x.shape[0]
    if g.multiplier > 1:  # output channel c*M + m reads input channel c
        x = jnp.repeat(x, g.multiplier, axis=3)
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
def _grouped(ctx: OpContext, xs: list) -> list:
    g = resolve(ctx)
    p = g.params
    y = _conv(to_nhwc(f32(xs[0]), p.nchw), f32(xs[1]), p, rhs_spec="OHWI", groups=g.groups) + f32(xs[2])
    return [from_nhwc(activation(y, p.activation), p.nchw)]


@lowers(Op.TRANSPOSE_CONV_2D)
def _transpose_conv(ctx: OpContext, xs: list) -> list:
    g = resolve(ctx)
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
def _fully_connected(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = jnp.reshape(f32(xs[0]), (p.batch, p.input_size))
    y = jnp.dot(x, f32(xs[1]).T, precision=HIGHEST) + f32(xs[2])
    return [activation(y, p.activation)]


@lowers(Op.BATCH_MATMUL, types=FLOAT + (I32,))
def _batch_matmul(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    a, b = xs[0], xs[1]
    a = jnp.swapaxes(a, -1, -2) if p.adj_x else a
    b = jnp.swapaxes(b, -1, -2) if p.adj_y else b
    if ctx.inputs[0].type == I32:  # wraps like C++ int32 arithmetic
        return [jnp.matmul(jnp.asarray(a, jnp.int32), jnp.asarray(b, jnp.int32))]
    return [jnp.matmul(f32(a), f32(b), precision=HIGHEST)]
