"""ROI_ALIGN: bilinear-sampled average pooling of regions of interest (Android's RoiAlign.cpp).

Inputs: (input [N,H,W,C] or NCHW, rois [R,4] as (x1, y1, x2, y2), batch index per roi
TENSOR_INT32 [R], output height INT32, output width INT32, height stride, width stride
(FLOAT32; FLOAT16 for float16), height sampling ratio INT32, width sampling ratio INT32
(0 = adaptive ceil(roi size / output size)), layout BOOL). Output [R, out_h, out_w, C].

Each output bin averages sampling ratio_h x ratio_w bilinear samples at the centres of a
regular sub-grid of the bin; samples past the last row/column clamp to it. The samples are taken
one at a time with a QoS checkpoint every few (any INT32 ratio is legal: memory stays bounded, and
a deadline stops the work). Quantized inputs
take TENSOR_QUANT16_ASYMM rois (scale 0.125, zero point 0); the interpolation weights are
quantized to 1/255 steps and the int32 sums requantized in fixed point, as Android does.
float16 is computed in float32. R may be 0 (zero-sized output).
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ..qos import checkpoint
from ._padding import from_nhwc, join_dims, split_dims, to_nhwc
from ._quant import as_float32, multiply_by_quantized_multiplier, quantize_multiplier, round_half_away
from .context import OpContext, UnknownValue
from .registry import register

_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + _QUANT


def roi_param_types(t: T) -> tuple[T, T]:
    """(roi tensor type, stride scalar type) that go with an input of type `t`."""
    if t == T.TENSOR_FLOAT16:
        return T.TENSOR_FLOAT16, T.FLOAT16
    if t == T.TENSOR_FLOAT32:
        return T.TENSOR_FLOAT32, T.FLOAT32
    return T.TENSOR_QUANT16_ASYMM, T.FLOAT32


def check_quant_rois(ctx: OpContext, index: int, what: str = "rois") -> None:
    """TENSOR_QUANT16_ASYMM boxes must have scale 0.125 and zero point 0."""
    r = ctx.inputs[index]
    if r.type == T.TENSOR_QUANT16_ASYMM and (as_float32(r.scale) != 0.125 or r.zero_point != 0):
        raise ctx.fail(f"input {index} ({what}) must have scale 0.125 and zero point 0, "
                       f"got {r.scale} and {r.zero_point}")


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(10, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    roi_t, stride_t = roi_param_types(t)
    ctx.check_types([t, roi_t, T.TENSOR_INT32, T.INT32, T.INT32, stride_t, stride_t, T.INT32, T.INT32,
                     T.BOOL], [t])
    ctx.check_rank(0, 4)
    ctx.check_rank(1, 2)
    ctx.check_rank(2, 1)
    check_quant_rois(ctx, 1)
    for i in range(3, 9):
        try:
            _param(ctx, i)
        except UnknownValue:
            pass


_PARAM_NAMES = {3: "output height", 4: "output width", 5: "height stride", 6: "width stride",
                7: "height sampling ratio", 8: "width sampling ratio"}


def _param(ctx: OpContext, i: int):
    """Scalar parameter `i`, checked: sizes and strides > 0, sampling ratios >= 0."""
    v = ctx.scalar(i)
    ok = v >= 0 if i >= 7 else v > 0
    if not ok:
        raise ctx.fail(f"input {i} ({_PARAM_NAMES[i]}) must be {'>= 0' if i >= 7 else 'positive'}, got {v}")
    return v


def roi_output_dims(ctx: OpContext) -> tuple[int, ...]:
    """Output shape of ROI_ALIGN / ROI_POOLING (shared checks of the input, rois and batch ids)."""
    dims, roi_dims, split = ctx.inputs[0].dims, ctx.inputs[1].dims, ctx.inputs[2].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    if len(roi_dims) != 2 or roi_dims[1] != 4:
        raise ctx.fail(f"input 1 (rois) has shape {roi_dims}, expected [num_rois, 4]")
    nchw = bool(ctx.scalar(len(ctx.inputs) - 1))
    n, h, w, c = split_dims(dims, nchw)
    if min(n, h, w, c) <= 0:
        raise ctx.fail(f"input 0 {dims}: every dimension must be positive")
    num_rois = roi_dims[0]
    if len(split) != 1 or split[0] != num_rois:
        raise ctx.fail(f"input 2 (batch indices) has shape {split}, expected [{num_rois}]")
    check_quant_rois(ctx, 1)
    return join_dims(num_rois, int(_param(ctx, 3)), int(_param(ctx, 4)), c, nchw)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    out = roi_output_dims(ctx)
    for i in (5, 6, 7, 8):
        _param(ctx, i)
    return [out]


def check_roi(ctx: OpContext, r: int, batch: int, num_batches: int, box, in_h: int, in_w: int) -> None:
    """Android's malformed-roi checks, on the box already scaled to the feature map."""
    x1, y1, x2, y2 = box
    if not 0 <= batch < num_batches:
        raise ctx.fail(f"roi {r} has batch index {batch}, expected [0, {num_batches})")
    if not (x1 >= 0 and y1 >= 0 and x2 >= 0 and y2 >= 0 and x1 <= in_w and x2 <= in_w
            and y1 <= in_h and y2 <= in_h and x1 <= x2 and y1 <= y2):
        raise ctx.fail(f"roi {r} ({x1}, {y1}, {x2}, {y2}) is malformed or out of the "
                       f"{in_h}x{in_w} feature map")


def _samples(start: np.float32, step: np.float32, bin_size: np.float32, out: int, ratio: int,
             in_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per sample index, for every output index: lower pixel, upper pixel, fraction (float32), with
    the last-pixel clamping of Android's loop. One sample at a time: a sampling ratio is any INT32,
    so memory stays that of one row of samples."""
    base = (step * np.arange(out, dtype=np.float32) + start) + bin_size / np.float32(2)
    for k in range(ratio):
        pos = base + bin_size * np.float32(k)
        lo = np.floor(pos).astype(np.int64)
        frac = (pos - lo.astype(np.float32)).astype(np.float32)
        edge = lo >= in_size - 1
        yield (np.where(edge, in_size - 1, lo), np.where(edge, in_size - 1, lo + 1),
               np.where(edge, np.float32(0), frac))


#: Samples taken between two QoS checkpoints (deadline, preemption): a sampling ratio of 2^31 - 1 is
#: legal, and its work is then stopped at the deadline instead of running for hours.
_SAMPLES_PER_CHECKPOINT = 64
#: Up to this width sampling ratio, the samples along the width are worked out once per roi.
_KEPT_SAMPLES = 64


def _execute(ctx: OpContext) -> list[np.ndarray]:
    (out_dims,) = _prepare(ctx)
    x_t, out = ctx.inputs[0], ctx.outputs[0]
    nchw = bool(ctx.scalar(9))
    num_rois = out_dims[0]
    if num_rois == 0:
        return [np.zeros(out_dims, out.dtype)]
    _, out_h, out_w, _ = split_dims(out_dims, nchw)
    x = to_nhwc(ctx.input(0), nchw)
    num_batches, in_h, in_w, depth = x.shape
    quant = x_t.type in _QUANT
    rois = ctx.input(1).astype(np.float32)
    if quant:
        rois = rois * np.float32(0.125)
    batches = ctx.input(2)
    h_scale = np.float32(1) / np.float32(_param(ctx, 5))
    w_scale = np.float32(1) / np.float32(_param(ctx, 6))
    h_ratio_param, w_ratio_param = _param(ctx, 7), _param(ctx, 8)
    result = np.zeros((num_rois, out_h, out_w, depth), np.float32 if not quant else out.dtype)
    if quant:
        xq = x.astype(np.int64) - x_t.zero_point
    else:
        xf = x.astype(np.float32)
    w_quant_scale = np.float32(1) / np.float32(255)
    for r in range(num_rois):
        x1, y1, x2, y2 = (rois[r, 0] * w_scale, rois[r, 1] * h_scale, rois[r, 2] * w_scale,
                          rois[r, 3] * h_scale)
        check_roi(ctx, r, int(batches[r]), num_batches, (x1, y1, x2, y2), in_h, in_w)
        roi_w = max(np.float32(x2 - x1), np.float32(1))
        roi_h = max(np.float32(y2 - y1), np.float32(1))
        w_step = np.float32(roi_w / np.float32(out_w))
        h_step = np.float32(roi_h / np.float32(out_h))
        w_ratio = w_ratio_param if w_ratio_param > 0 else int(math.ceil(w_step))
        h_ratio = h_ratio_param if h_ratio_param > 0 else int(math.ceil(h_step))
        w_bin = np.float32(w_step / np.float32(w_ratio))
        h_bin = np.float32(h_step / np.float32(h_ratio))
        img = xq[batches[r]] if quant else xf[batches[r]]
        acc = np.zeros((out_h, out_w, depth), np.int64 if quant else np.float32)
        width = (lambda: _samples(x1, w_step, w_bin, out_w, w_ratio, in_w))
        kept = list(width()) if w_ratio <= _KEPT_SAMPLES else None
        taken = 0
        for ya, yb, dy1 in _samples(y1, h_step, h_bin, out_h, h_ratio, in_h):
            fy1 = dy1[:, None, None]
            fy2 = np.float32(1) - fy1
            for xa, xb, dx1 in (kept if kept is not None else width()):
                taken += 1
                if taken % _SAMPLES_PER_CHECKPOINT == 0:
                    checkpoint("ROI_ALIGN sampling")
                fx1 = dx1[None, :, None]
                fx2 = np.float32(1) - fx1
                ws = (fx2 * fy2, fx1 * fy2, fx2 * fy1, fx1 * fy1)
                vals = (img[ya][:, xa], img[ya][:, xb], img[yb][:, xa], img[yb][:, xb])
                if quant:
                    for wgt, v in zip(ws, vals):
                        acc += round_half_away(wgt / w_quant_scale).astype(np.int64) * v
                else:
                    interp = ws[0] * vals[0] + ws[1] * vals[1] + ws[2] * vals[2] + ws[3] * vals[3]
                    acc += interp
        points = h_ratio * w_ratio
        if quant:
            real = np.float32(np.float32(x_t.scale) * w_quant_scale / np.float32(out.scale)) / np.float32(points)
            if not 0 <= real < 1:
                raise ctx.fail(f"requantization multiplier {real} is not in [0, 1)")
            mult, shift = quantize_multiplier(float(real))
            q = multiply_by_quantized_multiplier(acc, mult, shift) + out.zero_point
            info = np.iinfo(out.dtype)
            result[r] = np.clip(q, info.min, info.max)
        else:
            result[r] = acc / np.float32(points)
    return [from_nhwc(result, nchw).astype(out.dtype)]


register(Op.ROI_ALIGN, validate=_validate, prepare=_prepare, execute=_execute, allow_zero_sized_input=True)
