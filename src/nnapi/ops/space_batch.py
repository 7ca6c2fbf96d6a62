"""BATCH_TO_SPACE_ND and SPACE_TO_BATCH_ND over rank-4 tensors (NHWC, or NCHW with the layout flag).

BATCH_TO_SPACE_ND(input, block_shape[2], [layout]): batches are split into block_h * block_w
groups that interleave into the spatial dimensions (no cropping in NNAPI).
SPACE_TO_BATCH_ND(input, block_shape[2], paddings[2, 2], [layout]): the spatial dimensions are
zero-padded (quantized tensors pad with the output zero point, as Android does since 1.2),
then split into blocks that become batches; batch index = (shift_h * block_w + shift_w) * N + n.
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
#: Position of the optional layout flag.
_LAYOUT = {Op.BATCH_TO_SPACE_ND: 2, Op.SPACE_TO_BATCH_ND: 3}


@dataclass(frozen=True)
class SpaceBatchParams:
    """BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND: the block (height, width), SPACE_TO_BATCH_ND's spatial
    paddings (top, bottom, left, right; zeros for BATCH_TO_SPACE_ND), the layout and the output
    shape. SPACE_TO_BATCH_ND's batch index is (shift_h * block_w + shift_w) * N + n."""

    block_h: int
    block_w: int
    paddings: tuple[int, int, int, int]
    nchw: bool
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    n = _LAYOUT[ctx.op]
    ctx.check_counts((n, n + 1), 1)
    t = ctx.inputs[0].type
    params = [T.TENSOR_INT32] * (n - 1)
    ctx.check_types([_TYPES] + params + [T.BOOL], [t])
    ctx.check_rank(0, 4)
    ctx.check_rank(1, 1)
    if ctx.op == Op.SPACE_TO_BATCH_ND:
        ctx.check_rank(2, 2)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    try:
        _block(ctx)
        if ctx.op == Op.SPACE_TO_BATCH_ND:
            _paddings(ctx)
        _nchw(ctx)
    except UnknownValue:
        pass


def _nchw(ctx: OpContext) -> bool:
    return bool(ctx.scalar(_LAYOUT[ctx.op], False))


def _block(ctx: OpContext) -> tuple[int, int]:
    block = ctx.input(1).reshape(-1)
    if block.size != 2:
        raise ctx.fail(f"input 1 (block_shape) has {block.size} values, expected 2")
    bh, bw = int(block[0]), int(block[1])
    if bh < 1 or bw < 1:
        raise ctx.fail(f"input 1 (block_shape) [{bh}, {bw}] must be >= 1")
    return bh, bw


def _paddings(ctx: OpContext) -> tuple[int, int, int, int]:
    pads = ctx.input(2)
    if pads.shape != (2, 2):
        raise ctx.fail(f"input 2 (paddings) has shape {tuple(pads.shape)}, expected (2, 2)")
    top, bottom, left, right = (int(p) for p in pads.reshape(-1))
    if min(top, bottom, left, right) < 0:
        raise ctx.fail(f"input 2 (paddings) {pads.tolist()} has a negative value")
    return top, bottom, left, right


@resolver
def params(ctx: OpContext) -> SpaceBatchParams:
    """The resolved SpaceBatchParams; INVALID_ARGUMENT naming the input at fault (block < 1, negative
    paddings, sizes that are not multiples of the block), UnknownValue while one is not constant."""
    dims = ctx.inputs[0].dims
    if len(dims) != 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 4")
    nchw = _nchw(ctx)
    n, h, w, c = split_dims(dims, nchw)
    bh, bw = _block(ctx)
    if ctx.op == Op.BATCH_TO_SPACE_ND:
        if n % (bh * bw):
            raise ctx.fail(f"input 0 batch size {n} is not a multiple of block_h * block_w = {bh * bw}")
        return SpaceBatchParams(bh, bw, (0, 0, 0, 0), nchw, join_dims(n // (bh * bw), h * bh, w * bw, c, nchw))
    pads = _paddings(ctx)
    top, bottom, left, right = pads
    ph, pw = h + top + bottom, w + left + right
    if ph % bh or pw % bw:
        raise ctx.fail(f"padded spatial size {ph}x{pw} is not a multiple of block_shape [{bh}, {bw}]")
    return SpaceBatchParams(bh, bw, pads, nchw, join_dims(n * bh * bw, ph // bh, pw // bw, c, nchw))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    out = ctx.outputs[0]
    g = params(ctx)
    nchw, bh, bw = g.nchw, g.block_h, g.block_w
    x = to_nhwc(ctx.input(0), nchw)
    n, h, w, c = x.shape
    if ctx.op == Op.BATCH_TO_SPACE_ND:
        y = x.reshape(bh, bw, n // (bh * bw), h, w, c).transpose(2, 3, 0, 4, 1, 5)
        y = y.reshape(n // (bh * bw), h * bh, w * bw, c)
    else:
        top, bottom, left, right = g.paddings
        fill = out.zero_point if out.type.is_quantized else 0
        p = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
        ph, pw = p.shape[1], p.shape[2]
        y = p.reshape(n, ph // bh, bh, pw // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
        y = y.reshape(bh * bw * n, ph // bh, pw // bw, c)
    return [from_nhwc(y, nchw).astype(out.dtype)]


register(Op.BATCH_TO_SPACE_ND, Op.SPACE_TO_BATCH_ND, validate=_validate, prepare=_prepare,
         execute=_execute, params=params)
