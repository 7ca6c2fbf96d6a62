"""Machinery shared by the windowed operations (CONV_2D, DEPTHWISE_CONV_2D, pooling, and later
GROUPED_CONV_2D / TRANSPOSE_CONV_2D): locating and reading the scalar parameters, checking them,
and extracting input patches with numpy stride tricks so kernels never loop over output pixels.

Operand layout of these operations (NeuralNetworks.h), after `base` leading tensors:
    implicit: scheme, stride_w, stride_h, *extras, activation, [layout, [dilation_w, dilation_h]]
    explicit: pad_l, pad_r, pad_t, pad_b, stride_w, stride_h, *extras, activation, [layout, [dil_w, dil_h]]
The two forms are told apart by the input count and by whether the input right after the
implicit form's activation is BOOL (the layout flag) or INT32 (an explicit parameter).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hal import OperandType as T, PaddingScheme
from . import _activation, _quant
from ._padding import effective_filter_size, explicit_padding
from .context import OpContext, UnknownValue
from .tensor import Tensor

#: Above this many im2col elements the matmul is done in blocks of output rows (bounds memory).
_IM2COL_MAX_ELEMENTS = 1 << 23


# --- parameter positions ------------------------------------------------------------------
@dataclass(frozen=True)
class WindowSignature:
    """Where each scalar parameter of a windowed operation sits among its inputs."""

    explicit: bool
    pads: tuple[int, ...]            # (left, right, top, bottom) if explicit, else (scheme,)
    stride: tuple[int, int]          # (width, height)
    extras: tuple[int, ...]          # operation-specific INT32 scalars (depth multiplier, filter size)
    activation: int
    layout: int | None
    dilation: tuple[int, int] | None  # (width, height)

    def scalar_indexes(self) -> list[int]:
        """Every INT32 scalar position (all parameters except the BOOL layout flag)."""
        idx = [*self.pads, *self.stride, *self.extras, self.activation]
        return idx + list(self.dilation or ())


def window_signature(ctx: OpContext, *, base: int, n_extra: int, dilation: bool) -> WindowSignature:
    """Decide implicit vs explicit padding from the input count and the type of the input after
    the implicit activation; INVALID_ARGUMENT for any other count."""
    n = len(ctx.inputs)
    k = base + 4 + n_extra  # the layout flag (implicit) or an INT32 parameter (explicit)
    implicit_counts = (k, k + 1) + ((k + 3,) if dilation else ())
    explicit_counts = (k + 3, k + 4) + ((k + 6,) if dilation else ())
    kind = ctx.inputs[k].type if n > k else None
    if n == k or (n > k and kind == T.BOOL):
        if n not in implicit_counts:
            raise ctx.fail(f"{n} inputs do not form the implicit-padding signature "
                           f"(expected {' or '.join(map(str, implicit_counts))})")
        pads, first = (base,), base + 1
    elif n in explicit_counts and kind == T.INT32:
        pads, first = (base, base + 1, base + 2, base + 3), base + 4
    else:
        raise ctx.fail(f"unsupported input signature: {n} inputs"
                       + (f", input {k} of type {kind.name}" if kind is not None else ""))
    stride = (first, first + 1)
    extras = tuple(range(first + 2, first + 2 + n_extra))
    act = first + 2 + n_extra
    layout = act + 1 if n > act + 1 else None
    dil = (act + 2, act + 3) if n > act + 2 else None
    return WindowSignature(len(pads) == 4, pads, stride, extras, act, layout, dil)


def expected_scalar_types(sig: WindowSignature, n_inputs: int) -> list[T | None]:
    """Expected types of positions `0..n_inputs-1` for the scalar parameters (None elsewhere)."""
    types: list[T | None] = [None] * n_inputs
    for i in sig.scalar_indexes():
        types[i] = T.INT32
    if sig.layout is not None:
        types[sig.layout] = T.BOOL
    return types


# --- parameter values ---------------------------------------------------------------------
@dataclass(frozen=True)
class WindowParams:
    """Scalar parameters with padding resolved to explicit (left, right, top, bottom)."""

    pad_left: int
    pad_right: int
    pad_top: int
    pad_bottom: int
    stride_w: int
    stride_h: int
    dilation_w: int
    dilation_h: int
    activation: int
    nchw: bool
    extras: tuple[int, ...]


def known_scalar(ctx: OpContext, i: int) -> int | bool | None:
    """Value of scalar input `i`, or None while it is not constant (compile time)."""
    try:
        return ctx.scalar(i)
    except UnknownValue:
        return None


def check_scalars(ctx: OpContext, sig: WindowSignature, *, positive_extras: tuple[str, ...] = ()) -> None:
    """Check every constant parameter: strides/dilations/extras > 0, pads >= 0, scheme, activation.

    `positive_extras` names the extras (in order) that must be > 0; non-constant values are skipped.
    """
    def value(i: int) -> int | None:
        v = known_scalar(ctx, i)
        return None if v is None else int(v)

    if sig.explicit:
        for name, i in zip(("left", "right", "top", "bottom"), sig.pads):
            v = value(i)
            if v is not None and v < 0:
                raise ctx.fail(f"padding {name} (input {i}) is {v}, must be >= 0")
    else:
        v = value(sig.pads[0])
        if v is not None and v not in (PaddingScheme.SAME, PaddingScheme.VALID):
            raise ctx.fail(f"padding scheme (input {sig.pads[0]}) is {v}, must be 1 (SAME) or 2 (VALID)")
    checks = [("stride width", sig.stride[0]), ("stride height", sig.stride[1])]
    checks += list(zip(positive_extras, sig.extras))
    if sig.dilation is not None:
        checks += [("dilation width", sig.dilation[0]), ("dilation height", sig.dilation[1])]
    for name, i in checks:
        v = value(i)
        if v is not None and v <= 0:
            raise ctx.fail(f"{name} (input {i}) is {v}, must be > 0")
    v = value(sig.activation)
    if v is not None:
        _activation.check_activation(ctx.op.name, v)


def read_params(ctx: OpContext, sig: WindowSignature, in_h: int, in_w: int,
                filter_h: int | None = None, filter_w: int | None = None, *,
                positive_extras: tuple[str, ...] = ()) -> WindowParams:
    """Read all parameters (UnknownValue propagates) and resolve implicit padding.

    The filter size defaults to the last two extras (pooling's filter_w, filter_h).
    """
    check_scalars(ctx, sig, positive_extras=positive_extras)
    sw, sh = (int(ctx.scalar(i)) for i in sig.stride)
    extras = tuple(int(ctx.scalar(i)) for i in sig.extras)
    dw, dh = (int(ctx.scalar(i)) for i in sig.dilation) if sig.dilation else (1, 1)
    act = int(ctx.scalar(sig.activation))
    nchw = bool(ctx.scalar(sig.layout)) if sig.layout is not None else False
    if filter_h is None or filter_w is None:
        filter_w, filter_h = extras[-2], extras[-1]
    if sig.explicit:
        pl, pr, pt, pb = (int(ctx.scalar(i)) for i in sig.pads)
    else:
        scheme = int(ctx.scalar(sig.pads[0]))  # sizes still unknown (0) at compile time pad nothing
        pl, pr = explicit_padding(in_w, sw, filter_w, scheme, dilation=dw) if in_w and filter_w else (0, 0)
        pt, pb = explicit_padding(in_h, sh, filter_h, scheme, dilation=dh) if in_h and filter_h else (0, 0)
    return WindowParams(pl, pr, pt, pb, sw, sh, dw, dh, act, nchw, extras)


def layout_flag(ctx: OpContext, sig: WindowSignature) -> bool:
    """The NCHW flag (False when absent); UnknownValue when it is not constant."""
    return bool(ctx.scalar(sig.layout)) if sig.layout is not None else False


def check_padding_fits(ctx: OpContext, p: WindowParams, filter_h: int, filter_w: int) -> None:
    """Each padding must be smaller than the (dilated) filter extent, as Android requires."""
    eh = effective_filter_size(filter_h, p.dilation_h)
    ew = effective_filter_size(filter_w, p.dilation_w)
    for name, pad, eff in (("left", p.pad_left, ew), ("right", p.pad_right, ew),
                           ("top", p.pad_top, eh), ("bottom", p.pad_bottom, eh)):
        if pad >= eff:
            raise ctx.fail(f"padding {name} {pad} is not smaller than the filter extent {eff}")


def check_input_ranks(ctx: OpContext, ranks: tuple[int, ...]) -> None:
    """Input i must have rank ranks[i] (prepare-time check); UnknownValue at compile time while
    a rank is not known yet."""
    for i, rank in enumerate(ranks):
        dims = ctx.inputs[i].dims
        if len(dims) != rank:
            if ctx.compile_time and not dims:
                raise UnknownValue(f"{ctx.op.name}: rank of input {i} is not known")
            raise ctx.fail(f"input {i} has rank {len(dims)}, expected {rank}")


def window_counts(in_size: int, out_size: int, filter_size: int, stride: int, pad_head: int) -> np.ndarray:
    """Number of real (non-padding) input positions under each output position's window, along one axis."""
    origin = np.arange(out_size, dtype=np.int64) * stride - pad_head
    start = np.maximum(0, -origin)
    end = np.minimum(filter_size, in_size - origin)
    return np.maximum(end - start, 0)


# --- operand checks shared by the convolutions ----------------------------------------------
def validate_window_conv(ctx: OpContext, sig: WindowSignature, *, channel_dim: int, bias_axis: int,
                         positive_extras: tuple[str, ...] = ()) -> None:
    """The validation CONV_2D, DEPTHWISE_CONV_2D and GROUPED_CONV_2D share once their input count is
    checked: operand types and quantization, scalar parameters, the bias length against filter axis
    `bias_axis`."""
    check_conv_operands(ctx, channel_dim=channel_dim)
    ctx.check_types(expected_scalar_types(sig, len(ctx.inputs)))
    check_scalars(ctx, sig, positive_extras=positive_extras)
    f, b = ctx.inputs[1], ctx.inputs[2]
    if len(f.dims) == 4 and len(b.dims) == 1 and f.dims[bias_axis] and b.dims[0] and f.dims[bias_axis] != b.dims[0]:
        raise ctx.fail(f"bias (input 2) has {b.dims[0]} elements for {f.dims[bias_axis]} output channels")


def check_conv_operands(ctx: OpContext, *, channel_dim: int) -> None:
    """Types and quantization of (input, filter, bias) -> output for CONV_2D-like operations.

    Float: all tensors share the input type. Quantized: the filter has the input type or is
    TENSOR_QUANT8_SYMM_PER_CHANNEL along `channel_dim`; the bias is TENSOR_INT32 with zero point 0
    and scale = input scale * filter scale (per-channel: implied per channel, its own scale unused).
    """
    x, f, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    floats = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    quants = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
    if x.type in floats:
        ctx.check_types([x.type, x.type, x.type], [x.type])
    elif x.type in quants:
        ctx.check_types([x.type, (x.type, T.TENSOR_QUANT8_SYMM_PER_CHANNEL), T.TENSOR_INT32], [x.type])
    else:
        raise ctx.fail(f"input 0 has unsupported type {x.type.name}")
    ctx.check_rank(0, 4)
    ctx.check_rank(1, 4)
    ctx.check_rank(2, 1)
    ctx.check_rank(0, 4, output=True)
    if x.type in floats:
        return
    out = ctx.outputs[0]
    for name, t in (("input 0", x), ("output 0", out)):
        if not t.scale > 0:
            raise ctx.fail(f"{name} has scale {t.scale}, must be > 0")
    if b.zero_point != 0:
        raise ctx.fail(f"bias (input 2) has zero point {b.zero_point}, must be 0")
    if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = f.channel_quant
        if cq is None:
            raise ctx.fail("filter (input 1) is per-channel quantized but has no channel parameters")
        if cq.channel_dim != channel_dim:
            raise ctx.fail(f"filter (input 1) channel_dim is {cq.channel_dim}, must be {channel_dim}")
        if f.dims and len(f.dims) > channel_dim and f.dims[channel_dim] not in (0, len(cq.scales)):
            raise ctx.fail(f"filter (input 1) has {len(cq.scales)} channel scales for "
                           f"{f.dims[channel_dim]} channels")
        if any(not s > 0 for s in cq.scales):
            raise ctx.fail("filter (input 1) channel scales must be > 0")
        return
    if not f.scale > 0:
        raise ctx.fail(f"filter (input 1) has scale {f.scale}, must be > 0")
    product = float(np.float32(x.scale) * np.float32(f.scale))
    if abs(product - b.scale) > 1e-6 * min(product, b.scale):
        raise ctx.fail(f"bias (input 2) scale {b.scale} must equal input scale * filter scale ({product})")


def channel_multipliers(ctx: OpContext) -> np.ndarray:
    """Real requantization multiplier of each output channel (one for per-tensor filters):
    input scale * filter scale in float, then divided by the output scale in double, as
    Android's GetQuantizedConvolutionMultipler does."""
    x, f, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        scales = np.asarray(f.channel_quant.scales, np.float32)
    else:
        scales = np.asarray([f.scale], np.float32)
    products = (np.float32(x.scale) * scales).astype(np.float64)
    return products / float(np.float32(out.scale))


# --- patches ------------------------------------------------------------------------------
def pad_nhwc(x: np.ndarray, top: int, bottom: int, left: int, right: int, value: float = 0) -> np.ndarray:
    """Pad the spatial axes of an NHWC array with `value` (negative amounts crop instead)."""
    if min(top, bottom, left, right) < 0:
        h, w = x.shape[1], x.shape[2]
        x = x[:, max(0, -top):h - max(0, -bottom), max(0, -left):w - max(0, -right)]
        top, bottom, left, right = (max(0, v) for v in (top, bottom, left, right))
    if top == bottom == left == right == 0:
        return x
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def patch_view(xp: np.ndarray, filter_h: int, filter_w: int, out_h: int, out_w: int,
               stride_h: int = 1, stride_w: int = 1, dilation_h: int = 1, dilation_w: int = 1) -> np.ndarray:
    """Read-only strided view [N, out_h, out_w, filter_h, filter_w, C] of an already padded NHWC array.

    Element [n, y, x, i, j, c] is xp[n, y*stride_h + i*dilation_h, x*stride_w + j*dilation_w, c].
    """
    n, hp, wp, c = xp.shape
    if out_h <= 0 or out_w <= 0 or n == 0 or c == 0:
        return np.zeros((n, max(out_h, 0), max(out_w, 0), filter_h, filter_w, c), xp.dtype)
    if ((out_h - 1) * stride_h + (filter_h - 1) * dilation_h >= hp
            or (out_w - 1) * stride_w + (filter_w - 1) * dilation_w >= wp):
        raise ValueError("patch_view: windows reach past the padded input")
    sn, sh, sw, sc = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp, shape=(n, out_h, out_w, filter_h, filter_w, c),
        strides=(sn, sh * stride_h, sw * stride_w, sh * dilation_h, sw * dilation_w, sc),
        writeable=False)


def extract_patches(x: np.ndarray, p: WindowParams, filter_h: int, filter_w: int,
                    out_h: int, out_w: int, pad_value: float = 0) -> np.ndarray:
    """Pad an NHWC input per `p` (with zeros unless told) and return its patch view (see `patch_view`)."""
    xp = pad_nhwc(x, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right, pad_value)
    return patch_view(xp, filter_h, filter_w, out_h, out_w, p.stride_h, p.stride_w,
                      p.dilation_h, p.dilation_w)


def im2col_matmul(patches: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Contract patches [N, OH, OW, FH, FW, C] with weights [FH*FW*C, O] -> [N, OH, OW, O] (BLAS).

    The im2col matrix is built in blocks of output rows when it would be large.
    """
    n, oh, ow, fh, fw, c = patches.shape
    k, o = weights.shape
    dtype = np.result_type(patches.dtype, weights.dtype)
    if n * oh * ow * k <= _IM2COL_MAX_ELEMENTS:
        return (patches.reshape(n * oh * ow, k) @ weights).reshape(n, oh, ow, o)
    out = np.empty((n, oh, ow, o), dtype)
    rows = max(1, _IM2COL_MAX_ELEMENTS // max(1, ow * k))
    for b in range(n):
        for y in range(0, oh, rows):
            block = patches[b, y:y + rows]
            out[b, y:y + rows] = (block.reshape(-1, k) @ weights).reshape(block.shape[0], ow, o)
    return out


def depthwise_taps(patches: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Depthwise contraction: patches [N, OH, OW, FH, FW, C] with weights [FH, FW, C, M]
    -> [N, OH, OW, C, M], accumulated one filter tap at a time (vectorised over all pixels)."""
    n, oh, ow, fh, fw, c = patches.shape
    m = weights.shape[3]
    acc = np.zeros((n, oh, ow, c, m), np.result_type(patches.dtype, weights.dtype))
    for i in range(fh):
        for j in range(fw):
            acc += patches[:, :, :, i, j, :, None] * weights[i, j]
    return acc


# --- input shifting and output finishing ------------------------------------------------------
def compute_dtype(t: Tensor) -> np.dtype:
    """float64 for quantized data (exact integer sums of 8-bit products), float32 for float data
    (single-precision BLAS, as Android's float kernels compute)."""
    return np.dtype(np.float64) if t.type.is_quantized else np.dtype(np.float32)


def centered_input(ctx: OpContext) -> np.ndarray:
    """Input values with the zero point removed (so padding is 0), in `compute_dtype`."""
    x = ctx.inputs[0]
    v = x.value.astype(compute_dtype(x), copy=False)
    if x.type.is_quantized and x.zero_point:
        v -= x.zero_point
    return v


def centered_filter(ctx: OpContext) -> np.ndarray:
    """Filter values with the zero point removed (per-channel filters have none), in `compute_dtype`."""
    f = ctx.inputs[1]
    v = f.value.astype(compute_dtype(ctx.inputs[0]), copy=False)
    if f.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED) and f.zero_point:
        v -= f.zero_point
    return v


def finish(ctx: OpContext, acc: np.ndarray, activation: int) -> np.ndarray:
    """Add the bias to NHWC accumulators (channel last), requantize when quantized, apply the fused
    activation and cast to the output type."""
    out = ctx.outputs[0]
    bias = ctx.inputs[2].value
    if not out.type.is_quantized:
        acc += bias.astype(acc.dtype, copy=False)  # acc is this operation's own buffer
        return _activation.apply_float(acc, activation).astype(out.dtype, copy=False)
    acc_int = np.rint(acc).astype(np.int64) + bias.astype(np.int64)
    multipliers = channel_multipliers(ctx)
    if multipliers.size == 1:
        q = _quant.requantize(acc_int, float(multipliers[0]), out.zero_point)
    else:
        q = _quant.requantize_per_channel(acc_int, multipliers, out.zero_point)
    return _activation.apply_quant(q, activation, out.scale, out.zero_point, out.dtype)


# --- grouped and transposed convolution ----------------------------------------------------------
def grouped_im2col_matmul(patches: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Grouped contraction: patches [N, OH, OW, FH, FW, G*Cg] with weights [G, FH*FW*Cg, Og]
    -> [N, OH, OW, G*Og], output channel g*Og + d reading only input channels g*Cg .. (g+1)*Cg - 1.

    One BLAS matmul per group when there are few groups (each blocked like `im2col_matmul`),
    otherwise one batched matmul over all groups.
    """
    n, oh, ow, fh, fw, c = patches.shape
    g, k, og = weights.shape
    cg = c // g
    if g == 1:
        return im2col_matmul(patches, weights[0])
    if g <= 8 or n * oh * ow * k * g > _IM2COL_MAX_ELEMENTS:
        parts = [im2col_matmul(patches[..., i * cg:(i + 1) * cg], weights[i]) for i in range(g)]
        return np.concatenate(parts, axis=-1)
    cols = patches.reshape(n * oh * ow, fh, fw, g, cg).transpose(3, 0, 1, 2, 4).reshape(g, n * oh * ow, k)
    out = np.matmul(cols, weights)  # [G, M, Og]
    return out.transpose(1, 0, 2).reshape(n, oh, ow, g * og)


def transpose_conv_scatter(x: np.ndarray, weights: np.ndarray, out_h: int, out_w: int,
                           stride_h: int, stride_w: int, pad_top: int, pad_left: int) -> np.ndarray:
    """Transposed convolution accumulators: x [N, H, W, C] with weights [O, FH, FW, C] -> [N, OH, OW, O].

    One BLAS matmul gives every input pixel's contribution to each filter tap ([N, H, W, FH, FW, O]);
    col2im then adds tap (i, j) into output rows h*stride_h - pad_top + i and columns
    w*stride_w - pad_left + j with one strided slice per tap (positions never collide within a tap),
    contributions falling outside [0, OH) x [0, OW) being dropped, as Android's reference does.
    Padding may be negative at the tail (bottom/right): those outputs only receive what lands there.
    """
    n, h, w, c = x.shape
    o, fh, fw, _ = weights.shape
    dtype = np.result_type(x.dtype, weights.dtype)
    if n == 0 or out_h <= 0 or out_w <= 0:
        return np.zeros((n, max(out_h, 0), max(out_w, 0), o), dtype)
    wmat = weights.transpose(3, 1, 2, 0).reshape(c, fh * fw * o)  # [C, (i, j, o)]
    cols = (x.reshape(n * h * w, c) @ wmat).reshape(n, h, w, fh, fw, o)
    # Full (uncropped) canvas: big enough for every tap and for the requested output window.
    full_h = max((h - 1) * stride_h + fh, pad_top + out_h)
    full_w = max((w - 1) * stride_w + fw, pad_left + out_w)
    canvas = np.zeros((n, full_h, full_w, o), dtype)
    row_end, col_end = (h - 1) * stride_h + 1, (w - 1) * stride_w + 1
    for i in range(fh):
        for j in range(fw):
            canvas[:, i:i + row_end:stride_h, j:j + col_end:stride_w, :] += cols[:, :, :, i, j, :]
    return canvas[:, pad_top:pad_top + out_h, pad_left:pad_left + out_w, :]


def l2_pool(patches: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """L2 pooling over zero-padded patches [N, OH, OW, FH, FW, C]: sqrt(sum of squares / counts),
    `counts` ([OH, OW, 1]) being the number of real input elements under each window (TFLite L2Pool)."""
    squares = np.einsum("nyxijc,nyxijc->nyxc", patches, patches)
    return np.sqrt(squares / counts)


__all__ = ["WindowSignature", "WindowParams", "window_signature", "expected_scalar_types", "known_scalar",
           "check_scalars", "read_params", "layout_flag", "check_padding_fits", "check_conv_operands",
           "check_input_ranks", "window_counts",
           "channel_multipliers", "pad_nhwc", "patch_view", "extract_patches", "im2col_matmul",
           "depthwise_taps", "centered_input", "centered_filter", "finish",
           "grouped_im2col_matmul", "transpose_conv_scatter", "l2_pool"]
