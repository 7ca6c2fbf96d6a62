"""MAXIMUM / MINIMUM: broadcasting, int32, quantized inputs requantized to the output first."""
from __future__ import annotations


import numpy as np

from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_int32_broadcast() -> None:
    a = _t(T.TENSOR_INT32, [[1, 7], [4, -2]])
    b = _t(T.TENSOR_INT32, [3])
    assert _run(Op.MAXIMUM, [a, b], Tensor(T.TENSOR_INT32, (2, 2))).tolist() == [[3, 7], [4, 3]]
    assert _run(Op.MINIMUM, [a, b], Tensor(T.TENSOR_INT32, (2, 2))).tolist() == [[1, 3], [3, -2]]


def test_quantized_inputs_requantized_to_output_scale() -> None:
    a = _t(T.TENSOR_QUANT8_ASYMM, [10, 1], scale=1.0, zero_point=0)   # 10, 1
    b = _t(T.TENSOR_QUANT8_ASYMM, [4, 4], scale=2.0, zero_point=0)    # 8, 8
    out = Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 0.5, 0)                 # values * 2
    assert _run(Op.MAXIMUM, [a, b], out).tolist() == [20, 16]
    assert _run(Op.MINIMUM, [a, b], out).tolist() == [16, 2]


def test_requantization_rounds_half_away_from_zero_and_saturates() -> None:
    a = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [3, -3, 127], scale=1.0, zero_point=0)  # 3, -3, 127
    b = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [-128, -128, -128], scale=1.0, zero_point=0)
    out = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (3,), 2.0, 0)  # 1.5 -> 2, -1.5 -> -2, 63.5 -> 64
    assert _run(Op.MAXIMUM, [a, b], out).tolist() == [2, -2, 64]


def test_float16() -> None:
    r = _run(Op.MAXIMUM, [_t(T.TENSOR_FLOAT16, [1.5, -2.0]), _t(T.TENSOR_FLOAT16, [0.5, -1.0])],
             Tensor(T.TENSOR_FLOAT16, (2,)))
    assert r.dtype == np.float16 and r.tolist() == [1.5, -1.0]


def test_mixed_types_rejected() -> None:
    _invalid(Op.MINIMUM, [_t(T.TENSOR_FLOAT32, [1.0]), _t(T.TENSOR_FLOAT16, [1.0])],
             Tensor(T.TENSOR_FLOAT32, (1,)), "input 1")


def test_bool8_rejected() -> None:
    x = _t(T.TENSOR_BOOL8, [True])
    _invalid(Op.MAXIMUM, [x, x], Tensor(T.TENSOR_BOOL8, (1,)), "TENSOR_BOOL8")
