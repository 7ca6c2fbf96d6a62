"""DEPTH_TO_SPACE and SPACE_TO_DEPTH over rank-4 tensors (NHWC, or NCHW with the layout flag).

Inputs: (input, block_size INT32 >= 1, [layout BOOL]). DEPTH_TO_SPACE moves channel blocks
into block_size x block_size spatial tiles: out[n, h*b + i, w*b + j, c] =
in[n, h, w, (i*b + j) * C_out + c] (TFLite order); SPACE_TO_DEPTH is its inverse.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._padding import from_nhwc, join_dims, split_dims, to_nhwc
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class DepthSpaceParams:
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH: the block size, the layout (True: NCHW) and the output shape.
    Channel blocks are in TFLite order: out[n, h*b + i, w*b + j, c] = in[n, h, w, (i*b + j) * C_out + c]."""

    block: int
    nchw: bool
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((2, 3), 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32, T.BOOL], [t])
    ctx.check_rank(0, 4)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    try:
        _block(ctx)
        _nchw(ctx)
    except UnknownValue:
        pass


def _nchw(ctx: OpContext) -> bool:
    return bool(ctx.scalar(2, False))


def _block(ctx: OpContext) -> int:
    b = ctx.scalar(1)
    if not isinstance(b, int) or b < 1:
        raise ctx.fail(f"input 1 (block_size) must be >= 1, got {b}")
    return b


@resolver
def params(ctx: OpContext) -> DepthSpaceParams:
    """The resolved DepthSpaceParams; INVALID_ARGUMENT when the depth (DEPTH_TO_SPACE) or the height
    and width (SPACE_TO_DEPTH) are not multiples of the block, UnknownValue while a scalar is not constant."""
    dims = ctx.inputs[0].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    nchw = _nchw(ctx)
    n, h, w, c = split_dims(dims, nchw)
    b = _block(ctx)
    if ctx.op == Op.DEPTH_TO_SPACE:
        if c % (b * b):
            raise ctx.fail(f"input 0 depth {c} is not a multiple of block_size^2 = {b * b}")
        return DepthSpaceParams(b, nchw, join_dims(n, h * b, w * b, c // (b * b), nchw))
    if h % b or w % b:
        raise ctx.fail(f"input 0 height {h} and width {w} must be multiples of block_size {b}")
    return DepthSpaceParams(b, nchw, join_dims(n, h // b, w // b, c * b * b, nchw))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    nchw, b = g.nchw, g.block
    x = to_nhwc(ctx.input(0), nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.DEPTH_TO_SPACE:
        y = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
        y = y.reshape(n, h * b, w * b, c // (b * b))
    else:
        y = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
        y = y.reshape(n, h // b, w // b, b * b * c)
    return [from_nhwc(y, nchw).astype(ctx.outputs[0].dtype)]


register(Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH, validate=_validate, prepare=_prepare, execute=_execute,
         params=params)
