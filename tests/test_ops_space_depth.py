"""Layout-moving operations: DEPTH_TO_SPACE, SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND,
CHANNEL_SHUFFLE, PAD and PAD_V2 (element order, NCHW layout, quantized padding, bad parameters)."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_NP = {T.TENSOR_FLOAT32: np.float32, T.FLOAT32: np.float32, T.TENSOR_QUANT8_ASYMM: np.uint8,
       T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, T.BOOL: np.bool_}


def _t(value, t: T = T.TENSOR_INT32, **kw) -> Tensor:
    v = np.asarray(value, dtype=_NP.get(t, np.int32))
    return Tensor(t, () if t in (T.INT32, T.FLOAT32, T.BOOL) else v.shape, value=v, **kw)


def _run(op: Op, ins: list[Tensor], out_type: T = T.TENSOR_FLOAT32, **out_kw) -> np.ndarray:
    reg = find_operation(op)
    outs = [Tensor(out_type, (), **out_kw)]
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    (dims,) = reg.prepare(ctx)
    (y,) = reg.execute(ctx)
    assert y.shape == tuple(dims) and y.dtype == outs[0].dtype
    return y


def _invalid(fn, *words: str) -> None:
    with pytest.raises(NnError) as e:
        fn()
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in words:
        assert w in e.value.message, e.value.message


def _f(x) -> Tensor:
    return _t(x, T.TENSOR_FLOAT32)


# --- DEPTH_TO_SPACE / SPACE_TO_DEPTH ---------------------------------------------------------------
def test_depth_to_space_channel_order() -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    y = _run(Op.DEPTH_TO_SPACE, [_f(x), _t(2, T.INT32)])
    # out[0, i, j, c] = in[(i * 2 + j) * 2 + c]
    assert y.shape == (1, 2, 2, 2)
    assert y[0].tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]


def test_depth_to_space_nchw() -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    y = _run(Op.DEPTH_TO_SPACE, [_f(x), _t(2, T.INT32), _t(True, T.BOOL)])
    assert y.shape == (1, 2, 2, 2)
    assert y[0, 0].tolist() == [[0, 2], [4, 6]] and y[0, 1].tolist() == [[1, 3], [5, 7]]


def test_space_to_depth_inverts_depth_to_space() -> None:
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 2, 8)
    d2s = _run(Op.DEPTH_TO_SPACE, [_f(x), _t(2, T.INT32)])
    assert np.array_equal(_run(Op.SPACE_TO_DEPTH, [_f(d2s), _t(2, T.INT32)]), x)


def test_depth_space_bad_block_size() -> None:
    x = np.zeros((1, 2, 2, 3), np.float32)
    _invalid(lambda: _run(Op.DEPTH_TO_SPACE, [_f(x), _t(2, T.INT32)]), "DEPTH_TO_SPACE", "depth 3")
    _invalid(lambda: _run(Op.SPACE_TO_DEPTH, [_f(x), _t(0, T.INT32)]), "SPACE_TO_DEPTH", "input 1 (block_size)")
    _invalid(lambda: _run(Op.SPACE_TO_DEPTH, [_f(np.zeros((1, 3, 2, 1), np.float32)), _t(2, T.INT32)]),
             "multiples of block_size")


# --- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND ------------------------------------------------------------
def test_space_to_batch_block_order_and_padding() -> None:
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    y = _run(Op.SPACE_TO_BATCH_ND, [_f(x), _t([2, 2]), _t([[0, 0], [0, 0]])])
    assert y.reshape(-1).tolist() == [1, 2, 3, 4] and y.shape == (4, 1, 1, 1)
    y = _run(Op.SPACE_TO_BATCH_ND, [_f(x), _t([2, 2]), _t([[0, 0], [0, 2]])])
    assert y.shape == (4, 1, 2, 1)
    assert y[..., 0].reshape(4, 2).tolist() == [[1, 0], [2, 0], [3, 0], [4, 0]]


def test_space_to_batch_quantized_pads_with_zero_point() -> None:
    x = _t(np.array([1, 2, 3, 4]).reshape(1, 2, 2, 1), T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=5)
    y = _run(Op.SPACE_TO_BATCH_ND, [x, _t([2, 2]), _t([[0, 0], [0, 2]])], T.TENSOR_QUANT8_ASYMM,
             scale=0.5, zero_point=5)
    assert y[..., 0].reshape(4, 2).tolist() == [[1, 5], [2, 5], [3, 5], [4, 5]]


def test_batch_to_space_inverse_and_nchw() -> None:
    x = np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1, 1)
    assert _run(Op.BATCH_TO_SPACE_ND, [_f(x), _t([2, 2])])[0, ..., 0].tolist() == [[1, 2], [3, 4]]
    # NCHW with 2 channels: channel c of batch b holds 10 * c + b.
    x = np.array([[0, 10], [1, 11], [2, 12], [3, 13]], np.float32).reshape(4, 2, 1, 1)
    y = _run(Op.BATCH_TO_SPACE_ND, [_f(x), _t([2, 2]), _t(True, T.BOOL)])
    assert y.shape == (1, 2, 2, 2) and y[0, 1].tolist() == [[10, 11], [12, 13]]


def test_space_batch_bad_parameters() -> None:
    x = np.zeros((1, 3, 2, 1), np.float32)
    _invalid(lambda: _run(Op.SPACE_TO_BATCH_ND, [_f(x), _t([2, 2]), _t([[0, 0], [0, 0]])]),
             "SPACE_TO_BATCH_ND", "not a multiple")
    _invalid(lambda: _run(Op.SPACE_TO_BATCH_ND, [_f(x), _t([1, 1]), _t([[0, -1], [0, 0]])]),
             "input 2 (paddings)")
    _invalid(lambda: _run(Op.BATCH_TO_SPACE_ND, [_f(np.zeros((3, 1, 1, 1), np.float32)), _t([2, 1])]),
             "BATCH_TO_SPACE_ND", "batch size 3")
    _invalid(lambda: _run(Op.BATCH_TO_SPACE_ND, [_f(np.zeros((4, 1, 1, 1), np.float32)), _t([0, 2])]),
             "input 1 (block_shape)")


# --- CHANNEL_SHUFFLE --------------------------------------------------------------------------------
def test_channel_shuffle_interleaves_groups() -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    assert _run(Op.CHANNEL_SHUFFLE, [_f(x), _t(2, T.INT32), _t(-1, T.INT32)]).tolist() == [[0, 3, 1, 4, 2, 5]]
    assert _run(Op.CHANNEL_SHUFFLE, [_f(x), _t(3, T.INT32), _t(1, T.INT32)]).tolist() == [[0, 2, 4, 1, 3, 5]]
    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    assert _run(Op.CHANNEL_SHUFFLE, [_f(x), _t(2, T.INT32), _t(0, T.INT32)])[:, 0].tolist() == [0, 3, 1, 4, 2, 5]


def test_channel_shuffle_bad_parameters() -> None:
    x = _f(np.zeros((2, 6), np.float32))
    _invalid(lambda: _run(Op.CHANNEL_SHUFFLE, [x, _t(4, T.INT32), _t(1, T.INT32)]), "CHANNEL_SHUFFLE", "num_groups 4")
    _invalid(lambda: _run(Op.CHANNEL_SHUFFLE, [x, _t(0, T.INT32), _t(1, T.INT32)]), "input 1 (num_groups)")
    _invalid(lambda: _run(Op.CHANNEL_SHUFFLE, [x, _t(2, T.INT32), _t(2, T.INT32)]), "input 2 (axis)")


# --- PAD / PAD_V2 -----------------------------------------------------------------------------------
def test_pad_float_and_quantized_zero_point() -> None:
    assert _run(Op.PAD, [_f([1, 2]), _t([[1, 2]])]).tolist() == [0, 1, 2, 0, 0]
    q = _t([1, 2], T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=3)
    y = _run(Op.PAD, [q, _t([[1, 2]])], T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=3)
    assert y.tolist() == [3, 1, 2, 3, 3]


def test_pad_v2_values() -> None:
    assert _run(Op.PAD_V2, [_f([[1]]), _t([[0, 1], [1, 0]]), _t(9.5, T.FLOAT32)]).tolist() == [[9.5, 1], [9.5, 9.5]]
    q = _t([1], T.TENSOR_QUANT8_ASYMM_SIGNED, scale=1.0, zero_point=0)
    y = _run(Op.PAD_V2, [q, _t([[1, 0]]), _t(-7, T.INT32)], T.TENSOR_QUANT8_ASYMM_SIGNED, scale=1.0, zero_point=0)
    assert y.tolist() == [-7, 1]


def test_pad_bad_paddings() -> None:
    _invalid(lambda: _run(Op.PAD, [_f([1, 2]), _t([[1, -1]])]), "PAD", "negative")
    _invalid(lambda: _run(Op.PAD, [_f([1, 2]), _t([[1, 1], [0, 0]])]), "input 1 (paddings)", "(1, 2)")
    _invalid(lambda: _run(Op.PAD_V2, [_f([1, 2]), _t([[1, 1]]), _t(1, T.INT32)]), "PAD_V2", "input 2")
