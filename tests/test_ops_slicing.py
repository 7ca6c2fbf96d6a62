"""Slicing and shape operations: STRIDED_SLICE masks, SLICE, SPLIT, GATHER, SQUEEZE, EXPAND_DIMS,
TILE, TRANSPOSE, FILL and RANK (hand-computed expectations, parameter errors)."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation


def _t(value, t: T = T.TENSOR_INT32, **kw) -> Tensor:
    v = np.asarray(value, dtype={T.TENSOR_FLOAT32: np.float32, T.FLOAT32: np.float32,
                                 T.TENSOR_QUANT8_ASYMM: np.uint8, T.BOOL: np.bool_}.get(t, np.int32))
    return Tensor(t, () if t in (T.INT32, T.FLOAT32, T.BOOL) else v.shape, value=v, **kw)


def _omitted(t: T = T.TENSOR_INT32) -> Tensor:
    return Tensor(t, (), omitted=True)


def _run(op: Op, ins: list[Tensor], out_type: T = T.TENSOR_FLOAT32, n_out: int = 1, **out_kw) -> list[np.ndarray]:
    """validate (compile time, all constant) + prepare + execute; checks shapes agree."""
    reg = find_operation(op)
    outs = [Tensor(out_type, (), **out_kw) for _ in range(n_out)]
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    shapes = reg.prepare(ctx)
    results = reg.execute(ctx)
    for r, s in zip(results, shapes):
        assert r.shape == tuple(s)
        assert r.dtype == outs[0].dtype
    return results


def _invalid(fn, *words: str) -> None:
    with pytest.raises(NnError) as e:
        fn()
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in words:
        assert w in e.value.message, e.value.message


_X34 = np.arange(12, dtype=np.float32).reshape(3, 4)


def _ss(x, begin, end, strides, bm=0, em=0, sm=0):
    return _run(Op.STRIDED_SLICE, [_t(x, T.TENSOR_FLOAT32), _t(begin), _t(end), _t(strides),
                                   _t(bm, T.INT32), _t(em, T.INT32), _t(sm, T.INT32)])[0]


# --- STRIDED_SLICE ----------------------------------------------------------------------------
def test_strided_slice_basic_and_negative_indices() -> None:
    # rows 1..2, columns -3..-1 (= 1..2)
    assert _ss(_X34, [1, -3], [3, -1], [1, 1]).tolist() == [[5, 6], [9, 10]]


def test_strided_slice_out_of_range_indices_are_clamped() -> None:
    assert _ss(_X34, [-100, 2], [100, 100], [2, 1]).tolist() == [[2, 3], [10, 11]]


def test_strided_slice_negative_stride_walks_backwards() -> None:
    assert _ss(np.arange(5, dtype=np.float32), [4], [0], [-2]).tolist() == [4, 2]
    # begin_mask with a negative stride starts at the last element; end_mask runs past 0.
    assert _ss(np.arange(5, dtype=np.float32), [0], [0], [-1], bm=1, em=1).tolist() == [4, 3, 2, 1, 0]


def test_strided_slice_masks() -> None:
    # begin_mask bit 1 ignores begin[1]; end_mask bit 0 ignores end[0].
    y = _ss(_X34, [1, 3], [0, 2], [1, 1], bm=0b10, em=0b01)
    assert y.tolist() == [[4, 5], [8, 9]]


def test_strided_slice_shrink_axis() -> None:
    y = _ss(_X34, [2, 0], [3, 4], [1, 2], sm=0b01)
    assert y.shape == (2,) and y.tolist() == [8, 10]
    # shrinking every dimension leaves shape [1]
    assert _ss(_X34, [1, 2], [2, 3], [1, 1], sm=0b11).tolist() == [6]


def test_strided_slice_empty_range_gives_zero_extent() -> None:
    assert _ss(_X34, [2, 0], [1, 4], [1, 1]).shape == (0, 4)


def test_strided_slice_invalid_parameters() -> None:
    _invalid(lambda: _ss(_X34, [0, 0], [3, 4], [1, 0]), "STRIDED_SLICE", "strides")
    _invalid(lambda: _ss(_X34, [0, 0], [2, 4], [1, 1], sm=1), "shrink_axis_mask", "2 elements")
    _invalid(lambda: _ss(_X34, [1, 0], [0, 4], [-1, 1], sm=1), "negative stride")
    _invalid(lambda: _ss(_X34, [0], [3], [1]), "input 1 (begin)")


# --- SLICE ------------------------------------------------------------------------------------
def _slice(x, begin, size):
    return _run(Op.SLICE, [_t(x, T.TENSOR_FLOAT32), _t(begin), _t(size)])[0]


def test_slice_with_minus_one_size() -> None:
    assert _slice(_X34, [1, 2], [-1, 1]).tolist() == [[6], [10]]


def test_slice_zero_sized_input() -> None:
    assert _slice(np.zeros((0, 4), np.float32), [0, 1], [-1, 2]).shape == (0, 2)


def test_slice_out_of_bounds_rejected() -> None:
    _invalid(lambda: _slice(_X34, [2, 0], [2, 4]), "SLICE", "input 2 (size)")
    _invalid(lambda: _slice(_X34, [-1, 0], [1, 4]), "input 1 (begin)")


# --- SPLIT / GATHER ---------------------------------------------------------------------------
def test_split_negative_axis_and_output_count() -> None:
    a, b = _run(Op.SPLIT, [_t(_X34, T.TENSOR_FLOAT32), _t(-1, T.INT32), _t(2, T.INT32)], n_out=2)
    assert a.tolist() == [[0, 1], [4, 5], [8, 9]] and b.tolist() == [[2, 3], [6, 7], [10, 11]]
    _invalid(lambda: _run(Op.SPLIT, [_t(_X34, T.TENSOR_FLOAT32), _t(0, T.INT32), _t(2, T.INT32)], n_out=2),
             "SPLIT", "not a multiple")
    _invalid(lambda: _run(Op.SPLIT, [_t(_X34, T.TENSOR_FLOAT32), _t(1, T.INT32), _t(2, T.INT32)], n_out=3),
             "num_splits")
    _invalid(lambda: _run(Op.SPLIT, [_t(_X34, T.TENSOR_FLOAT32), _t(2, T.INT32), _t(1, T.INT32)]),
             "input 1 (axis) 2 is out of range")


def test_gather_multidimensional_indices() -> None:
    (y,) = _run(Op.GATHER, [_t(_X34, T.TENSOR_FLOAT32), _t(1, T.INT32), _t([[3, 0], [1, 1]])])
    assert y.shape == (3, 2, 2)
    assert y[1].tolist() == [[7, 4], [5, 5]]


def test_gather_index_out_of_range_rejected() -> None:
    _invalid(lambda: _run(Op.GATHER, [_t(_X34, T.TENSOR_FLOAT32), _t(0, T.INT32), _t([3])]),
             "GATHER", "input 2 (indices)")
    _invalid(lambda: _run(Op.GATHER, [_t(_X34, T.TENSOR_FLOAT32), _t(-3, T.INT32), _t([0])]), "axis")


# --- SQUEEZE / EXPAND_DIMS / TILE / TRANSPOSE ----------------------------------------------------
def test_squeeze_listed_omitted_and_all() -> None:
    x = np.zeros((1, 3, 1, 2), np.float32)
    assert _run(Op.SQUEEZE, [_t(x, T.TENSOR_FLOAT32), _t([-2])])[0].shape == (1, 3, 2)
    assert _run(Op.SQUEEZE, [_t(x, T.TENSOR_FLOAT32), _omitted()])[0].shape == (3, 2)
    assert _run(Op.SQUEEZE, [_t(np.zeros((1, 1), np.float32), T.TENSOR_FLOAT32), _omitted()])[0].shape == (1,)
    _invalid(lambda: _run(Op.SQUEEZE, [_t(x, T.TENSOR_FLOAT32), _t([1])]), "SQUEEZE", "size 3")


def test_expand_dims_axis_range_is_rank_plus_one() -> None:
    x = _t(_X34, T.TENSOR_FLOAT32)
    assert _run(Op.EXPAND_DIMS, [x, _t(2, T.INT32)])[0].shape == (3, 4, 1)
    assert _run(Op.EXPAND_DIMS, [x, _t(-1, T.INT32)])[0].shape == (3, 4, 1)
    assert _run(Op.EXPAND_DIMS, [x, _t(-3, T.INT32)])[0].shape == (1, 3, 4)
    _invalid(lambda: _run(Op.EXPAND_DIMS, [x, _t(3, T.INT32)]), "EXPAND_DIMS", "input 1 (axis)")


def test_tile_and_transpose() -> None:
    y = _run(Op.TILE, [_t([[1, 2]], T.TENSOR_FLOAT32), _t([2, 2])])[0]
    assert y.tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    _invalid(lambda: _run(Op.TILE, [_t([[1, 2]], T.TENSOR_FLOAT32), _t([2])]), "TILE", "multiples")
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    assert _run(Op.TRANSPOSE, [_t(x, T.TENSOR_FLOAT32), _t([2, 0, 1])])[0].shape == (3, 1, 2)
    assert _run(Op.TRANSPOSE, [_t(x, T.TENSOR_FLOAT32), _omitted()])[0].tolist() == [[[0], [3]], [[1], [4]], [[2], [5]]]
    _invalid(lambda: _run(Op.TRANSPOSE, [_t(x, T.TENSOR_FLOAT32), _t([0, 0, 1])]), "TRANSPOSE", "perm")


def test_quantized_output_must_keep_quantization() -> None:
    x = _t([[1, 2]], T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=3)
    y = _run(Op.TRANSPOSE, [x, _t([1, 0])], T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=3)[0]
    assert y.tolist() == [[1], [2]]
    _invalid(lambda: _run(Op.TRANSPOSE, [x, _t([1, 0])], T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=4),
             "TRANSPOSE", "quantization")


# --- FILL / RANK ------------------------------------------------------------------------------
def test_fill_value_type_follows_output() -> None:
    (y,) = _run(Op.FILL, [_t([2, 3]), _t(7, T.INT32)], T.TENSOR_INT32)
    assert y.dtype == np.int32 and y.tolist() == [[7, 7, 7]] * 2
    _invalid(lambda: _run(Op.FILL, [_t([2]), _t(1.5, T.FLOAT32)], T.TENSOR_INT32), "FILL", "input 1")
    _invalid(lambda: _run(Op.FILL, [_t([2, -1]), _t(1.0, T.FLOAT32)]), "negative")


def test_fill_non_constant_dims_unknown_at_compile_time() -> None:
    reg = find_operation(Op.FILL)
    ctx = OpContext(Op.FILL, [Tensor(T.TENSOR_INT32, (2,)), _t(1.0, T.FLOAT32)],
                    [Tensor(T.TENSOR_FLOAT32, ())], compile_time=True)
    reg.validate(ctx)
    with pytest.raises(UnknownValue):
        reg.prepare(ctx)


def test_rank_is_a_scalar() -> None:
    reg = find_operation(Op.RANK)
    ins = [_t(np.zeros((2, 1, 3), np.float32), T.TENSOR_FLOAT32)]
    outs = [Tensor(T.INT32, ())]
    reg.validate(OpContext(Op.RANK, ins, outs, compile_time=True))
    ctx = OpContext(Op.RANK, ins, outs)
    assert reg.prepare(ctx) == [()]
    (r,) = reg.execute(ctx)
    assert r.shape == () and r.dtype == np.int32 and int(r) == 3
    _invalid(lambda: reg.validate(OpContext(Op.RANK, ins, [Tensor(T.TENSOR_INT32, (1,))])), "RANK", "output 0")
