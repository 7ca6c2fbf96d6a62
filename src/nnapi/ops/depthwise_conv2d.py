"""DEPTHWISE_CONV_2D: per-channel 2-D convolution with a depth multiplier (float32, float16,
quant8 asymm / signed, per-channel filters along dim 3), implicit or explicit padding,
NHWC or NCHW, dilation; accumulated filter tap by tap over strided patch views."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperationType as Op
from . import _conv
from ._padding import from_nhwc, join_dims, out_size, split_dims, to_nhwc
from .context import OpContext
from .registry import register, resolver

_COUNTS = (8, 9, 11, 12, 14)
_EXTRAS = ("depth multiplier",)


@dataclass(frozen=True)
class DepthwiseConv2dParams:
    """Resolved parameters and sizes of one DEPTHWISE_CONV_2D; 0 marks a size unknown at compile time.
    Output channel c * multiplier + m reads input channel c with filter[0, :, :, c * multiplier + m]."""

    #: Padding made explicit, strides, dilations, activation, layout; extras = (multiplier,).
    params: _conv.WindowParams
    batches: int
    channels_in: int
    channels_out: int
    multiplier: int
    filter_h: int
    filter_w: int
    out_h: int
    out_w: int


def _signature(ctx: OpContext) -> _conv.WindowSignature:
    return _conv.window_signature(ctx, base=3, n_extra=1, dilation=True)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(_COUNTS, 1)
    _conv.validate_window_conv(ctx, _signature(ctx), channel_dim=3, bias_axis=3,
                               positive_extras=_EXTRAS)
    f = ctx.inputs[1]
    if len(f.dims) == 4 and f.dims[0] not in (0, 1):
        raise ctx.fail(f"filter (input 1) dimension 0 is {f.dims[0]}, must be 1")


@resolver
def params(ctx: OpContext) -> DepthwiseConv2dParams:
    """The resolved DepthwiseConv2dParams: shapes checked against each other and the output size
    computed (Android's DepthwiseConv2D prepare); INVALID_ARGUMENT naming the input at fault."""
    sig = _signature(ctx)
    x, f, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    _conv.check_input_ranks(ctx, (4, 4, 1))
    nchw = _conv.layout_flag(ctx, sig)
    n, h, w, c = split_dims(x.dims, nchw)
    one, fh, fw, o = f.dims
    p = _conv.read_params(ctx, sig, h, w, fh, fw, positive_extras=_EXTRAS)
    multiplier = p.extras[0]
    if one not in (0, 1):
        raise ctx.fail(f"filter (input 1) dimension 0 is {one}, must be 1")
    if o and b.dims[0] and o != b.dims[0]:
        raise ctx.fail(f"bias (input 2) has {b.dims[0]} elements for {o} output channels")
    if c and o and c * multiplier != o:
        raise ctx.fail(f"input depth {c} * depth multiplier {multiplier} != filter depth {o}")
    if not ctx.compile_time:
        for name, v in (("height", h), ("width", w), ("input depth", c), ("output depth", o),
                        ("filter height", fh), ("filter width", fw)):
            if v <= 0:
                raise ctx.fail(f"{name} is {v}, must be > 0")
    oh = ow = 0
    if fh and fw:
        _conv.check_padding_fits(ctx, p, fh, fw)
        if h:
            oh = out_size(h, fh, p.stride_h, p.pad_top, p.pad_bottom, p.dilation_h)
        if w:
            ow = out_size(w, fw, p.stride_w, p.pad_left, p.pad_right, p.dilation_w)
        if (h and oh <= 0) or (w and ow <= 0):
            raise ctx.fail(f"the filter does not fit the padded input (output {oh}x{ow})")
    return DepthwiseConv2dParams(p, n, c, o, multiplier, fh, fw, oh, ow)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    g = params(ctx)
    return [join_dims(g.batches, g.out_h, g.out_w, g.channels_out, g.params.nchw)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    p = g.params
    x = to_nhwc(_conv.centered_input(ctx), p.nchw)
    # Output channel k = c * multiplier + m reads input channel c with filter[0, :, :, k].
    weights = _conv.centered_filter(ctx).reshape(g.filter_h, g.filter_w, g.channels_in, g.multiplier)
    patches = _conv.extract_patches(x, p, g.filter_h, g.filter_w, g.out_h, g.out_w)
    acc = _conv.depthwise_taps(patches, weights).reshape(g.batches, g.out_h, g.out_w, g.channels_out)
    return [from_nhwc(_conv.finish(ctx, acc, p.activation), p.nchw)]


register(Op.DEPTHWISE_CONV_2D, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
