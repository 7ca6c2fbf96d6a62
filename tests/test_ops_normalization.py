"""L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION, LOG_SOFTMAX:
hand-computed results, Android's quantized L2 arithmetic, and parameter errors."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import nnapi
from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation, resolve
from nnapi.ops._quant import inv_sqrt_quantized_multiplier_exp


def _run(op: Op, ins: list[Tensor], out: Tensor) -> np.ndarray:
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def _t(a, t=T.TENSOR_FLOAT32, scale=0.0, zp=0) -> Tensor:
    v = np.asarray(a, Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zp, value=v)


def _s(v, t) -> Tensor:
    return Tensor(t, (), value=np.array(v, Tensor(t, ()).dtype))


# --- L2_NORMALIZATION ---------------------------------------------------------------------

def test_l2_float_default_last_axis() -> None:
    y = _run(Op.L2_NORMALIZATION, [_t([[3.0, 4.0], [0.0, 0.0]])], Tensor(T.TENSOR_FLOAT32, ()))
    assert y.reshape(-1).tolist() == pytest.approx([0.6, 0.8, 0.0, 0.0])


def test_l2_axis_zero() -> None:
    x = _t([[3.0, 1.0], [4.0, 0.0]])
    y = _run(Op.L2_NORMALIZATION, [x, _s(-2, T.INT32)], Tensor(T.TENSOR_FLOAT32, ()))
    assert y.reshape(-1).tolist() == pytest.approx([0.6, 1.0, 0.8, 0.0])


@pytest.mark.parametrize("t,zp_in,zp_out,axis", [(T.TENSOR_QUANT8_ASYMM, 100, 128, -1),
                                                  (T.TENSOR_QUANT8_ASYMM_SIGNED, -5, 0, -1),
                                                  (T.TENSOR_QUANT8_ASYMM_SIGNED, -5, 0, 0)])
def test_l2_quant_output_scale_one_128th(t: T, zp_in: int, zp_out: int, axis: int) -> None:
    a = np.array([zp_in + 3, zp_in - 4])
    x = _t(a if axis == -1 else a.reshape(2, 1), t, 0.1, zp_in)
    y = _run(Op.L2_NORMALIZATION, [x, _s(axis, T.INT32)], Tensor(t, (), 1.0 / 128, zp_out))
    want = [zp_out + 0.6 * 128, zp_out - 0.8 * 128]  # 76.8 -> 77, -102.4 -> -102
    assert np.abs(y.reshape(-1).astype(float) - want).max() <= 1


def test_inv_sqrt_multiplier_matches_reciprocal_square_root() -> None:
    for value in (2, 25, 1000, 123456, 1 << 30):
        m, shift = inv_sqrt_quantized_multiplier_exp(value, -1)
        assert shift <= 0
        # 5 fixed-point Newton steps, as TFLite takes: about 1e-6 relative error.
        assert m / 2.0 ** (31 - shift) == pytest.approx(1 / math.sqrt(value), rel=1e-5)
    assert inv_sqrt_quantized_multiplier_exp(0, -1) == ((1 << 31) - 1, 0)


def test_l2_quant_wrong_output_quantization_rejected() -> None:
    x = _t([1, 2], T.TENSOR_QUANT8_ASYMM, 0.1, 0)
    with pytest.raises(NnError) as e:
        _run(Op.L2_NORMALIZATION, [x], Tensor(T.TENSOR_QUANT8_ASYMM, (), 1.0 / 128, 0))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "zero point 128" in e.value.message


@pytest.mark.parametrize("axis", [2, -3])
def test_l2_bad_axis_rejected(axis: int) -> None:
    with pytest.raises(NnError) as e:
        _run(Op.L2_NORMALIZATION, [_t([[1.0, 2.0]]), _s(axis, T.INT32)], Tensor(T.TENSOR_FLOAT32, ()))
    assert "L2_NORMALIZATION" in e.value.message and "axis" in e.value.message


def test_l2_rank_five_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(Op.L2_NORMALIZATION, [_t(np.ones((1, 1, 1, 1, 2)))], Tensor(T.TENSOR_FLOAT32, ()))
    assert "rank" in e.value.message


# --- LOCAL_RESPONSE_NORMALIZATION ---------------------------------------------------------

def _lrn(x: Tensor, radius, bias, alpha, beta, axis=None) -> np.ndarray:
    s = T.FLOAT16 if x.type == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [x, _s(radius, T.INT32), _s(bias, s), _s(alpha, s), _s(beta, s)]
    if axis is not None:
        ins.append(_s(axis, T.INT32))
    return _run(Op.LOCAL_RESPONSE_NORMALIZATION, ins, Tensor(x.type, ()))


def test_lrn_window_clipped_at_edges() -> None:
    # squares 1, 4, 9; radius 1 windows: 1+4, 1+4+9, 4+9
    y = _lrn(_t([1.0, 2.0, 3.0]), 1, 1.0, 1.0, 0.5)
    assert y.tolist() == pytest.approx([1 / math.sqrt(6), 2 / math.sqrt(15), 3 / math.sqrt(14)], rel=1e-6)


def test_lrn_along_axis_zero_float16() -> None:
    x = _t([[1.0, 0.0], [2.0, 0.0], [3.0, 1.0]], T.TENSOR_FLOAT16)
    y = _lrn(x, 1, 1.0, 1.0, 0.5, axis=0)
    want = [1 / math.sqrt(6), 0.0, 2 / math.sqrt(15), 0.0, 3 / math.sqrt(14), 1 / math.sqrt(2)]
    assert y.astype(float).reshape(-1).tolist() == pytest.approx(want, rel=1e-3)


def test_lrn_bad_axis_rejected() -> None:
    with pytest.raises(NnError) as e:
        _lrn(_t([[1.0, 2.0]]), 1, 1.0, 1.0, 0.5, axis=2)
    assert "LOCAL_RESPONSE_NORMALIZATION" in e.value.message and "axis" in e.value.message


def test_lrn_float16_requires_float16_scalars() -> None:
    x = _t([1.0, 2.0], T.TENSOR_FLOAT16)
    ins = [x, _s(1, T.INT32), _s(1.0, T.FLOAT32), _s(1.0, T.FLOAT32), _s(0.5, T.FLOAT32)]
    with pytest.raises(NnError) as e:
        _run(Op.LOCAL_RESPONSE_NORMALIZATION, ins, Tensor(T.TENSOR_FLOAT16, ()))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "input 2" in e.value.message


INT32_MAX = 2**31 - 1


def test_lrn_params_clamp_a_radius_beyond_the_depth() -> None:
    x = _t(np.ones((1, 2, 2, 6), np.float32))
    ins = [x, _s(INT32_MAX, T.INT32), _s(1.0, T.FLOAT32), _s(0.5, T.FLOAT32), _s(0.75, T.FLOAT32)]
    p = resolve(OpContext(Op.LOCAL_RESPONSE_NORMALIZATION, ins, [Tensor(T.TENSOR_FLOAT32, (1, 2, 2, 6))],
                          compile_time=True))
    assert (p.axis, p.radius, p.bias, p.alpha, p.beta) == (3, 6, 1.0, 0.5, 0.75)
    ins[1] = _s(2, T.INT32)  # a radius inside the depth is kept
    assert resolve(OpContext(Op.LOCAL_RESPONSE_NORMALIZATION, ins, [Tensor(T.TENSOR_FLOAT32, ())])).radius == 2


def _lrn_model(shape: tuple[int, ...], radius: int) -> nnapi.Model:
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, shape)
    y = m.add_operand(T.TENSOR_FLOAT32, shape)
    scalars = []
    for v, t in ((radius, T.INT32), (1.0, T.FLOAT32), (0.5, T.FLOAT32), (0.75, T.FLOAT32)):
        scalars.append(m.add_operand(t))
        m.set_operand_value(scalars[-1], v)
    m.add_operation(Op.LOCAL_RESPONSE_NORMALIZATION, [x, *scalars], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("device", ["reference", "xla"])
def test_lrn_with_the_largest_radius_runs_at_once_on_every_driver(device) -> None:
    """Radius 2^31-1 (a legal INT32) once made xla build a 2^32-wide window: ~80 s in one native call
    that no deadline could stop. A radius past the depth sums the whole depth, so it is clamped."""
    shape = (1, 2, 2, 6)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    result: dict = {}

    def run() -> None:
        try:
            c = nnapi.Compilation(_lrn_model(shape, INT32_MAX), devices=[device], timeout=60).finish()
            result["y"] = c.execute([x], timeout=60)[0]
        except BaseException as e:  # reported below
            result["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)  # a watchdog against the unbounded native call, not a speed check
    assert not worker.is_alive(), f"LRN with radius {INT32_MAX} did not finish on {device}"
    assert "error" not in result, result.get("error")
    f = x.astype(np.float64)
    want = f * (1.0 + 0.5 * (f * f).sum(axis=-1, keepdims=True)) ** -0.75  # the window is the whole depth
    np.testing.assert_allclose(result["y"], want, rtol=1e-5, atol=1e-6)


# --- INSTANCE_NORMALIZATION ---------------------------------------------------------------

def _inorm(x: Tensor, gamma, beta, eps, nchw: bool) -> np.ndarray:
    s = T.FLOAT16 if x.type == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [x, _s(gamma, s), _s(beta, s), _s(eps, s), _s(nchw, T.BOOL)]
    return _run(Op.INSTANCE_NORMALIZATION, ins, Tensor(x.type, ()))


def test_instance_norm_nhwc_and_nchw_agree() -> None:
    # one channel [1, 2, 3, 4]: mean 2.5, variance 1.25; second channel constant 7.
    ch0 = np.array([1.0, 2.0, 3.0, 4.0])
    want0 = (ch0 - 2.5) * 2.0 / math.sqrt(1.25 + 0.25) + 1.0
    nhwc = np.stack([ch0, np.full(4, 7.0)], axis=-1).reshape(1, 2, 2, 2)
    y = _inorm(_t(nhwc), 2.0, 1.0, 0.25, False)
    assert y[..., 0].reshape(-1).tolist() == pytest.approx(want0.tolist())
    assert y[..., 1].reshape(-1).tolist() == pytest.approx([1.0] * 4)  # (7 - 7) * gamma / sigma + beta
    y2 = _inorm(_t(nhwc.transpose(0, 3, 1, 2)), 2.0, 1.0, 0.25, True)
    assert np.allclose(y2.transpose(0, 2, 3, 1), y)


def test_instance_norm_requires_rank_four() -> None:
    with pytest.raises(NnError) as e:
        _inorm(_t([[1.0, 2.0]]), 1.0, 0.0, 1e-4, False)
    assert "INSTANCE_NORMALIZATION" in e.value.message and "rank" in e.value.message


# --- LOG_SOFTMAX --------------------------------------------------------------------------

def _log_softmax(x: Tensor, beta, axis) -> np.ndarray:
    s = T.FLOAT16 if x.type == T.TENSOR_FLOAT16 else T.FLOAT32
    return _run(Op.LOG_SOFTMAX, [x, _s(beta, s), _s(axis, T.INT32)], Tensor(x.type, ()))


def test_log_softmax_with_beta() -> None:
    y = _log_softmax(_t([[1.0, 2.0, 3.0]]), 2.0, -1)
    lse = math.log(sum(math.exp(2 * v) for v in (1.0, 2.0, 3.0)))
    assert y[0].tolist() == pytest.approx([2 * v - lse for v in (1.0, 2.0, 3.0)], rel=1e-6)


def test_log_softmax_axis_zero_float16() -> None:
    y = _log_softmax(_t([[0.0, 5.0], [0.0, 5.0]], T.TENSOR_FLOAT16), 1.0, 0)
    assert y.astype(float).reshape(-1).tolist() == pytest.approx([-math.log(2)] * 4, rel=1e-3)


def test_log_softmax_bad_axis_rejected() -> None:
    with pytest.raises(NnError) as e:
        _log_softmax(_t([[1.0, 2.0]]), 1.0, 2)
    assert "LOG_SOFTMAX" in e.value.message and "axis" in e.value.message
