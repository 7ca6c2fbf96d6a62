"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR with Android's (TFLite's) exact sampling positions:
source indices and weights come from `ops.resize`'s public helpers and are applied with Gathers."""
from __future__ import annotations

import numpy as np
import openvino.opset16 as ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ....ops.resize import bilinear_terms, nearest_indices
from ..lowering import FLOAT_Q8, NCHW, Value, constant, i64, lowers, out


def _take(x, index: np.ndarray, axis: int):
    return out(ops.gather(x, constant(np.ascontiguousarray(index, np.int32)), i64(axis)))


@lowers(Op.RESIZE_NEAREST_NEIGHBOR, types=FLOAT_Q8, keeps_grid=True)
@lowers(Op.RESIZE_BILINEAR, types=FLOAT_Q8)
def resize(ctx: OpContext, xs):
    g = resolve(ctx)
    nchw, align, half = g.nchw, g.align_corners, g.half_pixel_centers
    layout = None if nchw else NCHW
    x = xs[0].laid_out(layout)  # channel-first: H is axis 2, W axis 3
    dims = ctx.inputs[0].dims
    in_h, in_w = (dims[2], dims[3]) if nchw else (dims[1], dims[2])
    out_h, out_w = g.out_h, g.out_w
    if ctx.op == Op.RESIZE_NEAREST_NEIGHBOR:
        y = x
        for axis, (n_in, n_out) in ((2, (in_h, out_h)), (3, (in_w, out_w))):
            index = nearest_indices(n_in, n_out, align, half)
            if n_in != n_out or not np.array_equal(index, np.arange(n_in)):
                y = _take(y, index, axis)
        return [Value(y, layout)]
    y0, y1, fy = bilinear_terms(in_h, out_h, align, half)
    x0, x1, fx = bilinear_terms(in_w, out_w, align, half)
    one = np.float32(1)
    r0, r1 = _take(x, y0, 2), _take(x, y1, 2)
    wy0 = constant((one - fy).reshape(1, 1, -1, 1))
    wy1 = constant(fy.reshape(1, 1, -1, 1))
    rows = ops.add(ops.multiply(r0, wy0), ops.multiply(r1, wy1))
    c0, c1 = _take(rows, x0, 3), _take(rows, x1, 3)
    wx0 = constant((one - fx).reshape(1, 1, 1, -1))
    wx1 = constant(fx.reshape(1, 1, 1, -1))
    return [Value(out(ops.add(ops.multiply(c0, wx0), ops.multiply(c1, wx1))), layout)]
