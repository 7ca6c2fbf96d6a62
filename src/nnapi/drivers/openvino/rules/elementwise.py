"""Element-wise operations: arithmetic with fused activations, maximum / minimum, POW, PRELU, unary
maths, comparisons, logical operations, SELECT and CAST.

Binary operations keep the layout their (non-constant) inputs share (`broadcast_pair`); quantized
operands are real values, so quantized arithmetic is float arithmetic put back on the output grid.
"""
from __future__ import annotations

import math

import numpy as np
from ..backend import ov, ops

from ....hal import OperationType as Op
from ....ops import OpContext, Tensor, activation_range, resolve
from ..lowering import (B8, F16, F32, FLOAT, FLOAT_Q8, I32, Q8A, Q8AS, Q8S, Q16A, Q16S, QUANT8, Unsupported, Value,
                        activation, broadcast_pair, f32, int_range, lowers, out)

QUANTIZED = (Q8A, Q8AS, Q8S, Q16A, Q16S)

_ARITH = {Op.ADD: ops.add, Op.SUB: ops.subtract, Op.MUL: ops.multiply, Op.DIV: ops.divide}


def _binary(ctx: OpContext, xs, fn) -> Value:
    a, b, perm = broadcast_pair(ctx, xs[0], xs[1])
    return Value(out(fn(a, b)), perm)


@lowers(Op.ADD, Op.SUB, Op.MUL, Op.DIV, types=FLOAT_Q8 + (I32,))
def arithmetic(ctx: OpContext, xs):
    code = int(resolve(ctx).activation)
    if ctx.inputs[0].type == I32:
        if ctx.op == Op.DIV:
            raise Unsupported("DIV of int32 (floor division, x / 0 = 0)")
        if code:
            raise Unsupported(f"{ctx.op.name} of int32 with a fused activation")
    y = _binary(ctx, xs, _ARITH[ctx.op])
    node, perm = y.physical()
    return [Value(_fused_activation(node, code, ctx.outputs[0]), perm)]


def _fused_activation(x, code: int, t: Tensor):
    """The fused activation; on a quantized output Android's clamp of its integers, as a FakeQuantize
    onto the grid points the activation keeps. A float Clamp there is moved ahead of the dequantization
    by OpenVINO's low-precision pipeline with its bounds rounded on the input's grid instead (2026.4: a
    MUL by a constant with RELU1 gave 1.09, 3 steps above 1.0: tests/fuzz_corpus)."""
    if t.type not in QUANT8 or code == 0:
        return activation(x, code)
    scale = np.float32(t.scale)

    def step(v: float | None, bound: int, pick) -> int:
        if v is None:
            return bound
        r = float(np.float32(v) / scale)  # std::round(v / scale) in float, halves away from zero
        return pick(bound, t.zero_point + int(math.copysign(math.floor(abs(r) + 0.5), r)))

    (lo, hi), (qmin, qmax) = activation_range(code), int_range(t.type)
    qlo, qhi = step(lo, qmin, max), step(hi, qmax, min)
    rlo, rhi = (np.float32(q - t.zero_point) * scale for q in (qlo, qhi))
    if qhi <= qlo:
        return out(ops.broadcast(f32(rlo), ops.shape_of(x)))
    return out(ops.fake_quantize(x, f32(rlo), f32(rhi), f32(rlo), f32(rhi), qhi - qlo + 1))


@lowers(Op.MAXIMUM, Op.MINIMUM, types=FLOAT_Q8 + (I32,))
def max_min(ctx: OpContext, xs):
    return [_binary(ctx, xs, ops.maximum if ctx.op == Op.MAXIMUM else ops.minimum)]


@lowers(Op.POW)
def power(ctx: OpContext, xs):
    return [_binary(ctx, xs, ops.power)]


@lowers(Op.PRELU, types=FLOAT_Q8)
def prelu(ctx: OpContext, xs):
    x, alpha, perm = broadcast_pair(ctx, xs[0], xs[1])
    zero = f32(0.0)
    y = ops.add(ops.maximum(x, zero), ops.multiply(ops.minimum(x, zero), alpha))
    shape = tuple(ctx.outputs[0].dims)
    v = Value(out(y), perm)
    if v.shape != shape:  # alpha broadcast beyond x's shape
        node = ops.broadcast(v.node, ops.constant(np.asarray(shape, np.int64))).output(0)
        v = Value(node)
    return [v]


def _rsqrt(x):
    return ops.divide(f32(1.0), ops.sqrt(x))


def _exp(x):
    """exp(NaN) is NaN (OpenVINO 2026.4's CPU Exp gives +inf)."""
    return ops.select(ops.is_nan(x), x, ops.exp(x))


_UNARY = {Op.ABS: ops.absolute, Op.NEG: ops.negative, Op.EXP: _exp, Op.FLOOR: ops.floor, Op.LOG: ops.log,
          Op.RSQRT: _rsqrt, Op.SIN: ops.sin, Op.SQRT: ops.sqrt}


@lowers(Op.ABS, Op.NEG, types=FLOAT + (I32,))
@lowers(Op.EXP, Op.FLOOR, Op.LOG, Op.RSQRT, Op.SIN, Op.SQRT)
def unary(ctx: OpContext, xs):
    node, perm = xs[0].physical()
    return [Value(out(_UNARY[ctx.op](node)), perm)]


#: a > b as b < a and a >= b as b <= a: OpenVINO 2026.4's CPU Greater / GreaterEqual are true when an
#: operand is NaN (IEEE comparisons with NaN are false; its Less / LessEqual are).
_COMPARE = {Op.EQUAL: ops.equal, Op.NOT_EQUAL: ops.not_equal, Op.GREATER: lambda a, b: ops.less(b, a),
            Op.GREATER_EQUAL: lambda a, b: ops.less_equal(b, a), Op.LESS: ops.less, Op.LESS_EQUAL: ops.less_equal}


@lowers(*_COMPARE, types=FLOAT_Q8 + (I32, B8))
def compare(ctx: OpContext, xs):
    a, b, perm = broadcast_pair(ctx, xs[0], xs[1])
    if ctx.inputs[0].type == B8:
        a, b = out(ops.convert(a, ov.Type.i32)), out(ops.convert(b, ov.Type.i32))
    return [Value(out(_COMPARE[ctx.op](a, b)), perm)]


@lowers(Op.LOGICAL_AND, Op.LOGICAL_OR, types=(B8,))
def logical(ctx: OpContext, xs):
    return [_binary(ctx, xs, ops.logical_and if ctx.op == Op.LOGICAL_AND else ops.logical_or)]


@lowers(Op.LOGICAL_NOT, types=(B8,))
def logical_not(ctx: OpContext, xs):
    node, perm = xs[0].physical()
    return [Value(out(ops.logical_not(node)), perm)]


@lowers(Op.SELECT, types=(B8,), keeps_grid=True)
def select(ctx: OpContext, xs):
    shape = tuple(ctx.outputs[0].dims)
    if tuple(xs[0].shape) != shape or tuple(xs[1].shape) != shape or tuple(xs[2].shape) != shape:
        raise Unsupported("SELECT with broadcasting")
    return [Value(out(ops.select(xs[0].node, xs[1].node, xs[2].node)))]


_INT32_LIMIT = float(2**31 - 128)  # the largest float32 below 2**31


def _truncate(x, lo: float, hi: float):
    """Toward zero, NaN -> 0, saturated into [lo, hi] (the reference's float-to-integer cast)."""
    t = ops.multiply(ops.sign(x), ops.floor(ops.absolute(x)))
    return out(ops.select(ops.is_nan(t), f32(0.0), ops.clamp(t, lo, hi)))


@lowers(Op.CAST, types=FLOAT + (I32, B8, Q8A, Q8AS, Q8S, Q16A, Q16S))
def cast(ctx: OpContext, xs):
    """Quantized values are cast as their raw integers, as Android's Cast.cpp does."""
    src, dst = ctx.inputs[0], ctx.outputs[0]
    node, perm = xs[0].physical()
    if src.type in QUANTIZED:  # the raw integers, from the real values on the input's grid
        node = out(ops.round(ops.add(ops.divide(node, f32(np.float32(src.scale))), f32(src.zero_point)),
                             "half_to_even"))
    if src.type == dst.type and src.type in (B8, I32):
        return [Value(node, perm)]
    if dst.type in (F32, F16):
        return [Value(out(ops.convert(node, ov.Type.f32)), perm)]
    if dst.type == I32:
        if src.type == I32:
            return [Value(node, perm)]
        return [Value(out(ops.convert(_truncate(out(ops.convert(node, ov.Type.f32)), -2.0**31, _INT32_LIMIT),
                                      ov.Type.i32)), perm)]
    if dst.type in QUANTIZED:
        raw = out(ops.convert(node, ov.Type.f32))
        if src.type != dst.type:  # to QUANT8_ASYMM: saturate to [0, 255], then truncate
            raw = _truncate(raw, 0.0, 255.0)
        real = ops.multiply(ops.subtract(raw, f32(dst.zero_point)), f32(np.float32(dst.scale)))
        return [Value(out(real), perm)]
    raise Unsupported(f"CAST to {dst.type.name}")
