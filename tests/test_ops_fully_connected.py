"""FULLY_CONNECTED: flattening, shape checks and the quantized accumulate / requantize path."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_REG = find_operation(Op.FULLY_CONNECTED)


def _run(x: Tensor, w: Tensor, b: Tensor, out: Tensor, activation: int = 0) -> np.ndarray:
    ins = [x, w, b, Tensor(T.INT32, (), value=np.array(activation, np.int32))]
    _REG.validate(OpContext(Op.FULLY_CONNECTED, ins, [out], compile_time=True))
    ctx = OpContext(Op.FULLY_CONNECTED, ins, [out])
    (dims,) = _REG.prepare(ctx)
    (y,) = _REG.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def _t(t: T, values, scale: float = 0.0, zp: int = 0) -> Tensor:
    v = np.asarray(values, Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zp, value=v)


def test_float_input_is_flattened_to_batches_of_input_size() -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)  # 2 batches of input_size 4
    w = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, -1]]
    y = _run(_t(T.TENSOR_FLOAT32, x), _t(T.TENSOR_FLOAT32, w), _t(T.TENSOR_FLOAT32, [0.5, 0, 0]),
             Tensor(T.TENSOR_FLOAT32, ()), activation=1)
    assert y.tolist() == [[0.5, 6.0, 0.0], [4.5, 22.0, 0.0]]  # RELU clamps -3 and -7


def test_quant8_accumulates_with_zero_points_and_bias() -> None:
    # input (q - 2) * 0.5 = [1, 2]; weights (q - 1) * 0.25 = [[1, 0.5]]; bias 4 * 0.125 = 0.5
    # 1 * 1 + 2 * 0.5 + 0.5 = 2.5 at output scale 0.5, zero point 10 -> 15.
    x = _t(T.TENSOR_QUANT8_ASYMM, [[4, 6]], 0.5, 2)
    w = _t(T.TENSOR_QUANT8_ASYMM, [[5, 3]], 0.25, 1)
    b = _t(T.TENSOR_INT32, [4], 0.125, 0)
    assert _run(x, w, b, Tensor(T.TENSOR_QUANT8_ASYMM, (), 0.5, 10)).tolist() == [[15]]


def test_quant8_signed_saturates() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [[100]], 1.0, 0)
    w = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [[100], [-100]], 1.0, 0)
    b = _t(T.TENSOR_INT32, [0, 0], 1.0, 0)
    assert _run(x, w, b, Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (), 1.0, 0)).tolist() == [[127, -128]]


def test_bias_scale_must_match_input_times_weights_scale() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM, [[1]], 0.5, 0)
    w = _t(T.TENSOR_QUANT8_ASYMM, [[1]], 0.5, 0)
    b = _t(T.TENSOR_INT32, [0], 0.5, 0)
    with pytest.raises(NnError) as e:
        _run(x, w, b, Tensor(T.TENSOR_QUANT8_ASYMM, (), 1.0, 0))
    assert "input 2" in e.value.message


def test_input_not_a_multiple_of_input_size_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(_t(T.TENSOR_FLOAT32, np.zeros((1, 5))), _t(T.TENSOR_FLOAT32, np.zeros((2, 3))),
             _t(T.TENSOR_FLOAT32, np.zeros(2)), Tensor(T.TENSOR_FLOAT32, ()))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_bias_length_must_equal_num_units() -> None:
    with pytest.raises(NnError):
        _run(_t(T.TENSOR_FLOAT32, np.zeros((1, 3))), _t(T.TENSOR_FLOAT32, np.zeros((2, 3))),
             _t(T.TENSOR_FLOAT32, np.zeros(3)), Tensor(T.TENSOR_FLOAT32, ()))


def test_zero_batch() -> None:
    y = _run(_t(T.TENSOR_FLOAT32, np.zeros((0, 3))), _t(T.TENSOR_FLOAT32, np.ones((2, 3))),
             _t(T.TENSOR_FLOAT32, np.zeros(2)), Tensor(T.TENSOR_FLOAT32, ()))
    assert y.shape == (0, 2)
