"""STRIDED_SLICE: input[begin:end:stride] per dimension, with begin/end/shrink-axis bit masks.

Inputs: (input, begin, end, strides: 1-D TENSOR_INT32 of length rank, begin_mask, end_mask,
shrink_axis_mask: INT32). Follows Android's strided_slice::prepare exactly:
- a begin (end) index is clamped with ClampedIndex: for a positive stride into [0, dim]
  after wrapping negatives once, for a negative stride into [-1, dim - 1];
- bit i of begin_mask (end_mask) ignores begin[i] (end[i]): the slice starts at 0 (ends at
  dim) for a positive stride, starts at dim - 1 (ends before 0) for a negative one;
- the extent is max(0, ceil((end - begin) / stride)); strides must be non-zero;
- bit i of shrink_axis_mask drops dimension i, which must then have stride > 0 and extent 1;
  when every dimension is dropped the output has shape [1].
Rank <= 4; quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class StridedSliceParams:
    """STRIDED_SLICE with masks and clamping resolved: per input dimension the first index, the
    (non-zero) stride and the number of elements taken (index begin + stride * k, k < extent),
    whether the dimension is dropped (shrink_axis_mask), and the output shape."""

    begins: tuple[int, ...]
    strides: tuple[int, ...]
    extents: tuple[int, ...]
    shrink: tuple[bool, ...]
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(7, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES] + [T.TENSOR_INT32] * 3 + [T.INT32] * 3, [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    for i in (1, 2, 3):
        ctx.check_rank(i, 1)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[3].value is not None and (ctx.inputs[3].value == 0).any():
        raise ctx.fail(f"input 3 (strides) {ctx.inputs[3].value.tolist()} has a zero stride")
    if ctx.inputs[0].dims and all(d > 0 for d in ctx.inputs[0].dims):
        try:
            _plan(ctx)
        except UnknownValue:
            pass


def _clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """Android's ClampedIndex (C++ remainder semantics)."""
    def positive_remainder(a: int, b: int) -> int:
        return (b + int(np.fmod(a, b))) % b
    if positive_stride:
        return dim if index >= dim else positive_remainder(min(max(index, -dim), dim), dim)
    return -1 if index < -dim else positive_remainder(min(max(index, -dim), dim - 1), dim)


def _plan(ctx: OpContext) -> tuple[list[tuple[int, int, int]], list[bool], tuple[int, ...]]:
    """Per dimension (begin, stride, extent), which dimensions shrink, and the output shape."""
    dims = ctx.inputs[0].dims
    rank = len(dims)
    if not 1 <= rank <= 4:
        raise ctx.fail(f"input 0 has rank {rank}, expected 1 to 4")
    vectors = []
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        v = ctx.input(i)
        if v.ndim != 1 or v.size != rank:
            raise ctx.fail(f"input {i} ({name}) has shape {tuple(v.shape)}, expected ({rank},)")
        vectors.append([int(x) for x in v])
    begins, ends, strides = vectors
    begin_mask, end_mask, shrink_mask = (int(ctx.scalar(i)) for i in (4, 5, 6))
    plan, shrink, out = [], [], []
    for d in range(rank):
        dim, stride = dims[d], strides[d]
        if stride == 0:
            raise ctx.fail(f"input 3 (strides) is 0 for dimension {d}")
        pos = stride > 0
        b = (0 if pos else dim - 1) if begin_mask & (1 << d) else _clamped_index(begins[d], dim, pos)
        e = (dim if pos else -1) if end_mask & (1 << d) else _clamped_index(ends[d], dim, pos)
        extent = max(0, -((b - e) // stride))  # ceil((e - b) / stride)
        shrinks = bool(shrink_mask & (1 << d))
        if shrinks:
            if stride < 0:
                raise ctx.fail(f"dimension {d} is in shrink_axis_mask but has negative stride {stride}")
            if extent != 1:
                raise ctx.fail(f"dimension {d} is in shrink_axis_mask but its slice has {extent} "
                               f"elements, expected 1")
        else:
            out.append(extent)
        plan.append((b, stride, extent))
        shrink.append(shrinks)
    return plan, shrink, tuple(out) or (1,)


@resolver
def params(ctx: OpContext) -> StridedSliceParams:
    """The resolved StridedSliceParams (Android's strided_slice::prepare); INVALID_ARGUMENT naming the
    input at fault, UnknownValue while begin, end, strides or a mask is not constant."""
    plan, shrink, out_dims = _plan(ctx)
    return StridedSliceParams(tuple(b for b, _, _ in plan), tuple(s for _, s, _ in plan),
                              tuple(n for _, _, n in plan), tuple(shrink), out_dims)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    x = ctx.input(0)
    index = np.ix_(*[b + s * np.arange(n, dtype=np.int64) for b, s, n in zip(g.begins, g.strides, g.extents)])
    return [x[index].reshape(g.out_dims).astype(ctx.outputs[0].dtype)]


register(Op.STRIDED_SLICE, validate=_validate, prepare=_prepare, execute=_execute, params=params)
