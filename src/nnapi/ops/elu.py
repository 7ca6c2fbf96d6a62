"""ELU: max(0, x) + min(0, alpha * (exp(x) - 1)) (FLOAT16 / FLOAT32, computed in float32).

Input 1 is alpha: FLOAT16 for a float16 tensor, FLOAT32 otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


@dataclass(frozen=True)
class EluParams:
    """ELU: max(0, x) + min(0, alpha * (exp(x) - 1)); alpha read as the tensor's element type (as
    Android does), then widened to a Python float."""

    alpha: float


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32], [t])


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [tuple(ctx.inputs[0].dims)]


@resolver
def params(ctx: OpContext) -> EluParams:
    """The resolved EluParams (alpha: input 1); UnknownValue while it is not constant."""
    # Android: alpha is read as the tensor's element type (T), then promoted to float.
    return EluParams(float(np.float32(np.asarray(ctx.scalar(1), dtype=ctx.inputs[0].dtype))))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if x.value.size == 0:
        return [np.zeros(x.dims, out.dtype)]
    alpha = np.float32(params(ctx).alpha)
    f = x.value.reshape(x.dims).astype(np.float32)
    with np.errstate(over="ignore"):
        r = np.maximum(np.float32(0), f) + np.minimum(np.float32(0), alpha * (np.exp(f) - np.float32(1)))
    return [r.astype(out.dtype)]


register(Op.ELU, validate=_validate, prepare=_prepare, execute=_execute, params=params)
