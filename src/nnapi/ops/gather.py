"""GATHER: slices of input 0 along `axis` (input 1) picked by the TENSOR_INT32 indices (input 2).

Output shape: input.dims[:axis] + indices.dims + input.dims[axis+1:]. Every index must lie in
[0, input.dims[axis]); an index out of range fails at execution, as in Android's gather::eval.
Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._axis import check_scalar_axis, scalar_axis
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
          T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class GatherParams:
    """GATHER: the axis (non-negative) and the output shape
    (input.dims[:axis] + indices.dims + input.dims[axis+1:]). Constant indices are checked against
    the axis size here; indices known only at execution are checked by the kernel."""

    axis: int
    out_dims: tuple[int, ...]
    #: input.dims[axis]: indices must lie in [0, size).
    size: int = 0

    @property
    def range_error(self) -> str:
        """What a compiled driver's run-time check of the indices says when one is out of range (the
        reference kernel names the value itself)."""
        return f"GATHER: input 2 (indices) holds a value out of range [0, {self.size}) for axis {self.axis}"


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


def _shape(ctx: OpContext) -> GatherParams:
    dims = ctx.inputs[0].dims
    if not dims:
        raise ctx.fail("input 0 must have rank >= 1")
    axis = scalar_axis(ctx, 1, len(dims))
    return GatherParams(axis, tuple(dims[:axis]) + tuple(ctx.inputs[2].dims) + tuple(dims[axis + 1:]), dims[axis])


@resolver
def params(ctx: OpContext) -> GatherParams:
    """The resolved GatherParams; INVALID_ARGUMENT for an axis out of range or a constant index out of
    [0, input.dims[axis]), UnknownValue while the axis is not constant."""
    g = _shape(ctx)
    indices = ctx.inputs[2].value
    if indices is not None:
        _check_indices(ctx, indices, zeros_unknown=ctx.compile_time)
    return g


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)  # checks the indices
    y = np.take(ctx.input(0), ctx.input(2).astype(np.int64), axis=g.axis)
    return [y.reshape(g.out_dims).astype(ctx.outputs[0].dtype)]


register(Op.GATHER, validate=_validate, prepare=_prepare, execute=_execute, params=params)
