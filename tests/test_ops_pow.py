"""POW: broadcasting, float16, NaN for negative bases with fractional exponents."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation


def _t(t: T, values, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    v = np.asarray(values, dtype=Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zero_point, value=v)


def _run(op: Op, ins: list[Tensor], out: Tensor) -> np.ndarray:
    """validate (compile time), prepare and execute one operation; the output array."""
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (result,) = reg.execute(ctx)
    assert result.shape == tuple(dims)
    assert result.dtype == out.dtype
    return result


def _invalid(op: Op, ins: list[Tensor], out: Tensor, *words: str) -> None:
    """The operation is rejected with INVALID_ARGUMENT naming the operation and `words`."""
    with pytest.raises(NnError) as e:
        _run(op, ins, out)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in (op.name,) + words:
        assert w in e.value.message, e.value.message

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
