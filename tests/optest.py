"""Helpers for operation unit tests: run one operation's validate / prepare / execute directly."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation


def tensor(t: T, values, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    v = np.asarray(values, dtype=Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zero_point, value=v)


def run_op(op: Op, ins: list[Tensor], out: Tensor) -> np.ndarray:
    """validate (compile time), prepare and execute one operation; the output array."""
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (result,) = reg.execute(ctx)
    assert result.shape == tuple(dims)
    assert result.dtype == out.dtype
    return result


def invalid_op(op: Op, ins: list[Tensor], out: Tensor, *words: str) -> None:
    """The operation is rejected with INVALID_ARGUMENT naming the operation and `words`."""
    with pytest.raises(NnError) as e:
        run_op(op, ins, out)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in (op.name,) + words:
        assert w in e.value.message, e.value.message
