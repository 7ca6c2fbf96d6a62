"""DETECTION_POSTPROCESSING: SSD box decoding followed by (regular or fast) NMS.

Inputs: class scores (batches, anchors, classes); box encodings (batches, anchors, >= 4) as
[dy, dx, dh, dw, ...]; anchors (anchors, 4) as [y_ctr, x_ctr, h, w]; scales y, x, h, w (> 0);
use regular NMS (BOOL); max detections (> 0); max classes per detection; max detections per
class; score threshold (>= 0); IoU threshold (>= 0); background in label (BOOL).
Outputs: scores (batches, d), boxes (batches, d, 4) [y1, x1, y2, x2], classes (batches, d) and
the number of valid detections per batch (batches,), where d = max detections (regular NMS) or
max detections * max classes per detection (fast NMS); unused slots are zero. Class 0 is the
background: never detected, and labels count from it only when background-in-label is set.
Types: float32 (FLOAT32 scalars) or float16 (FLOAT16 scalars); computed in float32.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._boxes import F32, from_float32, hard_suppress, nms_multi_class, nms_single_class, to_float32
from .context import OpContext, UnknownValue
from .registry import register


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(14, 4)
    t = ctx.inputs[0].type
    if t not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        raise ctx.fail(f"input 0 (scores) has unsupported type {t.name}")
    s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([t, t, t, s, s, s, s, T.BOOL, T.INT32, T.INT32, T.INT32, s, s, T.BOOL],
                    [t, t, T.TENSOR_INT32, T.TENSOR_INT32])
    for i, rank in ((0, 3), (1, 3), (2, 2)):
        ctx.check_rank(i, rank)
    try:
        _params(ctx)
    except UnknownValue:
        pass


def _params(ctx: OpContext) -> dict:
    """The scalar parameters, checked as Android's prepare checks them."""
    p = {name: ctx.scalar(i) for i, name in enumerate(
        ("scale_y", "scale_x", "scale_h", "scale_w", "regular", "max_det", "max_classes",
         "max_per_class", "score_thr", "iou_thr", "bg_in_label"), start=3)}
    for i, name in enumerate(("scale_y", "scale_x", "scale_h", "scale_w"), start=3):
        if not p[name] > 0:
            raise ctx.fail(f"input {i} ({name}) must be positive, got {p[name]}")
    for i, name in ((11, "score_thr"), (12, "iou_thr")):
        if not p[name] >= 0:
            raise ctx.fail(f"input {i} ({name}) must not be negative, got {p[name]}")
    if p["max_det"] <= 0:
        raise ctx.fail(f"input 8 (max detections) must be positive, got {p['max_det']}")
    if p["regular"]:
        if p["max_per_class"] <= 0:
            raise ctx.fail(f"input 10 (max detections per class) must be positive, got {p['max_per_class']}")
    elif p["max_classes"] <= 0:
        raise ctx.fail(f"input 9 (max classes per detection) must be positive, got {p['max_classes']}")
    return p


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    scores, deltas, anchors = ctx.inputs[:3]
    for i, rank in ((0, 3), (1, 3), (2, 2)):
        if len(ctx.inputs[i].dims) != rank:
            raise ctx.fail(f"input {i} has rank {len(ctx.inputs[i].dims)}, expected {rank}")
    batches, num_anchors, num_classes = scores.dims
    if deltas.dims[:2] != (batches, num_anchors):
        raise ctx.fail(f"input 1 (box encodings) has dimensions {list(deltas.dims)}, expected "
                       f"[{batches}, {num_anchors}, >= 4]")
    if anchors.dims != (num_anchors, 4):
        raise ctx.fail(f"input 2 (anchors) has dimensions {list(anchors.dims)}, expected [{num_anchors}, 4]")
    p = _params(ctx)
    if num_classes <= 1:
        raise ctx.fail(f"input 0 (scores) needs more than one class, got {num_classes}")
    if deltas.dims[2] < 4:
        raise ctx.fail(f"input 1 (box encodings) needs at least 4 values per box, got {deltas.dims[2]}")
    d = p["max_det"] if p["regular"] else p["max_det"] * p["max_classes"]
    return [(batches, d), (batches, d, 4), (batches, d), (batches,)]


def _decode(deltas: np.ndarray, anchors: np.ndarray, p: dict) -> np.ndarray:
    """Center-size encodings relative to the anchors -> [y1, x1, y2, x2], in float32."""
    sy, sx, sh, sw = (F32(p[k]) for k in ("scale_y", "scale_x", "scale_h", "scale_w"))
    with np.errstate(over="ignore", invalid="ignore"):
        y = anchors[:, 0] + anchors[:, 2] * deltas[:, 0] / sy
        x = anchors[:, 1] + anchors[:, 3] * deltas[:, 1] / sx
        h_half = anchors[:, 2] * np.exp(deltas[:, 2] / sh) * F32(0.5)
        w_half = anchors[:, 3] * np.exp(deltas[:, 3] / sw) * F32(0.5)
        return np.stack([y - h_half, x - w_half, y + h_half, x + w_half], axis=-1).astype(np.float32)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    dims = _prepare(ctx)
    p = _params(ctx)
    batches, num_anchors, num_classes = ctx.inputs[0].dims
    d = dims[0][1]
    scores = to_float32(ctx.inputs[0], ctx.input(0)).reshape(batches, num_anchors, num_classes)
    deltas = to_float32(ctx.inputs[1], ctx.input(1)).reshape(batches, num_anchors, -1)
    anchors = to_float32(ctx.inputs[2], ctx.input(2)).reshape(num_anchors, 4)
    out_scores = np.zeros((batches, d), np.float32)
    out_boxes = np.zeros((batches, d, 4), np.float32)
    out_classes = np.zeros((batches, d), np.int32)
    counts = np.zeros(batches, np.int32)
    label_shift = 0 if p["bg_in_label"] else 1
    suppress = hard_suppress(p["iou_thr"])
    for b in range(batches):
        boxes = _decode(deltas[b], anchors, p)
        s = np.ascontiguousarray(scores[b]).reshape(-1)
        if p["regular"]:
            # Flat indices anchor * classes + class; every class of an anchor shares its box.
            sel = nms_multi_class(s, np.repeat(boxes, num_classes, axis=0), num_anchors, num_classes,
                                  p["score_thr"], p["max_det"], p["max_per_class"], suppress)
            idx = np.asarray(sel, np.int64)
            out_scores[b, :len(sel)] = s[idx]
            out_boxes[b, :len(sel)] = boxes[idx // num_classes]
            out_classes[b, :len(sel)] = idx % num_classes - label_shift
            counts[b] = len(sel)
        else:
            per_anchor = s.reshape(num_anchors, num_classes)
            max_scores = per_anchor[:, 1:].max(axis=1)
            cand = np.flatnonzero(max_scores > F32(p["score_thr"])).tolist()
            sel = nms_single_class(max_scores, boxes, cand, p["max_det"], suppress)
            k = min(num_classes - 1, p["max_classes"])
            j = 0
            for a in sel:
                # Classes by decreasing score (stable: equal scores keep the lower class first).
                order = 1 + np.argsort(-per_anchor[a, 1:], kind="stable")[:k]
                out_scores[b, j:j + k] = per_anchor[a, order]
                out_boxes[b, j:j + k] = boxes[a]
                out_classes[b, j:j + k] = order - label_shift
                j += k
            counts[b] = len(sel) * k
    outs = ctx.outputs
    return [from_float32(out_scores, outs[0]), from_float32(out_boxes, outs[1]), out_classes, counts]


register(Op.DETECTION_POSTPROCESSING, validate=_validate, prepare=_prepare, execute=_execute)
