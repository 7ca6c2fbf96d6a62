"""ABS, EXP, FLOOR, LOG, NEG, RSQRT, SIN, SQRT: types, int32 wrap-around, float16, rank limits."""
from __future__ import annotations

import math

import numpy as np

from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_abs_and_neg_int32_wrap_like_twos_complement() -> None:
    x = _t(T.TENSOR_INT32, [-3, 0, 5, -(2**31)])
    assert _run(Op.ABS, [x], Tensor(T.TENSOR_INT32, (4,))).tolist() == [3, 0, 5, -(2**31)]
    assert _run(Op.NEG, [x], Tensor(T.TENSOR_INT32, (4,))).tolist() == [3, 0, -5, -(2**31)]


def test_float_functions_hand_computed() -> None:
    x = _t(T.TENSOR_FLOAT32, [4.0, 0.25, 1.0])
    out = Tensor(T.TENSOR_FLOAT32, (3,))
    assert _run(Op.RSQRT, [x], out).tolist() == [0.5, 2.0, 1.0]
    assert _run(Op.SQRT, [x], out).tolist() == [2.0, 0.5, 1.0]
    assert _run(Op.LOG, [x], out)[2] == 0.0
    np.testing.assert_allclose(_run(Op.EXP, [_t(T.TENSOR_FLOAT32, [0.0, 1.0])], Tensor(T.TENSOR_FLOAT32, (2,))),
                               [1.0, math.e], rtol=1e-6)
    np.testing.assert_allclose(_run(Op.SIN, [_t(T.TENSOR_FLOAT32, [math.pi / 2])], Tensor(T.TENSOR_FLOAT32, (1,))),
                               [1.0], rtol=1e-6)


def test_floor_float16_rounds_toward_negative_infinity() -> None:
    x = _t(T.TENSOR_FLOAT16, [[-1.5, 2.5], [-0.0, 3.0]])
    r = _run(Op.FLOOR, [x], Tensor(T.TENSOR_FLOAT16, (2, 2)))
    assert r.dtype == np.float16 and r.tolist() == [[-2.0, 2.0], [-0.0, 3.0]]


def test_log_of_negative_is_nan_not_an_error() -> None:
    r = _run(Op.LOG, [_t(T.TENSOR_FLOAT32, [-1.0])], Tensor(T.TENSOR_FLOAT32, (1,)))
    assert np.isnan(r[0])


def test_exp_rejects_int32() -> None:
    _invalid(Op.EXP, [_t(T.TENSOR_INT32, [1])], Tensor(T.TENSOR_INT32, (1,)), "TENSOR_INT32")


def test_output_type_must_match_input() -> None:
    _invalid(Op.ABS, [_t(T.TENSOR_FLOAT32, [1.0])], Tensor(T.TENSOR_FLOAT16, (1,)), "output 0")


def test_floor_rejects_rank_5_but_sqrt_accepts_it() -> None:
    x = _t(T.TENSOR_FLOAT32, np.ones((1, 1, 1, 1, 2)))
    _invalid(Op.FLOOR, [x], Tensor(T.TENSOR_FLOAT32, (1, 1, 1, 1, 2)), "rank 5")
    assert _run(Op.SQRT, [x], Tensor(T.TENSOR_FLOAT32, (1, 1, 1, 1, 2))).shape == (1, 1, 1, 1, 2)
