"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR over rank-4 images (Android's ResizeImageOps).

Inputs: (input, width, height, [layout BOOL], [align_corners BOOL], [half_pixel_centers BOOL]).
Input 1 is the output width and input 2 the output height: both INT32 sizes, or both scales
(FLOAT32, FLOAT16 for float16 tensors) giving floor(in_size * scale). RESIZE_BILINEAR may omit
the layout flag (NNAPI 1.0 form: 3 inputs); RESIZE_NEAREST_NEIGHBOR needs it. align_corners
and half_pixel_centers may not both be true. Only the batch dimension may be 0.

Bilinear follows TFLite's reference ResizeBilinear (float32 arithmetic, the float result cast
to the element type, i.e. truncated for quantized tensors); nearest neighbour follows Android's
own loop (roundf with align_corners, floorf otherwise). float16 is computed in float32.
Quantized outputs keep the input's values' quantization (values are resampled, not rescaled).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._padding import from_nhwc, join_dims, split_dims, to_nhwc
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_WIDTH, _HEIGHT, _LAYOUT, _ALIGN, _HALF_PIXEL = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class ResizeParams:
    """RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: layout and sampling flags, the output height and
    width (from the sizes or the scales) and the output shape. Source indices and weights per output
    index: `nearest_indices` / `bilinear_terms` of this module."""

    nchw: bool
    align_corners: bool
    half_pixel_centers: bool
    out_h: int
    out_w: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    min_inputs = 3 if ctx.op == Op.RESIZE_BILINEAR else 4
    ctx.check_counts(tuple(range(min_inputs, 7)), 1)
    t = ctx.inputs[0].type
    scalar_type = ctx.inputs[_HEIGHT].type
    if scalar_type == T.INT32:
        allowed = T.INT32
    else:
        allowed = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ctx.check_types([_TYPES, allowed, allowed, T.BOOL, T.BOOL, T.BOOL], [t])
    ctx.check_rank(0, 4)
    try:
        _flags(ctx)
        if ctx.inputs[0].known and all(ctx.inputs[0].dims[1:]):
            _out_hw(ctx, *split_dims(ctx.inputs[0].dims, _flags(ctx)[0])[1:3])
    except UnknownValue:
        pass


def _flags(ctx: OpContext) -> tuple[bool, bool, bool]:
    """(nchw, align_corners, half_pixel_centers), each False when absent."""
    nchw, align, half = (bool(ctx.scalar(i, False)) if i < len(ctx.inputs) else False
                         for i in (_LAYOUT, _ALIGN, _HALF_PIXEL))
    if align and half:
        raise ctx.fail("input 4 (align_corners) and input 5 (half_pixel_centers) cannot both be true")
    return nchw, align, half


def _out_hw(ctx: OpContext, in_h: int, in_w: int) -> tuple[int, int]:
    """Output (height, width) from the INT32 sizes or the float scales."""
    if ctx.inputs[_HEIGHT].type == T.INT32:
        h, w = ctx.scalar(_HEIGHT), ctx.scalar(_WIDTH)
    else:
        # Android: std::floor(float(inSize) * scale), in single precision.
        h = math.floor(np.float32(in_h) * np.float32(ctx.scalar(_HEIGHT)))
        w = math.floor(np.float32(in_w) * np.float32(ctx.scalar(_WIDTH)))
    if h <= 0:
        raise ctx.fail(f"input 2 (output height) gives height {h}, must be positive")
    if w <= 0:
        raise ctx.fail(f"input 1 (output width) gives width {w}, must be positive")
    return int(h), int(w)


@resolver
def params(ctx: OpContext) -> ResizeParams:
    """The resolved ResizeParams (Android's resize prepare); INVALID_ARGUMENT naming the input at
    fault (only the batch may be 0), UnknownValue while a size, scale or flag is not constant."""
    dims = ctx.inputs[0].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    nchw, align, half = _flags(ctx)
    n, in_h, in_w, c = split_dims(dims, nchw)
    if in_h <= 0 or in_w <= 0 or c <= 0:
        raise ctx.fail(f"input 0 {dims}: only the batch dimension may be 0")
    h, w = _out_hw(ctx, in_h, in_w)
    return ResizeParams(nchw, align, half, h, w, join_dims(n, h, w, c, nchw))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """Source pixels per output pixel (Android's calculateResizeScale / TFLite's), in float32."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Source index of every output index for RESIZE_NEAREST_NEIGHBOR."""
    scale = resize_scale(in_size, out_size, align_corners)
    pos = np.arange(out_size, dtype=np.float32)
    if half_pixel:
        pos = pos + np.float32(0.5)
    pos = pos * scale
    # roundf rounds halves away from zero; positions are non-negative here.
    idx = np.floor(pos + np.float32(0.5)) if align_corners else np.floor(pos)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    if half_pixel:
        idx = np.maximum(idx, 0)
    return idx


def bilinear_terms(in_size: int, out_size: int, align_corners: bool,
                   half_pixel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, fraction) per output index (TFLite ComputeInterpolationValues).

    The fraction is `scaled - lower` in float32; with half-pixel centres it may be negative
    at the border, where lower == upper so the weights still sum to one.
    """
    scale = resize_scale(in_size, out_size, align_corners)
    pos = np.arange(out_size, dtype=np.float32)
    if half_pixel:
        scaled = (pos + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        scaled = pos * scale
    lower = np.maximum(np.floor(scaled).astype(np.int64), 0)
    upper = np.minimum(np.ceil(scaled).astype(np.int64), in_size - 1)
    frac = (scaled - lower.astype(np.float32)).astype(np.float32)
    return lower, upper, frac


def _bilinear(x: np.ndarray, out_h: int, out_w: int, align: bool, half: bool) -> np.ndarray:
    """TFLite reference ResizeBilinear on an NHWC float32 array; float32 result."""
    _, in_h, in_w, _ = x.shape
    y0, y1, fy = bilinear_terms(in_h, out_h, align, half)
    x0, x1, fx = bilinear_terms(in_w, out_w, align, half)
    one = np.float32(1)
    wy0, wy1 = (one - fy)[None, :, None, None], fy[None, :, None, None]
    wx0, wx1 = (one - fx)[None, None, :, None], fx[None, None, :, None]
    rows0, rows1 = x[:, y0], x[:, y1]
    # Same association as TFLite: ((value * wy) * wx), summed left to right.
    return (rows0[:, :, x0] * wy0 * wx0 + rows1[:, :, x0] * wy1 * wx0
            + rows0[:, :, x1] * wy0 * wx1 + rows1[:, :, x1] * wy1 * wx1)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    out_dims, out = g.out_dims, ctx.outputs[0]
    if 0 in out_dims:
        return [np.zeros(out_dims, out.dtype)]
    nchw, align, half, out_h, out_w = g.nchw, g.align_corners, g.half_pixel_centers, g.out_h, g.out_w
    x = to_nhwc(ctx.input(0), nchw)
    if ctx.op == Op.RESIZE_NEAREST_NEIGHBOR:
        iy = nearest_indices(x.shape[1], out_h, align, half)
        ix = nearest_indices(x.shape[2], out_w, align, half)
        y = x[:, iy][:, :, ix]
    else:
        y = _bilinear(x.astype(np.float32), out_h, out_w, align, half)
        if out.type.is_quantized:
            info = np.iinfo(out.dtype)
            y = np.clip(np.trunc(y), info.min, info.max)  # static_cast<T>(float)
    return [from_nhwc(y, nchw).astype(out.dtype)]


register(Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR, validate=_validate, prepare=_prepare,
         execute=_execute, params=params, allow_zero_sized_input=True)
