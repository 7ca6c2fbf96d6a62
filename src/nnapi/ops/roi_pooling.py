"""ROI_POOLING: max pooling of regions of interest (Android's RoiPooling.cpp).

Inputs: (input [N,H,W,C] or NCHW, rois [R,4] as (x1, y1, x2, y2), batch index per roi
TENSOR_INT32 [R], output height INT32, output width INT32, height stride, width stride
(FLOAT32; FLOAT16 for float16), layout BOOL). Output [R, out_h, out_w, C].

The roi corners are scaled by 1/stride and rounded to whole pixels; bin (i, j) covers rows
[floor(i * h_step + y1), ceil((i + 1) * h_step + y1)) clipped to the map, where
h_step = max(y2 - y1 + 1, 1) / out_h (likewise for columns), and takes their maximum. An empty
bin yields the input's zero point (0 for floats). Quantized inputs take TENSOR_QUANT16_ASYMM
rois (scale 0.125, zero point 0); the output keeps the input's quantization.
float16 is computed in float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._padding import from_nhwc, split_dims, to_nhwc
from ._quant import round_half_away
from .context import OpContext, UnknownValue
from .registry import register
from .roi_align import check_quant_rois, check_roi, roi_output_dims, roi_param_types

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_PARAM_NAMES = {3: "output height", 4: "output width", 5: "height stride", 6: "width stride"}


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(8, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    roi_t, stride_t = roi_param_types(t)
    ctx.check_types([t, roi_t, T.TENSOR_INT32, T.INT32, T.INT32, stride_t, stride_t, T.BOOL], [t])
    ctx.check_rank(0, 4)
    ctx.check_rank(1, 2)
    ctx.check_rank(2, 1)
    check_quant_rois(ctx, 1)
    for i in range(3, 7):
        try:
            _positive(ctx, i)
        except UnknownValue:
            pass


def _positive(ctx: OpContext, i: int):
    v = ctx.scalar(i)
    if not v > 0:
        raise ctx.fail(f"input {i} ({_PARAM_NAMES[i]}) must be positive, got {v}")
    return v


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    for i in range(3, 7):
        _positive(ctx, i)
    return [roi_output_dims(ctx)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    (out_dims,) = _prepare(ctx)
    x_t, out = ctx.inputs[0], ctx.outputs[0]
    nchw = bool(ctx.scalar(7))
    num_rois = out_dims[0]
    if num_rois == 0:
        return [np.zeros(out_dims, out.dtype)]
    _, out_h, out_w, _ = split_dims(out_dims, nchw)
    x = to_nhwc(ctx.input(0), nchw)
    num_batches, in_h, in_w, depth = x.shape
    rois = ctx.input(1).astype(np.float32)
    if x_t.type.is_quantized:
        rois = rois * np.float32(0.125)  # convertQuantToFloat32 with scale 0.125, zero point 0
    batches = ctx.input(2)
    h_scale = np.float32(1) / np.float32(_positive(ctx, 5))
    w_scale = np.float32(1) / np.float32(_positive(ctx, 6))
    empty = np.full(depth, x_t.zero_point if x_t.type.is_quantized else 0, x.dtype)
    result = np.empty((num_rois, out_h, out_w, depth), x.dtype)
    for r in range(num_rois):
        box = (rois[r, 0] * w_scale, rois[r, 1] * h_scale, rois[r, 2] * w_scale, rois[r, 3] * h_scale)
        check_roi(ctx, r, int(batches[r]), num_batches, box, in_h, in_w)
        x1, y1, x2, y2 = (int(round_half_away(v)) for v in box)
        w_step = np.float32(max(x2 - x1 + 1, 1)) / np.float32(out_w)
        h_step = np.float32(max(y2 - y1 + 1, 1)) / np.float32(out_h)
        img = x[batches[r]]
        for i in range(out_h):
            h0 = min(math.floor(h_step * np.float32(i) + np.float32(y1)), in_h)
            h1 = min(math.ceil(h_step * np.float32(i + 1) + np.float32(y1)), in_h)
            for j in range(out_w):
                w0 = min(math.floor(w_step * np.float32(j) + np.float32(x1)), in_w)
                w1 = min(math.ceil(w_step * np.float32(j + 1) + np.float32(x1)), in_w)
                if h1 > h0 and w1 > w0:
                    result[r, i, j] = img[h0:h1, w0:w1].max(axis=(0, 1))
                else:
                    result[r, i, j] = empty
    return [from_nhwc(result, nchw).astype(out.dtype)]


register(Op.ROI_POOLING, validate=_validate, prepare=_prepare, execute=_execute)
