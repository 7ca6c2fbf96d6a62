"""GROUPED_CONV_2D: 2-D convolution split into channel groups (float32, float16, quant8 asymm /
signed, per-channel filters along dim 0), implicit or explicit padding, NHWC or NCHW (the layout
flag is mandatory); im2col + one BLAS matmul per group.

Filter [O, FH, FW, C / groups]: output channel g * (O / groups) + d convolves input channels
g * (C / groups) ... (g + 1) * (C / groups) - 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperationType as Op
from . import _conv
from ._padding import from_nhwc, join_dims, out_size, split_dims, to_nhwc
from .context import OpContext
from .registry import register, resolver

_COUNTS = (9, 12)
_EXTRAS = ("number of groups",)


@dataclass(frozen=True)
class GroupedConv2dParams:
    """Resolved parameters and sizes of one GROUPED_CONV_2D; 0 marks a size unknown at compile time.
    Output channel g * (channels_out / groups) + d reads input channels g * Cg .. (g + 1) * Cg - 1."""

    params: _conv.WindowParams
    batches: int
    groups: int
    channels_out: int
    filter_h: int
    filter_w: int
    out_h: int
    out_w: int


def _signature(ctx: OpContext) -> _conv.WindowSignature:
    return _conv.window_signature(ctx, base=3, n_extra=1, dilation=False)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(_COUNTS, 1)
    sig = _signature(ctx)
    _conv.validate_window_conv(ctx, sig, channel_dim=0, bias_axis=0, positive_extras=_EXTRAS)
    x, f = ctx.inputs[0], ctx.inputs[1]
    groups = _conv.known_scalar(ctx, sig.extras[0])
    nchw = _conv.known_scalar(ctx, sig.layout)
    if groups is not None and groups > 0 and len(f.dims) == 4:
        _check_groups(ctx, int(groups), f.dims,
                      split_dims(x.dims, bool(nchw))[3] if len(x.dims) == 4 and nchw is not None else 0)


def _check_groups(ctx: OpContext, groups: int, filter_dims: tuple[int, ...], channels_in: int) -> None:
    """Output channels divisible by the group count; input channels = groups * filter depth."""
    o, _, _, fc = filter_dims
    if o and o % groups:
        raise ctx.fail(f"{o} output channels (filter dimension 0) are not divisible by "
                       f"the number of groups {groups}")
    if channels_in and fc and channels_in != fc * groups:
        raise ctx.fail(f"input has {channels_in} channels but the filter (input 1) expects "
                       f"{fc} per group x {groups} groups = {fc * groups}")


@resolver
def params(ctx: OpContext) -> GroupedConv2dParams:
    """The resolved GroupedConv2dParams: shapes checked against each other and the output size
    computed (Android's groupedConvPrepare); INVALID_ARGUMENT naming the input at fault."""
    sig = _signature(ctx)
    b = ctx.inputs[2]
    _conv.check_input_ranks(ctx, (4, 4, 1))
    nchw = _conv.layout_flag(ctx, sig)
    n, h, w, c = split_dims(ctx.inputs[0].dims, nchw)
    o, fh, fw, fc = ctx.inputs[1].dims
    p = _conv.read_params(ctx, sig, h, w, fh, fw, positive_extras=_EXTRAS)
    groups = p.extras[0]
    _check_groups(ctx, groups, (o, fh, fw, fc), c)
    if o and b.dims[0] and o != b.dims[0]:
        raise ctx.fail(f"bias (input 2) has {b.dims[0]} elements for {o} output channels")
    if not ctx.compile_time:
        for name, v in (("height", h), ("width", w), ("input depth", c), ("output depth", o),
                        ("filter height", fh), ("filter width", fw), ("filter depth", fc)):
            if v <= 0:
                raise ctx.fail(f"{name} is {v}, must be > 0")
    oh = out_size(h, fh, p.stride_h, p.pad_top, p.pad_bottom) if h and fh else 0
    ow = out_size(w, fw, p.stride_w, p.pad_left, p.pad_right) if w and fw else 0
    if (h and fh and oh <= 0) or (w and fw and ow <= 0):
        raise ctx.fail(f"the filter does not fit the padded input (output {oh}x{ow})")
    return GroupedConv2dParams(p, n, groups, o, fh, fw, oh, ow)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    g = params(ctx)
    return [join_dims(g.batches, g.out_h, g.out_w, g.channels_out, g.params.nchw)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    p = g.params
    x = to_nhwc(_conv.centered_input(ctx), p.nchw)
    per_group = g.channels_out // g.groups
    # [O, FH, FW, Cg] -> [G, Og, FH*FW*Cg] -> [G, FH*FW*Cg, Og]
    weights = _conv.centered_filter(ctx).reshape(g.groups, per_group, -1).transpose(0, 2, 1)
    patches = _conv.extract_patches(x, p, g.filter_h, g.filter_w, g.out_h, g.out_w)
    acc = _conv.grouped_im2col_matmul(patches, weights)
    return [from_nhwc(_conv.finish(ctx, acc, p.activation), p.nchw)]


register(Op.GROUPED_CONV_2D, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
