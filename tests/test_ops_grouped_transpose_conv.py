"""GROUPED_CONV_2D, TRANSPOSE_CONV_2D and L2_POOL_2D against hand-computed values and independent
nested-loop references (written from NeuralNetworks.h's definitions), plus validation errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op, SymmPerChannelQuantParams
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation

SAME, VALID = 1, 2
RNG = np.random.default_rng(4321)


# --- building operations ----------------------------------------------------------------------
def i32(v: int | None) -> Tensor:
    return Tensor(T.INT32, (), value=None if v is None else np.array(v, np.int32))


def flag(v: bool) -> Tensor:
    return Tensor(T.BOOL, (), value=np.array(v, np.bool_))


def tensor(value: np.ndarray, typ: T, scale: float = 0.0, zero_point: int = 0,
           channel_quant: SymmPerChannelQuantParams | None = None) -> Tensor:
    return Tensor(typ, tuple(value.shape), scale, zero_point, channel_quant, value)


def out_like(typ: T, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    return Tensor(typ, (0, 0, 0, 0), scale, zero_point)


def run(op: Op, inputs: list[Tensor], output: Tensor) -> np.ndarray:
    """validate at compile time (only scalars constant), then prepare and execute."""
    reg = find_operation(op)
    compile_inputs = [Tensor(t.type, t.dims, t.scale, t.zero_point, t.channel_quant,
                             t.value if t.type.is_scalar else None) for t in inputs]
    reg.validate(OpContext(op, compile_inputs, [output], compile_time=True))
    ctx = OpContext(op, inputs, [output])
    (dims,) = reg.prepare(ctx)
    (result,) = reg.execute(ctx)
    assert result.shape == tuple(dims)
    assert result.dtype == output.dtype
    return result


def expect_invalid(op: Op, inputs: list[Tensor], output: Tensor, words: str) -> None:
    with pytest.raises(NnError) as e:
        run(op, inputs, output)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message
    assert words in e.value.message, e.value.message


def nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def f32(a) -> Tensor:
    a = np.asarray(a, np.float32)
    return tensor(a, T.TENSOR_FLOAT32)


# --- independent references ---------------------------------------------------------------------
def ref_grouped(x, f, b, groups, stride, pads):
    """Direct grouped convolution, NHWC: x [N,H,W,C], f [O,FH,FW,C/groups]; pads (l, r, t, b)."""
    n, h, w, c = x.shape
    o, fh, fw, cg = f.shape
    og = o // groups
    sw, sh = stride
    pl, pr, pt, pb = pads
    oh = (h + pt + pb - fh) // sh + 1
    ow = (w + pl + pr - fw) // sw + 1
    out = np.zeros((n, oh, ow, o))
    for bi, y, xo, k in itertools.product(range(n), range(oh), range(ow), range(o)):
        g = k // og
        s = float(b[k])
        for i, j, d in itertools.product(range(fh), range(fw), range(cg)):
            iy, ix = y * sh - pt + i, xo * sw - pl + j
            if 0 <= iy < h and 0 <= ix < w:
                s += float(x[bi, iy, ix, g * cg + d]) * float(f[k, i, j, d])
        out[bi, y, xo, k] = s
    return out


def ref_transpose(x, f, b, stride, pads):
    """Direct transposed convolution, NHWC: every input pixel scatters input * filter into the
    output at (h*sh - pt + i, w*sw - pl + j); x [N,H,W,C], f [O,FH,FW,C]; pads (l, r, t, b)."""
    n, h, w, c = x.shape
    o, fh, fw, _ = f.shape
    sw, sh = stride
    pl, pr, pt, pb = pads
    oh = sh * (h - 1) + fh - pt - pb
    ow = sw * (w - 1) + fw - pl - pr
    out = np.zeros((n, oh, ow, o)) + np.asarray(b, np.float64)
    for bi, y, xi, k, i, j in itertools.product(range(n), range(h), range(w), range(o), range(fh), range(fw)):
        oy, ox = y * sh - pt + i, xi * sw - pl + j
        if 0 <= oy < oh and 0 <= ox < ow:
            out[bi, oy, ox, k] += float(np.dot(x[bi, y, xi].astype(np.float64), f[k, i, j].astype(np.float64)))
    return out


# --- GROUPED_CONV_2D -----------------------------------------------------------------------------
def grouped_scalars(pads, stride, groups, act=0, layout=False) -> list[Tensor]:
    head = [i32(v) for v in pads] if isinstance(pads, tuple) else [i32(pads)]
    return head + [i32(stride[0]), i32(stride[1]), i32(groups), i32(act), flag(layout)]


def test_grouped_hand_computed_1x1():
    # Two groups of one channel: out0 = 2*x0 (group 0), out1 = 3*x1 + 1 (group 1).
    x = np.array([[[[1, 10], [2, 20]]]], np.float32)          # [1,1,2,2]
    f = np.array([[[[2]]], [[[3]]]], np.float32)              # [2,1,1,1]
    got = run(Op.GROUPED_CONV_2D, [f32(x), f32(f), f32([0, 1])] + grouped_scalars(VALID, (1, 1), 2),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(got, [[[[2, 31], [4, 61]]]])


@pytest.mark.parametrize("layout", [False, True])
@pytest.mark.parametrize("pads,stride", [((1, 0, 0, 1), (2, 1)), ((0, 2, 1, 1), (1, 2))])
def test_grouped_float_matches_direct_loops(layout, pads, stride):
    groups = 3
    x = RNG.normal(size=(2, 5, 4, 6)).astype(np.float32)
    f = RNG.normal(size=(9, 2, 3, 2)).astype(np.float32)
    b = RNG.normal(size=9).astype(np.float32)
    xin = nchw(x) if layout else x
    got = run(Op.GROUPED_CONV_2D, [f32(xin), f32(f), f32(b)] + grouped_scalars(pads, stride, groups, layout=layout),
              out_like(T.TENSOR_FLOAT32))
    want = ref_grouped(x, f, b, groups, stride, pads)
    np.testing.assert_allclose(got, nchw(want) if layout else want, rtol=1e-5, atol=1e-5)


def test_grouped_many_groups_float16_implicit_same():
    # 12 groups takes the batched-matmul path; SAME with 3x3 stride 1 keeps the size.
    groups = 12
    x = RNG.normal(size=(1, 4, 4, 12)).astype(np.float16)
    f = RNG.normal(size=(24, 3, 3, 1)).astype(np.float16)
    b = RNG.normal(size=24).astype(np.float16)
    got = run(Op.GROUPED_CONV_2D, [tensor(x, T.TENSOR_FLOAT16), tensor(f, T.TENSOR_FLOAT16),
                                   tensor(b, T.TENSOR_FLOAT16)] + grouped_scalars(SAME, (1, 1), groups),
              out_like(T.TENSOR_FLOAT16))
    np.testing.assert_allclose(got, ref_grouped(x, f, b, groups, (1, 1), (1, 1, 1, 1)), rtol=5e-3, atol=5e-3)


def test_grouped_quant8_per_channel_unit_multiplier():
    # input scale 0.5 zp 10, filter channel scales (2, 4), output scale 1 / 2 -> multipliers 1 and 2
    # of (sum of (q - 10) * w + bias); output zero point 100.
    x = np.array([[[[12, 30]]]], np.uint8)                    # centred: 2, 20
    f = np.array([[[[3]]], [[[-1]]]], np.int8)
    cq = SymmPerChannelQuantParams(scales=(2.0, 4.0), channel_dim=0)
    bias = np.array([4, -3], np.int32)                        # scales 1.0 and 2.0
    inputs = [tensor(x, T.TENSOR_QUANT8_ASYMM, 0.5, 10),
              tensor(f, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, channel_quant=cq),
              tensor(bias, T.TENSOR_INT32, 0.0, 0)] + grouped_scalars(VALID, (1, 1), 2)
    got = run(Op.GROUPED_CONV_2D, inputs, out_like(T.TENSOR_QUANT8_ASYMM, 1.0, 100))
    # channel 0: (2*3 + 4) * 1 = 10 -> 110; channel 1: (20*-1 - 3) * 2 = -46 -> 54
    np.testing.assert_array_equal(got, [[[[110, 54]]]])


def test_grouped_zero_batch():
    x = np.zeros((0, 3, 3, 4), np.float32)
    f = np.ones((2, 3, 3, 2), np.float32)
    got = run(Op.GROUPED_CONV_2D, [f32(x), f32(f), f32([0, 0])] + grouped_scalars(SAME, (1, 1), 2),
              out_like(T.TENSOR_FLOAT32))
    assert got.shape == (0, 3, 3, 2)


def test_grouped_rejects_channel_mismatch():
    x = np.zeros((1, 3, 3, 5), np.float32)
    f = np.zeros((4, 1, 1, 2), np.float32)
    expect_invalid(Op.GROUPED_CONV_2D, [f32(x), f32(f), f32(np.zeros(4))] + grouped_scalars(VALID, (1, 1), 2),
                   out_like(T.TENSOR_FLOAT32), "groups")


def test_grouped_rejects_outputs_not_divisible():
    x = np.zeros((1, 3, 3, 4), np.float32)
    f = np.zeros((3, 1, 1, 2), np.float32)
    expect_invalid(Op.GROUPED_CONV_2D, [f32(x), f32(f), f32(np.zeros(3))] + grouped_scalars(VALID, (1, 1), 2),
                   out_like(T.TENSOR_FLOAT32), "not divisible")


def test_grouped_rejects_zero_groups_and_missing_layout():
    x = np.zeros((1, 3, 3, 4), np.float32)
    f = np.zeros((4, 1, 1, 2), np.float32)
    base = [f32(x), f32(f), f32(np.zeros(4))]
    expect_invalid(Op.GROUPED_CONV_2D, base + grouped_scalars(VALID, (1, 1), 0),
                   out_like(T.TENSOR_FLOAT32), "number of groups")
    # The layout flag is mandatory: 8 inputs (implicit without layout) are rejected.
    expect_invalid(Op.GROUPED_CONV_2D, base + grouped_scalars(VALID, (1, 1), 2)[:-1],
                   out_like(T.TENSOR_FLOAT32), "inputs")


# --- TRANSPOSE_CONV_2D ---------------------------------------------------------------------------
def explicit_scalars(pads, stride, act=0, layout=False) -> list[Tensor]:
    return [i32(v) for v in pads] + [i32(stride[0]), i32(stride[1]), i32(act), flag(layout)]


def implicit_scalars(shape, scheme, stride, act=0, layout=False, constant_shape=True) -> list[Tensor]:
    s = np.asarray(shape, np.int32)
    shape_t = Tensor(T.TENSOR_INT32, s.shape, value=s if constant_shape else None)
    return [shape_t, i32(scheme), i32(stride[0]), i32(stride[1]), i32(act), flag(layout)]


def test_transpose_hand_computed_stride2():
    # x = [1, 2] along the width, filter taps [1, 10, 100], stride 2: the taps of pixel 0 land at
    # 0..2, those of pixel 1 at 2..4; they overlap at 2 -> [1, 10, 100 + 2, 20, 200].
    x = np.array([1, 2], np.float32).reshape(1, 1, 2, 1)
    f = np.array([1, 10, 100], np.float32).reshape(1, 1, 3, 1)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(x), f32(f), f32([0.5])] + explicit_scalars((0, 0, 0, 0), (2, 1)),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(got.reshape(-1), [1.5, 10.5, 102.5, 20.5, 200.5])


def test_transpose_negative_right_padding_extends_the_output():
    # pads left 1, right -1: output width 2*1 + 3 - 1 + 1 = 5; the first tap of pixel 0 falls off
    # the left edge and the last column receives nothing but the bias.
    x = np.array([1, 2], np.float32).reshape(1, 1, 2, 1)
    f = np.array([1, 10, 100], np.float32).reshape(1, 1, 3, 1)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(x), f32(f), f32([0])] + explicit_scalars((1, -1, 0, 0), (2, 1)),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(got.reshape(-1), [10, 102, 20, 200, 0])


@pytest.mark.parametrize("layout", [False, True])
@pytest.mark.parametrize("pads,stride", [((0, 0, 0, 0), (1, 1)), ((1, 2, 2, 0), (2, 3)), ((2, -1, 0, -2), (3, 2))])
def test_transpose_float_matches_direct_loops(layout, pads, stride):
    x = RNG.normal(size=(2, 3, 4, 3)).astype(np.float32)
    f = RNG.normal(size=(5, 3, 4, 3)).astype(np.float32)
    b = RNG.normal(size=5).astype(np.float32)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(nchw(x) if layout else x), f32(f), f32(b)]
              + explicit_scalars(pads, stride, layout=layout), out_like(T.TENSOR_FLOAT32))
    want = ref_transpose(x, f, b, stride, pads)
    np.testing.assert_allclose(got, nchw(want) if layout else want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", [False, True])
def test_transpose_implicit_same_gives_stride_times_input(layout):
    # SAME: the requested output 1x6x8 with stride 2 and a 3x3 filter pads (0 head, 1 tail) on
    # both axes (calculateExplicitPaddingTransposeConv): out = 2*(3-1)+3-0-1 = 6 and 2*(4-1)+3-1 = 8.
    x = RNG.normal(size=(1, 3, 4, 2)).astype(np.float32)
    f = RNG.normal(size=(2, 3, 3, 2)).astype(np.float32)
    b = np.zeros(2, np.float32)
    shape = (1, 2, 6, 8) if layout else (1, 6, 8, 2)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(nchw(x) if layout else x), f32(f), f32(b)]
              + implicit_scalars(shape, SAME, (2, 2), layout=layout), out_like(T.TENSOR_FLOAT32))
    assert got.shape == shape
    want = ref_transpose(x, f, b, (2, 2), (0, 1, 0, 1))
    np.testing.assert_allclose(got, nchw(want) if layout else want, rtol=1e-5, atol=1e-5)


def test_transpose_implicit_valid_and_relu():
    x = np.array([1, -2], np.float32).reshape(1, 1, 2, 1)
    f = np.array([1, 1], np.float32).reshape(1, 1, 2, 1)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(x), f32(f), f32([0])] + implicit_scalars((1, 1, 3, 1), VALID, (1, 1), act=1),
              out_like(T.TENSOR_FLOAT32))
    np.testing.assert_array_equal(got.reshape(-1), [1, 0, 0])  # [1, -1, -2] through RELU


def test_transpose_quant8_signed_hand_computed():
    # Scales multiply to 1 (input 0.5, filter 2, output 1): out = acc + bias + zero point, clamped.
    x = np.array([3, -1], np.int8).reshape(1, 1, 2, 1)             # zp 1 -> 2, -2
    f = np.array([1, 2, 3], np.int8).reshape(1, 1, 3, 1)           # zp 0
    inputs = [tensor(x, T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 1), tensor(f, T.TENSOR_QUANT8_ASYMM_SIGNED, 2.0, 0),
              tensor(np.array([5], np.int32), T.TENSOR_INT32, 1.0, 0)] + explicit_scalars((0, 0, 0, 0), (1, 1))
    got = run(Op.TRANSPOSE_CONV_2D, inputs, out_like(T.TENSOR_QUANT8_ASYMM_SIGNED, 1.0, -10))
    # acc = [2, 4-2, 6-4, -6] = [2, 2, 2, -6]; + 5 - 10 -> [-3, -3, -3, -11]
    np.testing.assert_array_equal(got.reshape(-1), [-3, -3, -3, -11])


def test_transpose_zero_batch():
    x = np.zeros((0, 2, 2, 1), np.float32)
    f = np.ones((3, 2, 2, 1), np.float32)
    got = run(Op.TRANSPOSE_CONV_2D, [f32(x), f32(f), f32(np.zeros(3))] + explicit_scalars((0, 0, 0, 0), (2, 2)),
              out_like(T.TENSOR_FLOAT32))
    assert got.shape == (0, 4, 4, 3)


def test_transpose_output_shape_not_constant_is_unknown_at_compile_time():
    x = Tensor(T.TENSOR_FLOAT32, (1, 2, 2, 1))
    f = Tensor(T.TENSOR_FLOAT32, (1, 3, 3, 1), value=np.ones((1, 3, 3, 1), np.float32))
    b = Tensor(T.TENSOR_FLOAT32, (1,), value=np.zeros(1, np.float32))
    ctx = OpContext(Op.TRANSPOSE_CONV_2D, [x, f, b] + implicit_scalars((1, 4, 4, 1), SAME, (2, 2), constant_shape=False),
                    [out_like(T.TENSOR_FLOAT32)], compile_time=True)
    reg = find_operation(Op.TRANSPOSE_CONV_2D)
    reg.validate(ctx)
    with pytest.raises(UnknownValue):
        reg.prepare(ctx)


def test_transpose_rejects_bad_parameters():
    x = np.zeros((1, 2, 2, 2), np.float32)
    f = np.zeros((1, 3, 3, 2), np.float32)
    base = [f32(x), f32(f), f32([0])]
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + explicit_scalars((-1, 0, 0, 0), (1, 1)),
                   out_like(T.TENSOR_FLOAT32), "padding left")
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + explicit_scalars((0, 0, 0, 0), (1, 0)),
                   out_like(T.TENSOR_FLOAT32), "stride height")
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + implicit_scalars((1, 4, 4), SAME, (1, 1)),
                   out_like(T.TENSOR_FLOAT32), "output shape")
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + implicit_scalars((1, 4, 4, 1), 3, (1, 1)),
                   out_like(T.TENSOR_FLOAT32), "padding scheme")
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + explicit_scalars((0, 0, 0, 0), (1, 1))[:-1],
                   out_like(T.TENSOR_FLOAT32), "inputs")
    expect_invalid(Op.TRANSPOSE_CONV_2D, [f32(x), f32(np.zeros((1, 3, 3, 3))), f32([0])]
                   + explicit_scalars((0, 0, 0, 0), (1, 1)), out_like(T.TENSOR_FLOAT32), "channels")
    # Padding that swallows the whole output.
    expect_invalid(Op.TRANSPOSE_CONV_2D, base + explicit_scalars((2, 2, 0, 0), (1, 1)),
                   out_like(T.TENSOR_FLOAT32), "no output")


# --- L2_POOL_2D ---------------------------------------------------------------------------------
def pool_scalars(pads, stride, filt, act=0, layout=None) -> list[Tensor]:
    head = [i32(v) for v in pads] if isinstance(pads, tuple) else [i32(pads)]
    s = head + [i32(stride[0]), i32(stride[1]), i32(filt[0]), i32(filt[1]), i32(act)]
    return s + ([flag(layout)] if layout is not None else [])


def test_l2_pool_hand_computed():
    x = np.array([3, 4, 0, 0], np.float32).reshape(1, 2, 2, 1)
    got = run(Op.L2_POOL_2D, [f32(x)] + pool_scalars(VALID, (1, 1), (2, 2)), out_like(T.TENSOR_FLOAT32))
    np.testing.assert_allclose(got.reshape(-1), [2.5])  # sqrt((9 + 16) / 4)


def test_l2_pool_padding_not_counted():
    # SAME 3x3 over 2x2: every window holds the 4 real values, padding is left out of the mean.
    x = np.array([3, 4, 0, 0], np.float32).reshape(1, 2, 2, 1)
    got = run(Op.L2_POOL_2D, [f32(x)] + pool_scalars(SAME, (1, 1), (3, 3)), out_like(T.TENSOR_FLOAT32))
    np.testing.assert_allclose(got.reshape(-1), [2.5] * 4)
    # Explicit padding 1 on the right with a 2x1 window: [3, 4] -> sqrt(12.5), [4, pad] -> 4.
    got = run(Op.L2_POOL_2D, [f32(x)] + pool_scalars((0, 1, 0, 0), (1, 1), (2, 1)), out_like(T.TENSOR_FLOAT32))
    np.testing.assert_allclose(got.reshape(2, 2)[0], [np.sqrt(12.5), 4.0], rtol=1e-6)


def test_l2_pool_float16_nchw_relu6():
    x = np.array([[[[30, 40], [0, 0]]]], np.float16)  # NCHW [1,1,2,2]
    got = run(Op.L2_POOL_2D, [tensor(x, T.TENSOR_FLOAT16)] + pool_scalars(VALID, (1, 1), (2, 2), act=3, layout=True),
              out_like(T.TENSOR_FLOAT16))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.reshape(-1), [6.0])  # 25 clamped by RELU6


def test_l2_pool_rejects_quantized_input():
    x = np.zeros((1, 2, 2, 1), np.uint8)
    expect_invalid(Op.L2_POOL_2D, [tensor(x, T.TENSOR_QUANT8_ASYMM, 0.5, 0)] + pool_scalars(VALID, (1, 1), (2, 2)),
                   out_like(T.TENSOR_QUANT8_ASYMM, 0.5, 0), "TENSOR_QUANT8_ASYMM")
