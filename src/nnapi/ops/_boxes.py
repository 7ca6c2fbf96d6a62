"""Bounding-box maths shared by the detection operations (Android's GenerateProposals.cpp).

AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and DETECTION_POSTPROCESSING
all work in single precision on float32 copies of their inputs (float16 and quantized inputs
are converted first, quantized results converted back at the end), exactly as Android's
reference does. Boxes are corner-encoded [x1, y1, x2, y2] (DETECTION_POSTPROCESSING uses
[y1, x1, y2, x2], which IoU does not care about).

The NMS loops reproduce the reference's in-place selection: the best remaining box is the
first maximum in the current order (std::max_element), and a suppressed box is swapped with
the last candidate, which is examined next. That order decides ties, so it is kept.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ._quant import convert_float32_to_quant, dequantize_float32
from .context import OpContext
from .tensor import Tensor

F32 = np.float32


def to_float32(t: Tensor, value: np.ndarray | None = None) -> np.ndarray:
    """The tensor's value as float32 the way the reference converts it (convertQuantToFloat32 for
    quantized types, a plain widening for float16)."""
    v = t.value if value is None else value
    if t.type.is_quantized:
        return dequantize_float32(v, t.scale, t.zero_point)
    return np.asarray(v).astype(np.float32)


def from_float32(x: np.ndarray, out: Tensor) -> np.ndarray:
    """Float32 results in the output's type (convertFloat32ToQuant for quantized outputs)."""
    if out.type.is_quantized:
        return convert_float32_to_quant(x, out.scale, out.zero_point, out.dtype)
    return np.asarray(x, np.float32).astype(out.dtype)


def bbox_transform(ctx: OpContext, rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray,
                   image_info: np.ndarray) -> np.ndarray:
    """Android's bboxTransformFloat32: apply [dx, dy, log dw, log dh] deltas of every class to
    each corner-encoded roi and clip to its batch's image [height, width].

    rois (n, 4), deltas (n, 4 * classes), batches (n,), image_info (batches, 2) -> (n, 4 * classes).
    Fails on a batch index out of range or a roi with x2 < x1 or y2 < y1.
    """
    n = rois.shape[0]
    num_batches = image_info.shape[0]
    rois = rois.astype(np.float32).reshape(n, 4)
    batches = np.asarray(batches).reshape(-1).astype(np.int64)
    if batches.size and (batches.min() < 0 or batches.max() >= num_batches):
        raise ctx.fail(f"a batch index is out of range [0, {num_batches})")
    x1, y1, x2, y2 = (rois[:, k:k + 1] for k in range(4))
    if np.any(~(x1 <= x2)) or np.any(~(y1 <= y2)):
        raise ctx.fail("an input roi has x2 < x1 or y2 < y1")
    w, h = x2 - x1, y2 - y1
    cx, cy = (x1 + x2) / F32(2), (y1 + y2) / F32(2)
    d = deltas.astype(np.float32).reshape(n, -1, 4)
    info = image_info.astype(np.float32).reshape(num_batches, 2)[batches]
    img_h, img_w = info[:, 0:1], info[:, 1:2]
    with np.errstate(over="ignore", invalid="ignore"):
        nw = np.exp(d[..., 2]) * w
        nh = np.exp(d[..., 3]) * h
        nx = cx + d[..., 0] * w
        ny = cy + d[..., 1] * h
        out = np.stack([np.minimum(np.maximum(nx - nw / F32(2), F32(0)), img_w),
                        np.minimum(np.maximum(ny - nh / F32(2), F32(0)), img_h),
                        np.minimum(np.maximum(nx + nw / F32(2), F32(0)), img_w),
                        np.minimum(np.maximum(ny + nh / F32(2), F32(0)), img_h)], axis=-1)
    return out.astype(np.float32).reshape(n, -1)


def iou(candidates: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Android's getIoUAxisAligned(candidate, box) in single precision for each candidate row."""
    c = candidates.astype(np.float32)
    b = box.astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        area1 = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
        area2 = (b[2] - b[0]) * (b[3] - b[1])
        w = np.maximum(np.minimum(c[:, 2], b[2]) - np.maximum(c[:, 0], b[0]), F32(0))
        h = np.maximum(np.minimum(c[:, 3], b[3]) - np.maximum(c[:, 1], b[1]), F32(0))
        inter = w * h
        return (inter / (area1 + area2 - inter)).astype(np.float32)


#: Decides, for candidate indices `idx` and their IoU with the box just kept, which candidates
#: are dropped; soft kernels also rescale their scores in place.
Suppress = Callable[[np.ndarray, np.ndarray], np.ndarray]


def hard_suppress(iou_threshold: float) -> Suppress:
    """Hard NMS: drop every candidate whose IoU reaches the threshold."""
    thr = F32(iou_threshold)
    return lambda ious, idx: ious >= thr


def soft_suppress(scores: np.ndarray, kernel: int, iou_threshold: float, sigma: float,
                  score_threshold: float) -> Suppress:
    """BOX_WITH_NMS_LIMIT's kernels (0 hard, 1 linear, 2 gaussian): scale the candidates' scores
    by kernel(iou), then drop those whose new score is below the NMS score threshold."""
    thr, sig, min_score = F32(iou_threshold), F32(sigma), F32(score_threshold)

    def suppress(ious: np.ndarray, idx: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if kernel == 0:
                k = np.where(ious < thr, F32(1), F32(0))
            elif kernel == 1:
                k = np.where(ious < thr, F32(1), F32(1) - ious)
            else:
                k = np.exp(F32(-1) * ious * ious / sig)
            scores[idx] = (scores[idx] * k.astype(np.float32)).astype(np.float32)
        return scores[idx] < min_score

    return suppress


def nms_single_class(scores: np.ndarray, boxes: np.ndarray, select: list[int], max_detections: int,
                     suppress: Suppress) -> list[int]:
    """Android's hardNmsSingleClass / softNmsSingleClass over the candidate indices `select`
    (scores[i] and boxes[i] belong to index i); at most `max_detections` kept (all when < 0).
    Returns the kept indices in the order they were chosen."""
    sel = list(select)
    start, end, kept = 0, len(sel), 0
    if max_detections < 0:
        max_detections = len(sel)
    while start < end and kept < max_detections:
        m = start + int(np.argmax(scores[sel[start:end]]))  # first maximum, as std::max_element
        sel[m], sel[start] = sel[start], sel[m]
        if end - start > 1:
            rest = np.asarray(sel[start + 1:end], np.int64)
            dropped = dict(zip(rest.tolist(), suppress(iou(boxes[rest], boxes[sel[start]]), rest).tolist()))
            i = start + 1
            while i < end:  # a dropped box is swapped with the last candidate, examined next
                if dropped[sel[i]]:
                    end -= 1
                    sel[i], sel[end] = sel[end], sel[i]
                else:
                    i += 1
        start += 1
        kept += 1
    return sel[:start]


def nms_multi_class(scores: np.ndarray, boxes: np.ndarray, num_rois: int, num_classes: int,
                    score_threshold: float, max_detections: int, max_per_class: int,
                    suppress: Suppress) -> list[int]:
    """Android's hardNmsMultiClass / softNmsMultiClass: NMS per class (class 0, the background,
    skipped) over flat indices roi * num_classes + class whose score exceeds the threshold, then
    all kept indices sorted by decreasing score and cut to `max_detections` (all when < 0)."""
    thr = F32(score_threshold)
    selected: list[int] = []
    for c in range(1, num_classes):
        idx = np.arange(num_rois) * num_classes + c
        cand = idx[scores[idx] > thr].tolist()
        selected += nms_single_class(scores, boxes, cand, max_per_class, suppress)
    selected.sort(key=lambda i: -float(scores[i]))  # stable: ties keep their order
    if 0 <= max_detections < len(selected):
        selected = selected[:max_detections]
    return selected

