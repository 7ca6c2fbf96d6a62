"""Activation rules: RELU family, LOGISTIC / TANH, ELU, HARD_SWISH, SOFTMAX, LOG_SOFTMAX."""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import activation, f32, lowers


@lowers(Op.RELU, Op.RELU1, Op.RELU6)
def _relu(ctx: OpContext, xs: list) -> list:
    return [activation(xs[0], resolve(ctx).activation)]


@lowers(Op.LOGISTIC, Op.TANH)
def _logistic_tanh(ctx: OpContext, xs: list) -> list:
    x = f32(xs[0])
    return [jnp.tanh(x) if ctx.op == Op.TANH else jax.nn.sigmoid(x)]


@lowers(Op.ELU)
def _elu(ctx: OpContext, xs: list) -> list:
    x = f32(xs[0])
    alpha = np.float32(resolve(ctx).alpha)
    return [jnp.maximum(0.0, x) + jnp.minimum(0.0, alpha * (jnp.exp(x) - 1.0))]


@lowers(Op.HARD_SWISH)
def _hard_swish(ctx: OpContext, xs: list) -> list:
    x = f32(xs[0])
    return [x * jnp.minimum(6.0, jnp.maximum(0.0, x + 3.0)) / 6.0]


@lowers(Op.SOFTMAX)
def _softmax(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = f32(xs[0])
    e = jnp.exp((x - jnp.max(x, axis=p.axis, keepdims=True)) * p.beta)
    return [e / jnp.sum(e, axis=p.axis, keepdims=True)]


@lowers(Op.LOG_SOFTMAX)
def _log_softmax(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    x = f32(xs[0])
    shifted = (x - jnp.max(x, axis=p.axis, keepdims=True)) * float(p.beta)
    return [shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=p.axis, keepdims=True))]
