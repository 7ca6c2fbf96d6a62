"""ARGMAX / ARGMIN: ties, output shapes and axis errors."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation


def _run(op: Op, a, axis: int, t: T = T.TENSOR_FLOAT32) -> np.ndarray:
    reg = find_operation(op)
    v = np.asarray(a, Tensor(t, ()).dtype)
    ins = [Tensor(t, v.shape, 0.5 if t.is_quantized else 0.0, value=v),
           Tensor(T.INT32, (), value=np.array(axis, np.int32))]
    out = Tensor(T.TENSOR_INT32, ())
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == np.int32
    return y


def test_ties_pick_first_index() -> None:
    assert _run(Op.ARGMAX, [[3.0, 1.0, 3.0]], 1).tolist() == [0]
    assert _run(Op.ARGMIN, [[1.0, 1.0, 3.0]], -1).tolist() == [0]


def test_axis_zero_and_negative() -> None:
    a = [[1, 9], [5, 2]]
    assert _run(Op.ARGMAX, a, 0, T.TENSOR_INT32).tolist() == [1, 0]
    assert _run(Op.ARGMIN, a, -2, T.TENSOR_QUANT8_ASYMM).tolist() == [0, 1]


def test_rank_one_input_gives_shape_one() -> None:
    y = _run(Op.ARGMAX, [1.0, 7.0, 3.0], 0)
    assert y.shape == (1,) and y.tolist() == [1]


@pytest.mark.parametrize("axis", [2, -3])
def test_bad_axis_rejected(axis: int) -> None:
    with pytest.raises(NnError) as e:
        _run(Op.ARGMAX, [[1.0, 2.0]], axis)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "ARGMAX" in e.value.message and "axis" in e.value.message
