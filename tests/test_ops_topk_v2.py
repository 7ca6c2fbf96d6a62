"""TOPK_V2: ordering (ties by decreasing index, as Android's reference), shapes and k errors."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_REG = find_operation(Op.TOPK_V2)


def _run(a, k: int, t: T = T.TENSOR_FLOAT32, out_scale: float | None = None):
    v = np.asarray(a, Tensor(t, ()).dtype)
    scale = 0.5 if t.is_quantized else 0.0
    ins = [Tensor(t, v.shape, scale, 3 if t.is_quantized else 0, value=v),
           Tensor(T.INT32, (), value=np.array(k, np.int32))]
    outs = [Tensor(t, (), scale if out_scale is None else out_scale, 3 if t.is_quantized else 0),
            Tensor(T.TENSOR_INT32, ())]
    _REG.validate(OpContext(Op.TOPK_V2, ins, outs, compile_time=True))
    ctx = OpContext(Op.TOPK_V2, ins, outs)
    dims = _REG.prepare(ctx)
    values, indices = _REG.execute(ctx)
    assert values.shape == tuple(dims[0]) and indices.shape == tuple(dims[1])
    assert values.dtype == outs[0].dtype and indices.dtype == np.int32
    return values, indices


def test_descending_values_per_row() -> None:
    values, indices = _run([[1.0, 5.0, 3.0], [9.0, -1.0, 4.0]], 2)
    assert values.tolist() == [[5.0, 3.0], [9.0, 4.0]]
    assert indices.tolist() == [[1, 2], [0, 2]]


def test_ties_come_out_by_decreasing_index() -> None:
    values, indices = _run([[1, 3, 3, 2]], 3, T.TENSOR_INT32)
    assert values.tolist() == [[3, 3, 2]]
    assert indices.tolist() == [[2, 1, 3]]


def test_quant8_rank_three() -> None:
    values, indices = _run(np.array([[[10, 200, 7]], [[0, 1, 2]]]), 1, T.TENSOR_QUANT8_ASYMM)
    assert values.shape == (2, 1, 1) and values.reshape(-1).tolist() == [200, 2]
    assert indices.reshape(-1).tolist() == [1, 2]


@pytest.mark.parametrize("k", [0, -1, 4])
def test_k_out_of_range_rejected(k: int) -> None:
    with pytest.raises(NnError) as e:
        _run([[1.0, 2.0, 3.0]], k)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "TOPK_V2" in e.value.message and "(k)" in e.value.message


def test_values_quantization_must_match_input() -> None:
    with pytest.raises(NnError) as e:
        _run([[1, 2]], 1, T.TENSOR_QUANT8_ASYMM, out_scale=0.25)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
