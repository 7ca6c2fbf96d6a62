"""Comparisons and logical ops: broadcasting, quantized inputs compared on real values, BOOL8."""
from __future__ import annotations



from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_quantized_inputs_with_different_scales_compare_real_values() -> None:
    a = _t(T.TENSOR_QUANT8_ASYMM, [2, 2, 2], scale=1.0, zero_point=0)    # 2, 2, 2
    b = _t(T.TENSOR_QUANT8_ASYMM, [4, 3, 5], scale=0.5, zero_point=0)    # 2, 1.5, 2.5
    out = Tensor(T.TENSOR_BOOL8, (3,))
    assert _run(Op.EQUAL, [a, b], out).tolist() == [True, False, False]
    assert _run(Op.GREATER, [a, b], out).tolist() == [False, True, False]
    assert _run(Op.LESS_EQUAL, [a, b], out).tolist() == [True, False, True]


def test_signed_quantized_zero_points() -> None:
    a = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [-10], scale=0.5, zero_point=-12)  # 1.0
    b = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [3], scale=0.25, zero_point=-1)    # 1.0
    assert _run(Op.NOT_EQUAL, [a, b], Tensor(T.TENSOR_BOOL8, (1,))).tolist() == [False]
    assert _run(Op.GREATER_EQUAL, [a, b], Tensor(T.TENSOR_BOOL8, (1,))).tolist() == [True]


def test_broadcasting_to_the_larger_shape() -> None:
    a = _t(T.TENSOR_INT32, [[1], [5]])
    b = _t(T.TENSOR_INT32, [0, 3, 6])
    r = _run(Op.LESS, [a, b], Tensor(T.TENSOR_BOOL8, (2, 3)))
    assert r.tolist() == [[False, True, True], [False, False, True]]


def test_bool8_comparison_orders_false_before_true() -> None:
    a = _t(T.TENSOR_BOOL8, [True, False, True])
    b = _t(T.TENSOR_BOOL8, [False, False, True])
    assert _run(Op.GREATER, [a, b], Tensor(T.TENSOR_BOOL8, (3,))).tolist() == [True, False, False]


def test_comparison_output_must_be_bool8() -> None:
    a = _t(T.TENSOR_FLOAT32, [1.0])
    _invalid(Op.EQUAL, [a, a], Tensor(T.TENSOR_FLOAT32, (1,)), "output 0", "TENSOR_BOOL8")


def test_comparison_inputs_must_share_type() -> None:
    _invalid(Op.LESS, [_t(T.TENSOR_FLOAT32, [1.0]), _t(T.TENSOR_INT32, [1])],
             Tensor(T.TENSOR_BOOL8, (1,)), "input 1")


def test_incompatible_shapes_are_rejected() -> None:
    _invalid(Op.GREATER, [_t(T.TENSOR_FLOAT32, [1.0, 2.0]), _t(T.TENSOR_FLOAT32, [1.0, 2.0, 3.0])],
             Tensor(T.TENSOR_BOOL8, (3,)), "broadcast")


def test_logical_and_or_broadcast_and_not() -> None:
    a = _t(T.TENSOR_BOOL8, [[True], [False]])
    b = _t(T.TENSOR_BOOL8, [True, False])
    out = Tensor(T.TENSOR_BOOL8, (2, 2))
    assert _run(Op.LOGICAL_AND, [a, b], out).tolist() == [[True, False], [False, False]]
    assert _run(Op.LOGICAL_OR, [a, b], out).tolist() == [[True, True], [True, False]]
    assert _run(Op.LOGICAL_NOT, [b], Tensor(T.TENSOR_BOOL8, (2,))).tolist() == [False, True]


def test_logical_ops_require_bool8() -> None:
    x = _t(T.TENSOR_INT32, [1])
    _invalid(Op.LOGICAL_AND, [x, x], Tensor(T.TENSOR_BOOL8, (1,)), "input 0", "TENSOR_INT32")
    _invalid(Op.LOGICAL_NOT, [_t(T.TENSOR_BOOL8, [True])], Tensor(T.TENSOR_INT32, (1,)), "output 0")
