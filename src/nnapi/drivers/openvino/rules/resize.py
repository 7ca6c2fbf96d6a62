"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR as OpenVINO's Interpolate, in the coordinate modes that
give Android's (TFLite's) sampling positions:

- bilinear (`linear_onnx`, separable): `asymmetric` (x * in / out), `align_corners`
  (x * (in - 1) / (out - 1)) or `half_pixel` ((x + 0.5) * in / out - 0.5; at the borders both taps
  of TFLite's clamped indices are the same pixel, as the clamped coordinate gives);
- nearest: `floor` of the asymmetric or half-pixel position (`tf_half_pixel_for_nn`), or with
  align_corners the position rounded half up (`round_prefer_ceil`: TFLite's roundf on positions that
  are never negative).

One Interpolate node runs as one kernel; the Gathers and weighted sums this replaces (one pair per
axis) cost pose_detection 950 us of its 9.5 ms."""
from __future__ import annotations

import numpy as np
from ..backend import ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import FLOAT_Q8, NCHW, Value, constant, lowers, out


@lowers(Op.RESIZE_NEAREST_NEIGHBOR, types=FLOAT_Q8, keeps_grid=True)
@lowers(Op.RESIZE_BILINEAR, types=FLOAT_Q8)
def resize(ctx: OpContext, xs):
    g = resolve(ctx)
    layout = None if g.nchw else NCHW
    x = xs[0].laid_out(layout)  # channel-first: H is axis 2, W axis 3
    align, half = g.align_corners, g.half_pixel_centers
    if ctx.op == Op.RESIZE_NEAREST_NEIGHBOR:
        mode, nearest = "nearest", "round_prefer_ceil" if align else "floor"
        coordinates = "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
    else:
        mode, nearest = "linear_onnx", "round_prefer_floor"
        coordinates = "align_corners" if align else "half_pixel" if half else "asymmetric"
    sizes = constant(np.array([g.out_h, g.out_w], np.int64))
    axes = constant(np.array([2, 3], np.int64))
    y = ops.interpolate(x, sizes, mode, "sizes", coordinate_transformation_mode=coordinates,
                        nearest_mode=nearest, axes=axes)
    return [Value(out(y), layout)]
