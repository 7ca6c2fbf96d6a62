"""SQUEEZE: drop the size-1 dimensions listed in input 1 (1-D TENSOR_INT32, may be omitted).

With input 1 omitted every size-1 dimension is dropped. Listing a dimension whose size is
not 1, or out of [-rank, rank), is invalid. Squeezing every dimension gives shape [1], as
Android's squeeze::prepare does. Rank <= 4; quantized outputs keep the input's quantization.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import normalize_axes
from .context import OpContext, UnknownValue
from .registry import register, resolver
from .reshape import ReshapeParams

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    if ctx.inputs[0].omitted:
        raise ctx.fail("input 0 must not be omitted")
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.TENSOR_INT32], [t])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    ctx.check_rank(1, 1)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[0].dims and ctx.has_input(1) and ctx.inputs[1].value is not None:
        try:
            _squeeze(ctx, zeros_unknown=True)
        except UnknownValue:
            pass


def _squeeze(ctx: OpContext, *, zeros_unknown: bool = False) -> ReshapeParams:
    """The squeezed axes and the output shape."""
    dims = ctx.inputs[0].dims
    rank = len(dims)
    if rank > 4:
        raise ctx.fail(f"input 0 has rank {rank}, expected at most 4")
    if ctx.has_input(1):
        axes = normalize_axes(ctx, ctx.input(1).reshape(-1).tolist(), rank, param="input 1 (squeeze_dims)")
        for a in axes:
            if dims[a] != 1 and not (zeros_unknown and dims[a] == 0):
                raise ctx.fail(f"input 1 (squeeze_dims) names dimension {a} of size {dims[a]}, expected size 1")
        squeeze = set(axes)
    else:
        squeeze = {a for a, d in enumerate(dims) if d == 1}
    out = tuple(d for a, d in enumerate(dims) if a not in squeeze)
    return ReshapeParams(out or (1,), tuple(sorted(squeeze)))


@resolver
def params(ctx: OpContext) -> ReshapeParams:
    """ReshapeParams of SQUEEZE: the dropped axes (input 1, or every size-1 dimension when omitted) and
    the output shape; INVALID_ARGUMENT naming the axis at fault, UnknownValue while input 1 is not
    constant."""
    return _squeeze(ctx, zeros_unknown=ctx.compile_time)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [_squeeze(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    return [ctx.input(0).reshape(_squeeze(ctx).out_dims).astype(ctx.outputs[0].dtype)]


register(Op.SQUEEZE, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_omitted_operand=True)
