"""AVERAGE_POOL_2D and MAX_POOL_2D (float32, float16, quant8 asymm / signed), L2_POOL_2D (float32,
float16), implicit or explicit padding, NHWC or NCHW; reductions over strided patch views.

Each pooling kind is one entry of `_KINDS` (allowed types + reduction), so L2_POOL_2D only needs
a reduction and a registration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from . import _activation, _conv
from ._padding import from_nhwc, join_dims, out_size, split_dims, to_nhwc
from .context import OpContext
from .registry import register, resolver

_COUNTS = (7, 8, 10, 11)
_EXTRAS = ("filter width", "filter height")
_FLOAT_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANT_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


@dataclass(frozen=True)
class Pool2dParams:
    """Resolved parameters and sizes of one AVERAGE / MAX / L2_POOL_2D; 0 marks a size unknown at
    compile time. Padding never counts: averages and L2 norms divide by `window_counts()`."""

    #: Padding made explicit, strides, activation, layout; extras = (filter_w, filter_h).
    params: _conv.WindowParams
    batches: int
    height: int
    width: int
    channels: int
    filter_h: int
    filter_w: int
    out_h: int
    out_w: int

    def window_counts(self) -> np.ndarray:
        """[out_h, out_w, 1] number of real (non-padding) input elements under each window."""
        p = self.params
        ch = _conv.window_counts(self.height, self.out_h, self.filter_h, p.stride_h, p.pad_top)
        cw = _conv.window_counts(self.width, self.out_w, self.filter_w, p.stride_w, p.pad_left)
        return np.maximum(ch[:, None] * cw[None, :], 1)[:, :, None]


Reduction = Callable[[OpContext, np.ndarray, Pool2dParams], np.ndarray]


@dataclass(frozen=True)
class _Kind:
    """One pooling operation: the input types it accepts and its NHWC reduction."""

    types: tuple[T, ...]
    reduce: Reduction


def _signature(ctx: OpContext) -> _conv.WindowSignature:
    return _conv.window_signature(ctx, base=1, n_extra=2, dilation=False)


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(_COUNTS, 1)
    sig = _signature(ctx)
    x = ctx.inputs[0]
    kind = _KINDS[ctx.op]
    ctx.check_types([kind.types], [x.type])
    ctx.check_types(_conv.expected_scalar_types(sig, len(ctx.inputs)))
    ctx.check_rank(0, 4)
    ctx.check_rank(0, 4, output=True)
    if x.type.is_quantized:
        if not x.scale > 0:
            raise ctx.fail(f"input 0 has scale {x.scale}, must be > 0")
        ctx.check_same_quant(0, 0, j_output=True)
    _conv.check_scalars(ctx, sig, positive_extras=_EXTRAS)


@resolver
def params(ctx: OpContext) -> Pool2dParams:
    """The resolved Pool2dParams: parameters checked and the output size computed (Android's Pooling
    prepare); INVALID_ARGUMENT naming the input at fault."""
    sig = _signature(ctx)
    _conv.check_input_ranks(ctx, (4,))
    nchw = _conv.layout_flag(ctx, sig)
    n, h, w, c = split_dims(ctx.inputs[0].dims, nchw)
    p = _conv.read_params(ctx, sig, h, w, positive_extras=_EXTRAS)
    fw, fh = p.extras
    if not ctx.compile_time:
        for name, v in (("height", h), ("width", w), ("depth", c)):
            if v <= 0:
                raise ctx.fail(f"input {name} is {v}, must be > 0")
    _conv.check_padding_fits(ctx, p, fh, fw)
    oh = out_size(h, fh, p.stride_h, p.pad_top, p.pad_bottom) if h else 0
    ow = out_size(w, fw, p.stride_w, p.pad_left, p.pad_right) if w else 0
    if (h and oh <= 0) or (w and ow <= 0):
        raise ctx.fail(f"the filter does not fit the padded input (output {oh}x{ow})")
    return Pool2dParams(p, n, h, w, c, fh, fw, oh, ow)


def _patches(x: np.ndarray, g: Pool2dParams, pad_value: float = 0) -> np.ndarray:
    return _conv.extract_patches(x, g.params, g.filter_h, g.filter_w, g.out_h, g.out_w, pad_value)


def _average(ctx: OpContext, x: np.ndarray, g: Pool2dParams) -> np.ndarray:
    """Mean over the real elements of each window; quantized: rounded half away from zero (TFLite)."""
    t = ctx.inputs[0]
    counts = g.window_counts()
    if t.type.is_quantized:
        total = _patches(x.astype(np.int64), g).sum(axis=(3, 4))
        q = np.sign(total) * ((np.abs(total) + counts // 2) // counts)
        return _activation.apply_quant(q, g.params.activation, t.scale, t.zero_point, t.dtype)
    total = _patches(x.astype(np.float64), g).sum(axis=(3, 4))
    return _activation.apply_float(total / counts, g.params.activation).astype(t.dtype)


def _max(ctx: OpContext, x: np.ndarray, g: Pool2dParams) -> np.ndarray:
    """Maximum over the real elements of each window (padding never wins)."""
    t = ctx.inputs[0]
    if t.type.is_quantized:
        m = _patches(x.astype(np.int64), g, np.iinfo(np.int64).min).max(axis=(3, 4))
        return _activation.apply_quant(m, g.params.activation, t.scale, t.zero_point, t.dtype)
    m = _patches(x.astype(np.float64), g, -np.inf).max(axis=(3, 4))
    return _activation.apply_float(m, g.params.activation).astype(t.dtype)


def _l2(ctx: OpContext, x: np.ndarray, g: Pool2dParams) -> np.ndarray:
    """sqrt(mean of squares) over the real elements of each window (padding excluded from the count)."""
    t = ctx.inputs[0]
    out = _conv.l2_pool(_patches(x.astype(np.float64), g), g.window_counts())
    return _activation.apply_float(out, g.params.activation).astype(t.dtype)


_KINDS: dict[Op, _Kind] = {
    Op.AVERAGE_POOL_2D: _Kind(_FLOAT_TYPES + _QUANT_TYPES, _average),
    Op.MAX_POOL_2D: _Kind(_FLOAT_TYPES + _QUANT_TYPES, _max),
    Op.L2_POOL_2D: _Kind(_FLOAT_TYPES, _l2),
}


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    g = params(ctx)
    return [join_dims(g.batches, g.out_h, g.out_w, g.channels, g.params.nchw)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    g = params(ctx)
    x = to_nhwc(ctx.inputs[0].value, g.params.nchw)
    if g.batches == 0 or g.out_h == 0 or g.out_w == 0:
        out = np.zeros((g.batches, g.out_h, g.out_w, g.channels), ctx.outputs[0].dtype)
    else:
        out = _KINDS[ctx.op].reduce(ctx, x, g)
    return [from_nhwc(out, g.params.nchw)]


register(*_KINDS, validate=_validate, prepare=_prepare, execute=_execute, params=params,
         allow_zero_sized_input=True)
