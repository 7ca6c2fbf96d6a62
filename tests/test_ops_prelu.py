"""PRELU: broadcast alpha, float16, TFLite fixed-point quantized path with separate scales."""
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

def test_float_broadcast_alpha() -> None:
    x = _t(T.TENSOR_FLOAT32, [[-2.0, 3.0], [-4.0, 0.0]])
    alpha = _t(T.TENSOR_FLOAT32, [0.5, 0.25])
    r = _run(Op.PRELU, [x, alpha], Tensor(T.TENSOR_FLOAT32, (2, 2)))
    assert r.tolist() == [[-1.0, 3.0], [-2.0, 0.0]]  # alpha per column: 0.5, 0.25


def test_quantized_positive_and_negative_paths() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM, [132, 124, 128], scale=0.5, zero_point=128)  # 2, -2, 0
    alpha = _t(T.TENSOR_QUANT8_ASYMM, [2], scale=0.25, zero_point=0)            # 0.5
    out = Tensor(T.TENSOR_QUANT8_ASYMM, (3,), 0.25, 128)  # 2 -> 136, -1 -> 124, 0 -> 128
    assert _run(Op.PRELU, [x, alpha], out).tolist() == [136, 124, 128]


def test_quantized_signed_saturates() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [127, -128], scale=1.0, zero_point=0)
    alpha = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], scale=1.0, zero_point=0)
    out = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 0.5, 0)  # 254 -> 127, -512*2 -> -128
    assert _run(Op.PRELU, [x, alpha], out).tolist() == [127, -128]


def test_alpha_type_must_match() -> None:
    _invalid(Op.PRELU, [_t(T.TENSOR_FLOAT32, [1.0]), _t(T.TENSOR_FLOAT16, [1.0])],
             Tensor(T.TENSOR_FLOAT32, (1,)), "input 1")


def test_alpha_must_broadcast() -> None:
    _invalid(Op.PRELU, [_t(T.TENSOR_FLOAT32, [1.0, 2.0, 3.0]), _t(T.TENSOR_FLOAT32, [1.0, 2.0])],
             Tensor(T.TENSOR_FLOAT32, (3,)), "broadcast")
