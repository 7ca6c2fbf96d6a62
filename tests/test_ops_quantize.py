"""QUANTIZE and DEQUANTIZE: rounding, saturation and per-channel scales."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op, SymmPerChannelQuantParams
from nnapi.ops import OpContext, Tensor, find_operation


def _run(op: Op, x: Tensor, out: Tensor) -> np.ndarray:
    reg = find_operation(op)
    reg.validate(OpContext(op, [x], [out], compile_time=True))
    ctx = OpContext(op, [x], [out])
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def test_quantize_rounds_halves_away_from_zero() -> None:
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32)
    y = _run(Op.QUANTIZE, Tensor(T.TENSOR_FLOAT32, v.shape, value=v),
             Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (6,), 1.0, 0))
    assert y.tolist() == [1, 2, 3, -1, -2, -3]


def test_quantize_saturates_and_adds_zero_point() -> None:
    v = np.array([-100.0, 0.0, 1.0, 100.0], np.float16)
    y = _run(Op.QUANTIZE, Tensor(T.TENSOR_FLOAT16, v.shape, value=v),
             Tensor(T.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10))
    assert y.tolist() == [0, 10, 12, 210]


def test_quantize_rejects_quantized_input() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 0, value=np.zeros(1, np.uint8))
    with pytest.raises(NnError) as e:
        _run(Op.QUANTIZE, x, Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 0))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "input 0" in e.value.message


def test_dequantize_asymm_and_signed() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, (3,), 0.5, 128, value=np.array([0, 128, 255], np.uint8))
    assert _run(Op.DEQUANTIZE, x, Tensor(T.TENSOR_FLOAT32, ())).tolist() == [-64.0, 0.0, 63.5]
    s = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 0.25, -1, value=np.array([-128, 127], np.int8))
    assert _run(Op.DEQUANTIZE, s, Tensor(T.TENSOR_FLOAT16, ())).tolist() == [-31.75, 32.0]


def test_dequantize_per_channel_uses_each_channel_scale() -> None:
    cq = SymmPerChannelQuantParams((0.5, 2.0), 1)
    x = Tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 2), channel_quant=cq,
               value=np.array([[2, 2], [-4, 3]], np.int8))
    assert _run(Op.DEQUANTIZE, x, Tensor(T.TENSOR_FLOAT32, ())).tolist() == [[1.0, 4.0], [-2.0, 6.0]]


def test_dequantize_per_channel_scale_count_checked() -> None:
    cq = SymmPerChannelQuantParams((0.5, 2.0, 1.0), 0)
    x = Tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 2), channel_quant=cq, value=np.zeros((2, 2), np.int8))
    with pytest.raises(NnError):
        _run(Op.DEQUANTIZE, x, Tensor(T.TENSOR_FLOAT32, ()))
