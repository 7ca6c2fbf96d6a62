"""BOX_WITH_NMS_LIMIT: greedy per-class non-maximum suppression with hard, linear or gaussian kernels.

Inputs: scores (num_rois, classes); rois (num_rois, 4 * classes) [x1, y1, x2, y2] per class;
batch indices TENSOR_INT32 (num_rois,), boxes of a batch consecutive; score threshold; max
detections per batch (< 0: all); kernel (0 hard, 1 linear, 2 gaussian); IoU threshold; sigma
(gaussian); NMS score threshold (soft-suppressed boxes below it are dropped).
Outputs (their size depends on the values): kept scores (n,), rois (n, 4), classes (n,) and
batch indices (n,), per batch sorted by class then decreasing score. Class 0 is background and
never kept. Types: float32 / float16, or quant8 asymm (signed) scores with
TENSOR_QUANT16_ASYMM rois (scale 0.125, zero point 0) and float32 scalars.

Follows Android's boxWithNmsLimitFloat32Compute: the kernel is always applied the soft way
(hard = score times 0), so with an NMS score threshold <= 0 a suppressed box is kept with
score 0. Output shapes need the input values: prepare runs the selection (UnknownValue when
the inputs are not constant at compile time).
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._boxes import from_float32, nms_multi_class, soft_suppress, to_float32
from .context import OpContext, UnknownValue
from .registry import register

_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(9, 4)
    t = ctx.inputs[0].type
    if t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
        ctx.check_types([t, t, T.TENSOR_INT32, s, T.INT32, T.INT32, s, s, s],
                        [t, t, T.TENSOR_INT32, T.TENSOR_INT32])
    elif t in _QUANT:
        q16, f = T.TENSOR_QUANT16_ASYMM, T.FLOAT32
        ctx.check_types([t, q16, T.TENSOR_INT32, f, T.INT32, T.INT32, f, f, f],
                        [t, q16, T.TENSOR_INT32, T.TENSOR_INT32])
    else:
        raise ctx.fail(f"input 0 (scores) has unsupported type {t.name}")
    for i, rank in ((0, 2), (1, 2), (2, 1)):
        ctx.check_rank(i, rank)
    try:
        _kernel(ctx)
    except UnknownValue:
        pass


def _kernel(ctx: OpContext) -> int:
    kernel = ctx.scalar(5)
    if kernel not in (0, 1, 2):
        raise ctx.fail(f"input 5 (NMS kernel) must be 0 (hard), 1 (linear) or 2 (gaussian), got {kernel}")
    return kernel


def _check_dims(ctx: OpContext) -> tuple[int, int]:
    scores, rois, batches = ctx.inputs[:3]
    for i, rank in ((0, 2), (1, 2), (2, 1)):
        if len(ctx.inputs[i].dims) != rank:
            raise ctx.fail(f"input {i} has rank {len(ctx.inputs[i].dims)}, expected {rank}")
    num_rois, num_classes = scores.dims
    if rois.dims != (num_rois, 4 * num_classes):
        raise ctx.fail(f"input 1 (rois) has dimensions {list(rois.dims)}, expected "
                       f"[{num_rois}, {4 * num_classes}]")
    if batches.dims[0] != num_rois:
        raise ctx.fail(f"input 2 (batch indices) has {batches.dims[0]} entries, expected {num_rois}")
    if num_classes <= 1:
        raise ctx.fail(f"input 0 (scores) needs more than one class, got {num_classes}")
    if scores.type in _QUANT and (np.float32(rois.scale) != np.float32(0.125) or rois.zero_point != 0):
        raise ctx.fail(f"input 1 (rois) must have scale 0.125 and zero point 0, "
                       f"got {rois.scale} and {rois.zero_point}")
    return num_rois, num_classes


def _select(ctx: OpContext) -> tuple[list[int], list[int], np.ndarray]:
    """(kept flat indices roi * classes + class, their batch segment starts, final float32 scores)."""
    num_rois, num_classes = _check_dims(ctx)
    kernel = _kernel(ctx)
    params = [ctx.scalar(i) for i in (3, 4, 6, 7, 8)]
    score_thr, max_det, iou_thr, sigma, nms_score_thr = params
    if num_rois == 0:
        return [], [], np.zeros(0, np.float32)
    scores = to_float32(ctx.inputs[0], ctx.input(0)).reshape(-1).copy()
    rois = to_float32(ctx.inputs[1], ctx.input(1)).reshape(-1, 4)
    batches = ctx.input(2).reshape(-1)
    # Consecutive equal batch indices form one batch.
    starts = [0] + [i for i in range(1, num_rois) if batches[i] != batches[i - 1]]
    ends = starts[1:] + [num_rois]
    kept: list[int] = []
    firsts: list[int] = []
    for s, e in zip(starts, ends):
        n = e - s
        seg_scores = scores[s * num_classes:e * num_classes]  # a view: soft NMS rescales in place
        seg_rois = rois[s * num_classes:e * num_classes]
        # Android checks the first n boxes (4 values each) of the batch's roi block.
        head = seg_rois[:n]
        if np.any(~(head[:, 0] <= head[:, 2])) or np.any(~(head[:, 1] <= head[:, 3])):
            raise ctx.fail("an input roi has x2 < x1 or y2 < y1")
        suppress = soft_suppress(seg_scores, kernel, iou_thr, sigma, nms_score_thr)
        result = nms_multi_class(seg_scores, seg_rois, n, num_classes, score_thr, max_det, max_det, suppress)
        result.sort(key=lambda i: (i % num_classes, -float(seg_scores[i])))
        kept += [s * num_classes + i for i in result]
        firsts += [s] * len(result)
    return kept, firsts, scores


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    kept, _, _ = _select(ctx)
    n = len(kept)
    return [(n,), (n, 4), (n,), (n,)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    kept, firsts, scores = _select(ctx)
    outs = ctx.outputs
    idx = np.asarray(kept, np.int64)
    num_classes = ctx.inputs[0].dims[1]
    out_scores = from_float32(scores[idx], outs[0])
    out_rois = ctx.input(1).reshape(-1, 4)[idx].astype(outs[1].dtype).reshape(len(kept), 4)
    classes = (idx % num_classes).astype(np.int32)
    batches = ctx.input(2).reshape(-1)[np.asarray(firsts, np.int64)].astype(np.int32)
    return [out_scores, out_rois, classes, batches]


register(Op.BOX_WITH_NMS_LIMIT, validate=_validate, prepare=_prepare, execute=_execute,
         allow_zero_sized_input=True)
