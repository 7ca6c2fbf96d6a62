"""CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D and MAX_POOL_2D against independent nested-loop
references, plus padding maths, layouts, quantization and validation errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op, SymmPerChannelQuantParams
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation
from nnapi.ops._padding import explicit_padding, out_size

SAME, VALID = 1, 2
RNG = np.random.default_rng(1234)


# --- building operations ----------------------------------------------------------------------
def i32(v: int | None) -> Tensor:
    """An INT32 scalar; None makes it a non-constant (value unknown at compile time)."""
    return Tensor(T.INT32, (), value=None if v is None else np.array(v, np.int32))


def flag(v: bool) -> Tensor:
    return Tensor(T.BOOL, (), value=np.array(v, np.bool_))


def tensor(value: np.ndarray, typ: T, scale: float = 0.0, zero_point: int = 0,
           channel_quant: SymmPerChannelQuantParams | None = None) -> Tensor:
    return Tensor(typ, tuple(value.shape), scale, zero_point, channel_quant, value)


def run(op: Op, inputs: list[Tensor], output: Tensor, *, relaxed: bool = False) -> np.ndarray:
    """validate at compile time (declared shapes, constant scalars), then prepare and execute."""
    reg = find_operation(op)
    compile_inputs = [Tensor(t.type, t.dims, t.scale, t.zero_point, t.channel_quant,
                             t.value if t.type.is_scalar else None) for t in inputs]
    reg.validate(OpContext(op, compile_inputs, [output], relaxed=relaxed, compile_time=True))
    ctx = OpContext(op, inputs, [output], relaxed=relaxed)
    (dims,) = reg.prepare(ctx)
    (result,) = reg.execute(ctx)
    assert result.shape == tuple(dims)
    assert result.dtype == output.dtype
    return result


def out_like(typ: T, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    """A declared output with unknown dimensions."""
    return Tensor(typ, (0, 0, 0, 0), scale, zero_point)


def conv_scalars(pads: tuple[int, int, int, int] | int, stride: tuple[int, int], act: int = 0,
                 nchw: bool | None = None, dilation: tuple[int, int] | None = None,
                 extra: tuple[int, ...] = ()) -> list[Tensor]:
    """Scalar inputs after (input, filter, bias): explicit pads tuple or an implicit scheme."""
    head = [i32(v) for v in pads] if isinstance(pads, tuple) else [i32(pads)]
    s = head + [i32(stride[0]), i32(stride[1])] + [i32(v) for v in extra] + [i32(act)]
    if nchw is not None or dilation is not None:
        s.append(flag(bool(nchw)))
    if dilation is not None:
        s += [i32(dilation[0]), i32(dilation[1])]
    return s


# --- independent references (NHWC, direct loops) -------------------------------------------
def ref_conv(x, f, b, stride, pads, dilation=(1, 1)):
    """Direct convolution: x [N,H,W,C], f [O,FH,FW,C]; pads (left, right, top, bottom)."""
    n, h, w, c = x.shape
    o, fh, fw, _ = f.shape
    sw, sh = stride
    dw, dh = dilation
    pl, pr, pt, pb = pads
    oh = (h + pt + pb - (fh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (fw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, o))
    for bi, y, xo, k in itertools.product(range(n), range(oh), range(ow), range(o)):
        s = float(b[k])
        for i, j in itertools.product(range(fh), range(fw)):
            iy, ix = y * sh - pt + i * dh, xo * sw - pl + j * dw
            if 0 <= iy < h and 0 <= ix < w:
                s += float(np.dot(x[bi, iy, ix].astype(np.float64), f[k, i, j].astype(np.float64)))
        out[bi, y, xo, k] = s
    return out


def ref_depthwise(x, f, b, stride, pads, multiplier, dilation=(1, 1)):
    """Direct depthwise convolution: x [N,H,W,C], f [1,FH,FW,C*M]."""
    n, h, w, c = x.shape
    _, fh, fw, o = f.shape
    sw, sh = stride
    dw, dh = dilation
    pl, pr, pt, pb = pads
    oh = (h + pt + pb - (fh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (fw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, o))
    for bi, y, xo, k in itertools.product(range(n), range(oh), range(ow), range(o)):
        s = float(b[k])
        for i, j in itertools.product(range(fh), range(fw)):
            iy, ix = y * sh - pt + i * dh, xo * sw - pl + j * dw
            if 0 <= iy < h and 0 <= ix < w:
                s += float(x[bi, iy, ix, k // multiplier]) * float(f[0, i, j, k])
        out[bi, y, xo, k] = s
    return out


def ref_pool(x, filt, stride, pads, how):
    """Direct pooling over the real (non-padding) elements of each window."""
    n, h, w, c = x.shape
    fw, fh = filt
    sw, sh = stride
    pl, pr, pt, pb = pads
    oh = (h + pt + pb - fh) // sh + 1
    ow = (w + pl + pr - fw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for bi, y, xo, k in itertools.product(range(n), range(oh), range(ow), range(c)):
        vals = [float(x[bi, y * sh - pt + i, xo * sw - pl + j, k])
                for i in range(fh) for j in range(fw)
                if 0 <= y * sh - pt + i < h and 0 <= xo * sw - pl + j < w]
        out[bi, y, xo, k] = how(vals)
    return out


def nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


# --- padding maths ----------------------------------------------------------------------------
def test_same_padding_stride2_dilation2():
    # effective filter (3-1)*2+1 = 5; out = ceil(7/2) = 4; needs (4-1)*2+5 = 11 = 7 + 4 -> 2 / 2.
    assert explicit_padding(7, 2, 3, SAME, dilation=2) == (2, 2)
    assert out_size(7, 3, 2, 2, 2, dilation=2) == 4


def test_same_padding_puts_odd_pixel_at_tail():
    assert explicit_padding(5, 1, 4, SAME) == (1, 2)
    assert explicit_padding(6, 2, 2, SAME) == (0, 0)
    assert explicit_padding(5, 1, 4, VALID) == (0, 0)
    assert out_size(5, 4, 1, 0, 0) == 2


def test_conv_same_stride2_dilation_output_shape():
    x = RNG.standard_normal((1, 7, 7, 2)).astype(np.float32)
    f = RNG.standard_normal((3, 3, 3, 2)).astype(np.float32)
    b = np.zeros(3, np.float32)
    ins = [tensor(x, T.TENSOR_FLOAT32), tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
    got = run(Op.CONV_2D, ins + conv_scalars(SAME, (2, 2), nchw=False, dilation=(2, 2)),
              out_like(T.TENSOR_FLOAT32))
    assert got.shape == (1, 4, 4, 3)
    np.testing.assert_allclose(got, ref_conv(x, f, b, (2, 2), (2, 2, 2, 2), (2, 2)), rtol=1e-5, atol=1e-5)


# --- CONV_2D float ----------------------------------------------------------------------------
@pytest.mark.parametrize("stride,pads,dilation", [
    ((1, 1), (0, 0, 0, 0), (1, 1)),
    ((2, 1), (1, 0, 2, 1), (1, 1)),
    ((1, 2), (2, 1, 0, 2), (2, 3)),
    ((3, 3), (1, 1, 1, 1), (1, 2)),
])
def test_conv_float_matches_direct_loops(stride, pads, dilation):
    x = RNG.standard_normal((2, 9, 8, 3)).astype(np.float32)
    f = RNG.standard_normal((4, 3, 2, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    ins = [tensor(x, T.TENSOR_FLOAT32), tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
    got = run(Op.CONV_2D, ins + conv_scalars(pads, stride, nchw=False, dilation=dilation),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_allclose(got, ref_conv(x, f, b, stride, pads, dilation), rtol=1e-5, atol=1e-5)


def test_conv_nchw_equals_transposed_nhwc():
    x = RNG.standard_normal((2, 6, 5, 3)).astype(np.float32)
    f = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    common = [tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
    a = run(Op.CONV_2D, [tensor(x, T.TENSOR_FLOAT32)] + common + conv_scalars(SAME, (2, 1), nchw=False),
            out_like(T.TENSOR_FLOAT32))
    c = run(Op.CONV_2D, [tensor(nchw(x), T.TENSOR_FLOAT32)] + common + conv_scalars(SAME, (2, 1), nchw=True),
            out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(c, nchw(a))


def test_conv_relu6_and_float16():
    x = (RNG.standard_normal((1, 4, 4, 2)) * 4).astype(np.float16)
    f = RNG.standard_normal((2, 2, 2, 2)).astype(np.float16)
    b = np.array([0.5, -0.5], np.float16)
    ins = [tensor(x, T.TENSOR_FLOAT16), tensor(f, T.TENSOR_FLOAT16), tensor(b, T.TENSOR_FLOAT16)]
    got = run(Op.CONV_2D, ins + conv_scalars(VALID, (1, 1), act=3), out_like(T.TENSOR_FLOAT16))
    assert got.dtype == np.float16
    want = np.clip(ref_conv(x, f, b, (1, 1), (0, 0, 0, 0)), 0, 6)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=5 * 2**-10, atol=5 * 2**-10)


# --- CONV_2D quantized -----------------------------------------------------------------------
def _requantized_reference(real: np.ndarray, out_scale: float, out_zp: int, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(real / out_scale) + out_zp, info.min, info.max)


def test_conv_per_channel_int8_matches_float_reference():
    x_q = RNG.integers(-128, 128, (1, 5, 5, 3)).astype(np.int8)
    f_q = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    in_scale, in_zp = 0.05, -3
    f_scales = (0.01, 0.02, 0.005, 0.04)
    b_real = RNG.standard_normal(4)
    b_q = np.round(b_real / (in_scale * np.array(f_scales))).astype(np.int32)
    out_scale, out_zp = 0.25, 5
    cq = SymmPerChannelQuantParams(f_scales, 0)
    ins = [tensor(x_q, T.TENSOR_QUANT8_ASYMM_SIGNED, in_scale, in_zp),
           tensor(f_q, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, channel_quant=cq),
           tensor(b_q, T.TENSOR_INT32, 0.0, 0)]
    got = run(Op.CONV_2D, ins + conv_scalars((1, 1, 1, 1), (2, 2)),
              out_like(T.TENSOR_QUANT8_ASYMM_SIGNED, out_scale, out_zp))
    x_real = (x_q.astype(np.float64) - in_zp) * in_scale
    f_real = f_q.astype(np.float64) * np.array(f_scales)[:, None, None, None]
    b_deq = b_q * in_scale * np.array(f_scales)
    want = _requantized_reference(ref_conv(x_real, f_real, b_deq, (2, 2), (1, 1, 1, 1)),
                                  out_scale, out_zp, np.int8)
    assert got.dtype == np.int8
    assert np.abs(got.astype(int) - want).max() <= 1


def test_conv_uint8_with_filter_zero_point_matches_float_reference():
    x_q = RNG.integers(0, 256, (2, 4, 6, 2)).astype(np.uint8)
    f_q = RNG.integers(0, 256, (3, 2, 3, 2)).astype(np.uint8)
    in_scale, in_zp, f_scale, f_zp = 0.1, 128, 0.02, 120
    bias_scale = float(np.float32(in_scale) * np.float32(f_scale))
    b_q = RNG.integers(-500, 500, 3).astype(np.int32)
    out_scale, out_zp = 0.5, 100
    ins = [tensor(x_q, T.TENSOR_QUANT8_ASYMM, in_scale, in_zp),
           tensor(f_q, T.TENSOR_QUANT8_ASYMM, f_scale, f_zp),
           tensor(b_q, T.TENSOR_INT32, bias_scale, 0)]
    got = run(Op.CONV_2D, ins + conv_scalars(SAME, (1, 2)),
              out_like(T.TENSOR_QUANT8_ASYMM, out_scale, out_zp))
    pl, pr = explicit_padding(6, 1, 3, SAME)
    pt, pb = explicit_padding(4, 2, 2, SAME)
    real = ref_conv((x_q - float(in_zp)) * in_scale, (f_q - float(f_zp)) * f_scale, b_q * bias_scale,
                    (1, 2), (pl, pr, pt, pb))
    want = _requantized_reference(real, out_scale, out_zp, np.uint8)
    assert np.abs(got.astype(int) - want).max() <= 1


# --- DEPTHWISE_CONV_2D ---------------------------------------------------------------------------
@pytest.mark.parametrize("multiplier,stride,pads,dilation", [
    (1, (1, 1), (0, 0, 0, 0), (1, 1)),
    (2, (2, 1), (1, 1, 0, 1), (1, 1)),
    (3, (1, 2), (2, 0, 1, 1), (2, 1)),
])
def test_depthwise_float_matches_direct_loops(multiplier, stride, pads, dilation):
    c = 2
    x = RNG.standard_normal((2, 7, 6, c)).astype(np.float32)
    f = RNG.standard_normal((1, 3, 2, c * multiplier)).astype(np.float32)
    b = RNG.standard_normal(c * multiplier).astype(np.float32)
    ins = [tensor(x, T.TENSOR_FLOAT32), tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
    got = run(Op.DEPTHWISE_CONV_2D,
              ins + conv_scalars(pads, stride, nchw=False, dilation=dilation, extra=(multiplier,)),
              out_like(T.TENSOR_FLOAT32))
    want = ref_depthwise(x, f, b, stride, pads, multiplier, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_nchw_equals_transposed_nhwc():
    x = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    f = RNG.standard_normal((1, 2, 2, 6)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    common = [tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
    args = dict(extra=(2,))
    a = run(Op.DEPTHWISE_CONV_2D, [tensor(x, T.TENSOR_FLOAT32)] + common
            + conv_scalars(SAME, (2, 2), nchw=False, **args), out_like(T.TENSOR_FLOAT32))
    c = run(Op.DEPTHWISE_CONV_2D, [tensor(nchw(x), T.TENSOR_FLOAT32)] + common
            + conv_scalars(SAME, (2, 2), nchw=True, **args), out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(c, nchw(a))


def test_depthwise_per_channel_uint8_matches_float_reference():
    x_q = RNG.integers(0, 256, (1, 4, 4, 2)).astype(np.uint8)
    f_q = RNG.integers(-127, 128, (1, 2, 2, 4)).astype(np.int8)
    in_scale, in_zp = 0.5, 127
    f_scales = (0.1, 0.05, 0.2, 0.01)
    b_q = RNG.integers(-50, 50, 4).astype(np.int32)
    out_scale, out_zp = 2.0, 120
    ins = [tensor(x_q, T.TENSOR_QUANT8_ASYMM, in_scale, in_zp),
           tensor(f_q, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, channel_quant=SymmPerChannelQuantParams(f_scales, 3)),
           tensor(b_q, T.TENSOR_INT32)]
    got = run(Op.DEPTHWISE_CONV_2D, ins + conv_scalars(VALID, (1, 1), extra=(2,)),
              out_like(T.TENSOR_QUANT8_ASYMM, out_scale, out_zp))
    real = ref_depthwise((x_q - float(in_zp)) * in_scale, f_q * np.array(f_scales),
                         b_q * in_scale * np.array(f_scales), (1, 1), (0, 0, 0, 0), 2)
    want = _requantized_reference(real, out_scale, out_zp, np.uint8)
    assert np.abs(got.astype(int) - want).max() <= 1


def test_depthwise_rejects_filter_dim0_not_one():
    x = np.zeros((1, 3, 3, 2), np.float32)
    f = np.zeros((2, 2, 2, 4), np.float32)
    ins = [tensor(x, T.TENSOR_FLOAT32), tensor(f, T.TENSOR_FLOAT32),
           tensor(np.zeros(4, np.float32), T.TENSOR_FLOAT32)]
    with pytest.raises(NnError) as e:
        run(Op.DEPTHWISE_CONV_2D, ins + conv_scalars((0, 0, 0, 0), (1, 1), extra=(2,), nchw=False),
            out_like(T.TENSOR_FLOAT32))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


# --- pooling ------------------------------------------------------------------------------------
def pool_scalars(pads, stride, filt, act=0, nchw=None):
    s = conv_scalars(pads, stride, act=act, extra=filt)
    return s if nchw is None else s + [flag(nchw)]


@pytest.mark.parametrize("op,how", [(Op.AVERAGE_POOL_2D, np.mean), (Op.MAX_POOL_2D, max)])
@pytest.mark.parametrize("pads,stride,filt", [
    ((0, 0, 0, 0), (1, 1), (2, 2)),
    ((1, 1, 1, 1), (2, 2), (3, 3)),
    ((2, 0, 1, 2), (1, 2), (3, 4)),
])
def test_pool_float_matches_direct_loops(op, how, pads, stride, filt):
    x = (RNG.standard_normal((2, 6, 7, 3)) - 3).astype(np.float32)  # mostly negative: padding must not win
    got = run(op, [tensor(x, T.TENSOR_FLOAT32)] + pool_scalars(pads, stride, filt, nchw=False),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_allclose(got, ref_pool(x, filt, stride, pads, how), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D])
def test_pool_nchw_equals_transposed_nhwc(op):
    x = RNG.standard_normal((1, 5, 6, 3)).astype(np.float32)
    a = run(op, [tensor(x, T.TENSOR_FLOAT32)] + pool_scalars(SAME, (2, 2), (3, 2), nchw=False),
            out_like(T.TENSOR_FLOAT32))
    c = run(op, [tensor(nchw(x), T.TENSOR_FLOAT32)] + pool_scalars(SAME, (2, 2), (3, 2), nchw=True),
            out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(c, nchw(a))


def test_average_pool_quant_rounds_half_away_from_zero():
    # uint8 windows {1, 2} -> 1.5 -> 2; int8 windows {-1, -2} -> -1.5 -> -2 and {-1, 0} -> -0.5 -> -1.
    u = np.array([1, 2, 3, 3], np.uint8).reshape(1, 1, 4, 1)
    got = run(Op.AVERAGE_POOL_2D, [tensor(u, T.TENSOR_QUANT8_ASYMM, 0.5, 0)] + pool_scalars(VALID, (2, 1), (2, 1)),
              out_like(T.TENSOR_QUANT8_ASYMM, 0.5, 0))
    assert got.reshape(-1).tolist() == [2, 3]
    s = np.array([-1, -2, -1, 0], np.int8).reshape(1, 1, 4, 1)
    got = run(Op.AVERAGE_POOL_2D, [tensor(s, T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 0)]
              + pool_scalars(VALID, (2, 1), (2, 1)), out_like(T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 0))
    assert got.reshape(-1).tolist() == [-2, -1]


def test_average_pool_excludes_padding_from_count():
    x = np.full((1, 3, 3, 1), 4.0, np.float32)
    got = run(Op.AVERAGE_POOL_2D, [tensor(x, T.TENSOR_FLOAT32)] + pool_scalars(SAME, (1, 1), (3, 3)),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(got, np.full((1, 3, 3, 1), 4.0, np.float32))


def test_max_pool_quant_applies_activation():
    x = np.array([10, 200, 50, 90], np.uint8).reshape(1, 2, 2, 1)
    # scale 0.1, zp 100: RELU6 range is [100, 160].
    got = run(Op.MAX_POOL_2D, [tensor(x, T.TENSOR_QUANT8_ASYMM, 0.1, 100)]
              + pool_scalars(VALID, (1, 1), (1, 1), act=3), out_like(T.TENSOR_QUANT8_ASYMM, 0.1, 100))
    assert got.reshape(-1).tolist() == [100, 160, 100, 100]


# --- zero-sized batches and compile-time behaviour ----------------------------------------------
def test_zero_sized_batch_conv_and_pool():
    x = np.zeros((0, 4, 4, 2), np.float32)
    f = RNG.standard_normal((3, 2, 2, 2)).astype(np.float32)
    b = np.zeros(3, np.float32)
    got = run(Op.CONV_2D, [tensor(x, T.TENSOR_FLOAT32), tensor(f, T.TENSOR_FLOAT32), tensor(b, T.TENSOR_FLOAT32)]
              + conv_scalars(VALID, (1, 1)), out_like(T.TENSOR_FLOAT32))
    assert got.shape == (0, 3, 3, 3)
    got = run(Op.MAX_POOL_2D, [tensor(x, T.TENSOR_FLOAT32)] + pool_scalars(VALID, (2, 2), (2, 2)),
              out_like(T.TENSOR_FLOAT32))
    assert got.shape == (0, 2, 2, 2)


def test_non_constant_parameter_is_unknown_at_compile_time():
    reg = find_operation(Op.CONV_2D)
    ins = [Tensor(T.TENSOR_FLOAT32, (1, 4, 4, 1)),
           Tensor(T.TENSOR_FLOAT32, (1, 2, 2, 1), value=np.ones((1, 2, 2, 1), np.float32)),
           Tensor(T.TENSOR_FLOAT32, (1,), value=np.zeros(1, np.float32)),
           i32(None), i32(1), i32(1), i32(0)]  # the padding scheme is not a constant
    ctx = OpContext(Op.CONV_2D, ins, [out_like(T.TENSOR_FLOAT32)], compile_time=True)
    reg.validate(ctx)
    with pytest.raises(UnknownValue):
        reg.prepare(ctx)


# --- validation errors ------------------------------------------------------------------------
def _float_conv_inputs():
    return [tensor(np.zeros((1, 4, 4, 1), np.float32), T.TENSOR_FLOAT32),
            tensor(np.ones((1, 2, 2, 1), np.float32), T.TENSOR_FLOAT32),
            tensor(np.zeros(1, np.float32), T.TENSOR_FLOAT32)]


@pytest.mark.parametrize("op,scalars", [
    (Op.CONV_2D, conv_scalars(VALID, (0, 1))),
    (Op.CONV_2D, conv_scalars((0, 0, -1, 0), (1, 1))),
    (Op.CONV_2D, conv_scalars(3, (1, 1))),
    (Op.CONV_2D, conv_scalars(VALID, (1, 1), act=7)),
    (Op.CONV_2D, conv_scalars(VALID, (1, 1), dilation=(0, 1))),
    (Op.DEPTHWISE_CONV_2D, conv_scalars(VALID, (1, 1), extra=(0,))),
    (Op.DEPTHWISE_CONV_2D, conv_scalars(VALID, (1, -2), extra=(1,))),
])
def test_bad_constant_parameter_is_invalid_argument(op, scalars):
    with pytest.raises(NnError) as e:
        run(op, _float_conv_inputs() + scalars, out_like(T.TENSOR_FLOAT32))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message


def test_bad_stride_given_at_execution_fails_in_prepare():
    reg = find_operation(Op.CONV_2D)
    ins = _float_conv_inputs() + conv_scalars(VALID, (1, 1))
    compile_ins = ins[:4] + [i32(None)] + ins[5:]
    reg.validate(OpContext(Op.CONV_2D, compile_ins, [out_like(T.TENSOR_FLOAT32)], compile_time=True))
    ins[4] = i32(0)
    with pytest.raises(NnError) as e:
        reg.prepare(OpContext(Op.CONV_2D, ins, [out_like(T.TENSOR_FLOAT32)]))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("op,filt", [(Op.MAX_POOL_2D, (0, 2)), (Op.AVERAGE_POOL_2D, (2, -1))])
def test_bad_pool_filter_is_invalid_argument(op, filt):
    with pytest.raises(NnError) as e:
        run(op, [tensor(np.zeros((1, 4, 4, 1), np.float32), T.TENSOR_FLOAT32)] + pool_scalars(VALID, (1, 1), filt),
            out_like(T.TENSOR_FLOAT32))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_wrong_input_count_and_layout_type():
    ins = _float_conv_inputs() + conv_scalars(VALID, (1, 1), nchw=False) + [i32(1)]  # 9 inputs
    with pytest.raises(NnError):
        run(Op.CONV_2D, ins, out_like(T.TENSOR_FLOAT32))
    ins = _float_conv_inputs() + conv_scalars(VALID, (1, 1)) + [i32(0)]  # INT32 where the layout BOOL goes
    with pytest.raises(NnError):
        run(Op.CONV_2D, ins, out_like(T.TENSOR_FLOAT32))


def test_quant_bias_scale_and_channel_dim_are_checked():
    x = tensor(np.zeros((1, 3, 3, 1), np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    f = tensor(np.ones((1, 2, 2, 1), np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    bad_bias = tensor(np.zeros(1, np.int32), T.TENSOR_INT32, 0.5, 0)  # should be 0.25
    with pytest.raises(NnError):
        run(Op.CONV_2D, [x, f, bad_bias] + conv_scalars(VALID, (1, 1)), out_like(T.TENSOR_QUANT8_ASYMM, 1.0, 0))
    pc = tensor(np.ones((1, 2, 2, 1), np.int8), T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                channel_quant=SymmPerChannelQuantParams((0.5,), 3))  # CONV_2D needs channel_dim 0
    with pytest.raises(NnError) as e:
        run(Op.CONV_2D, [x, pc, tensor(np.zeros(1, np.int32), T.TENSOR_INT32)] + conv_scalars(VALID, (1, 1)),
            out_like(T.TENSOR_QUANT8_ASYMM, 1.0, 0))
    assert "channel_dim" in e.value.message


def test_pool_quant_output_must_match_input_quantization():
    x = tensor(np.zeros((1, 2, 2, 1), np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    with pytest.raises(NnError):
        run(Op.MAX_POOL_2D, [x] + pool_scalars(VALID, (1, 1), (1, 1)), out_like(T.TENSOR_QUANT8_ASYMM, 0.25, 0))


def test_requantize_per_channel_agrees_with_per_tensor_requantize():
    from nnapi.ops._quant import requantize, requantize_per_channel
    acc = RNG.integers(-(1 << 20), 1 << 20, (6, 5)).astype(np.int64)
    multipliers = np.array([0.0003, 0.25, 0.5, 1.75, 3e-7])
    got = requantize_per_channel(acc, multipliers, 7)
    for c, m in enumerate(multipliers):
        np.testing.assert_array_equal(got[:, c], requantize(acc[:, c], float(m), 7))
