"""Element-wise rules: arithmetic with broadcasting, unary maths, comparisons, logic, selection, casts."""
from __future__ import annotations

import numpy as np

import jax.numpy as jnp
from jax import lax

from ....hal import OperationType as Op
from ....ops import OpContext, numpy_dtype, resolve
from ..lowering import B8, FLOAT, I32, activation, f32, lowers

_BINARY = {Op.ADD: jnp.add, Op.SUB: jnp.subtract, Op.MUL: jnp.multiply, Op.DIV: jnp.divide}


@lowers(Op.ADD, Op.SUB, Op.MUL, Op.DIV, types=FLOAT + (I32,))
def _arith(ctx: OpContext, xs: list) -> list:
    p = resolve(ctx)
    a, b = xs[0], xs[1]
    if ctx.inputs[0].type == I32:
        a, b = jnp.asarray(a, jnp.int32), jnp.asarray(b, jnp.int32)
        if ctx.op == Op.DIV:  # floor division, x / 0 = 0 (Android's Broadcast.cpp)
            zero = b == 0
            y = jnp.where(zero, 0, jnp.floor_divide(a, jnp.where(zero, 1, b)))
        else:
            y = _BINARY[ctx.op](a, b)  # int32 wraps like C++
    else:
        y = activation(_BINARY[ctx.op](f32(a), f32(b)), p.activation)
    return [jnp.broadcast_to(y, p.out_dims)]


@lowers(Op.MAXIMUM, Op.MINIMUM, types=FLOAT + (I32,))
def _max_min(ctx: OpContext, xs: list) -> list:
    fn = jnp.maximum if ctx.op == Op.MAXIMUM else jnp.minimum
    return [jnp.broadcast_to(fn(xs[0], xs[1]), resolve(ctx).out_dims)]


@lowers(Op.POW)
def _pow(ctx: OpContext, xs: list) -> list:
    return [jnp.broadcast_to(jnp.power(f32(xs[0]), f32(xs[1])), resolve(ctx).out_dims)]


@lowers(Op.PRELU)
def _prelu(ctx: OpContext, xs: list) -> list:
    x, a = f32(xs[0]), f32(xs[1])
    return [jnp.broadcast_to(jnp.where(x >= 0, x, x * a), resolve(ctx).out_dims)]


_UNARY = {Op.ABS: jnp.abs, Op.NEG: jnp.negative, Op.EXP: jnp.exp, Op.FLOOR: jnp.floor, Op.LOG: jnp.log,
          Op.RSQRT: lax.rsqrt, Op.SIN: jnp.sin, Op.SQRT: jnp.sqrt}


@lowers(Op.ABS, Op.NEG, types=FLOAT + (I32,))
@lowers(Op.EXP, Op.FLOOR, Op.LOG, Op.RSQRT, Op.SIN, Op.SQRT)
def _unary(ctx: OpContext, xs: list) -> list:
    return [_UNARY[ctx.op](f32(xs[0]))]


@lowers(Op.CAST, types=FLOAT + (I32,))
def _cast(ctx: OpContext, xs: list) -> list:
    x, out = xs[0], ctx.outputs[0].type
    if out == I32 and ctx.inputs[0].type in FLOAT:
        f = jnp.trunc(f32(x))
        f = jnp.where(jnp.isnan(f), 0.0, jnp.clip(f, -2.0**31, 2.0**31 - 128))
        return [f.astype(jnp.int32)]
    return [jnp.asarray(x).astype(numpy_dtype(out))]


_COMPARE = {Op.EQUAL: jnp.equal, Op.NOT_EQUAL: jnp.not_equal, Op.GREATER: jnp.greater,
            Op.GREATER_EQUAL: jnp.greater_equal, Op.LESS: jnp.less, Op.LESS_EQUAL: jnp.less_equal}


@lowers(*_COMPARE, types=FLOAT + (I32, B8))
def _compare(ctx: OpContext, xs: list) -> list:
    return [jnp.broadcast_to(_COMPARE[ctx.op](xs[0], xs[1]), resolve(ctx).out_dims)]


@lowers(Op.LOGICAL_AND, Op.LOGICAL_OR, types=(B8,))
def _logical(ctx: OpContext, xs: list) -> list:
    fn = jnp.logical_and if ctx.op == Op.LOGICAL_AND else jnp.logical_or
    return [jnp.broadcast_to(fn(xs[0], xs[1]), resolve(ctx).out_dims)]


@lowers(Op.LOGICAL_NOT, types=(B8,))
def _logical_not(ctx: OpContext, xs: list) -> list:
    return [jnp.logical_not(xs[0])]


@lowers(Op.SELECT, types=(B8,))
def _select(ctx: OpContext, xs: list) -> list:
    if ctx.inputs[1].type not in FLOAT + (I32,):
        raise NotImplementedError("SELECT on quantized values")
    return [jnp.where(xs[0], xs[1], xs[2])]


@lowers(Op.RANK, types=FLOAT + (I32, B8))
def _rank(ctx: OpContext, xs: list) -> list:
    return [np.int32(len(ctx.inputs[0].dims))]
