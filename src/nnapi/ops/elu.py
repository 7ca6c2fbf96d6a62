"""ELU: max(0, x) + min(0, alpha * (exp(x) - 1)) (FLOAT16 / FLOAT32, computed in float32).

Input 1 is alpha: FLOAT16 for a float16 tensor, FLOAT32 otherwise.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32], [t])


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [tuple(ctx.inputs[0].dims)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    # Android: alpha is read as the tensor's element type (T), then promoted to float.
    alpha = np.float32(np.asarray(ctx.scalar(1), dtype=x.dtype))
    f = x.value.reshape(x.dims).astype(np.float32)
    with np.errstate(over="ignore"):
        r = np.maximum(np.float32(0), f) + np.minimum(np.float32(0), alpha * (np.exp(f) - np.float32(1)))
    return [r.astype(out.dtype)]


register(Op.ELU, validate=_validate, prepare=_prepare, execute=_execute)
