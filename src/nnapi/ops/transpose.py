"""TRANSPOSE: permute the dimensions of input 0 by `perm` (input 1, 1-D TENSOR_INT32 of length rank).

Output dimension i is input dimension perm[i]. With input 1 omitted the dimensions are
reversed. `perm` must be a permutation of [0, rank); rank <= 4. Quantized outputs keep the
input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class TransposeParams:
    """TRANSPOSE: output dimension i is input dimension perm[i]."""

    perm: tuple[int, ...]
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    if ctx.inputs[0].omitted:
        raise ctx.fail("input 0 must not be omitted")
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.TENSOR_INT32], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    ctx.check_rank(1, 1)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[0].dims and ctx.has_input(1) and ctx.inputs[1].value is not None:
        try:
            _perm(ctx)
        except UnknownValue:
            pass


def _perm(ctx: OpContext) -> list[int]:
    rank = len(ctx.inputs[0].dims)
    if rank > 4:
        raise ctx.fail(f"input 0 has rank {rank}, expected at most 4")
    if not ctx.has_input(1):
        return list(range(rank - 1, -1, -1))
    perm = [int(v) for v in ctx.input(1).reshape(-1)]
    if sorted(perm) != list(range(rank)):
        raise ctx.fail(f"input 1 (perm) {perm} is not a permutation of the {rank} dimensions of input 0")
    return perm


@resolver
def params(ctx: OpContext) -> TransposeParams:
    """The resolved TransposeParams (input 1, or the dimensions reversed when it is omitted);
    INVALID_ARGUMENT when it is not a permutation, UnknownValue while input 1 is not constant."""
    dims = ctx.inputs[0].dims
    perm = tuple(_perm(ctx))
    return TransposeParams(perm, tuple(dims[p] for p in perm))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    y = np.transpose(ctx.input(0), params(ctx).perm)
    return [np.ascontiguousarray(y).astype(ctx.outputs[0].dtype)]


register(Op.TRANSPOSE, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_omitted_operand=True, allow_zero_sized_input=True)
