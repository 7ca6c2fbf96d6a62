"""TILE: input 0 repeated `multiples[i]` times along each dimension i (input 1, 1-D TENSOR_INT32
of length rank); output dims[i] = input dims[i] * multiples[i]. Negative multiples are invalid.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class TileParams:
    """TILE: the repetition count of each dimension and the output shape."""

    multiples: tuple[int, ...]
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.TENSOR_INT32], [t])
    ctx.check_rank(1, 1)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[1].value is not None and ctx.inputs[0].dims:
        try:
            _multiples(ctx)
        except UnknownValue:
            pass


def _multiples(ctx: OpContext) -> list[int]:
    m = ctx.input(1).reshape(-1)
    rank = len(ctx.inputs[0].dims)
    if m.size != rank:
        raise ctx.fail(f"input 1 (multiples) has {m.size} values, expected {rank} (the rank of input 0)")
    if (m < 0).any():
        raise ctx.fail(f"input 1 (multiples) {m.tolist()} has a negative value")
    return [int(v) for v in m]


@resolver
def params(ctx: OpContext) -> TileParams:
    """The resolved TileParams; INVALID_ARGUMENT when input 1 has the wrong length or a negative value,
    UnknownValue while it is not constant."""
    if not ctx.inputs[0].dims:
        raise ctx.fail("input 0 must have rank >= 1")
    multiples = tuple(_multiples(ctx))
    return TileParams(multiples, tuple(d * m for d, m in zip(ctx.inputs[0].dims, multiples)))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    return [np.tile(ctx.input(0), params(ctx).multiples).astype(ctx.outputs[0].dtype)]


register(Op.TILE, validate=_validate, prepare=_prepare, execute=_execute, params=params)
