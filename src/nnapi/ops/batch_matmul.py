"""BATCH_MATMUL (NNAPI feature level 6): out[..., i, j] = sum_k x[..., i, k] * y[..., k, j], per batch.

Inputs: (x, y, [adj_x BOOL], [adj_y BOOL]). x and y share a type (TENSOR_FLOAT32, TENSOR_FLOAT16,
TENSOR_INT32, TENSOR_QUANT8_ASYMM_SIGNED) and a rank of 2 to 4, with identical batch dimensions
(everything but the last two); adj_x / adj_y transpose the last two dimensions of x / y first.
Output shape [..., rows of x, columns of y]. Float16 is computed in float32; TENSOR_INT32 wraps like
C++. Quantized: the accumulator sum((x - zp_x) * (y - zp_y)) is requantized by
scale_x * scale_y / scale_out in fixed point and offset by the output zero point, as TFLite's
reference BatchMatMul does (the output quantization may differ from the inputs').
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._quant import as_float32, requantize
from .context import OpContext
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class BatchMatmulParams:
    """BATCH_MATMUL: whether x / y have their last two dimensions transposed first, and the output
    shape [..., rows of x, columns of y] (0: unknown at compile time)."""

    adj_x: bool
    adj_y: bool
    out_dims: tuple[int, ...]


def _flags(ctx: OpContext) -> tuple[bool, bool]:
    return bool(ctx.scalar(2, False)), bool(ctx.scalar(3, False))


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((2, 3, 4), 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, t, T.BOOL, T.BOOL], [t])
    ctx.check_rank(0, 2, 3, 4)
    ctx.check_rank(1, 2, 3, 4)
    if t == T.TENSOR_QUANT8_ASYMM_SIGNED:
        for name, tensor in (("input 0", ctx.inputs[0]), ("input 1", ctx.inputs[1]), ("output 0", ctx.outputs[0])):
            if not tensor.scale > 0:
                raise ctx.fail(f"{name} has scale {tensor.scale}, must be > 0")
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        _output_dims(ctx)


def _output_dims(ctx: OpContext) -> tuple[int, ...]:
    x, y = ctx.inputs[0].dims, ctx.inputs[1].dims
    if len(x) != len(y):
        raise ctx.fail(f"inputs 0 and 1 have ranks {len(x)} and {len(y)}; they must be equal")
    adj_x, adj_y = _flags(ctx)
    rows, inner_x = (x[-1], x[-2]) if adj_x else (x[-2], x[-1])
    inner_y, cols = (y[-1], y[-2]) if adj_y else (y[-2], y[-1])
    if inner_x and inner_y and inner_x != inner_y:
        raise ctx.fail(f"inner dimensions differ: input 0 {list(x)} (adj_x {adj_x}) and input 1 {list(y)} "
                       f"(adj_y {adj_y})")
    batch = []
    for a, b in zip(x[:-2], y[:-2]):
        if a and b and a != b:
            raise ctx.fail(f"batch dimensions differ: {list(x[:-2])} and {list(y[:-2])}")
        batch.append(a or b)
    return (*batch, rows, cols)


@resolver
def params(ctx: OpContext) -> BatchMatmulParams:
    """The resolved BatchMatmulParams; INVALID_ARGUMENT when ranks, inner or batch dimensions differ,
    UnknownValue while adj_x / adj_y is not constant."""
    dims = _output_dims(ctx)
    return BatchMatmulParams(*_flags(ctx), dims)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    return [params(ctx).out_dims]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, y, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    g = params(ctx)
    adj_x, adj_y = g.adj_x, g.adj_y
    a, b = ctx.input(0), ctx.input(1)
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    if x.type == T.TENSOR_QUANT8_ASYMM_SIGNED:
        acc = np.matmul(a.astype(np.int64) - x.zero_point, b.astype(np.int64) - y.zero_point)
        multiplier = float(np.float32(as_float32(x.scale) * as_float32(y.scale))) / as_float32(out.scale)
        raw = requantize(acc, multiplier, out.zero_point)
        return [np.clip(raw, -128, 127).astype(np.int8)]
    if x.type == T.TENSOR_INT32:
        return [np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)]
    y32 = np.matmul(a.astype(np.float32), b.astype(np.float32))
    return [y32.astype(out.dtype)]


register(Op.BATCH_MATMUL, validate=_validate, prepare=_prepare, execute=_execute, params=params)
