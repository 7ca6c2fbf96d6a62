"""FULLY_CONNECTED: output = activation(input @ weights.T + bias).

The input (rank 2 to 4) is flattened to [batch, input_size] with input_size = weights.dims[1];
weights are [num_units, input_size], bias [num_units]. Float16 is computed in float32;
quant8 (asymm and signed) accumulates (input - zp) * (weights - zp) + int32 bias exactly and
requantizes by input_scale * weights_scale / output_scale, as Android/TFLite do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hal import FusedActivationFunc, OperandType as T, OperationType as Op
from ._activation import apply_float, apply_quant, check_activation, constant_activation
from ._quant import as_float32, requantize
from .context import OpContext, UnknownValue
from .registry import register, resolver

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class FullyConnectedParams:
    """The input seen as [batch, input_size] times weights [num_units, input_size] transposed;
    output [batch, num_units]. 0 marks a size unknown at compile time."""

    batch: int
    input_size: int
    num_units: int
    activation: FusedActivationFunc


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(4, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES:
        raise ctx.fail(f"input 0 has unsupported type {t.name}")
    ctx.check_types([t, t, T.TENSOR_INT32 if t.is_quantized else t, T.INT32], [t])
    ctx.check_rank(0, 2, 3, 4)
    ctx.check_rank(1, 2)
    ctx.check_rank(2, 1)
    constant_activation(ctx, 3)
    if t.is_quantized:
        _multiplier(ctx)
    if all(ctx.inputs[i].dims for i in range(3)):
        _output_dims(ctx, zeros_unknown=True)


def _multiplier(ctx: OpContext) -> float:
    """input_scale * weights_scale / output_scale; the bias scale must equal the product
    (Android's GetQuantizedConvolutionMultipler, to a relative 1e-6)."""
    x, w, b, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    product = float(np.float32(x.scale) * np.float32(w.scale))
    bias_scale = as_float32(b.scale)
    if abs(product - bias_scale) > 1e-6 * min(product, bias_scale):
        raise ctx.fail(f"input 2 (bias) scale {b.scale} must equal input scale * weights scale "
                       f"({x.scale} * {w.scale})")
    if as_float32(out.scale) <= 0.0:
        raise ctx.fail(f"output 0 has non-positive scale {out.scale}")
    return product / as_float32(out.scale)


def _output_dims(ctx: OpContext, *, zeros_unknown: bool) -> tuple[int, int]:
    """(batch, num_units) from the input, weights and bias shapes (Android's validateShapes).

    With `zeros_unknown` a 0 dimension is unknown and yields 0 where it matters.
    """
    x, w, b = (ctx.inputs[i].dims for i in range(3))
    if zeros_unknown and not b:
        b = (0,)  # the bias only confirms num_units
    for i, (dims, ranks) in enumerate(((x, (2, 3, 4)), (w, (2,)), (b, (1,)))):
        if zeros_unknown and not dims:
            raise UnknownValue(f"{ctx.op.name}: input {i} rank not known yet")
        if len(dims) not in ranks:
            raise ctx.fail(f"input {i} has rank {len(dims)}, expected {' or '.join(map(str, ranks))}")
    num_units, input_size = w
    n_elements = math.prod(x)
    if zeros_unknown and (0 in x or input_size == 0):
        batch = 0
    else:
        if input_size == 0:
            raise ctx.fail("input 1 (weights) has input_size 0")
        batch = n_elements // input_size
        if batch * input_size != n_elements:
            raise ctx.fail(f"input 0 with {n_elements} elements is not a multiple of input_size {input_size}")
    if num_units != 0 and b[0] != 0 and b[0] != num_units:
        raise ctx.fail(f"input 2 (bias) has {b[0]} elements, expected num_units {num_units}")
    if not zeros_unknown and num_units == 0:
        raise ctx.fail("input 1 (weights) has num_units 0")
    return batch, num_units or b[0]


@resolver
def params(ctx: OpContext) -> FullyConnectedParams:
    """The resolved FullyConnectedParams (Android's validateShapes); INVALID_ARGUMENT naming the input
    at fault, UnknownValue while the activation (input 3) is not constant."""
    batch, num_units = _output_dims(ctx, zeros_unknown=ctx.compile_time)
    activation = check_activation(ctx.op.name, ctx.scalar(3))
    return FullyConnectedParams(batch, ctx.inputs[1].dims[1], num_units, activation)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    try:  # resolved once for prepare and execute
        g = params(ctx)
        return [(g.batch, g.num_units)]
    except UnknownValue:  # the activation is known only at execution: the shape does not need it
        return [_output_dims(ctx, zeros_unknown=ctx.compile_time)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, w, b, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    g = params(ctx)
    activation, batch, num_units = g.activation, g.batch, g.num_units
    if batch == 0:
        return [np.zeros((0, num_units), out.dtype)]
    flat = x.value.reshape(batch, w.dims[1])
    if x.type.is_quantized:
        acc = ((flat.astype(np.int64) - x.zero_point) @ (w.value.astype(np.int64) - w.zero_point).T
               + b.value.astype(np.int64))
        raw = requantize(acc, _multiplier(ctx), out.zero_point)
        return [apply_quant(raw, activation, as_float32(out.scale), out.zero_point, out.dtype)]
    y = flat.astype(np.float64) @ w.value.astype(np.float64).T + b.value.astype(np.float64)
    return [apply_float(y.astype(np.float32), activation).astype(out.dtype)]


register(Op.FULLY_CONNECTED, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
