"""LSTM family: hand-computed cell steps, CIFG, batch-major sequences, bidirectional merging,
fixed-point gates of QUANTIZED_16BIT_LSTM and INVALID_ARGUMENT for malformed operands."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation
from nnapi.ops._quant import fp_logistic, fp_tanh


def _f32(a) -> Tensor:
    v = np.asarray(a, np.float32)
    return Tensor(T.TENSOR_FLOAT32, v.shape, value=v)


_OMIT = Tensor(T.TENSOR_FLOAT32, (), omitted=True)


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _run(op: Op, ins: list[Tensor], outs: list[Tensor]) -> list[np.ndarray]:
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    shapes = reg.prepare(ctx)
    res = reg.execute(ctx)
    for r, s, o in zip(res, shapes, outs):
        assert r.shape == tuple(s) and r.dtype == o.dtype
    return res


def _cell_inputs(wi, wr, bias, h0, c0, *, cifg=False, peephole=None, proj=None) -> list[Tensor]:
    """LSTM inputs 1-19 for n_cell = n_output = 1 with scalar weights per gate (i, f, c, o)."""
    ins = []
    for g in range(4):
        ins.append(_OMIT if (cifg and g == 0) else _f32([[wi[g]]]))
    for g in range(4):
        ins.append(_OMIT if (cifg and g == 0) else _f32([[wr[g]]]))
    for g in range(3):
        ins.append(_OMIT if peephole is None or (cifg and g == 0) else _f32([peephole[g]]))
    for g in range(4):
        ins.append(_OMIT if (cifg and g == 0) else _f32([bias[g]]))
    ins += [_OMIT if proj is None else _f32([[proj]]), _OMIT, _f32([[h0]]), _f32([[c0]])]
    return ins


def _scalars(act=4, cell_clip=0.0, proj_clip=0.0) -> list[Tensor]:
    return [Tensor(T.INT32, (), value=np.array(act, np.int32)),
            Tensor(T.FLOAT32, (), value=np.array(cell_clip, np.float32)),
            Tensor(T.FLOAT32, (), value=np.array(proj_clip, np.float32))]


def _outs(n: int) -> list[Tensor]:
    return [Tensor(T.TENSOR_FLOAT32, ()) for _ in range(n)]


def _reference_step(x, h, c, wi, wr, b, peep=(0, 0, 0)):
    i = _sig(wi[0] * x + wr[0] * h + b[0] + peep[0] * c)
    f = _sig(wi[1] * x + wr[1] * h + b[1] + peep[1] * c)
    g = math.tanh(wi[2] * x + wr[2] * h + b[2])
    c2 = f * c + i * g
    o = _sig(wi[3] * x + wr[3] * h + b[3] + peep[2] * c2)
    return o * math.tanh(c2), c2


def test_lstm_single_step_with_peephole() -> None:
    wi, wr, b, peep = (0.5, -0.3, 0.8, 0.2), (0.1, 0.4, -0.6, 0.7), (0.0, 1.0, 0.1, -0.2), (0.3, -0.1, 0.5)
    ins = [_f32([[0.7]])] + _cell_inputs(wi, wr, b, 0.2, -0.4, peephole=peep) + _scalars()
    scratch, h, c, out = _run(Op.LSTM, ins, _outs(4))
    want_h, want_c = _reference_step(0.7, 0.2, -0.4, wi, wr, b, peep)
    assert scratch.shape == (1, 4)
    assert c[0, 0] == pytest.approx(want_c, abs=1e-6)
    assert out[0, 0] == pytest.approx(want_h, abs=1e-6) and h[0, 0] == out[0, 0]


def test_lstm_cifg_couples_input_gate_to_forget_gate() -> None:
    wi, wr, b = (0.0, -0.3, 0.8, 0.2), (0.0, 0.4, -0.6, 0.7), (0.0, 1.0, 0.1, -0.2)
    ins = [_f32([[0.7]])] + _cell_inputs(wi, wr, b, 0.2, -0.4, cifg=True) + _scalars()
    scratch, _, c, _ = _run(Op.LSTM, ins, _outs(4))
    f = _sig(-0.3 * 0.7 + 0.4 * 0.2 + 1.0)
    g = math.tanh(0.8 * 0.7 - 0.6 * 0.2 + 0.1)
    assert scratch.shape == (1, 3)
    assert c[0, 0] == pytest.approx(f * -0.4 + (1 - f) * g, abs=1e-6)


def test_lstm_cell_and_projection_clipping() -> None:
    wi, wr, b = (5.0, 5.0, 5.0, 5.0), (0.0,) * 4, (5.0, 5.0, 5.0, 5.0)
    ins = [_f32([[1.0]])] + _cell_inputs(wi, wr, b, 0.0, 3.0, proj=10.0) + _scalars(0, 0.5, 0.25)
    _, h, c, out = _run(Op.LSTM, ins, _outs(4))
    assert c[0, 0] == pytest.approx(0.5)           # clipped to cell_clip
    assert out[0, 0] == pytest.approx(0.25)        # projection clipped to proj_clip


def test_unidirectional_batch_major_carries_state() -> None:
    wi, wr, b = (0.5, -0.3, 0.8, 0.2), (0.1, 0.4, -0.6, 0.7), (0.0, 1.0, 0.1, -0.2)
    xs = [0.7, -0.2, 0.4]
    ins = ([_f32([[[v] for v in xs]])] + _cell_inputs(wi, wr, b, 0.0, 0.0) + _scalars()
           + [Tensor(T.BOOL, (), value=np.array(False))] + [_OMIT] * 4)
    out, h, c = _run(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, _outs(3))
    hh, cc = 0.0, 0.0
    for t, v in enumerate(xs):
        hh, cc = _reference_step(v, hh, cc, wi, wr, b)
        assert out[0, t, 0] == pytest.approx(hh, abs=1e-6)
    assert h[0, 0] == pytest.approx(hh, abs=1e-6) and c[0, 0] == pytest.approx(cc, abs=1e-6)


def _bidirectional_inputs(xs, merge: bool) -> list[Tensor]:
    fw = (0.5, -0.3, 0.8, 0.2), (0.1, 0.4, -0.6, 0.7), (0.0, 1.0, 0.1, -0.2)
    bw = (-0.5, 0.3, 0.2, 0.9), (0.2, -0.4, 0.6, 0.1), (0.3, 0.0, -0.1, 0.2)
    fw_cell = _cell_inputs(*fw, 0.0, 0.0)
    bw_cell = _cell_inputs(*bw, 0.0, 0.0)
    ins = ([_f32([[[v]] for v in xs])] + fw_cell[:17] + bw_cell[:17] + fw_cell[17:] + bw_cell[17:]
           + [_OMIT] * 9 + _scalars() + [Tensor(T.BOOL, (), value=np.array(merge)),
                                         Tensor(T.BOOL, (), value=np.array(True))] + [_OMIT] * 8)
    assert len(ins) == 61
    return ins


def test_bidirectional_backward_runs_in_reverse_and_merges() -> None:
    xs = [0.7, -0.2, 0.4]
    (merged,) = _run(Op.BIDIRECTIONAL_SEQUENCE_LSTM, _bidirectional_inputs(xs, True), _outs(1))
    fw_out, bw_out = _run(Op.BIDIRECTIONAL_SEQUENCE_LSTM, _bidirectional_inputs(xs, False), _outs(2))
    assert merged.shape == (3, 1, 2)
    np.testing.assert_array_equal(merged[..., :1], fw_out)
    np.testing.assert_array_equal(merged[..., 1:], bw_out)
    bw = (-0.5, 0.3, 0.2, 0.9), (0.2, -0.4, 0.6, 0.1), (0.3, 0.0, -0.1, 0.2)
    h, c = _reference_step(xs[2], 0.0, 0.0, *bw)      # the backward cell starts at the last step
    assert bw_out[2, 0, 0] == pytest.approx(h, abs=1e-6)
    h, _ = _reference_step(xs[1], h, c, *bw)
    assert bw_out[1, 0, 0] == pytest.approx(h, abs=1e-6)


def _invalid(op: Op, ins: list[Tensor], outs: list[Tensor], match: str) -> None:
    reg = find_operation(op)
    with pytest.raises(NnError) as e:
        reg.validate(OpContext(op, ins, outs, compile_time=True))
        reg.prepare(OpContext(op, ins, outs))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and match in str(e.value)


def test_invalid_activation_and_half_cifg() -> None:
    wi, wr, b = (0.5, -0.3, 0.8, 0.2), (0.1, 0.4, -0.6, 0.7), (0.0, 1.0, 0.1, -0.2)
    ins = [_f32([[0.7]])] + _cell_inputs(wi, wr, b, 0.2, -0.4) + _scalars(act=2)
    _invalid(Op.LSTM, ins, _outs(4), "activation")
    ins = [_f32([[0.7]])] + _cell_inputs(wi, wr, b, 0.2, -0.4) + _scalars()
    ins[5] = _OMIT  # recurrent-to-input omitted but input-to-input present
    _invalid(Op.LSTM, ins, _outs(4), "CIFG")
    ins = [_f32([[0.7]])] + _cell_inputs(wi, wr, b, 0.2, -0.4) + _scalars(cell_clip=-1.0)
    _invalid(Op.LSTM, ins, _outs(4), "cell clip")


def test_invalid_bidirectional_output_count_for_merge() -> None:
    _invalid(Op.BIDIRECTIONAL_SEQUENCE_LSTM, _bidirectional_inputs([0.1, 0.2], True), _outs(2),
             "merge_outputs")


def test_fixed_point_logistic_and_tanh() -> None:
    # F3 raw 4096 is 1.0; outputs are F0 (raw / 32768).
    assert fp_logistic(np.array([0]), 3, 16)[0] == 16384
    assert fp_logistic(np.array([4096]), 3, 16)[0] / 32768 == pytest.approx(_sig(1.0), abs=2e-4)
    assert fp_logistic(np.array([-8192]), 3, 16)[0] / 32768 == pytest.approx(_sig(-2.0), abs=2e-4)
    assert fp_tanh(np.array([-4096]), 3, 16)[0] / 32768 == pytest.approx(math.tanh(-1.0), abs=3e-4)


def _q16_inputs(input_scale=1 / 128) -> list[Tensor]:
    q8 = lambda v, s=1 / 128, zp=128: Tensor(T.TENSOR_QUANT8_ASYMM, np.shape(v), s, zp,  # noqa: E731
                                               value=np.asarray(v, np.uint8))
    ws = 0.00408021
    ins = [q8([[166, 179]], input_scale)]
    ins += [q8([[100 + k, 90], [110, 100]], ws, 100) for k in range(4)]   # input weights [2, 2]
    ins += [q8([[100, 120], [80, 100 + k]], ws, 100) for k in range(4)]   # recurrent [2, 2]
    bias_scale = float(np.float32(ws) / np.float32(128))
    ins += [Tensor(T.TENSOR_INT32, (2,), bias_scale, 0, value=np.array([1000 * k, -500], np.int32))
            for k in range(4)]
    ins += [Tensor(T.TENSOR_QUANT16_SYMM, (1, 2), 1 / 2048, 0, value=np.array([[876, -909]], np.int16)),
            q8([[136, 115]])]
    return ins


def test_quantized_16bit_lstm_matches_float_cell() -> None:
    ins = _q16_inputs()
    outs = [Tensor(T.TENSOR_QUANT16_SYMM, (), 1 / 2048, 0), Tensor(T.TENSOR_QUANT8_ASYMM, (), 1 / 128, 128)]
    c, out = _run(Op.QUANTIZED_16BIT_LSTM, ins, outs)
    # Float model of Android's kernel: activations [input, prev output] against weight rows
    # [recurrent, input] (QuantizedLSTMCell::concatenateWeights).
    x = (ins[0].value.astype(float) - 128) / 128
    h = (ins[14].value.astype(float) - 128) / 128
    cat = np.concatenate([x, h], 1)
    gates = [cat @ ((np.concatenate([ins[5 + k].value, ins[1 + k].value], 1) - 100.0) * 0.00408021).T
             + ins[9 + k].value * ins[9].scale for k in range(4)]
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    new_c = sig(gates[0]) * np.tanh(gates[2]) + sig(gates[1]) * ins[13].value / 2048
    np.testing.assert_allclose(c / 2048, new_c, atol=4 / 2048)
    np.testing.assert_allclose((out.astype(float) - 128) / 128, sig(gates[3]) * np.tanh(new_c), atol=2 / 128)


def test_quantized_16bit_lstm_rejects_wrong_input_scale() -> None:
    outs = [Tensor(T.TENSOR_QUANT16_SYMM, (), 1 / 2048, 0), Tensor(T.TENSOR_QUANT8_ASYMM, (), 1 / 128, 128)]
    _invalid(Op.QUANTIZED_16BIT_LSTM, _q16_inputs(input_scale=1 / 64), outs, "input 0")
