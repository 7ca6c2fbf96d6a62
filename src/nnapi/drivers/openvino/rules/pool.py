"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D on channel-first data (AvgPool, MaxPool).

Averages count only real input elements under each window (`exclude_pad`), as Android does; L2 is
the square root of the average of squares over the same elements. AvgPool always gets explicit
dilations: OpenVINO 2026.4's CPU plugin crashes on an AvgPool-14 without them.
"""
from __future__ import annotations

from ..backend import ops

from ....hal import FusedActivationFunc as Act, OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import FLOAT, FLOAT_Q8, NCHW, QUANT8, Value, activation, fake_quantize, lowers, out


def _pool(ctx: OpContext, xs, fn):
    g = resolve(ctx)
    p, fh, fw = g.params, g.filter_h, g.filter_w
    layout = None if p.nchw else NCHW
    x = xs[0].laid_out(layout)
    y = fn(x, [p.stride_h, p.stride_w], [p.pad_top, p.pad_left], [p.pad_bottom, p.pad_right], [fh, fw])
    y = activation(y, p.activation)
    t = ctx.outputs[0]
    if p.activation not in (Act.NONE, Act.RELU) and t.type in QUANT8:
        y = fake_quantize(y, t)  # a clamp at +-1 or 6 may leave the grid MAX_POOL otherwise keeps
    return [Value(y, layout)]


@lowers(Op.AVERAGE_POOL_2D, types=FLOAT_Q8)
def average_pool(ctx: OpContext, xs):
    return _pool(ctx, xs, lambda x, s, pb, pe, k: out(ops.avg_pool(x, s, pb, pe, k, exclude_pad=True,
                                                                   dilations=[1, 1])))


@lowers(Op.MAX_POOL_2D, types=FLOAT_Q8, keeps_grid=True)
def max_pool(ctx: OpContext, xs):
    return _pool(ctx, xs, lambda x, s, pb, pe, k: ops.max_pool(x, s, [1, 1], pb, pe, k).output(0))


@lowers(Op.L2_POOL_2D, types=FLOAT)
def l2_pool(ctx: OpContext, xs):
    def l2(x, s, pb, pe, k):
        return out(ops.sqrt(ops.avg_pool(ops.multiply(x, x), s, pb, pe, k, exclude_pad=True, dilations=[1, 1])))
    return _pool(ctx, xs, l2)
