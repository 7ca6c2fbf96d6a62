"""CAST: raw (non-dequantized) conversions, saturation to uint8, truncation, identity-only types."""
from __future__ import annotations



from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_float_to_quant8_saturates_then_truncates() -> None:
    x = _t(T.TENSOR_FLOAT32, [-3.7, 1.9, 254.99, 300.0])
    r = _run(Op.CAST, [x], Tensor(T.TENSOR_QUANT8_ASYMM, (4,), 1.0, 0))
    assert r.tolist() == [0, 1, 254, 255]


def test_int32_to_quant8_saturates() -> None:
    r = _run(Op.CAST, [_t(T.TENSOR_INT32, [-5, 7, 1000])], Tensor(T.TENSOR_QUANT8_ASYMM, (3,), 1.0, 0))
    assert r.tolist() == [0, 7, 255]


def test_float_to_int32_truncates_toward_zero() -> None:
    r = _run(Op.CAST, [_t(T.TENSOR_FLOAT16, [-1.75, 2.75])], Tensor(T.TENSOR_INT32, (2,)))
    assert r.tolist() == [-1, 2]


def test_quant8_cast_uses_raw_values_not_dequantized() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM, [3, 200], scale=0.5, zero_point=1)
    assert _run(Op.CAST, [x], Tensor(T.TENSOR_FLOAT32, (2,))).tolist() == [3.0, 200.0]


def test_identity_only_types() -> None:
    b = _t(T.TENSOR_BOOL8, [True, False])
    assert _run(Op.CAST, [b], Tensor(T.TENSOR_BOOL8, (2,))).tolist() == [True, False]
    s = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [-5], scale=1.0, zero_point=0)
    assert _run(Op.CAST, [s], Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (1,), 1.0, 0)).tolist() == [-5]
    _invalid(Op.CAST, [s], Tensor(T.TENSOR_FLOAT32, (1,)), "TENSOR_QUANT8_ASYMM_SIGNED", "TENSOR_FLOAT32")
    _invalid(Op.CAST, [_t(T.TENSOR_FLOAT32, [1.0])], Tensor(T.TENSOR_BOOL8, (1,)), "TENSOR_BOOL8")


def test_mismatching_shapes_rejected() -> None:
    x = _t(T.TENSOR_INT32, [[1, 2, 3], [4, 5, 6]])
    _invalid(Op.CAST, [x], Tensor(T.TENSOR_INT32, (100,)), "dimensions")
