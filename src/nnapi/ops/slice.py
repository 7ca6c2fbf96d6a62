"""SLICE: the block of input 0 starting at `begin` (input 1) with extent `size` (input 2).

Both are 1-D TENSOR_INT32 of length rank. A size of -1 takes everything up to the end of
that dimension. Requires 0 <= begin, 0 <= size and begin + size <= dim (Android's
slice::prepare). Zero-sized inputs are allowed and give a zero-sized output.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class SliceParams:
    """SLICE: per dimension the first index and the number of elements taken (size -1 resolved);
    the output shape is `sizes`."""

    begins: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def out_dims(self) -> tuple[int, ...]:
        return self.sizes


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.TENSOR_INT32, T.TENSOR_INT32], [t])
    ctx.check_rank(1, 1)
    ctx.check_rank(2, 1)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    rank = len(ctx.inputs[0].dims)
    for i, name in ((1, "begin"), (2, "size")):
        v = ctx.inputs[i].value
        if v is not None and rank and v.size != rank:
            raise ctx.fail(f"input {i} ({name}) has {v.size} values, expected {rank} (the rank of input 0)")


def _bounds(ctx: OpContext) -> list[tuple[int, int]]:
    """(begin, size) per dimension with size -1 resolved."""
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank >= 1")
    begin, size = ctx.input(1).reshape(-1), ctx.input(2).reshape(-1)
    for i, (name, v) in enumerate((("begin", begin), ("size", size)), start=1):
        if v.size != len(dims):
            raise ctx.fail(f"input {i} ({name}) has {v.size} values, expected {len(dims)} (the rank of input 0)")
    out = []
    for d, (b, s, dim) in enumerate(zip(begin.tolist(), size.tolist(), dims)):
        if s == -1:
            s = dim - b
        if b < 0 or b > dim:
            raise ctx.fail(f"input 1 (begin) {b} is out of range [0, {dim}] for dimension {d}")
        if s < 0 or b + s > dim:
            raise ctx.fail(f"input 2 (size) {s} at begin {b} exceeds dimension {d} of size {dim}")
        out.append((b, s))
    return out


@resolver
def params(ctx: OpContext) -> SliceParams:
    """The resolved SliceParams (Android's slice::prepare: 0 <= begin, 0 <= size, begin + size <= dim);
    INVALID_ARGUMENT naming the input at fault, UnknownValue while begin or size is not constant."""
    bounds = _bounds(ctx)
    return SliceParams(tuple(b for b, _ in bounds), tuple(s for _, s in bounds))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).sizes]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    y = ctx.input(0)[tuple(slice(b, b + s) for b, s in zip(g.begins, g.sizes))]
    return [np.ascontiguousarray(y).astype(ctx.outputs[0].dtype)]


register(Op.SLICE, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
