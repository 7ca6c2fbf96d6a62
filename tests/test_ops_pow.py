"""POW: broadcasting, float16, NaN for negative bases with fractional exponents."""
from __future__ import annotations


import numpy as np

from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_pow_broadcast() -> None:
    base = _t(T.TENSOR_FLOAT32, [[2.0, 9.0], [4.0, 1.0]])
    exp = _t(T.TENSOR_FLOAT32, [3.0, 0.5])
    r = _run(Op.POW, [base, exp], Tensor(T.TENSOR_FLOAT32, (2, 2)))
    np.testing.assert_allclose(r, [[8.0, 3.0], [64.0, 1.0]], rtol=1e-6)


def test_pow_negative_base() -> None:
    r = _run(Op.POW, [_t(T.TENSOR_FLOAT16, [-2.0, -2.0]), _t(T.TENSOR_FLOAT16, [2.0, 0.5])],
             Tensor(T.TENSOR_FLOAT16, (2,)))
    assert r[0] == 4.0 and np.isnan(r[1])


def test_pow_rejects_int32_and_mixed_types() -> None:
    x = _t(T.TENSOR_INT32, [2])
    _invalid(Op.POW, [x, x], Tensor(T.TENSOR_INT32, (1,)), "input 0")
    _invalid(Op.POW, [_t(T.TENSOR_FLOAT32, [2.0]), _t(T.TENSOR_FLOAT16, [2.0])],
             Tensor(T.TENSOR_FLOAT32, (1,)), "input 1")
