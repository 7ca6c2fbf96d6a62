"""Pooling rules: AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D (padding never counts)."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import activation, f32, from_nhwc, lowers, to_nhwc


@lowers(Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)
def _pool(ctx: OpContext, xs: list) -> list:
    g = resolve(ctx)
    p = g.params
    x = to_nhwc(f32(xs[0]), p.nchw)
    window, strides = (1, g.filter_h, g.filter_w, 1), (1, p.stride_h, p.stride_w, 1)
    padding = ((0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right), (0, 0))
    if ctx.op == Op.MAX_POOL_2D:
        y = lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)
    else:
        counts = jnp.asarray(g.window_counts(), jnp.float32)  # real elements under each window
        if ctx.op == Op.AVERAGE_POOL_2D:
            y = lax.reduce_window(x, 0.0, lax.add, window, strides, padding) / counts
        else:
            y = jnp.sqrt(lax.reduce_window(x * x, 0.0, lax.add, window, strides, padding) / counts)
    return [from_nhwc(activation(y, p.activation), p.nchw)]
