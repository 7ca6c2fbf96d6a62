"""Convolutions and FULLY_CONNECTED: Convolution, GroupConvolution, ConvolutionBackpropData, MatMul.

NHWC inputs are taken channel-first (the layout OpenVINO's kernels run) and outputs left
channel-first; constant quantized filters become `Constant(int8) -> Convert -> [Subtract] -> Multiply`
so that, with the FakeQuantize on the quantized input, the low-precision pipeline runs int8 kernels.
"""
from __future__ import annotations

import numpy as np
from ..backend import ov, ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import (FLOAT, FLOAT_Q8, I32, NCHW, Q8A, Q8PC, QUANT8, Unsupported, Value, activation, bias_values,
                        constant, dequantized_array, dequantized_weights, lowers, reshape)


def _layout(nchw: bool):
    return None if nchw else NCHW


def _bias(ctx: OpContext, xs, y: ov.Output, channels: int, rank: int = 4) -> ov.Output:
    """Add the bias along axis 1 of `y` (channel-first)."""
    shape = (1, channels) + (1,) * (rank - 2)
    b = bias_values(ctx)
    if b is not None:
        if not b.any():
            return y
        return ops.add(y, constant(b.reshape(shape))).output(0)
    return ops.add(y, reshape(_runtime_bias(ctx, xs), shape)).output(0)


def _runtime_bias(ctx: OpContext, xs) -> ov.Output:
    """A bias the request supplies, as real values (int32 biases scaled by input x filter scale)."""
    if ctx.inputs[2].type != I32:
        return xs[2].node
    f = ctx.inputs[1]
    if f.type == Q8PC:
        scales = np.float32(ctx.inputs[0].scale) * np.asarray(f.channel_quant.scales, np.float32)
    else:
        scales = np.asarray([np.float32(ctx.inputs[0].scale) * np.float32(f.scale)], np.float32)
    return ops.multiply(ops.convert(xs[2].node, ov.Type.f32), constant(scales)).output(0)


def _filter(ctx: OpContext, xs, *, perm, shape=None, channel_axis: int = 0, keep_float: bool = False) -> ov.Output:
    """The filter as float values in OpenVINO's layout: constant ones dequantized in the LPT weights
    pattern (with `keep_float`, as float constants: outside the int8 pipeline), others transposed from
    the graph."""
    f = ctx.inputs[1]
    if f.value is not None and keep_float and f.type not in FLOAT:
        w = constant(np.ascontiguousarray(np.transpose(dequantized_array(f), perm)))
    elif f.value is not None:
        return dequantized_weights(f, perm=perm, shape=shape, channel_axis=channel_axis)
    else:
        w = xs[1].laid_out(perm)
    return reshape(w, shape) if shape is not None else w


def _group_filter(ctx: OpContext, xs, perm, inputs_per_group: int, outputs_per_group: int) -> ov.Output:
    """A group convolution's filter. OpenVINO's int8 group convolution computes garbage with one input
    and more than one output channel per group (2026.4, CPU: signed activations, and unsigned ones with
    some filter sizes and strides, e.g. 1x3, stride 2: tests/fuzz_corpus): such a filter stays float."""
    return _filter(ctx, xs, perm=perm, keep_float=inputs_per_group == 1 and outputs_per_group > 1)


@lowers(Op.CONV_2D, types=FLOAT_Q8)
def conv2d(ctx: OpContext, xs):
    g = resolve(ctx)
    p = g.params
    x = xs[0].laid_out(_layout(p.nchw))
    w = _filter(ctx, xs, perm=(0, 3, 1, 2))  # OHWI -> OIHW
    y = ops.convolution(x, w, [p.stride_h, p.stride_w], [p.pad_top, p.pad_left], [p.pad_bottom, p.pad_right],
                        [p.dilation_h, p.dilation_w]).output(0)
    y = activation(_bias(ctx, xs, y, g.channels_out), p.activation)
    return [Value(y, _layout(p.nchw))]


@lowers(Op.DEPTHWISE_CONV_2D, types=FLOAT_Q8)
def depthwise_conv2d(ctx: OpContext, xs):
    g = resolve(ctx)
    p = g.params
    x = xs[0].laid_out(_layout(p.nchw))
    channels, out_channels, multiplier = g.channels_in, g.channels_out, g.multiplier
    if channels * multiplier != out_channels:
        raise Unsupported("DEPTHWISE_CONV_2D: output channels are not input channels x multiplier")
    # [1, H, W, C*M] -> [C*M, 1, H, W] (per-channel scales on axis 0) -> [C, M, 1, H, W]
    w = _group_filter(ctx, xs, (3, 0, 1, 2), 1, multiplier)
    w = reshape(w, (channels, multiplier, 1, g.filter_h, g.filter_w))
    y = ops.group_convolution(x, w, [p.stride_h, p.stride_w], [p.pad_top, p.pad_left], [p.pad_bottom, p.pad_right],
                              [p.dilation_h, p.dilation_w]).output(0)
    y = activation(_bias(ctx, xs, y, out_channels), p.activation)
    return [Value(y, _layout(p.nchw))]


@lowers(Op.GROUPED_CONV_2D, types=FLOAT_Q8)
def grouped_conv2d(ctx: OpContext, xs):
    f = ctx.inputs[1].dims  # [O, H, W, C / G]
    g = resolve(ctx)
    p, groups, o = g.params, g.groups, g.channels_out
    x = xs[0].laid_out(_layout(p.nchw))
    if o % groups:
        raise Unsupported("GROUPED_CONV_2D: output channels are not a multiple of the groups")
    w = _group_filter(ctx, xs, (0, 3, 1, 2), f[3], o // groups)  # OIHW, per-channel scales on axis 0
    w = reshape(w, (groups, o // groups, f[3], f[1], f[2]))
    y = ops.group_convolution(x, w, [p.stride_h, p.stride_w], [p.pad_top, p.pad_left], [p.pad_bottom, p.pad_right],
                              [p.dilation_h, p.dilation_w]).output(0)
    y = activation(_bias(ctx, xs, y, o), p.activation)
    return [Value(y, _layout(p.nchw))]


@lowers(Op.TRANSPOSE_CONV_2D, types=FLOAT_Q8)
def transpose_conv2d(ctx: OpContext, xs):
    g = resolve(ctx)
    p = g.params  # padding explicit; the bottom / right ones may be negative
    x = xs[0].laid_out(_layout(p.nchw))
    # OpenVINO's int8 ConvolutionBackpropData is wrong for an input with zero point 0 and a filter with
    # one (2026.4, CPU: tests/fuzz_corpus): such a filter stays float.
    f = ctx.inputs[1]
    zero = f.zero_point - (128 if f.type == Q8A else 0) if f.type in QUANT8 else 0
    w = _filter(ctx, xs, perm=(3, 0, 1, 2), channel_axis=1,  # -> [C, O, H, W]
                keep_float=ctx.inputs[0].zero_point == 0 and zero != 0)
    # The full scatter, then the output window: negative padding crops, a negative tail adds rows that
    # only get the bias (Android drops contributions outside the output).
    y = ops.convolution_backprop_data(x, w, [p.stride_h, p.stride_w], pads_begin=[0, 0], pads_end=[0, 0],
                                      dilations=[1, 1]).output(0)
    if p.pad_top or p.pad_bottom or p.pad_left or p.pad_right:
        y = ops.pad(y, constant(np.array([0, 0, -p.pad_top, -p.pad_left], np.int64)),
                    constant(np.array([0, 0, -p.pad_bottom, -p.pad_right], np.int64)), "constant").output(0)
    y = activation(_bias(ctx, xs, y, g.channels_out), p.activation)
    return [Value(y, _layout(p.nchw))]


@lowers(Op.FULLY_CONNECTED, types=FLOAT_Q8)
def fully_connected(ctx: OpContext, xs):
    g = resolve(ctx)
    units, size, batch = g.num_units, g.input_size, g.batch
    x = xs[0].node
    if tuple(xs[0].shape) != (batch, size):
        x = reshape(x, (batch, size))
    w = _filter(ctx, xs, perm=None)  # [units, size]: MatMul with transpose_b, per-channel on axis 0
    y = ops.matmul(x, w, False, True).output(0)
    b = bias_values(ctx)
    if b is not None:
        if b.any():
            y = ops.add(y, constant(b.reshape(1, units))).output(0)
    else:
        y = ops.add(y, _runtime_bias(ctx, xs)).output(0)
    return [activation(y, g.activation)]
