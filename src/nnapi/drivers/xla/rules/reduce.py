"""Reduction rules: MEAN, REDUCE_*, ARGMAX / ARGMIN."""
from __future__ import annotations

import math

import numpy as np

import jax.numpy as jnp

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import B8, F16, FLOAT, I32, f32, lowers


@lowers(Op.MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD)
@lowers(Op.REDUCE_ALL, Op.REDUCE_ANY, types=(B8,))
def _reduce(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x, axes, op = xs[0], p.axes, ctx.op
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
    return [jnp.reshape(y, p.out_dims)]


@lowers(Op.ARGMAX, Op.ARGMIN, types=FLOAT + (I32,))
def _argminmax(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    fn = jnp.argmax if ctx.op == Op.ARGMAX else jnp.argmin  # first occurrence on ties
    return [jnp.reshape(fn(xs[0], axis=p.axis).astype(jnp.int32), p.out_dims)]
