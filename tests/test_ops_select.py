"""SELECT: same-shape selection, quantized inputs requantized to the output, shape checks."""
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

def test_select_float() -> None:
    c = _t(T.TENSOR_BOOL8, [True, False, True])
    r = _run(Op.SELECT, [c, _t(T.TENSOR_FLOAT32, [1.0, 2.0, 3.0]), _t(T.TENSOR_FLOAT32, [-1.0, -2.0, -3.0])],
             Tensor(T.TENSOR_FLOAT32, (3,)))
    assert r.tolist() == [1.0, -2.0, 3.0]


def test_select_quantized_requantizes_both_inputs() -> None:
    c = _t(T.TENSOR_BOOL8, [True, False])
    a = _t(T.TENSOR_QUANT8_ASYMM, [130, 130], scale=1.0, zero_point=128)  # 2, 2
    b = _t(T.TENSOR_QUANT8_ASYMM, [5, 7], scale=0.5, zero_point=1)        # 2, 3
    out = Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 0.25, 10)                   # real * 4 + 10
    assert _run(Op.SELECT, [c, a, b], out).tolist() == [18, 22]


def test_select_requires_equal_shapes() -> None:
    c = _t(T.TENSOR_BOOL8, [True, False])
    x = _t(T.TENSOR_INT32, [1, 2, 3])
    _invalid(Op.SELECT, [c, x, x], Tensor(T.TENSOR_INT32, (3,)), "condition", "input 1")
    _invalid(Op.SELECT, [_t(T.TENSOR_BOOL8, [True]), _t(T.TENSOR_INT32, [1]), _t(T.TENSOR_INT32, [1, 2])],
             Tensor(T.TENSOR_INT32, (1,)), "input 2")


def test_select_condition_must_be_bool8() -> None:
    x = _t(T.TENSOR_INT32, [1])
    _invalid(Op.SELECT, [x, x, x], Tensor(T.TENSOR_INT32, (1,)), "input 0", "TENSOR_BOOL8")
