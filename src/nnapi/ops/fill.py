"""FILL: a tensor of the shape given by a 1-D TENSOR_INT32 (input 0), every element the scalar input 1.

The output type picks the value type: TENSOR_FLOAT32 <- FLOAT32, TENSOR_FLOAT16 <- FLOAT16,
TENSOR_INT32 <- INT32 (Android's fill_op). Negative dimensions are invalid.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_VALUE_TYPE = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16, T.TENSOR_INT32: T.INT32}


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


def _execute(ctx: OpContext) -> list[np.ndarray]:
    out = ctx.outputs[0]
    return [np.full(_dims(ctx), ctx.scalar(1), dtype=out.dtype)]


register(Op.FILL, validate=_validate, prepare=_prepare, execute=_execute)
