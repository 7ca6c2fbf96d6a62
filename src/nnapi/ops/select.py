"""SELECT: output = condition ? input1 : input2, element-wise; no broadcasting.

Condition is TENSOR_BOOL8 with the same dimensions as both inputs. Quantized inputs may have
scales / zero points different from the output's: each is requantized to the output's
(Android's requantize<T>) before selecting, as in Android's Select.cpp.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import requantize_values
from .context import OpContext
from .registry import register

_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
          T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _check_shapes(ctx: OpContext, *, unknown_zeros: bool) -> None:
    """Condition, input 1 and input 2 must have equal dimensions (known ones at compile time)."""
    c, a, b = (ctx.inputs[i].dims for i in range(3))
    for i, other in ((1, a), (2, b)):
        if not c or not other:
            if unknown_zeros:
                continue
        if len(c) != len(other) or any(
                x != y and not (unknown_zeros and (x == 0 or y == 0)) for x, y in zip(c, other)):
            raise ctx.fail(f"input 0 (condition) dimensions {tuple(c)} differ from input {i} "
                           f"dimensions {tuple(other)}")


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[1].type
    if t not in _TYPES:
        raise ctx.fail(f"input 1 has unsupported type {t.name}")
    ctx.check_types([T.TENSOR_BOOL8, t, t], [t])
    if t.is_quantized:
        for kind, tensor in (("input 1", ctx.inputs[1]), ("input 2", ctx.inputs[2]),
                             ("output 0", ctx.outputs[0])):
            if not np.float32(tensor.scale) > 0:
                raise ctx.fail(f"{kind} has non-positive scale {tensor.scale}")
    _check_shapes(ctx, unknown_zeros=True)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    _check_shapes(ctx, unknown_zeros=ctx.compile_time)
    return [tuple(ctx.inputs[1].dims)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    cond, a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    _check_shapes(ctx, unknown_zeros=False)
    x, y = a.value.reshape(a.dims), b.value.reshape(b.dims)
    if a.type.is_quantized:
        x = requantize_values(x, a.scale, a.zero_point, out.scale, out.zero_point, out.dtype)
        y = requantize_values(y, b.scale, b.zero_point, out.scale, out.zero_point, out.dtype)
    return [np.where(cond.value.reshape(cond.dims).astype(np.bool_), x, y).astype(out.dtype)]


register(Op.SELECT, validate=_validate, prepare=_prepare, execute=_execute)
