"""Activations and softmax: RELU / RELU1 / RELU6, LOGISTIC, TANH, ELU, HARD_SWISH, SOFTMAX, LOG_SOFTMAX.

All keep their input's layout (softmax maps its axis). Quantized variants compute on real values;
the output's FakeQuantize rounds them onto the (fixed) output grid.
"""
from __future__ import annotations

from ..backend import ops

from ....hal import FusedActivationFunc as Act, OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import FLOAT, FLOAT_Q8, Value, activation, f32, lowers, out


def _same_layout(xs, fn) -> list[Value]:
    node, perm = xs[0].physical()
    return [Value(out(fn(node)), perm)]


@lowers(Op.RELU, types=FLOAT_Q8, keeps_grid=True)
def relu(ctx: OpContext, xs):
    return _same_layout(xs, lambda x: activation(x, Act.RELU))


@lowers(Op.RELU1, Op.RELU6, types=FLOAT_Q8)
def relu_n(ctx: OpContext, xs):
    code = Act.RELU1 if ctx.op == Op.RELU1 else Act.RELU6
    return _same_layout(xs, lambda x: activation(x, code))


@lowers(Op.LOGISTIC, types=FLOAT_Q8)
def logistic(ctx: OpContext, xs):
    return _same_layout(xs, ops.sigmoid)


@lowers(Op.TANH, types=FLOAT_Q8)
def tanh(ctx: OpContext, xs):
    return _same_layout(xs, ops.tanh)


@lowers(Op.ELU)
def elu(ctx: OpContext, xs):
    """NNAPI's max(0, x) + min(0, alpha * (exp(x) - 1)): OpenVINO's Elu (x > 0 ? x : alpha * (exp(x) - 1))
    is the same only for alpha >= 0; a negative alpha is lowered as the formula itself."""
    alpha = float(resolve(ctx).alpha)
    if alpha >= 0.0:
        return _same_layout(xs, lambda x: ops.elu(x, alpha))

    def formula(x):
        em1 = ops.multiply(ops.subtract(ops.exp(x), f32(1.0)), f32(alpha))
        return ops.add(ops.maximum(x, f32(0.0)), ops.minimum(em1, f32(0.0)))
    return _same_layout(xs, formula)


@lowers(Op.HARD_SWISH, types=FLOAT_Q8)
def hard_swish(ctx: OpContext, xs):
    return _same_layout(xs, ops.hswish)


@lowers(Op.SOFTMAX, types=FLOAT_Q8)
def softmax(ctx: OpContext, xs):
    g = resolve(ctx)
    node, perm = xs[0].physical()
    if g.beta != 1.0:
        node = out(ops.multiply(node, f32(g.beta)))
    return [Value(out(ops.softmax(node, xs[0].axis(g.axis))), perm)]


@lowers(Op.LOG_SOFTMAX, types=FLOAT)
def log_softmax(ctx: OpContext, xs):
    g = resolve(ctx)
    node, perm = xs[0].physical()
    if g.beta != 1.0:
        node = out(ops.multiply(node, f32(g.beta)))
    return [Value(out(ops.log_softmax(node, xs[0].axis(g.axis))), perm)]
