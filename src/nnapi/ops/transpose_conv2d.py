"""TRANSPOSE_CONV_2D: transposed 2-D convolution (float32, float16, quant8 asymm / signed,
per-channel filters along dim 0), NHWC or NCHW (the layout flag is mandatory).

Two signatures (NeuralNetworks.h):
    explicit (11 inputs): input, filter, bias, pad_l, pad_r, pad_t, pad_b, stride_w, stride_h, act, layout
    implicit (9 inputs):  input, filter, bias, output_shape, scheme, stride_w, stride_h, act, layout
The implicit form derives the padding from the requested output shape (Android's
calculateExplicitPaddingTransposeConv); the output size then follows computeOutSizeTransposeConv.
The right / bottom paddings may be negative. Computed as one BLAS matmul followed by a col2im
scatter-add over the filter taps (see `_conv.transpose_conv_scatter`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, OperationType as Op, PaddingScheme
from . import _activation, _conv
from ._padding import explicit_padding, from_nhwc, join_dims, split_dims, to_nhwc, transpose_out_size
from .context import OpContext
from .registry import register, resolver

_EXPLICIT, _IMPLICIT = 11, 9


@dataclass(frozen=True)
class TransposeConv2dParams:
    """Resolved parameters and sizes of one TRANSPOSE_CONV_2D; 0 marks a size unknown at compile time.
    Input pixel (y, x) adds filter tap (i, j) into output (y * stride_h - pad_top + i,
    x * stride_w - pad_left + j); contributions outside the output are dropped. The bottom / right
    paddings may be negative; dilations are 1, extras empty."""

    params: _conv.WindowParams
    batches: int
    channels_out: int
    filter_h: int
    filter_w: int
    out_h: int
    out_w: int


def _positions(n: int) -> tuple[int, int, int, int]:
    """(first stride, activation, layout, scheme-or--1) input positions of each signature."""
    return (7, 9, 10, -1) if n == _EXPLICIT else (5, 7, 8, 4)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts((_IMPLICIT, _EXPLICIT), 1)
    n = len(ctx.inputs)
    _conv.check_conv_operands(ctx, channel_dim=0)
    if n == _EXPLICIT:
        ctx.check_types([None, None, None] + [T.INT32] * 7 + [T.BOOL])
    else:
        ctx.check_types([None, None, None, T.TENSOR_INT32] + [T.INT32] * 4 + [T.BOOL])
        ctx.check_rank(3, 1)
        shape = ctx.inputs[3].dims
        if len(shape) == 1 and shape[0] not in (0, 4):
            raise ctx.fail(f"output shape (input 3) has {shape[0]} elements, expected 4")
    first_stride, act, _, scheme = _positions(n)
    values = {i: _conv.known_scalar(ctx, i) for i in range(3, n - 1) if i != 3 or n == _EXPLICIT}
    if n == _EXPLICIT:
        for name, i in (("left", 3), ("top", 5)):
            if values[i] is not None and values[i] < 0:
                raise ctx.fail(f"padding {name} (input {i}) is {values[i]}, must be >= 0")
    elif values[scheme] is not None and values[scheme] not in (PaddingScheme.SAME, PaddingScheme.VALID):
        raise ctx.fail(f"padding scheme (input {scheme}) is {values[scheme]}, must be 1 (SAME) or 2 (VALID)")
    for name, i in (("stride width", first_stride), ("stride height", first_stride + 1)):
        if values[i] is not None and values[i] <= 0:
            raise ctx.fail(f"{name} (input {i}) is {values[i]}, must be > 0")
    if values[act] is not None:
        _activation.check_activation(ctx.op.name, values[act])
    f, b = ctx.inputs[1], ctx.inputs[2]
    if len(f.dims) == 4 and len(b.dims) == 1 and f.dims[0] and b.dims[0] and f.dims[0] != b.dims[0]:
        raise ctx.fail(f"bias (input 2) has {b.dims[0]} elements for {f.dims[0]} output channels")


def _read_params(ctx: OpContext, filter_h: int, filter_w: int) -> _conv.WindowParams:
    """All scalar parameters (UnknownValue propagates), implicit padding resolved from the
    output-shape tensor."""
    n = len(ctx.inputs)
    first_stride, act, layout, scheme = _positions(n)
    sw, sh = int(ctx.scalar(first_stride)), int(ctx.scalar(first_stride + 1))
    activation = int(ctx.scalar(act))
    nchw = bool(ctx.scalar(layout))
    if n == _EXPLICIT:
        pl, pr, pt, pb = (int(ctx.scalar(i)) for i in (3, 4, 5, 6))
    else:
        kind = int(ctx.scalar(scheme))
        if kind not in (PaddingScheme.SAME, PaddingScheme.VALID):
            raise ctx.fail(f"padding scheme (input {scheme}) is {kind}, must be 1 (SAME) or 2 (VALID)")
        shape = ctx.input(3).reshape(-1)
        if shape.size != 4:
            raise ctx.fail(f"output shape (input 3) has {shape.size} elements, expected 4")
        _, out_h, out_w, _ = split_dims(tuple(int(v) for v in shape), nchw)
        pl, pr = explicit_padding(out_w, sw, filter_w, kind, transpose=True) if sw > 0 else (0, 0)
        pt, pb = explicit_padding(out_h, sh, filter_h, kind, transpose=True) if sh > 0 else (0, 0)
    for name, v in (("padding left", pl), ("padding top", pt)):
        if v < 0:
            raise ctx.fail(f"{name} is {v}, must be >= 0")
    for name, v in (("stride width", sw), ("stride height", sh)):
        if v <= 0:
            raise ctx.fail(f"{name} is {v}, must be > 0")
    _activation.check_activation(ctx.op.name, activation)
    return _conv.WindowParams(pl, pr, pt, pb, sw, sh, 1, 1, activation, nchw, ())


@resolver
def params(ctx: OpContext) -> TransposeConv2dParams:
    """The resolved TransposeConv2dParams: implicit padding derived from the output-shape tensor,
    shapes checked against each other and the output size computed (Android's TransposeConv2D
    prepare); INVALID_ARGUMENT naming the input at fault."""
    x, f, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    _conv.check_input_ranks(ctx, (4, 4, 1))
    o, fh, fw, fc = f.dims
    p = _read_params(ctx, fh, fw)
    n, h, w, c = split_dims(x.dims, p.nchw)
    if c and fc and c != fc:
        raise ctx.fail(f"input has {c} channels but the filter (input 1) expects {fc}")
    if o and b.dims[0] and o != b.dims[0]:
        raise ctx.fail(f"bias (input 2) has {b.dims[0]} elements for {o} output channels")
    if not ctx.compile_time:  # only the batch may be zero
        for name, v in (("height", h), ("width", w), ("input depth", c), ("output depth", o),
                        ("filter height", fh), ("filter width", fw)):
            if v <= 0:
                raise ctx.fail(f"{name} is {v}, must be > 0")
    oh = transpose_out_size(h, fh, p.stride_h, p.pad_top, p.pad_bottom) if h and fh else 0
    ow = transpose_out_size(w, fw, p.stride_w, p.pad_left, p.pad_right) if w and fw else 0
    if (h and fh and oh <= 0) or (w and fw and ow <= 0):
        raise ctx.fail(f"the padding leaves no output (output {oh}x{ow})")
    return TransposeConv2dParams(p, n, o, fh, fw, oh, ow)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    g = params(ctx)
    return [join_dims(g.batches, g.out_h, g.out_w, g.channels_out, g.params.nchw)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    p = g.params
    x = to_nhwc(_conv.centered_input(ctx), p.nchw)
    weights = _conv.centered_filter(ctx)  # [O, FH, FW, C]
    acc = _conv.transpose_conv_scatter(x, weights, g.out_h, g.out_w, p.stride_h, p.stride_w,
                                       p.pad_top, p.pad_left)
    return [from_nhwc(_conv.finish(ctx, acc, p.activation), p.nchw)]


register(Op.TRANSPOSE_CONV_2D, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
