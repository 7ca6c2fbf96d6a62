"""RESHAPE: -1 inference, element-count checks and compile-time shape inference."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation

_REG = find_operation(Op.RESHAPE)


def _inputs(x: np.ndarray, shape: list[int], t: T = T.TENSOR_FLOAT32) -> list[Tensor]:
    s = np.asarray(shape, np.int32)
    return [Tensor(t, x.shape, value=x), Tensor(T.TENSOR_INT32, s.shape, value=s)]


def _run(x: np.ndarray, shape: list[int]) -> np.ndarray:
    ins = _inputs(x, shape)
    out = [Tensor(T.TENSOR_FLOAT32, ())]
    _REG.validate(OpContext(Op.RESHAPE, ins, out, compile_time=True))
    ctx = OpContext(Op.RESHAPE, ins, out)
    (dims,) = _REG.prepare(ctx)
    (y,) = _REG.execute(ctx)
    assert y.shape == tuple(dims)
    return y


def test_minus_one_is_inferred_from_element_count() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = _run(x, [-1, 4])
    assert y.shape == (6, 4)
    assert y.reshape(-1).tolist() == x.reshape(-1).tolist()  # row-major order kept
    assert _run(x, [2, -1]).shape == (2, 12)


def test_two_minus_ones_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(np.zeros((2, 3), np.float32), [-1, -1])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "RESHAPE" in e.value.message and "input 1" in e.value.message


def test_element_count_mismatch_rejected() -> None:
    with pytest.raises(NnError):
        _run(np.zeros((2, 3), np.float32), [4, 2])
    with pytest.raises(NnError):  # 6 elements cannot fill a multiple of 4
        _run(np.zeros((2, 3), np.float32), [-1, 4])


def test_zero_sized_input_with_minus_one() -> None:
    assert _run(np.zeros((0, 4), np.float32), [-1, 2]).shape == (0, 2)


def test_non_constant_shape_cannot_be_inferred_at_compile_time() -> None:
    x = Tensor(T.TENSOR_FLOAT32, (2, 3))
    shape = Tensor(T.TENSOR_INT32, (2,))  # model input: no value yet
    with pytest.raises(UnknownValue):
        _REG.prepare(OpContext(Op.RESHAPE, [x, shape], [Tensor(T.TENSOR_FLOAT32, ())], compile_time=True))


def test_quantized_output_must_keep_quantization() -> None:
    x = np.zeros((2, 2), np.uint8)
    ins = [Tensor(T.TENSOR_QUANT8_ASYMM, (2, 2), 0.5, 3, value=x),
           Tensor(T.TENSOR_INT32, (1,), value=np.array([4], np.int32))]
    out = [Tensor(T.TENSOR_QUANT8_ASYMM, (4,), 0.25, 3)]
    with pytest.raises(NnError) as e:
        _REG.validate(OpContext(Op.RESHAPE, ins, out, compile_time=True))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
