"""LOGISTIC and TANH: float values and Android's fixed quantized output parameters."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation


def _run(op: Op, x: Tensor, out: Tensor) -> np.ndarray:
    reg = find_operation(op)
    reg.validate(OpContext(op, [x], [out], compile_time=True))
    ctx = OpContext(op, [x], [out])
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def test_float_values() -> None:
    v = np.array([-2.0, 0.0, 3.0], np.float32)
    x = Tensor(T.TENSOR_FLOAT32, (3,), value=v)
    assert _run(Op.LOGISTIC, x, Tensor(T.TENSOR_FLOAT32, ())).tolist() == pytest.approx(
        [1 / (1 + math.exp(2.0)), 0.5, 1 / (1 + math.exp(-3.0))], rel=1e-6)
    assert _run(Op.TANH, x, Tensor(T.TENSOR_FLOAT32, ())).tolist() == pytest.approx(
        [math.tanh(-2.0), 0.0, math.tanh(3.0)], rel=1e-6)


def test_float16_keeps_type() -> None:
    x = Tensor(T.TENSOR_FLOAT16, (1,), value=np.array([0.0], np.float16))
    assert _run(Op.LOGISTIC, x, Tensor(T.TENSOR_FLOAT16, ())).tolist() == [0.5]


@pytest.mark.parametrize("op,t,scale,zp,expected", [
    # outputs for real inputs 0, -64 and 63.5: the midpoint, the bottom and the top of the range
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM, 1 / 256, 0, [128, 0, 255]),
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM_SIGNED, 1 / 256, -128, [0, -128, 127]),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM, 1 / 128, 128, [128, 0, 255]),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM_SIGNED, 1 / 128, 0, [0, -128, 127]),
])
def test_quantized_outputs_use_the_fixed_range(op: Op, t: T, scale: float, zp: int,
                                               expected: list[int]) -> None:
    dtype = Tensor(t, ()).dtype
    in_zp = 128 if t == T.TENSOR_QUANT8_ASYMM else 0
    info = np.iinfo(dtype)
    x = Tensor(t, (3,), 0.5, in_zp, value=np.array([in_zp, info.min, info.max], dtype))
    assert _run(op, x, Tensor(t, (3,), scale, zp)).tolist() == expected


@pytest.mark.parametrize("op,t,scale,zp", [
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM, 1 / 128, 0),
    (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM_SIGNED, 1 / 256, 0),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM, 1 / 128, 0),
    (Op.TANH, T.TENSOR_QUANT8_ASYMM_SIGNED, 1 / 256, 0),
])
def test_wrong_output_quantization_rejected(op: Op, t: T, scale: float, zp: int) -> None:
    x = Tensor(t, (1,), 0.1, 0, value=np.zeros(1, Tensor(t, ()).dtype))
    with pytest.raises(NnError) as e:
        _run(op, x, Tensor(t, (1,), scale, zp))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message and "output 0" in e.value.message
