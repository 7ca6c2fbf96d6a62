"""Normalization rules: L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import f32, from_nhwc, lowers, to_nhwc


@lowers(Op.L2_NORMALIZATION)
def _l2_norm(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = f32(xs[0])
    norm = jnp.maximum(jnp.sqrt(jnp.sum(x * x, axis=p.axis, keepdims=True)), p.epsilon)
    return [x / norm]


@lowers(Op.LOCAL_RESPONSE_NORMALIZATION)
def _lrn(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)  # the radius is clamped to the depth: the window never outgrows the tensor
    rank = len(ctx.inputs[0].dims)
    x = f32(xs[0])
    window = [1] * rank
    window[p.axis] = 2 * p.radius + 1
    pads = [(0, 0)] * rank
    pads[p.axis] = (p.radius, p.radius)
    sums = lax.reduce_window(x * x, 0.0, lax.add, tuple(window), (1,) * rank, tuple(pads))
    return [x * jnp.power(p.bias + p.alpha * sums, -p.beta)]


@lowers(Op.INSTANCE_NORMALIZATION)
def _instance_norm(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = to_nhwc(f32(xs[0]), p.nchw)
    mean = jnp.mean(x, axis=(1, 2), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True)
    return [from_nhwc((x - mean) * p.gamma / jnp.sqrt(var + p.epsilon) + p.beta, p.nchw)]
