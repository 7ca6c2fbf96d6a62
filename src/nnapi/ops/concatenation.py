"""CONCATENATION: N tensors joined along an axis (the last input, an INT32 scalar).

All inputs share type and rank and agree on every dimension but the axis. A negative axis
counts from the end. Quantized inputs whose scale or zero point differ from the output's are
requantized with TFLite's float formula (ConcatenationWithScaling), as Android does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, round_half_away
from .context import OpContext, UnknownValue
from .registry import register, resolver
from .tensor import Tensor

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class ConcatenationParams:
    """CONCATENATION: the axis (non-negative) and the output shape (0: unknown at compile time);
    the tensors are inputs 0 .. n_inputs - 1."""

    axis: int
    n_inputs: int
    out_dims: tuple[int, ...]


def _validate(ctx: OpContext) -> None:
    if len(ctx.inputs) < 2:
        raise ctx.fail(f"expected at least 2 inputs (tensors and the axis), got {len(ctx.inputs)}")
    ctx.check_counts(len(ctx.inputs), 1)
    n = len(ctx.inputs) - 1
    t = ctx.inputs[0].type
    ctx.check_types([_TYPES] + [t] * (n - 1) + [T.INT32], [t])
    for i in range(n):
        ctx.check_rank(i, 1, 2, 3, 4)
    try:
        _output_dims(ctx, zeros_unknown=True)
    except UnknownValue:
        pass


def _output_dims(ctx: OpContext, *, zeros_unknown: bool) -> tuple[int, ...]:
    """Input 0's shape with the axis dimension summed over the inputs (Android's prepare).

    With `zeros_unknown` a 0 is an unknown dimension (the sum is then 0, unknown) and an
    empty shape an unknown rank (that input is skipped; UnknownValue when all are unknown).
    """
    n = len(ctx.inputs) - 1
    shapes = [(i, ctx.inputs[i].dims) for i in range(n)]
    if zeros_unknown:
        shapes = [(i, d) for i, d in shapes if d]
        if not shapes:
            raise UnknownValue(f"{ctx.op.name}: input ranks not known yet")
    axis = ctx.scalar(n)
    if not isinstance(axis, int):
        raise ctx.fail(f"input {n} (axis) has no value")
    rank = len(shapes[0][1])
    if not -rank <= axis < rank:
        raise ctx.fail(f"input {n} (axis) {axis} is out of range for rank {rank}")
    axis %= rank
    out = list(shapes[0][1])
    out[axis] = 0
    axis_unknown = False
    for i, dims in shapes:
        if len(dims) != rank:
            raise ctx.fail(f"input {i} has rank {len(dims)}, expected {rank} like input {shapes[0][0]}")
        for d, size in enumerate(dims):
            if d == axis:
                axis_unknown |= zeros_unknown and size == 0
                out[d] += size
            elif zeros_unknown and (size == 0 or out[d] == 0):
                out[d] = max(out[d], size)
            elif size != out[d]:
                raise ctx.fail(f"input {i} has dimension {d} of size {size}, expected {out[d]}")
    if axis_unknown or (zeros_unknown and len(shapes) < n):
        out[axis] = 0
    return tuple(out)


@resolver
def params(ctx: OpContext) -> ConcatenationParams:
    """The resolved ConcatenationParams; INVALID_ARGUMENT naming the input whose rank or dimension
    disagrees, UnknownValue while the axis (last input) is not constant."""
    dims = _output_dims(ctx, zeros_unknown=ctx.compile_time)
    n = len(ctx.inputs) - 1
    return ConcatenationParams(ctx.scalar(n) % len(dims), n, dims)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _requantize(x: Tensor, out: Tensor) -> np.ndarray:
    """Input values in the output's quantization: TFLite computes round(q * s + bias) in
    float32 over uint8 values (int8 is shifted by 128 first, as Android does)."""
    if x.scale == out.scale and x.zero_point == out.zero_point:
        return x.value
    shift = 128 if x.type == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    scale = np.float32(as_float32(x.scale)) * (np.float32(1.0) / np.float32(as_float32(out.scale)))
    bias = np.float32(-(x.zero_point + shift)) * scale
    q = round_half_away((x.value.astype(np.float32) + np.float32(shift)) * scale + bias)
    q = np.clip(q + (out.zero_point + shift), 0, 255) - shift
    return q.astype(out.dtype)


def _execute(ctx: OpContext) -> list[np.ndarray]:
    out = ctx.outputs[0]
    g = params(ctx)
    n, axis = g.n_inputs, g.axis
    parts = [ctx.inputs[i] for i in range(n)]
    arrays = [_requantize(x, out) if out.type.is_quantized else x.value for x in parts]
    return [np.concatenate([a.reshape(x.dims) for a, x in zip(arrays, parts)], axis=axis).astype(out.dtype)]


register(Op.CONCATENATION, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
