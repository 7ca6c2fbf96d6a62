"""RESHAPE: the same elements under the shape given by a 1-D TENSOR_INT32 (input 1).

At most one target dimension may be -1; it is inferred so the element count is unchanged
(Android's reshapePrepare). Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class ReshapeParams:
    """RESHAPE / SQUEEZE / EXPAND_DIMS: the output shape (RESHAPE's -1 resolved; 0: unknown at compile
    time) and, for SQUEEZE, the dropped axes, for EXPAND_DIMS the inserted one (non-negative)."""

    out_dims: tuple[int, ...]
    axes: tuple[int, ...] = ()


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    ctx.check_types([_TYPES, T.TENSOR_INT32], [ctx.inputs[0].type])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    ctx.check_rank(1, 1)
    if ctx.inputs[0].type.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    if ctx.inputs[1].value is not None:
        try:
            _target_dims(ctx, zeros_unknown=True)
        except UnknownValue:
            pass


def _target_dims(ctx: OpContext, *, zeros_unknown: bool) -> tuple[int, ...]:
    """The output shape: input 1 with its -1 resolved against the input's element count.

    With `zeros_unknown` a 0 in the input shape (or an empty shape) is unknown: a -1 then
    raises UnknownValue, and the element counts are not compared.
    """
    target = [int(v) for v in ctx.input(1).reshape(-1)]
    if any(v < -1 for v in target):
        raise ctx.fail(f"input 1 (shape) has a negative dimension: {target}")
    stretch = [i for i, v in enumerate(target) if v == -1]
    if len(stretch) > 1:
        raise ctx.fail(f"input 1 (shape) has more than one -1: {target}")
    dims = ctx.inputs[0].dims
    if zeros_unknown and (not dims or 0 in dims):
        if stretch:
            raise UnknownValue(f"{ctx.op.name}: input 0 shape not known yet")
        return tuple(target)
    n_in = math.prod(dims)
    known = math.prod(v for v in target if v != -1)
    if stretch:
        if known == 0:
            raise ctx.fail(f"input 1 (shape) {target}: cannot infer -1 next to a 0 dimension")
        target[stretch[0]] = n_in // known
    if math.prod(target) != n_in:
        raise ctx.fail(f"input 1 (shape) {target} does not hold the {n_in} elements of input 0 {tuple(dims)}")
    return tuple(target)


@resolver
def params(ctx: OpContext) -> ReshapeParams:
    """The output shape of RESHAPE (input 1 with its -1 resolved); INVALID_ARGUMENT when it does not
    hold input 0's elements, UnknownValue while input 1 is not constant."""
    if len(ctx.inputs[0].dims) > 4:
        raise ctx.fail(f"input 0 has rank {len(ctx.inputs[0].dims)}, expected at most 4")
    return ReshapeParams(_target_dims(ctx, zeros_unknown=ctx.compile_time))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    return [ctx.input(0).reshape(params(ctx).out_dims).astype(ctx.outputs[0].dtype)]


register(Op.RESHAPE, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
