"""Convolutions, pooling, fully connected and batch matmul: filter and bias operands (hybrid weights
dequantized at import, per-channel weights kept), fused activations and padding schemes; MediaPipe's
custom Convolution2DTransposeBias; FULLY_CONNECTED with per-channel weights as a 1x1 CONV_2D."""
from __future__ import annotations

import math
import struct

import numpy as np

from ....hal import FusedActivationFunc, OperandType as T, OperationType as Op, PaddingScheme
from ..flatbuffer import BadModel
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register, register_custom
from ..schema import FlatOperator
from ..spec import Spec, f32
from .common import QUANT8, const_ints, fused, need, padding_scheme, simple, with_activation

_POOLS = {"AVERAGE_POOL_2D": Op.AVERAGE_POOL_2D, "MAX_POOL_2D": Op.MAX_POOL_2D, "L2_POOL_2D": Op.L2_POOL_2D}


def _weights(graph: Graph, t: int, x: Spec, channel_dim: int) -> tuple[int, Spec]:
    """Filter operand for an input of spec `x`: float weights for float inputs (dequantized at import
    when they are quantized: hybrid models), quantized ones as declared otherwise."""
    spec = graph.spec_of(t)
    if x.is_float and spec.quantized:
        value = graph.real_value(t)
        if value is None:
            raise Unsupported("quantized weights of a float operator must be constant")
        return graph.const(value, Spec(x.type, spec.dims)), Spec(x.type, spec.dims)
    if x.is_float and spec.type != x.type:
        return graph.float_input(t), Spec(T.TENSOR_FLOAT32, spec.dims)
    if spec.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and spec.channel[1] != channel_dim:
        raise Unsupported(f"per-channel weights along dimension {spec.channel[1]}, NNAPI needs {channel_dim}")
    return graph.input(t, spec), spec


def _bias(graph: Graph, t: int, x: Spec, w: Spec, n: int) -> int:
    """The bias operand (`n` values; zeros when omitted, `t` = -1): float for float inputs, else int32
    scaled input scale x filter scale."""
    if x.is_float:
        spec = Spec(x.type, (n,))
        if t < 0:
            return graph.zeros(spec)
        if graph.spec_of(t).type != x.type:
            return graph.float_input(t)
        return graph.input(t, spec)
    if w.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        spec = Spec(T.TENSOR_INT32, (n,), 0.0, 0)
    else:
        spec = Spec(T.TENSOR_INT32, (n,), f32(np.float32(x.scale) * np.float32(w.scale)), 0)
    if t < 0:
        return graph.zeros(spec)
    if graph.tensor(t).type != "INT32":
        raise Unsupported(f"bias {graph.tensor(t).describe()} of a quantized operator must be int32")
    return graph.input(t, spec)


def _check_input(x: Spec, name: str) -> None:
    """Refuse an input type NNAPI has no such operation for."""
    if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + QUANT8:
        raise Unsupported(f"{name} input type {x.type.name} is not supported by NNAPI")


def _convolution(graph: Graph, op: FlatOperator, options: str,
                 channel_dim: int) -> tuple[object, Spec, tuple[int, ...], int, Spec]:
    """What CONV_2D and DEPTHWISE_CONV_2D read first: (options, input spec, input dims, filter operand,
    filter spec), the input and filter checked to be 4-D."""
    need(op, (2, 3))
    o = op.options(options)
    x = graph.spec_of(op.inputs[0])
    x_dims = graph.dims(op.inputs[0], 4, "input")
    graph.dims(op.inputs[1], 4, "filter")
    _check_input(x, op.name)
    w_operand, w = _weights(graph, op.inputs[1], x, channel_dim)
    return o, x, x_dims, w_operand, w


@register("CONV_2D")
def map_conv_2d(graph: Graph, op: FlatOperator) -> None:
    """CONV_2D (GROUPED_CONV_2D where the filter has fewer input channels than the input)."""
    o, x, x_dims, w_operand, w = _convolution(graph, op, "Conv2DOptions", 0)
    n_out, _, _, w_in = w.dims
    if w_in < 1:
        raise BadModel(f"filter {graph.tensor(op.inputs[1]).describe()} has no input channels")
    bias = _bias(graph, op.inputs[2] if len(op.inputs) > 2 else -1, x, w, n_out)
    code, out, finish = with_activation(graph, op.outputs[0], o.FusedActivationFunction())
    padding = graph.i32(padding_scheme(o.Padding()))
    dilation = (o.DilationWFactor(), o.DilationHFactor())
    if x_dims[3] != w_in:
        groups = x_dims[3] // w_in
        if groups * w_in != x_dims[3] or dilation != (1, 1):
            raise Unsupported(f"input channels {x_dims[3]} and filter channels {w_in} (dilation {dilation})")
        graph.emit(Op.GROUPED_CONV_2D, [graph.input(op.inputs[0]), w_operand, bias, padding, graph.i32(o.StrideW()),
                                        graph.i32(o.StrideH()), graph.i32(groups), code, graph.bool(False)], [out])
    else:
        ins = [graph.input(op.inputs[0]), w_operand, bias, padding, graph.i32(o.StrideW()), graph.i32(o.StrideH()),
               code]
        if dilation != (1, 1):
            ins += [graph.bool(False), graph.i32(dilation[0]), graph.i32(dilation[1])]
        graph.emit(Op.CONV_2D, ins, [out])
    finish()


@register("DEPTHWISE_CONV_2D")
def map_depthwise_conv_2d(graph: Graph, op: FlatOperator) -> None:
    """DEPTHWISE_CONV_2D with the depth multiplier the filter's channels give."""
    o, x, x_dims, w_operand, w = _convolution(graph, op, "DepthwiseConv2DOptions", 3)
    channels = w.dims[3]
    multiplier = channels // x_dims[3] if x_dims[3] else 1
    if multiplier * x_dims[3] != channels:
        raise Unsupported(f"filter channels {channels} are not a multiple of input channels {x_dims[3]}")
    bias = _bias(graph, op.inputs[2] if len(op.inputs) > 2 else -1, x, w, channels)
    code, out, finish = with_activation(graph, op.outputs[0], o.FusedActivationFunction())
    ins = [graph.input(op.inputs[0]), w_operand, bias, graph.i32(padding_scheme(o.Padding())), graph.i32(o.StrideW()),
           graph.i32(o.StrideH()), graph.i32(multiplier), code]
    if (o.DilationWFactor(), o.DilationHFactor()) != (1, 1):
        ins += [graph.bool(False), graph.i32(o.DilationWFactor()), graph.i32(o.DilationHFactor())]
    graph.emit(Op.DEPTHWISE_CONV_2D, ins, [out])
    finish()


@register("TRANSPOSE_CONV")
def map_transpose_conv(graph: Graph, op: FlatOperator) -> None:
    """TRANSPOSE_CONV_2D with the constant output shape (TFLite's input 0) and an optional bias."""
    need(op, (3, 4))
    o = op.options("TransposeConvOptions")
    shape_t, w_t, x_t = op.inputs[:3]
    x = graph.spec_of(x_t)
    graph.dims(x_t, 4, "input")
    graph.dims(w_t, 4, "filter")
    _check_input(x, "TRANSPOSE_CONV")
    w_operand, w = _weights(graph, w_t, x, 0)
    bias = _bias(graph, op.inputs[3] if len(op.inputs) > 3 else -1, x, w, w.dims[0])
    code, out, finish = with_activation(graph, op.outputs[0], o.FusedActivationFunction())
    shape = graph.const_i32(const_ints(graph, shape_t, "output shape", 4))
    graph.emit(Op.TRANSPOSE_CONV_2D, [graph.input(x_t), w_operand, bias, shape,
                                      graph.i32(padding_scheme(o.Padding())), graph.i32(o.StrideW()),
                                      graph.i32(o.StrideH()), code, graph.bool(False)], [out])
    finish()


@register_custom("Convolution2DTransposeBias")
def map_convolution_2d_transpose_bias(graph: Graph, op: FlatOperator) -> None:
    """MediaPipe's transposed convolution with bias (mediapipe/util/tflite/operations/
    transpose_conv_bias.cc): inputs data [N, H, W, I], weights [O, KH, KW, I], bias [O]; the custom
    options are a raw TfLiteTransposeConvParams (int32 padding 1 SAME / 2 VALID, stride_w, stride_h).
    SAME pads total = max(0, K - (in - 1) % stride - 1), half of it (rounded down) before: NNAPI
    TRANSPOSE_CONV_2D with those explicit paddings computes the same output."""
    need(op, 3)
    x_t, w_t, b_t = op.inputs
    if op.custom_options is None or op.custom_options[1] < 12:
        raise BadModel("custom options must hold padding, stride_w and stride_h (12 bytes)")
    padding, stride_w, stride_h = struct.unpack("<iii", graph.flat.bytes_at((op.custom_options[0], 12)))
    if padding not in (1, 2):
        raise BadModel(f"custom options: padding {padding} is neither SAME (1) nor VALID (2)")
    if stride_w < 1 or stride_h < 1:
        raise BadModel(f"custom options: strides ({stride_w}, {stride_h}) must be positive")
    x = graph.spec_of(x_t)
    batches, in_h, in_w, in_c = graph.dims(x_t, 4, "input")
    out_c, k_h, k_w, w_c = graph.dims(w_t, 4, "weights")
    graph.dims(b_t, 1, "bias")
    if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        raise Unsupported(f"input type {x.type.name}: MediaPipe's kernel is float only")
    if w_c != in_c or graph.spec_of(b_t).dims[0] != out_c:
        raise BadModel(f"weights [{out_c}, {k_h}, {k_w}, {w_c}] and bias {list(graph.spec_of(b_t).dims)} do not "
                       f"fit an input of {in_c} channels")

    def pads(size: int, k: int, stride: int) -> tuple[int, int]:
        total = max(0, k - (size - 1) % stride - 1) if padding == 1 else 0
        return total // 2, total - total // 2
    (top, bottom), (left, right) = pads(in_h, k_h, stride_h), pads(in_w, k_w, stride_w)
    out_dims = (batches, stride_h * (in_h - 1) + k_h - top - bottom,
                stride_w * (in_w - 1) + k_w - left - right, out_c)
    if out_dims != graph.spec_of(op.outputs[0]).dims:
        raise BadModel(f"output {graph.tensor(op.outputs[0]).describe()} should have shape {list(out_dims)}")
    w_operand, w = _weights(graph, w_t, x, 0)
    bias = _bias(graph, b_t, x, w, out_c)
    graph.emit(Op.TRANSPOSE_CONV_2D, [graph.input(x_t), w_operand, bias, graph.i32(left), graph.i32(right),
                                      graph.i32(top), graph.i32(bottom), graph.i32(stride_w), graph.i32(stride_h),
                                      graph.i32(FusedActivationFunc.NONE), graph.bool(False)],
               [graph.output(op.outputs[0])])


@register(*_POOLS)
def map_pool(graph: Graph, op: FlatOperator) -> None:
    """AVERAGE, MAX and L2 pooling with the input's quantization and a fused activation."""
    nnapi = _POOLS[op.name]
    need(op, 1)
    o = op.options("Pool2DOptions")
    x, y = graph.spec_of(op.inputs[0]), graph.spec_of(op.outputs[0])
    graph.dims(op.inputs[0], 4, "input")
    _check_input(x, op.name)
    if x.quantized and (x.scale, x.zero_point) != (y.scale, y.zero_point):
        raise Unsupported("quantized pooling with different input and output quantization")
    code, out, finish = with_activation(graph, op.outputs[0], o.FusedActivationFunction())
    graph.emit(nnapi, [graph.input(op.inputs[0]), graph.i32(padding_scheme(o.Padding())), graph.i32(o.StrideW()),
                       graph.i32(o.StrideH()), graph.i32(o.FilterWidth()), graph.i32(o.FilterHeight()), code], [out])
    finish()


@register("FULLY_CONNECTED")
def map_fully_connected(graph: Graph, op: FlatOperator) -> None:
    """FULLY_CONNECTED over [batch, size] (inputs of other ranks reshaped; output reshaped back)."""
    need(op, (2, 3), 1)
    o = op.options("FullyConnectedOptions")
    if o.WeightsFormat() != 0:
        raise Unsupported("shuffled weights format")
    x_t, w_t = op.inputs[0], op.inputs[1]
    b_t = op.inputs[2] if len(op.inputs) > 2 else -1
    act = o.FusedActivationFunction()
    fused(act)
    x = graph.spec_of(x_t)
    _check_input(x, "FULLY_CONNECTED")
    units, size = graph.dims(w_t, 2, "weights")
    w = graph.spec_of(w_t)
    if size < 1:
        raise BadModel(f"weights {graph.tensor(w_t).describe()} have no input size")
    batch = math.prod(x.dims) // size
    if batch * size != math.prod(x.dims):
        raise Unsupported(f"input {list(x.dims)} is not a multiple of the weights' input size {size}")
    if w.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and not x.is_float:
        return _fully_connected_per_channel(graph, op, x, w, b_t, act, batch)
    w_operand, w = _weights(graph, w_t, x, 0)
    bias = _bias(graph, b_t, x, w, units)
    x_operand = graph.input(x_t)
    if len(x.dims) > 4 or len(x.dims) < 2:
        x_operand = graph.reshape(x_operand, (batch, size))
    code, out, finish = with_activation(graph, op.outputs[0], act, dims=(batch, units))
    graph.emit(Op.FULLY_CONNECTED, [x_operand, w_operand, bias, code], [out])
    finish()


def _fully_connected_per_channel(graph: Graph, op: FlatOperator, x: Spec, w: Spec, b_t: int, act: int,
                                 batch: int) -> None:
    """NNAPI FULLY_CONNECTED has no per-channel weights: a 1x1 CONV_2D over [1, 1, batch, size] does."""
    units, size = w.dims
    filter_spec = Spec(w.type, (units, 1, 1, size), channel=w.channel)
    w_operand = graph.input(op.inputs[1], filter_spec) if graph.is_const(op.inputs[1]) else None
    if w_operand is None:
        raise Unsupported("per-channel weights must be constant")
    bias = _bias(graph, b_t, x, filter_spec, units)
    x_operand = graph.reshape(graph.input(op.inputs[0]), (1, 1, batch, size))
    code, out, finish = with_activation(graph, op.outputs[0], act, dims=(1, 1, batch, units))
    graph.emit(Op.CONV_2D, [x_operand, w_operand, bias, graph.i32(PaddingScheme.VALID), graph.i32(1), graph.i32(1),
                            code], [out])
    finish()


@register("BATCH_MATMUL")
def map_batch_matmul(graph: Graph, op: FlatOperator) -> None:
    """NNAPI feature-level-6 BATCH_MATMUL: same types and batch dimensions (it does not broadcast)."""
    need(op, 2)
    o = op.options("BatchMatMulOptions")
    a, b = graph.spec_of(op.inputs[0]), graph.spec_of(op.inputs[1])
    if a.type != b.type or a.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32,
                                          T.TENSOR_QUANT8_ASYMM_SIGNED):
        raise Unsupported(f"input types {a.type.name} and {b.type.name}")
    if len(a.dims) != len(b.dims) or a.dims[:-2] != b.dims[:-2] or not 2 <= len(a.dims) <= 4:
        raise Unsupported(f"batch dimensions {list(a.dims)} and {list(b.dims)} differ (NNAPI BATCH_MATMUL "
                          "does not broadcast) or rank is not 2 to 4")
    simple(graph, op, Op.BATCH_MATMUL, list(op.inputs), [graph.bool(bool(o.AdjX())), graph.bool(bool(o.AdjY()))])
