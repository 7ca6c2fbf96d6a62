"""ADD, MUL, SUB, DIV: element-wise arithmetic with numpy broadcasting and a fused activation.

Float16 is computed in float32; TENSOR_INT32 (activation NONE only) wraps like C++ and DIV
rounds toward negative infinity (division by zero gives 0), as Android's Broadcast.cpp does.
Quantized ADD/SUB use TFLite's fixed-point scheme (inputs shifted left by 20 bits and rescaled
to a common scale), quantized MUL TFLite's MulElementwise, so results match Android exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..hal import FusedActivationFunc, OperandType as T, OperationType as Op
from ._activation import apply_float, apply_quant, check_activation, constant_activation
from ._quant import as_float32, multiply_by_quantized_multiplier, quantize_multiplier
from .context import OpContext, UnknownValue
from .registry import register, resolver

_FLOAT = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_TYPES = {
    Op.ADD: _FLOAT + _QUANT + (T.TENSOR_INT32,),
    Op.MUL: _FLOAT + _QUANT + (T.TENSOR_INT32,),
    Op.SUB: _FLOAT + _QUANT + (T.TENSOR_INT32,),
    Op.DIV: _FLOAT + (T.TENSOR_INT32,),
}
#: TFLite's headroom for quantized ADD/SUB on 8-bit inputs.
_ADD_LEFT_SHIFT = 20


@dataclass(frozen=True)
class BroadcastParams:
    """A two-input element-wise operation: the NumPy-style broadcast output shape (0: unknown at
    compile time) and the fused activation (NONE for operations that have none)."""

    out_dims: tuple[int, ...]
    activation: FusedActivationFunc = FusedActivationFunc.NONE


def broadcast_dims(ctx: OpContext, a: Sequence[int], b: Sequence[int], *,
                   zeros_unknown: bool | None = None) -> tuple[int, ...]:
    """NumPy-style broadcast of two shapes (Android's calculateBroadcastedShape).

    With `zeros_unknown` (default: at compile time) a 0 is an unknown dimension and an empty
    shape an unknown rank (raises UnknownValue); otherwise a 0 is a zero-sized dimension.
    """
    unknown = ctx.compile_time if zeros_unknown is None else zeros_unknown
    if unknown and (not a or not b):
        raise UnknownValue(f"{ctx.op.name}: input rank not known yet")
    if not unknown and type(a) is tuple and a == b:
        return a  # (the same shape: nothing to broadcast)
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        d1 = a[-i] if i <= len(a) else 1
        d2 = b[-i] if i <= len(b) else 1
        if unknown and (d1 == 0 or d2 == 0):
            out.append(max(d1, d2) if max(d1, d2) > 1 else 0)
        elif d1 != d2 and d1 != 1 and d2 != 1:
            raise ctx.fail(f"inputs 0 {tuple(a)} and 1 {tuple(b)} cannot be broadcast together")
        else:
            out.append(d2 if d1 == 1 else d1)
    return tuple(reversed(out))


def validate_same_type_pair(ctx: OpContext, types: Sequence[T], names: tuple[str, str] = ("input 0", "input 1"),
                            ) -> None:
    """Two inputs and one output of one type from `types` whose shapes broadcast; quantized scales > 0.
    Shared by the element-wise binary operations outside ADD/MUL/SUB/DIV (MAXIMUM, MINIMUM, POW, PRELU)."""
    ctx.check_counts(2, 1)
    t = ctx.inputs[0].type
    if t not in types:
        raise ctx.fail(f"{names[0]} has unsupported type {t.name}, expected "
                       f"{'/'.join(x.name for x in types)}")
    ctx.check_types([t, t], [t])
    if t.is_quantized:
        for kind, tensor in ((names[0], ctx.inputs[0]), (names[1], ctx.inputs[1]), ("output 0", ctx.outputs[0])):
            if not np.float32(tensor.scale) > 0:
                raise ctx.fail(f"{kind} has non-positive scale {tensor.scale}")
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims, zeros_unknown=True)


def prepare_broadcast(ctx: OpContext) -> list[tuple[int, ...]]:
    """The output shape of a two-input broadcasting operation."""
    return [broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims)]


@resolver
def broadcast_params(ctx: OpContext) -> BroadcastParams:
    """BroadcastParams of a two-input operation without activation (MAXIMUM, MINIMUM, POW, PRELU,
    comparisons, logical AND / OR); INVALID_ARGUMENT when the shapes do not broadcast."""
    return BroadcastParams(broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims))


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES[ctx.op]:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, t, T.INT32], [t])
    ctx.check_rank(0, 0, 1, 2, 3, 4)
    ctx.check_rank(1, 0, 1, 2, 3, 4)
    activation = constant_activation(ctx, 2)
    if t == T.TENSOR_INT32 and activation not in (None, FusedActivationFunc.NONE):
        raise ctx.fail(f"input 2: TENSOR_INT32 requires fused activation NONE, got {activation.name}")
    if t in _QUANT:
        for kind, tensor in (("input 0", ctx.inputs[0]), ("input 1", ctx.inputs[1]),
                             ("output 0", ctx.outputs[0])):
            if not as_float32(tensor.scale) > 0.0:
                raise ctx.fail(f"{kind} has non-positive scale {tensor.scale}")
    if ctx.op == Op.MUL and t in _QUANT:
        a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
        if not as_float32(out.scale) > _product_scale(a.scale, b.scale):
            raise ctx.fail(f"output 0 scale {out.scale} must exceed input0 scale * input1 scale "
                           f"({a.scale} * {b.scale})")
    if ctx.inputs[0].dims and ctx.inputs[1].dims:
        broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims, zeros_unknown=True)


def _shape(ctx: OpContext) -> tuple[int, ...]:
    for i in (0, 1):
        if len(ctx.inputs[i].dims) > 4:
            raise ctx.fail(f"input {i} has rank {len(ctx.inputs[i].dims)}, expected at most 4")
    return broadcast_dims(ctx, ctx.inputs[0].dims, ctx.inputs[1].dims)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    try:  # resolved once for prepare and execute
        return [params(ctx).out_dims]
    except UnknownValue:  # the activation is known only at execution: the shape does not need it
        return [_shape(ctx)]


@resolver
def params(ctx: OpContext) -> BroadcastParams:
    """ADD / SUB / MUL / DIV: BroadcastParams with the fused activation (input 2) checked (NONE only
    for TENSOR_INT32); INVALID_ARGUMENT naming the input at fault, UnknownValue while input 2 is not
    constant."""
    dims = _shape(ctx)
    activation = check_activation(ctx.op.name, ctx.scalar(2))
    if ctx.inputs[0].type == T.TENSOR_INT32 and activation != FusedActivationFunc.NONE:
        raise ctx.fail(f"input 2: TENSOR_INT32 requires fused activation NONE, got {activation.name}")
    return BroadcastParams(dims, activation)


def _product_scale(s1: float, s2: float) -> float:
    """in1_scale * in2_scale as C++ computes it: a float product, widened afterwards."""
    return float(np.float32(s1) * np.float32(s2))


def _execute(ctx: OpContext) -> list[np.ndarray]:
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    g = params(ctx)
    shape, activation = g.out_dims, g.activation
    if 0 in shape:
        return [np.zeros(shape, out.dtype)]
    if a.type == T.TENSOR_INT32:
        result = _int32(ctx.op, a.value, b.value)
    elif a.type in _QUANT:
        result = _QUANT_KERNELS[ctx.op](ctx, int(activation))
    else:  # float16 is computed in float32, as the reference kernels do
        x, y = a.value, b.value
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        if y.dtype != np.float32:
            y = y.astype(np.float32)
        ufunc = _FLOAT_UFUNCS[ctx.op]
        if ctx.op == Op.DIV:
            with np.errstate(all="ignore"):  # DIV by zero gives inf/nan as in C++
                result = ufunc(x, y)
        else:
            result = ufunc(x, y)
        result = apply_float(result, activation)
    if result.shape != shape:
        result = np.broadcast_to(result, shape)
    return [result if result.dtype == out.dtype and result.flags.owndata else result.astype(out.dtype)]


_FLOAT_UFUNCS = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide}


def _int32(op: Op, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """int32 arithmetic with two's-complement wrap-around; DIV is floor division, x / 0 = 0."""
    x64, y64 = x.astype(np.int64), y.astype(np.int64)
    if op == Op.DIV:
        q = np.floor_divide(x64, np.where(y64 == 0, 1, y64))
        r = np.where(y64 == 0, 0, q)
    else:
        r = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply}[op](x64, y64)
    return r.astype(np.int32)  # int64 -> int32 keeps the low 32 bits (wraps)


def _add_sub_quant(ctx: OpContext, activation: int) -> np.ndarray:
    """TFLite's quantized Add (Android's addQuant8/subQuant8; SUB negates input 1's multiplier)."""
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    s1, s2, so = as_float32(a.scale), as_float32(b.scale), as_float32(out.scale)
    twice_max_input_scale = 2.0 * max(s1, s2)
    m1, shift1 = quantize_multiplier(s1 / twice_max_input_scale)
    m2, shift2 = quantize_multiplier(s2 / twice_max_input_scale)
    mo, shift_o = quantize_multiplier(twice_max_input_scale / ((1 << _ADD_LEFT_SHIFT) * so))
    if ctx.op == Op.SUB:
        m2 = -m2
    x = (a.value.astype(np.int64) - a.zero_point) * (1 << _ADD_LEFT_SHIFT)
    y = (b.value.astype(np.int64) - b.zero_point) * (1 << _ADD_LEFT_SHIFT)
    raw_sum = (multiply_by_quantized_multiplier(x, m1, shift1)
               + multiply_by_quantized_multiplier(y, m2, shift2))
    raw = multiply_by_quantized_multiplier(raw_sum, mo, shift_o) + out.zero_point
    return apply_quant(raw, activation, so, out.zero_point, out.dtype)


def _mul_quant(ctx: OpContext, activation: int) -> np.ndarray:
    """TFLite's quantized Mul: (in1 - zp1) * (in2 - zp2) rescaled by s1 * s2 / s_out."""
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    so = as_float32(out.scale)
    m, shift = quantize_multiplier(_product_scale(a.scale, b.scale) / so)
    product = (a.value.astype(np.int64) - a.zero_point) * (b.value.astype(np.int64) - b.zero_point)
    raw = multiply_by_quantized_multiplier(product, m, shift) + out.zero_point
    return apply_quant(raw, activation, so, out.zero_point, out.dtype)


_QUANT_KERNELS = {Op.ADD: _add_sub_quant, Op.SUB: _add_sub_quant, Op.MUL: _mul_quant}

register(Op.ADD, Op.MUL, Op.SUB, Op.DIV, validate=_validate, prepare=_prepare, execute=_execute,
         params=params, allow_zero_sized_input=True)
