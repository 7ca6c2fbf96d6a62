"""GENERATE_PROPOSALS: region proposals from anchors, box deltas and objectness scores (Faster R-CNN).

Inputs: scores (batches, height, width, anchors); deltas (batches, height, width, 4 * anchors);
anchors (anchors, 4) [x1, y1, x2, y2]; image info (batches, 2) [height, width]; height and
width strides; pre-NMS top N (<= 0: all); post-NMS top N (< 0: all); IoU threshold; minimum box
size; layout (BOOL, true = NCHW for scores and deltas).
Outputs (their size depends on the values): scores (n,), rois (n, 4) and batch indices (n,).
Types: float32 / float16 (FLOAT16 scalars), or quant8 asymm (signed) scores and deltas with
TENSOR_QUANT16_SYMM anchors and TENSOR_QUANT16_ASYMM image info / rois, float32 scalars.

Per batch, as Android's generateProposalsNhwcFloat32Compute: anchors shifted over the grid,
deltas applied (clipped to the image), the pre-NMS top N by score kept, boxes not wider and
taller than the minimum size or centred outside the image dropped, then hard NMS keeping at
most post-NMS top N. Prepare runs the selection (UnknownValue while inputs are not constant).
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._boxes import F32, bbox_transform, from_float32, hard_suppress, nms_single_class, to_float32
from ._padding import to_nhwc
from .context import OpContext
from .registry import register

_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(11, 3)
    t = ctx.inputs[0].type
    if t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
        ctx.check_types([t, t, t, t, s, s, T.INT32, T.INT32, s, s, T.BOOL], [t, t, T.TENSOR_INT32])
    elif t in _QUANT:
        f = T.FLOAT32
        ctx.check_types([t, t, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM, f, f, T.INT32, T.INT32,
                         f, f, T.BOOL], [t, T.TENSOR_QUANT16_ASYMM, T.TENSOR_INT32])
    else:
        raise ctx.fail(f"input 0 (scores) has unsupported type {t.name}")
    for i, rank in ((0, 4), (1, 4), (2, 2), (3, 2)):
        ctx.check_rank(i, rank)


def _check_dims(ctx: OpContext) -> tuple[bool, int, int, int, int]:
    nchw = bool(ctx.scalar(10))
    scores, deltas, anchors, info = ctx.inputs[:4]
    for i, rank in ((0, 4), (1, 4), (2, 2), (3, 2)):
        if len(ctx.inputs[i].dims) != rank:
            raise ctx.fail(f"input {i} has rank {len(ctx.inputs[i].dims)}, expected {rank}")
    if nchw:
        n, a, h, w = scores.dims
        expected = (n, 4 * a, h, w)
    else:
        n, h, w, a = scores.dims
        expected = (n, h, w, 4 * a)
    if deltas.dims != expected:
        raise ctx.fail(f"input 1 (deltas) has dimensions {list(deltas.dims)}, expected {list(expected)}")
    if info.dims != (n, 2):
        raise ctx.fail(f"input 3 (image info) has dimensions {list(info.dims)}, expected [{n}, 2]")
    if anchors.dims != (a, 4):
        raise ctx.fail(f"input 2 (anchors) has dimensions {list(anchors.dims)}, expected [{a}, 4]")
    if scores.type == T.TENSOR_QUANT8_ASYMM:
        if np.float32(anchors.scale) != np.float32(0.125):
            raise ctx.fail(f"input 2 (anchors) must have scale 0.125, got {anchors.scale}")
        if np.float32(info.scale) != np.float32(0.125) or info.zero_point != 0:
            raise ctx.fail(f"input 3 (image info) must have scale 0.125 and zero point 0, "
                           f"got {info.scale} and {info.zero_point}")
    return nchw, n, h, w, a


def _compute(ctx: OpContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float32 (scores (k,), rois (k, 4)) and int32 batch indices (k,) of the kept proposals."""
    nchw, n, h, w, a = _check_dims(ctx)
    h_stride, w_stride = F32(ctx.scalar(4)), F32(ctx.scalar(5))
    pre_top, post_top = ctx.scalar(6), ctx.scalar(7)
    iou_thr, min_size = ctx.scalar(8), F32(ctx.scalar(9))
    scores = to_nhwc(to_float32(ctx.inputs[0], ctx.input(0)).reshape(n, *ctx.inputs[0].dims[1:]), nchw)
    deltas = to_nhwc(to_float32(ctx.inputs[1], ctx.input(1)).reshape(n, *ctx.inputs[1].dims[1:]), nchw)
    anchors = to_float32(ctx.inputs[2], ctx.input(2)).reshape(a, 4)
    info = to_float32(ctx.inputs[3], ctx.input(3)).reshape(n, 2)
    size = h * w * a
    # Anchors shifted to every grid cell: rois[(y * w + x) * a + k]. Infinite strides or anchors give
    # inf / nan as IEEE (and the C++ kernel) do, without numpy's warnings on the app's stderr.
    rois = np.empty((h, w, a, 4), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        shift_y = (np.arange(h, dtype=np.float32) * h_stride)[:, None, None]
        shift_x = (np.arange(w, dtype=np.float32) * w_stride)[None, :, None]
        rois[..., 0] = anchors[:, 0] + shift_x
        rois[..., 1] = anchors[:, 1] + shift_y
        rois[..., 2] = anchors[:, 2] + shift_x
        rois[..., 3] = anchors[:, 3] + shift_y
    rois = rois.reshape(size, 4)
    zeros = np.zeros(size, np.int32)
    out_scores: list[np.ndarray] = [np.zeros(0, np.float32)]
    out_rois: list[np.ndarray] = [np.zeros((0, 4), np.float32)]
    out_batches: list[np.ndarray] = [np.zeros(0, np.int32)]
    for b in range(n):
        s = np.ascontiguousarray(scores[b]).reshape(size)
        boxes = bbox_transform(ctx, rois, np.ascontiguousarray(deltas[b]).reshape(size, 4), zeros, info[b:b + 1])
        select = np.arange(size)
        if 0 < pre_top < size:
            select = np.argsort(-s, kind="stable")[:pre_top]
        # Drop boxes not larger than min_size or centred outside the image.
        r = boxes[select]
        bw, bh = r[:, 2] - r[:, 0], r[:, 3] - r[:, 1]
        cx, cy = r[:, 0] + bw / F32(2), r[:, 1] + bh / F32(2)
        keep = (bw > min_size) & (bh > min_size) & (cx < info[b, 1]) & (cy < info[b, 0])
        select = select[keep].tolist()
        kept = np.asarray(nms_single_class(s, boxes, select, post_top, hard_suppress(iou_thr)), np.int64)
        out_scores.append(s[kept])
        out_rois.append(boxes[kept])
        out_batches.append(np.full(len(kept), b, np.int32))
    return (np.concatenate(out_scores).astype(np.float32), np.concatenate(out_rois).reshape(-1, 4),
            np.concatenate(out_batches).astype(np.int32))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    scores, _, _ = _compute(ctx)
    k = scores.shape[0]
    return [(k,), (k, 4), (k,)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    scores, rois, batches = _compute(ctx)
    return [from_float32(scores, ctx.outputs[0]), from_float32(rois, ctx.outputs[1]), batches]


register(Op.GENERATE_PROPOSALS, validate=_validate, prepare=_prepare, execute=_execute)
