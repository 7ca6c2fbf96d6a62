"""AXIS_ALIGNED_BBOX_TRANSFORM: apply per-class box deltas to rois and clip to the image.

Inputs: rois (num_rois, 4) corner-encoded [x1, y1, x2, y2]; deltas (num_rois, 4 * classes) as
[dx, dy, log dw, log dh] per class; batch indices TENSOR_INT32 (num_rois,); image info
(batches, 2) as [height, width]. Output (num_rois, 4 * classes), the roi type.
Types: float32 / float16 everywhere, or TENSOR_QUANT16_ASYMM rois and image info (scale 0.125,
zero point 0) with TENSOR_QUANT8_ASYMM or _SIGNED deltas (output quant16 asymm, scale 0.125).
Only num_rois may be zero. Computed in float32 as Android's reference does.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._boxes import bbox_transform, from_float32, to_float32
from .context import OpContext
from .registry import register

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_DELTA_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(4, 1)
    t = ctx.inputs[0].type
    if t in _FLOATS:
        ctx.check_types([t, t, T.TENSOR_INT32, t], [t])
    elif t == T.TENSOR_QUANT16_ASYMM:
        ctx.check_types([t, _DELTA_QUANT, T.TENSOR_INT32, t], [t])
    else:
        raise ctx.fail(f"input 0 (rois) has unsupported type {t.name}")
    for i, rank in ((0, 2), (1, 2), (2, 1), (3, 2)):
        ctx.check_rank(i, rank)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    roi, delta, batches, info = (ctx.inputs[i] for i in range(4))
    for i, rank in ((0, 2), (1, 2), (2, 1), (3, 2)):
        if len(ctx.inputs[i].dims) != rank:
            raise ctx.fail(f"input {i} has rank {len(ctx.inputs[i].dims)}, expected {rank}")
    num_rois, num_classes, num_batches = roi.dims[0], delta.dims[1] // 4, info.dims[0]
    if num_classes <= 0:
        raise ctx.fail(f"input 1 (deltas) needs at least 4 columns, got {delta.dims[1]}")
    if num_batches <= 0:
        raise ctx.fail("input 3 (image info) has no batches")
    if roi.dims[1] != 4:
        raise ctx.fail(f"input 0 (rois) must have 4 columns, got {roi.dims[1]}")
    if delta.dims[0] != num_rois or delta.dims[1] != 4 * num_classes:
        raise ctx.fail(f"input 1 (deltas) has dimensions {list(delta.dims)}, expected "
                       f"[{num_rois}, 4 * classes]")
    if batches.dims[0] != num_rois:
        raise ctx.fail(f"input 2 (batch indices) has {batches.dims[0]} entries, expected {num_rois}")
    if info.dims[1] != 2:
        raise ctx.fail(f"input 3 (image info) must have 2 columns, got {info.dims[1]}")
    if roi.type == T.TENSOR_QUANT16_ASYMM:
        for i, name in ((0, "rois"), (3, "image info")):
            t = ctx.inputs[i]
            if np.float32(t.scale) != np.float32(0.125) or t.zero_point != 0:
                raise ctx.fail(f"input {i} ({name}) must have scale 0.125 and zero point 0, "
                               f"got {t.scale} and {t.zero_point}")
    return [(num_rois, 4 * num_classes)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    (dims,) = _prepare(ctx)
    out = ctx.outputs[0]
    if dims[0] == 0:
        return [np.zeros(dims, out.dtype)]
    roi, delta, batches, info = (ctx.inputs[i] for i in range(4))
    res = bbox_transform(ctx, to_float32(roi), to_float32(delta), ctx.input(2), to_float32(info))
    return [from_float32(res, out).reshape(dims)]


register(Op.AXIS_ALIGNED_BBOX_TRANSFORM, validate=_validate, prepare=_prepare, execute=_execute,
         allow_zero_sized_input=True)
