"""HEATMAP_MAX_KEYPOINT: keypoint locations and scores from heatmaps (Android's HeatmapMaxKeypoint.cpp).

Inputs: (heatmaps [B, S, S, K] or NCHW [B, K, S, S] with S >= 2, boxes [B, 4] as
(x1, y1, x2, y2), layout BOOL). Outputs: scores [B, K] and keypoints [B, K, 2] as (x, y).

For each box and keypoint the heatmap maximum (first one in row-major order) is refined by a
second-order Taylor expansion over its 3x3 neighbourhood (mirrored at the border): the offset
solves A d = b (b the negative gradient, A the Hessian), skipped when |det A| is below
atol + rtol * A00 * A11 (1e-5 each; 1e-3 for float16), scaled down to at most 1.5 pixels, and
the score is the expansion's value there. The keypoint is
((index + d + 0.5) / S) * box size + box start. Quantized heatmaps take TENSOR_QUANT16_ASYMM
boxes and keypoints (scale 0.125, zero point 0); everything is computed in float32.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, quantize_float32
from .context import OpContext
from .registry import register

_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + _QUANT


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 2)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    box_t = T.TENSOR_QUANT16_ASYMM if t in _QUANT else t
    ctx.check_types([t, box_t, T.BOOL], [t, box_t])
    ctx.check_rank(0, 4)
    ctx.check_rank(1, 2)
    if t in _QUANT:
        for kind, tensor, index in (("input", ctx.inputs[1], 1), ("output", ctx.outputs[1], 1)):
            if as_float32(tensor.scale) != 0.125 or tensor.zero_point != 0:
                raise ctx.fail(f"{kind} {index} (boxes/keypoints) must have scale 0.125 and zero point 0, "
                               f"got {tensor.scale} and {tensor.zero_point}")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    dims, box_dims = ctx.inputs[0].dims, ctx.inputs[1].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    if len(box_dims) != 2:
        raise ctx.fail(f"input 1 (boxes) has rank {len(box_dims)}, expected 2")
    nchw = bool(ctx.scalar(2))
    num_boxes, size = dims[0], dims[2]
    keypoints = dims[1] if nchw else dims[3]
    other = dims[3] if nchw else dims[1]
    if other != size:
        raise ctx.fail(f"input 0 {dims}: heatmaps must be square")
    if size < 2:
        raise ctx.fail(f"input 0 {dims}: heatmap size must be at least 2")
    if box_dims != (num_boxes, 4):
        raise ctx.fail(f"input 1 (boxes) has shape {box_dims}, expected [{num_boxes}, 4]")
    return [(num_boxes, keypoints), (num_boxes, keypoints, 2)]


def _solve(grid: np.ndarray, max_score: np.ndarray, atol: np.float32,
           rtol: np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Android's solveForDelta over arrays: grid [..., 3, 3] float32 -> (dx, dy, score)."""
    g = lambda i, j: grid[..., i, j]  # noqa: E731
    two, four, half = np.float32(2), np.float32(4), np.float32(1.5)
    b0 = -(g(1, 2) - g(1, 0)) / two
    b1 = -(g(2, 1) - g(0, 1)) / two
    a00 = g(1, 0) - two * g(1, 1) + g(1, 2)
    a01 = (g(2, 2) - g(2, 0) - g(0, 2) + g(0, 0)) / four
    a11 = g(0, 1) - two * g(1, 1) + g(2, 1)
    cross1, cross2 = a00 * a11, a01 * a01
    det = cross1 - cross2
    solvable = ~(np.abs(det) < (atol + rtol * cross1))
    safe_det = np.where(solvable, det, np.float32(1))
    d0 = (a11 * b0 - a01 * b1) / safe_det
    d1 = (a00 * b1 - a01 * b0) / safe_det
    big = np.maximum(np.abs(d0), np.abs(d1))
    clip = (np.abs(d0) > half) | (np.abs(d1) > half)
    scale = half / np.where(clip, big, np.float32(1))
    d0 = np.where(clip, d0 * scale, d0)
    d1 = np.where(clip, d1 * scale, d1)
    score = g(1, 1) - b0 * d0 - b1 * d1 + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
    zero = np.float32(0)
    return (np.where(solvable, d0, zero), np.where(solvable, d1, zero),
            np.where(solvable, score, max_score))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    score_dims, kp_dims = _prepare(ctx)
    heat_t, score_t, kp_t = ctx.inputs[0], ctx.outputs[0], ctx.outputs[1]
    if 0 in score_dims:
        return [np.zeros(score_dims, score_t.dtype), np.zeros(kp_dims, kp_t.dtype)]
    nchw = bool(ctx.scalar(2))
    heat = ctx.inputs[0].dequantized()
    if not nchw:
        heat = heat.transpose(0, 3, 1, 2)  # -> [B, K, S, S]
    boxes = ctx.inputs[1].dequantized()
    num_boxes, num_kp, size, _ = heat.shape
    for i in range(num_boxes):
        if not (boxes[i, 0] <= boxes[i, 2] and boxes[i, 1] <= boxes[i, 3]):
            raise ctx.fail(f"box {i} {boxes[i].tolist()} has x2 < x1 or y2 < y1")
    flat = heat.reshape(num_boxes, num_kp, size * size)
    index = flat.argmax(axis=2)  # first maximum, as Android's strict '<' scan
    max_score = np.take_along_axis(flat, index[..., None], axis=2)[..., 0]
    row, col = index // size, index % size
    offsets = np.array([-1, 0, 1])
    rows = row[..., None] + offsets  # [B, K, 3]
    cols = col[..., None] + offsets
    rows = np.where(rows < 0, 1, np.where(rows >= size, size - 2, rows))
    cols = np.where(cols < 0, 1, np.where(cols >= size, size - 2, cols))
    b_idx = np.arange(num_boxes)[:, None, None, None]
    k_idx = np.arange(num_kp)[None, :, None, None]
    grid = heat[b_idx, k_idx, rows[..., :, None], cols[..., None, :]]  # [B, K, 3, 3]
    tol = np.float32(1e-3) if heat_t.type == T.TENSOR_FLOAT16 else np.float32(1e-5)
    dx, dy, score = _solve(grid.astype(np.float32), max_score, tol, tol)
    x1, y1 = boxes[:, 0:1], boxes[:, 1:2]
    roi_w, roi_h = boxes[:, 2:3] - x1, boxes[:, 3:4] - y1
    s = np.float32(size)
    w_rel = (col.astype(np.float32) + dx + np.float32(0.5)) / s
    h_rel = (row.astype(np.float32) + dy + np.float32(0.5)) / s
    keypoints = np.stack([w_rel * roi_w + x1, h_rel * roi_h + y1], axis=-1)
    if heat_t.type in _QUANT:
        return [quantize_float32(score, score_t.scale, score_t.zero_point, score_t.dtype),
                quantize_float32(keypoints, kp_t.scale, kp_t.zero_point, kp_t.dtype)]
    return [score.astype(score_t.dtype), keypoints.astype(kp_t.dtype)]


register(Op.HEATMAP_MAX_KEYPOINT, validate=_validate, prepare=_prepare, execute=_execute)
