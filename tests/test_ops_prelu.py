"""PRELU: broadcast alpha, float16, TFLite fixed-point quantized path with separate scales."""
from __future__ import annotations



from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_float_broadcast_alpha() -> None:
    x = _t(T.TENSOR_FLOAT32, [[-2.0, 3.0], [-4.0, 0.0]])
    alpha = _t(T.TENSOR_FLOAT32, [0.5, 0.25])
    r = _run(Op.PRELU, [x, alpha], Tensor(T.TENSOR_FLOAT32, (2, 2)))
    assert r.tolist() == [[-1.0, 3.0], [-2.0, 0.0]]  # alpha per column: 0.5, 0.25


def test_quantized_positive_and_negative_paths() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM, [132, 124, 128], scale=0.5, zero_point=128)  # 2, -2, 0
    alpha = _t(T.TENSOR_QUANT8_ASYMM, [2], scale=0.25, zero_point=0)            # 0.5
    out = Tensor(T.TENSOR_QUANT8_ASYMM, (3,), 0.25, 128)  # 2 -> 136, -1 -> 124, 0 -> 128
    assert _run(Op.PRELU, [x, alpha], out).tolist() == [136, 124, 128]


def test_quantized_signed_saturates() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [127, -128], scale=1.0, zero_point=0)
    alpha = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], scale=1.0, zero_point=0)
    out = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 0.5, 0)  # 254 -> 127, -512*2 -> -128
    assert _run(Op.PRELU, [x, alpha], out).tolist() == [127, -128]


def test_alpha_type_must_match() -> None:
    _invalid(Op.PRELU, [_t(T.TENSOR_FLOAT32, [1.0]), _t(T.TENSOR_FLOAT16, [1.0])],
             Tensor(T.TENSOR_FLOAT32, (1,)), "input 1")


def test_alpha_must_broadcast() -> None:
    _invalid(Op.PRELU, [_t(T.TENSOR_FLOAT32, [1.0, 2.0, 3.0]), _t(T.TENSOR_FLOAT32, [1.0, 2.0])],
             Tensor(T.TENSOR_FLOAT32, (3,)), "broadcast")
