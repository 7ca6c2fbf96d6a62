"""ELU and HARD_SWISH: float formulas, alpha scalar type, quantized HardSwish fixed point."""
from __future__ import annotations

import math

import numpy as np

from nnapi.hal import OperandType as T, OperationType as Op
from nnapi.ops import Tensor


from optest import invalid_op as _invalid, run_op as _run, tensor as _t


def test_elu_formula() -> None:
    x = _t(T.TENSOR_FLOAT32, [-1.0, 0.0, 2.0])
    alpha = Tensor(T.FLOAT32, (), value=np.array(2.0, np.float32))
    r = _run(Op.ELU, [x, alpha], Tensor(T.TENSOR_FLOAT32, (3,)))
    np.testing.assert_allclose(r, [2.0 * (math.exp(-1.0) - 1.0), 0.0, 2.0], rtol=1e-6)


def test_elu_float16_needs_float16_alpha() -> None:
    x = _t(T.TENSOR_FLOAT16, [-1.0])
    alpha32 = Tensor(T.FLOAT32, (), value=np.array(1.0, np.float32))
    _invalid(Op.ELU, [x, alpha32], Tensor(T.TENSOR_FLOAT16, (1,)), "input 1", "FLOAT16")
    alpha16 = Tensor(T.FLOAT16, (), value=np.array(1.0, np.float16))
    r = _run(Op.ELU, [x, alpha16], Tensor(T.TENSOR_FLOAT16, (1,)))
    assert abs(float(r[0]) - (math.exp(-1.0) - 1.0)) < 1e-3


def test_hard_swish_float() -> None:
    x = _t(T.TENSOR_FLOAT32, [-4.0, -3.0, -1.5, 0.0, 1.0, 3.0, 5.0])
    r = _run(Op.HARD_SWISH, [x], Tensor(T.TENSOR_FLOAT32, (7,)))
    np.testing.assert_allclose(r, [0.0, 0.0, -0.375, 0.0, 4.0 / 6.0, 3.0, 5.0], rtol=1e-6, atol=1e-7)


def test_hard_swish_quantized_close_to_real_formula() -> None:
    # scale 0.05, zero point 128: reals -4, -1, 0, 1, 2, 4 -> hard swish 0, -1/3, 0, 2/3, 5/3, 4.
    x = _t(T.TENSOR_QUANT8_ASYMM, [48, 108, 128, 148, 168, 208], scale=0.05, zero_point=128)
    r = _run(Op.HARD_SWISH, [x], Tensor(T.TENSOR_QUANT8_ASYMM, (6,), 0.05, 128))
    expected = [128, 121, 128, 141, 161, 208]
    assert np.all(np.abs(r.astype(int) - expected) <= 1), r.tolist()


def test_hard_swish_quantized_different_output_params() -> None:
    # input reals -2, 0, 2 (scale 0.1, zp 0); output scale 0.02, zp -100: -1/3 -> -117, 0 -> -100, 5/3 -> -17
    x = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [-20, 0, 20], scale=0.1, zero_point=0)
    r = _run(Op.HARD_SWISH, [x], Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (3,), 0.02, -100))
    assert np.all(np.abs(r.astype(int) - [-117, -100, -17]) <= 1), r.tolist()


def test_hard_swish_output_scale_too_small_fails() -> None:
    x = _t(T.TENSOR_QUANT8_ASYMM, [130], scale=1.0, zero_point=128)
    _invalid(Op.HARD_SWISH, [x], Tensor(T.TENSOR_QUANT8_ASYMM, (1,), 1.0 / 1024, 0), "output 0 scale")


def test_hard_swish_rejects_int32() -> None:
    _invalid(Op.HARD_SWISH, [_t(T.TENSOR_INT32, [1])], Tensor(T.TENSOR_INT32, (1,)), "TENSOR_INT32")
