"""FILL: a tensor of the shape given by a 1-D TENSOR_INT32 (input 0), every element the scalar input 1.

The output type picks the value type: TENSOR_FLOAT32 <- FLOAT32, TENSOR_FLOAT16 <- FLOAT16,
TENSOR_INT32 <- INT32 (Android's fill_op). Negative dimensions are invalid.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register, resolver

_VALUE_TYPE = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16, T.TENSOR_INT32: T.INT32}


@dataclass(frozen=True)
class FillParams:
    """FILL: the output shape (input 0) and the fill value (input 1 as a Python number; None while it
    is not a constant: then it is known only at execution)."""

    out_dims: tuple[int, ...]
    value: int | float | None


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    out_type = ctx.outputs[0].type
    if out_type not in _VALUE_TYPE:
        raise ctx.fail(f"output 0 has unsupported type {out_type.name}, expected "
                       f"{'/'.join(t.name for t in _VALUE_TYPE)}")
    ctx.check_types([T.TENSOR_INT32, _VALUE_TYPE[out_type]], [out_type])
    ctx.check_rank(0, 1)
    if ctx.inputs[0].value is not None:
        _dims(ctx)


def _dims(ctx: OpContext) -> tuple[int, ...]:
    dims = ctx.input(0)
    if dims.ndim != 1:
        raise ctx.fail(f"input 0 (dims) has rank {dims.ndim}, expected 1")
    out = tuple(int(d) for d in dims)
    if any(d < 0 for d in out):
        raise ctx.fail(f"input 0 (dims) {list(out)} has a negative dimension")
    return out


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [_dims(ctx)]


@resolver
def params(ctx: OpContext) -> FillParams:
    """The resolved FillParams; INVALID_ARGUMENT for a negative dimension, UnknownValue while the
    shape (input 0) is not constant."""
    value = ctx.inputs[1].value
    return FillParams(_dims(ctx), None if value is None else value.reshape(-1)[0].item())


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    return [np.full(g.out_dims, g.value, dtype=ctx.outputs[0].dtype)]


register(Op.FILL, validate=_validate, prepare=_prepare, execute=_execute, params=params)
