"""CONCATENATION: axis handling, shape checks and requantization of mixed-scale inputs."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_REG = find_operation(Op.CONCATENATION)


def _run(tensors: list[Tensor], axis: int, out: Tensor) -> np.ndarray:
    ins = tensors + [Tensor(T.INT32, (), value=np.array(axis, np.int32))]
    _REG.validate(OpContext(Op.CONCATENATION, ins, [out], compile_time=True))
    ctx = OpContext(Op.CONCATENATION, ins, [out])
    (dims,) = _REG.prepare(ctx)
    (y,) = _REG.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def _f32(a) -> Tensor:
    v = np.asarray(a, np.float32)
    return Tensor(T.TENSOR_FLOAT32, v.shape, value=v)


def test_concatenates_along_axis() -> None:
    a, b = [[1, 2], [3, 4]], [[5], [6]]
    y = _run([_f32(a), _f32(b)], 1, Tensor(T.TENSOR_FLOAT32, ()))
    assert y.tolist() == [[1, 2, 5], [3, 4, 6]]


def test_negative_axis_counts_from_the_end() -> None:
    a, b = [[1, 2], [3, 4]], [[5], [6]]
    y = _run([_f32(a), _f32(b)], -1, Tensor(T.TENSOR_FLOAT32, ()))
    assert y.tolist() == [[1, 2, 5], [3, 4, 6]]


@pytest.mark.parametrize("axis", [2, -3])
def test_axis_out_of_range_rejected(axis: int) -> None:
    with pytest.raises(NnError) as e:
        _run([_f32([[1.0]]), _f32([[2.0]])], axis, Tensor(T.TENSOR_FLOAT32, ()))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "CONCATENATION" in e.value.message and "axis" in e.value.message


def test_mismatched_non_axis_dimension_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run([_f32(np.zeros((2, 2))), _f32(np.zeros((3, 1)))], 1, Tensor(T.TENSOR_FLOAT32, ()))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_rank_5_rejected() -> None:
    with pytest.raises(NnError):
        _run([_f32(np.zeros((1,) * 5)), _f32(np.zeros((1,) * 5))], 0, Tensor(T.TENSOR_FLOAT32, ()))


def test_zero_sized_input_contributes_nothing() -> None:
    y = _run([_f32(np.zeros((0, 2))), _f32([[7, 8]])], 0, Tensor(T.TENSOR_FLOAT32, ()))
    assert y.tolist() == [[7, 8]]


def test_mixed_scales_are_requantized_to_output() -> None:
    # Input 0 shares the output quantization and is copied; input 1 (scale 0.5, zero point 10)
    # holds 1.0, 1.5, -2.5, which at scale 1.0 / zero point 100 round half away to 101, 102, 97.
    out = Tensor(T.TENSOR_QUANT8_ASYMM, (), 1.0, 100)
    a = Tensor(T.TENSOR_QUANT8_ASYMM, (2,), 1.0, 100, value=np.array([0, 255], np.uint8))
    b = Tensor(T.TENSOR_QUANT8_ASYMM, (3,), 0.5, 10, value=np.array([12, 13, 5], np.uint8))
    assert _run([a, b], 0, out).tolist() == [0, 255, 101, 102, 97]


def test_signed_requantization_saturates() -> None:
    out = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (), 0.5, 0)
    a = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 2.0, 0, value=np.array([100, -100], np.int8))
    assert _run([a, a], 0, out).tolist() == [127, -128, 127, -128]
