"""SELECT: same-shape selection, quantized inputs requantized to the output, shape checks."""
from __future__ import annotations



from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


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
