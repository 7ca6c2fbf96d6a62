"""SOFTMAX: definition, beta, axis handling and the fixed quantized output scale."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_REG = find_operation(Op.SOFTMAX)


def _run(x: Tensor, beta: float, out: Tensor, axis: int | None = None) -> np.ndarray:
    beta_t = T.FLOAT16 if x.type == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [x, Tensor(beta_t, (), value=np.array(beta, Tensor(beta_t, ()).dtype))]
    if axis is not None:
        ins.append(Tensor(T.INT32, (), value=np.array(axis, np.int32)))
    _REG.validate(OpContext(Op.SOFTMAX, ins, [out], compile_time=True))
    ctx = OpContext(Op.SOFTMAX, ins, [out])
    (dims,) = _REG.prepare(ctx)
    (y,) = _REG.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def _f32(a) -> Tensor:
    v = np.asarray(a, np.float32)
    return Tensor(T.TENSOR_FLOAT32, v.shape, value=v)


def test_float_softmax_with_beta() -> None:
    y = _run(_f32([[1.0, 2.0, 3.0]]), 0.5, Tensor(T.TENSOR_FLOAT32, ()))
    e = [math.exp(0.5 * v) for v in (1.0, 2.0, 3.0)]
    assert y[0].tolist() == pytest.approx([v / sum(e) for v in e], rel=1e-6)


def test_axis_zero_normalises_columns() -> None:
    y = _run(_f32([[0.0, 5.0], [0.0, 5.0]]), 1.0, Tensor(T.TENSOR_FLOAT32, ()), axis=0)
    assert y.tolist() == [[0.5, 0.5], [0.5, 0.5]]
    y = _run(_f32([[0.0, 5.0], [0.0, 5.0]]), 1.0, Tensor(T.TENSOR_FLOAT32, ()), axis=-2)
    assert y.tolist() == [[0.5, 0.5], [0.5, 0.5]]


@pytest.mark.parametrize("axis", [2, -3])
def test_bad_axis_rejected(axis: int) -> None:
    with pytest.raises(NnError) as e:
        _run(_f32([[1.0, 2.0]]), 1.0, Tensor(T.TENSOR_FLOAT32, ()), axis=axis)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "SOFTMAX" in e.value.message and "axis" in e.value.message


def test_non_positive_beta_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(_f32([1.0, 2.0]), 0.0, Tensor(T.TENSOR_FLOAT32, ()))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_quant8_uniform_input_gives_equal_probabilities() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, (1, 4), 0.5, 0, value=np.full((1, 4), 77, np.uint8))
    y = _run(x, 1.0, Tensor(T.TENSOR_QUANT8_ASYMM, (1, 4), 1.0 / 256, 0))
    assert y.tolist() == [[64, 64, 64, 64]]  # 0.25 * 256
    xs = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 4), 0.5, 0, value=np.full((1, 4), -7, np.int8))
    ys = _run(xs, 1.0, Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 4), 1.0 / 256, -128))
    assert ys.tolist() == [[-64, -64, -64, -64]]


def test_quant8_one_hot_saturates_at_255() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0, 0, value=np.array([0, 255], np.uint8))
    y = _run(x, 1.0, Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0 / 256, 0))
    assert y.tolist() == [0, 255]  # probability 1.0 would be 256


def test_quant8_output_quantization_is_fixed() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0, 0, value=np.array([0, 1], np.uint8))
    with pytest.raises(NnError) as e:
        _run(x, 1.0, Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0 / 128, 0))
    assert "output 0" in e.value.message
