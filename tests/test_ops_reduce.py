"""REDUCE_* and MEAN: axis handling, output shapes, Android's rounding, and parameter errors."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation


def _run(op: Op, x: Tensor, axes, keep, out: Tensor | None = None) -> np.ndarray:
    reg = find_operation(op)
    keep_t = Tensor(T.INT32, (), value=np.array(keep, np.int32)) if op == Op.MEAN \
        else Tensor(T.BOOL, (), value=np.array(bool(keep)))
    axes_v = np.asarray(axes, np.int32)
    ins = [x, Tensor(T.TENSOR_INT32, axes_v.shape, value=axes_v), keep_t]
    out = out or Tensor(x.type, (), x.scale, x.zero_point)
    reg.validate(OpContext(op, ins, [out], compile_time=True))
    ctx = OpContext(op, ins, [out])
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == out.dtype
    return y


def _t(a, t=T.TENSOR_FLOAT32, scale=0.0, zp=0) -> Tensor:
    v = np.asarray(a, Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zp, value=v)


X = np.arange(24, dtype=np.float32).reshape(4, 3, 2)


def test_sum_negative_and_duplicate_axes() -> None:
    # axes [1, 0, -3, -3] reduce dimensions 0 and 1; the last one (size 2) remains.
    y = _run(Op.REDUCE_SUM, _t(X), [1, 0, -3, -3], False)
    assert y.tolist() == [sum(range(0, 24, 2)), sum(range(1, 24, 2))]


def test_keep_dims_gives_ones() -> None:
    y = _run(Op.REDUCE_MAX, _t(X), [0, 2], True)
    assert y.shape == (1, 3, 1) and y.reshape(-1).tolist() == [19.0, 21.0, 23.0]


def test_all_axes_removed_gives_shape_one() -> None:
    y = _run(Op.REDUCE_MIN, _t(X), [0, 1, 2], False)
    assert y.shape == (1,) and y.tolist() == [0.0]


def test_prod_zero_times_inf_is_zero() -> None:
    y = _run(Op.REDUCE_PROD, _t([[0.0, np.inf], [2.0, 3.0]]), [1], False)
    assert y.tolist() == [0.0, 6.0]


def test_float16_sum() -> None:
    y = _run(Op.REDUCE_SUM, _t([[1.5, 2.25], [4.0, -1.0]], T.TENSOR_FLOAT16), [-1], False)
    assert y.dtype == np.float16 and y.tolist() == [3.75, 3.0]


def test_all_any_bool8() -> None:
    b = _t([[True, False], [True, True]], T.TENSOR_BOOL8)
    assert _run(Op.REDUCE_ALL, b, [1], False).tolist() == [False, True]
    assert _run(Op.REDUCE_ANY, b, [0], False).tolist() == [True, True]


def test_quant_max_keeps_raw_values() -> None:
    y = _run(Op.REDUCE_MAX, _t([[-128, 5], [7, -3]], T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, -1), [0], False)
    assert y.dtype == np.int8 and y.tolist() == [7, 5]


def test_mean_float_and_keep_dims_int() -> None:
    y = _run(Op.MEAN, _t(X), [0, 2], 1)
    assert y.shape == (1, 3, 1)
    assert y.reshape(-1).tolist() == pytest.approx([X[:, i, :].mean() for i in range(3)])


def test_mean_quant_truncates_toward_zero() -> None:
    # Android runs TFLite's reference Mean<T, int32>: raw sum / count in C++ integer division.
    y = _run(Op.MEAN, _t([[10, 11]], T.TENSOR_QUANT8_ASYMM, 0.8, 5), [1], 0)
    assert y.tolist() == [10]  # 10.5 -> 10
    y = _run(Op.MEAN, _t([[-117, -118]], T.TENSOR_QUANT8_ASYMM_SIGNED, 0.8, -123), [1], 0)
    assert y.tolist() == [-117]  # -117.5 -> -117 (toward zero, not floor)


@pytest.mark.parametrize("op", [Op.REDUCE_SUM, Op.MEAN])
@pytest.mark.parametrize("axes", [[3], [-4], [0, 5]])
def test_axis_out_of_range_rejected(op: Op, axes) -> None:
    with pytest.raises(NnError) as e:
        _run(op, _t(X), axes, 0)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message and "axes" in e.value.message


def test_quantized_output_must_match_input_quantization() -> None:
    x = _t([[1, 2]], T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    with pytest.raises(NnError) as e:
        _run(Op.REDUCE_MIN, x, [1], False, out=Tensor(T.TENSOR_QUANT8_ASYMM, (), 0.25, 0))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "REDUCE_MIN" in e.value.message


def test_unsupported_type_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(Op.REDUCE_SUM, _t([[1, 2]], T.TENSOR_QUANT8_ASYMM, 0.5, 0), [0], False)
    assert "unsupported type" in e.value.message


def test_rank_above_four_rejected() -> None:
    with pytest.raises(NnError) as e:
        _run(Op.REDUCE_SUM, _t(np.zeros((1, 1, 1, 1, 2))), [0], False)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "rank" in e.value.message
