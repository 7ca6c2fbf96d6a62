"""ADD / MUL / SUB / DIV kernels: broadcasting, int32 semantics and TFLite's quantized rounding."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation


def _scalar(v: int) -> Tensor:
    return Tensor(T.INT32, (), value=np.array(v, np.int32))


def _tensor(t: T, values, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    v = np.asarray(values, dtype=Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zero_point, value=v)


def _run(op: Op, a: Tensor, b: Tensor, out: Tensor, activation: int = 0) -> np.ndarray:
    """validate (compile time), prepare and execute one operation; the output array."""
    reg = find_operation(op)
    ins = [a, b, _scalar(activation)]
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (result,) = reg.execute(ctx)
    assert result.shape == tuple(dims)
    assert result.dtype == out.dtype
    return result


def test_int32_div_floors_toward_negative_infinity() -> None:
    a = _tensor(T.TENSOR_INT32, [7, -7, 7, -7, 6, -6])
    b = _tensor(T.TENSOR_INT32, [2, 2, -2, -2, 3, 3])
    out = Tensor(T.TENSOR_INT32, (6,))
    assert _run(Op.DIV, a, b, out).tolist() == [3, -4, -4, 3, 2, -2]


def test_int32_div_by_zero_gives_zero() -> None:
    a = _tensor(T.TENSOR_INT32, [5, -5, 0])
    b = _tensor(T.TENSOR_INT32, [0, 0, 0])
    assert _run(Op.DIV, a, b, Tensor(T.TENSOR_INT32, (3,))).tolist() == [0, 0, 0]


def test_int32_add_wraps_like_two_complement() -> None:
    a = _tensor(T.TENSOR_INT32, [2**31 - 1])
    b = _tensor(T.TENSOR_INT32, [1])
    assert _run(Op.ADD, a, b, Tensor(T.TENSOR_INT32, (1,))).tolist() == [-(2**31)]


def test_int32_requires_activation_none() -> None:
    a = _tensor(T.TENSOR_INT32, [1])
    with pytest.raises(NnError) as e:
        _run(Op.SUB, a, a, Tensor(T.TENSOR_INT32, (1,)), activation=1)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "SUB" in e.value.message and "input 2" in e.value.message


def test_float_broadcasting_matches_elementwise_definition() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    y = np.array([[10.0], [20.0], [30.0], [40.0]], np.float32)
    got = _run(Op.SUB, _tensor(T.TENSOR_FLOAT32, x), _tensor(T.TENSOR_FLOAT32, y),
               Tensor(T.TENSOR_FLOAT32, (2, 4, 3)))
    assert got.shape == (2, 4, 3)
    for i in range(2):
        for j in range(4):
            for k in range(3):
                assert got[i, j, k] == x[i, 0, k] - y[j, 0]


def test_float16_result_with_relu6() -> None:
    a = _tensor(T.TENSOR_FLOAT16, [1.0, 4.0, -3.0])
    b = _tensor(T.TENSOR_FLOAT16, [2.0, 4.0, 1.0])
    got = _run(Op.MUL, a, b, Tensor(T.TENSOR_FLOAT16, (3,)), activation=3)
    assert got.dtype == np.float16
    assert got.tolist() == [2.0, 6.0, 0.0]  # 16 clamped to 6, -3 clamped to 0


def test_incompatible_shapes_rejected() -> None:
    a = _tensor(T.TENSOR_FLOAT32, np.zeros((2, 3)))
    b = _tensor(T.TENSOR_FLOAT32, np.zeros((4,)))
    with pytest.raises(NnError) as e:
        _run(Op.ADD, a, b, Tensor(T.TENSOR_FLOAT32, (2, 3)))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_zero_sized_broadcast() -> None:
    a = _tensor(T.TENSOR_FLOAT32, np.zeros((0, 2)))
    b = _tensor(T.TENSOR_FLOAT32, np.ones((1, 2)))
    assert _run(Op.ADD, a, b, Tensor(T.TENSOR_FLOAT32, (0, 2))).shape == (0, 2)


def test_compile_time_unknown_dimension_is_inferred_from_the_other_input() -> None:
    reg = find_operation(Op.ADD)
    a = Tensor(T.TENSOR_FLOAT32, (0, 3))  # first dimension not known yet
    b = Tensor(T.TENSOR_FLOAT32, (4, 1))
    ctx = OpContext(Op.ADD, [a, b, _scalar(0)], [Tensor(T.TENSOR_FLOAT32, ())], compile_time=True)
    assert tuple(reg.prepare(ctx)[0]) == (4, 3)
    ctx = OpContext(Op.ADD, [a, Tensor(T.TENSOR_FLOAT32, ()), _scalar(0)],  # input 1: unknown rank
                    [Tensor(T.TENSOR_FLOAT32, ())], compile_time=True)
    with pytest.raises(UnknownValue):
        reg.prepare(ctx)


def test_quant_add_exact_value() -> None:
    # 3 * 0.5 + 5 * 0.25 = 2.75 -> 3 at scale 1.0 (no tie, so any correct rounding agrees).
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [3], 0.5, 0)
    b = _tensor(T.TENSOR_QUANT8_ASYMM, [5], 0.25, 0)
    assert _run(Op.ADD, a, b, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 0)).tolist() == [3]


def test_quant_sub_rounds_ties_away_from_zero_like_gemmlowp() -> None:
    # (0 - 5) * 1.0 / 10.0 = -0.5: TFLite's fixed-point path ends in RoundingDivideByPOT,
    # which rounds the tie away from zero (-1), whereas round-half-even would give 0.
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [0], 1.0, 0)
    b = _tensor(T.TENSOR_QUANT8_ASYMM, [5], 1.0, 0)
    got = _run(Op.SUB, a, b, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 10.0, 120))
    assert got.tolist() == [119]


def test_quant8_signed_sub_with_different_scales() -> None:
    # 2 * 0.5 - (-3 + 1) * 0.25 = 1.0 + 0.5 = 1.5 -> 1.5 / 0.5 = 3 -> q = 3 + (-7) = -4.
    a = _tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.5, 0)
    b = _tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [-3], 0.25, -1)
    got = _run(Op.SUB, a, b, Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (1,), 0.5, -7))
    assert got.tolist() == [-4]


def test_quant_add_relu_clamps_at_output_zero_point() -> None:
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [0, 200], 1.0, 100)   # -100, 100
    b = _tensor(T.TENSOR_QUANT8_ASYMM, [100, 100], 1.0, 100)  # 0, 0
    got = _run(Op.ADD, a, b, Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0, 50), activation=1)
    assert got.tolist() == [50, 150]


def test_quant_mul_rescales_product() -> None:
    # (132 - 128) * 0.5 = 2.0, (112 - 100) * 0.25 = 3.0, product 6.0 at scale 1, zero point 10.
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [132], 0.5, 128)
    b = _tensor(T.TENSOR_QUANT8_ASYMM, [112], 0.25, 100)
    assert _run(Op.MUL, a, b, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 10)).tolist() == [16]


def test_quant_mul_output_scale_must_exceed_product_of_input_scales() -> None:
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [1], 0.5, 0)
    with pytest.raises(NnError) as e:
        _run(Op.MUL, a, a, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 0.25, 0))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "output 0" in e.value.message


def test_div_rejects_quantized_inputs() -> None:
    a = _tensor(T.TENSOR_QUANT8_ASYMM, [1], 0.5, 0)
    with pytest.raises(NnError, match="DIV"):
        _run(Op.DIV, a, a, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 0.5, 0))


def test_bad_activation_code_rejected() -> None:
    a = _tensor(T.TENSOR_FLOAT32, [1.0])
    with pytest.raises(NnError) as e:
        _run(Op.ADD, a, a, Tensor(T.TENSOR_FLOAT32, (1,)), activation=7)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
