"""Normalizations: L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION."""
from __future__ import annotations

import numpy as np
from ..backend import ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import FLOAT, FLOAT_Q8, NCHW, QUANT8, Value, constant, f32, i64, lowers, out, reshape, transpose

@lowers(Op.L2_NORMALIZATION, types=FLOAT_Q8)
def l2_normalization(ctx: OpContext, xs):
    g = resolve(ctx)
    node, perm = xs[0].physical()
    a = i64([xs[0].axis(g.axis)])
    epsilon = g.epsilon
    t = ctx.inputs[0]
    if t.type in QUANT8:
        # Normalize the integers (q - zero point) themselves: a real value on the grid carries float
        # error, which the division would blow up where the norm is (nearly) zero.
        node = out(ops.round(ops.divide(node, f32(t.scale)), "half_to_even"))
        epsilon = g.epsilon / t.scale
    norm = ops.maximum(ops.sqrt(ops.reduce_sum(ops.multiply(node, node), a, True)), f32(epsilon))
    return [Value(out(ops.divide(node, norm)), perm)]


@lowers(Op.LOCAL_RESPONSE_NORMALIZATION, types=FLOAT)
def local_response_normalization(ctx: OpContext, xs):
    """x * (bias + alpha * sum of squares over the window)^-beta, the window sums taken by a 1-D
    convolution with ones along the axis (OpenVINO's own LRN supports few axes on the CPU)."""
    dims = tuple(ctx.inputs[0].dims)
    rank = len(dims)
    g = resolve(ctx)
    axis, radius, bias, alpha, beta = g.axis, g.radius, g.bias, g.alpha, g.beta
    x = xs[0].node
    perm = [a for a in range(rank) if a != axis] + [axis]
    moved = transpose(x, perm) if axis != rank - 1 else x
    length = dims[axis]
    rows = int(np.prod([dims[a] for a in perm[:-1]], dtype=np.int64))
    squares = reshape(out(ops.multiply(moved, moved)), (rows, 1, length))
    ones = constant(np.ones((1, 1, 2 * radius + 1), np.float32))
    sums = out(ops.convolution(squares, ones, [1], [radius], [radius], [1]))
    sums = reshape(sums, [dims[a] for a in perm])
    if axis != rank - 1:
        sums = transpose(sums, [perm.index(a) for a in range(rank)])
    scale = ops.power(ops.add(ops.multiply(sums, f32(alpha)), f32(bias)), f32(-beta))
    return [out(ops.multiply(x, scale))]


@lowers(Op.INSTANCE_NORMALIZATION, types=FLOAT)
def instance_normalization(ctx: OpContext, xs):
    g = resolve(ctx)
    gamma, beta, epsilon = g.gamma, g.beta, g.epsilon
    layout = None if g.nchw else NCHW
    x = xs[0].laid_out(layout)
    y = ops.mvn(x, i64([2, 3]), True, epsilon, "inside_sqrt")
    if gamma != 1.0:
        y = ops.multiply(y, f32(gamma))
    if beta != 0.0:
        y = ops.add(y, f32(beta))
    return [Value(out(y), layout)]
