"""CHANNEL_SHUFFLE: split dimension `axis` (input 2) into `num_groups` (input 1) groups and
interleave them: output channel j * num_groups + g is input channel g * group_size + j.

num_groups must be > 0 and divide the axis dimension; rank <= 4. Quantized outputs keep the
input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import scalar_axis
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class ChannelShuffleParams:
    """CHANNEL_SHUFFLE: output index j * groups + g along `axis` (non-negative) reads input index
    g * (dims[axis] / groups) + j; the output shape is the input's."""

    groups: int
    axis: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32, T.INT32], [t])
    ctx.check_rank(0, 1, 2, 3, 4)
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    try:
        _groups(ctx)
        if ctx.inputs[0].dims:
            scalar_axis(ctx, 2, len(ctx.inputs[0].dims))
    except UnknownValue:
        pass


def _groups(ctx: OpContext) -> int:
    g = ctx.scalar(1)
    if not isinstance(g, int) or g < 1:
        raise ctx.fail(f"input 1 (num_groups) must be > 0, got {g}")
    return g


@resolver
def params(ctx: OpContext) -> ChannelShuffleParams:
    """The resolved ChannelShuffleParams; INVALID_ARGUMENT when num_groups (input 1) does not divide
    the axis (input 2) dimension, UnknownValue while either is not constant."""
    dims = ctx.inputs[0].dims
    if not 1 <= len(dims) <= 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected 1 to 4")
    axis = scalar_axis(ctx, 2, len(dims))
    g = _groups(ctx)
    if dims[axis] % g:
        raise ctx.fail(f"input 0 dimension {axis} of size {dims[axis]} is not a multiple of "
                       f"num_groups {g}")
    return ChannelShuffleParams(g, axis, tuple(dims))


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    p = params(ctx)
    dims, axis, g = p.out_dims, p.axis, p.groups
    x = ctx.input(0)
    split = dims[:axis] + (g, dims[axis] // g) + dims[axis + 1:]
    y = np.swapaxes(x.reshape(split), axis, axis + 1).reshape(dims)
    return [y.astype(ctx.outputs[0].dtype)]


register(Op.CHANNEL_SHUFFLE, validate=_validate, prepare=_prepare, execute=_execute, params=params)
