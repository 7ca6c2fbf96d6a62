"""GATHER: slices of input 0 along `axis` (input 1) picked by the TENSOR_INT32 indices (input 2).

Output shape: input.dims[:axis] + indices.dims + input.dims[axis+1:]. Every index must lie in
[0, input.dims[axis]); an index out of range fails at execution, as in Android's gather::eval.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext, UnknownValue
from .registry import register

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES, T.INT32, T.TENSOR_INT32], [t])
    if t.is_quantized:
        ctx.check_same_quant(0, 0, j_output=True)
    check_scalar_axis(ctx, 1)
    if ctx.inputs[2].value is not None and ctx.inputs[0].dims:
        try:
            _check_indices(ctx, ctx.inputs[2].value, zeros_unknown=True)
        except UnknownValue:
            pass


def _check_indices(ctx: OpContext, indices: np.ndarray, *, zeros_unknown: bool = False) -> None:
    dims = ctx.inputs[0].dims
    axis = scalar_axis(ctx, 1, len(dims))
    size = dims[axis]
    if zeros_unknown and size == 0:
        return
    bad = (indices < 0) | (indices >= size)
    if bad.any():
        raise ctx.fail(f"input 2 (indices) holds {int(indices[bad].reshape(-1)[0])}, "
                       f"out of range [0, {size}) for axis {axis}")


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank >= 1")
    axis = scalar_axis(ctx, 1, len(dims))
    return [tuple(dims[:axis]) + tuple(ctx.inputs[2].dims) + tuple(dims[axis + 1:])]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    (dims,) = _prepare(ctx)
    axis = scalar_axis(ctx, 1, len(ctx.inputs[0].dims))
    indices = ctx.input(2)
    _check_indices(ctx, indices)
    y = np.take(ctx.input(0), indices.astype(np.int64), axis=axis)
    return [y.reshape(dims).astype(ctx.outputs[0].dtype)]


register(Op.GATHER, validate=_validate, prepare=_prepare, execute=_execute)
