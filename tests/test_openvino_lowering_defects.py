"""Openvino lowerings that a differential fuzz found disagreeing with the reference driver (issue 32),
each checked on a one-operation model built with the public API: quantized REDUCE_MIN / REDUCE_MAX,
quantized PAD of a size-1 dimension, ELU with a negative alpha, TOPK_V2 ties, and NaN through RELU,
RELU1, RELU6 and fused activations (which the xla driver must compute alike)."""
from __future__ import annotations

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op

Q8AS, Q8A, F32, F16 = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16


def _scalar(m: nnapi.Model, value, kind: T = T.INT32) -> int:
    i = m.add_operand(kind)
    m.set_operand_value(i, value)
    return i


def _const(m: nnapi.Model, kind: T, value: np.ndarray) -> int:
    i = m.add_operand(kind, value.shape)
    m.set_operand_value(i, value)
    return i


def _one_op(op: Op, x: tuple, params, outs: list[tuple], *, scale: float = 0.0, zero_point: int = 0) -> nnapi.Model:
    """`op` on input x = (type, dims) and `params(m)` (its other inputs); outputs (type, dims), those of
    x's type with x's quantization."""
    m = nnapi.Model()
    xi = m.add_operand(x[0], x[1], scale, zero_point)
    ys = [m.add_operand(t, d, scale if t == x[0] else 0.0, zero_point if t == x[0] else 0) for t, d in outs]
    m.add_operation(op, [xi] + params(m), ys)
    m.identify_inputs_and_outputs([xi], ys)
    m.finish()
    return m


def _run(model: nnapi.Model, device: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run on `device` alone (it fails when the device does not claim the operation)."""
    return nnapi.Compilation(model, devices=[device]).finish().execute(inputs)


def _ints(kind: T, shape: tuple) -> np.ndarray:
    """Integers over the whole range of `kind`, the same for a shape whichever tests run."""
    info = np.iinfo(np.int8 if kind == Q8AS else np.uint8)
    rng = np.random.default_rng([32, *shape])
    return rng.integers(info.min, info.max + 1, shape).astype(info.dtype)


# --- 1. quantized REDUCE_MIN / REDUCE_MAX --------------------------------------------------------------
def _reduce_model(op: Op, kind: T, zero_point: int, shape: tuple, axes: list[int], keep: bool,
                  internal: bool) -> tuple[nnapi.Model, tuple]:
    """`op` over `axes` of a model input, or (`internal`) of the input plus a zero (an ADD's output)."""
    norm = [a % len(shape) for a in axes]
    out = tuple(1 if i in norm else d for i, d in enumerate(shape) if keep or i not in norm)
    m = nnapi.Model()
    x = m.add_operand(kind, shape, 0.5, zero_point)
    src = x
    if internal:
        zero = m.add_operand(kind, (1,), 0.5, zero_point)
        m.set_operand_value(zero, np.array([zero_point], np.int8 if kind == Q8AS else np.uint8))
        src = m.add_operand(kind, shape, 0.5, zero_point)
        m.add_operation(Op.ADD, [x, zero, _scalar(m, 0)], [src])
    y = m.add_operand(kind, out, 0.5, zero_point)
    m.add_operation(op, [src, _const(m, T.TENSOR_INT32, np.array(axes, np.int32)), _scalar(m, keep, T.BOOL)], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m, out


@pytest.mark.parametrize("kind,zero_point", [(Q8AS, -96), (Q8A, 30)])
@pytest.mark.parametrize("op", [Op.REDUCE_MIN, Op.REDUCE_MAX])
@pytest.mark.parametrize("internal", [False, True])
@pytest.mark.parametrize("shape,axes,keep", [((2, 3, 2), [1], False), ((2, 3, 2), [-2], True),
                                             ((3, 3, 3), [1], True), ((3, 1, 1), [2], True),
                                             ((2, 1, 2), [1, 2], False), ((4, 3, 2), [0, 2], True),
                                             ((4, 3), [0], True), ((2, 3, 4, 2), [1, 2], False)])
def test_quantized_reduce_min_max_gives_every_slice_its_extreme(kind, zero_point, op, internal, shape, axes, keep):
    """OpenVINO's CPU ReduceMin / ReduceMax with the output's FakeQuantize fused into it wrote the zero
    point to some or all slices (the fuzz: [-29, -86, -96, -96] for [-29, -86, -89, -62])."""
    m, out = _reduce_model(op, kind, zero_point, shape, axes, keep, internal)
    x = _ints(kind, shape)
    norm = tuple(a % len(shape) for a in axes)
    want = (np.min if op == Op.REDUCE_MIN else np.max)(x, axis=norm, keepdims=keep).reshape(out)
    (ref,) = _run(m, "reference", [x])
    (got,) = _run(m, "openvino", [x])
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, ref)


# --- 2. quantized PAD / PAD_V2 of a size-1 dimension -------------------------------------------------
@pytest.mark.parametrize("kind,zero_point", [(Q8AS, -55), (Q8A, 179)])
@pytest.mark.parametrize("op", [Op.PAD, Op.PAD_V2])
@pytest.mark.parametrize("shape,pads", [((1,), [[1, 1]]), ((1, 2), [[2, 1], [0, 0]]), ((3, 1), [[0, 0], [1, 2]]),
                                        ((1, 2, 2, 1), [[0, 0], [0, 0], [0, 0], [0, 1]]),
                                        ((1, 1, 1, 3), [[0, 0], [1, 0], [0, 0], [0, 0]]),
                                        ((2, 1), [[1, 0], [0, 2]])])
def test_quantized_pad_of_a_size_one_dimension_pads_with_the_pad_value(kind, zero_point, op, shape, pads):
    """OpenVINO's low-precision Pad rewrite pads the integers with 0 and, for a padded dimension of size
    1, keeps the zero point's Subtract: the padding came out as integer 0, not the zero point (PAD) or
    the given value (PAD_V2)."""
    value = int(np.iinfo(np.int8 if kind == Q8AS else np.uint8).min + 7)
    out = tuple(d + sum(p) for d, p in zip(shape, pads))

    def params(m: nnapi.Model) -> list[int]:
        p = [_const(m, T.TENSOR_INT32, np.array(pads, np.int32))]
        return p + [_scalar(m, value)] if op == Op.PAD_V2 else p

    m = _one_op(op, (kind, shape), params, [(kind, out)], scale=0.25, zero_point=zero_point)
    x = _ints(kind, shape)
    fill = value if op == Op.PAD_V2 else zero_point
    want = np.pad(x, pads, constant_values=fill)
    (ref,) = _run(m, "reference", [x])
    (got,) = _run(m, "openvino", [x])
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, ref)


# --- 3. ELU with a negative alpha ------------------------------------------------------------------------
def _elu_model(kind: T, n: int, alpha: float) -> nnapi.Model:
    akind = T.FLOAT16 if kind == F16 else T.FLOAT32
    return _one_op(Op.ELU, (kind, (n,)), lambda m: [_scalar(m, alpha, akind)], [(kind, (n,))])


def test_elu_with_a_negative_alpha_follows_the_nnapi_formula():
    """max(0, x) + min(0, alpha * (exp(x) - 1)), not OpenVINO's Elu (x > 0 ? x : alpha * (exp(x) - 1)),
    which differs from it for alpha < 0 (the fuzz: [0.950, 0.632, 0.5, 2.0])."""
    x = np.array([-3.0, -1.0, 0.5, 2.0], np.float32)
    m = _elu_model(F32, 4, -1.0)
    (got,) = _run(m, "openvino", [x])
    np.testing.assert_allclose(got, [0.0, 0.0, -0.1487212, -4.3890561], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", [F32, F16])
@pytest.mark.parametrize("alpha", [-2.5, -0.5, 0.0, 1.0, 1.75])
def test_elu_matches_reference_for_any_alpha(kind, alpha):
    x = np.concatenate([np.linspace(-6, 6, 37), [0.0, -0.0, 1e-6, -1e-6]]).astype(np.float16 if kind == F16 else np.float32)
    m = _elu_model(kind, x.size, alpha)
    (ref,) = _run(m, "reference", [x])
    (got,) = _run(m, "openvino", [x])
    tol = 2e-3 if kind == F16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol)


# --- 4. TOPK_V2 ties -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [F32, F16, T.TENSOR_INT32, Q8A, Q8AS])
def test_topk_orders_equal_values_by_decreasing_index_as_the_reference(kind):
    """The reference (Android's sort of (value, index) pairs, reversed) puts the higher index first
    among equal values; OpenVINO's stable TopK put the lower one first."""
    rows = np.array([[1, 2, 2, 0, 2, 1], [3, 3, 3, 3, 3, 3], [0, 1, 0, 1, 0, 1]])
    x = rows.astype({F32: np.float32, F16: np.float16, T.TENSOR_INT32: np.int32, Q8A: np.uint8,
                     Q8AS: np.int8}[kind])
    quant = kind in (Q8A, Q8AS)
    for k in (1, 3, 6):
        m = _one_op(Op.TOPK_V2, (kind, x.shape), lambda m: [_scalar(m, k)],
                    [(kind, (3, k)), (T.TENSOR_INT32, (3, k))], scale=0.5 if quant else 0.0,
                    zero_point=2 if quant else 0)
        ref = _run(m, "reference", [x])
        got = _run(m, "openvino", [x])
        if k == 3:
            np.testing.assert_array_equal(ref[1], [[4, 2, 1], [5, 4, 3], [5, 3, 1]])
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


# --- 5. NaN through RELU, RELU1, RELU6 and fused activations ------------------------------------------
#: Where each activation code takes NaN: the low end of its clamp (`nnapi.ops.activation_range`).
NAN_TO = {1: 0.0, 2: -1.0, 3: 0.0}
DRIVERS = ["openvino", "xla"]


def _agree(m: nnapi.Model, inputs: list[np.ndarray], want: np.ndarray) -> None:
    """The reference gives `want` (exactly), openvino and xla what the reference gives."""
    (ref, *_) = _run(m, "reference", inputs)
    np.testing.assert_allclose(ref.astype(np.float32), want, rtol=1e-6, atol=1e-6)
    for device in DRIVERS:
        (got, *_) = _run(m, device, inputs)
        assert not np.isnan(got).any(), device
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3,
                                   err_msg=device)


@pytest.mark.parametrize("kind", [F32, F16])
@pytest.mark.parametrize("op,code", [(Op.RELU, 1), (Op.RELU1, 2), (Op.RELU6, 3)])
def test_nan_through_relu_becomes_the_low_end_of_the_clamp(kind, op, code):
    """The spec's max(0, input) / min(1.f, max(-1.f, input)) as C evaluates them (std::max, fmax) and as
    Android's reference kernel does: NaN -> 0 (RELU, RELU6) or -1 (RELU1), on every driver."""
    dtype = np.float16 if kind == F16 else np.float32
    x = np.array([np.nan, -np.nan, -2.0, 0.5, 3.0, 7.0], dtype)
    lo, hi = {1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}[code]
    want = np.clip(np.nan_to_num(x.astype(np.float32), nan=lo), lo, hi)
    _agree(_one_op(op, (kind, x.shape), lambda m: [], [(kind, x.shape)]), [x], want)


def _fused(op: Op, code: int) -> tuple[nnapi.Model, list[np.ndarray], np.ndarray]:
    """`op` with fused activation `code` on a float32 input holding a NaN; (model, inputs, activation-free
    result with NaN where the input's NaN reaches)."""
    m = nnapi.Model()
    if op == Op.ADD:
        a, b, y = (m.add_operand(F32, (4,)) for _ in range(3))
        m.add_operation(Op.ADD, [a, b, _scalar(m, code)], [y])
        m.identify_inputs_and_outputs([a, b], [y])
        va, vb = np.array([np.nan, -3.0, 0.25, 8.0], np.float32), np.full(4, 0.5, np.float32)
        m.finish()
        return m, [va, vb], va + vb
    x = np.array([np.nan, -3.0, 0.25, 8.0], np.float32)
    if op == Op.CONV_2D:
        xi, y = m.add_operand(F32, (1, 2, 2, 1)), m.add_operand(F32, (1, 2, 2, 1))
        w = _const(m, F32, np.full((1, 1, 1, 1), 2.0, np.float32))
        b = _const(m, F32, np.zeros(1, np.float32))
        m.add_operation(op, [xi, w, b] + [_scalar(m, v) for v in (0, 0, 0, 0, 1, 1, code)], [y])
        x, want = x.reshape(1, 2, 2, 1), (2 * x).reshape(1, 2, 2, 1)
    elif op == Op.FULLY_CONNECTED:
        xi, y = m.add_operand(F32, (4, 1)), m.add_operand(F32, (4, 1))
        w, b = _const(m, F32, np.ones((1, 1), np.float32)), _const(m, F32, np.zeros(1, np.float32))
        m.add_operation(op, [xi, w, b, _scalar(m, code)], [y])
        x, want = x.reshape(4, 1), x.reshape(4, 1)
    elif op == Op.AVERAGE_POOL_2D:
        xi, y = m.add_operand(F32, (1, 2, 2, 1)), m.add_operand(F32, (1, 2, 2, 1))
        m.add_operation(op, [xi] + [_scalar(m, v) for v in (0, 0, 0, 0, 1, 1, 1, 1, code)], [y])
        x, want = x.reshape(1, 2, 2, 1), x.reshape(1, 2, 2, 1)
    else:  # RNN: h = activation(x W^T + b + h R^T), one unit
        xi, h_out, y = m.add_operand(F32, (4, 1)), m.add_operand(F32, (4, 1)), m.add_operand(F32, (4, 1))
        ones, zero = np.ones((1, 1), np.float32), np.zeros(1, np.float32)
        h = _const(m, F32, np.zeros((4, 1), np.float32))
        m.add_operation(op, [xi, _const(m, F32, ones), _const(m, F32, ones), _const(m, F32, zero), h,
                             _scalar(m, code)], [h_out, y])
        x, want = x.reshape(4, 1), x.reshape(4, 1)
    m.identify_inputs_and_outputs([xi], [y])
    m.finish()
    return m, [x], want


@pytest.mark.parametrize("op", [Op.ADD, Op.CONV_2D, Op.FULLY_CONNECTED, Op.AVERAGE_POOL_2D, Op.RNN])
@pytest.mark.parametrize("code", [1, 2, 3])
def test_nan_through_a_fused_activation_becomes_the_low_end_of_the_clamp(op, code):
    """A fused RELU / RELU1 / RELU6 (and the RNN's cell activation) is the RELU operation's clamp."""
    m, inputs, raw = _fused(op, code)
    lo, hi = {1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}[code]
    _agree(m, inputs, np.clip(np.nan_to_num(raw, nan=NAN_TO[code]), lo, hi))
