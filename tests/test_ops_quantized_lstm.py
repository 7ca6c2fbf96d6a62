"""QUANTIZED_LSTM: hand-computed integer LSTM steps (zero weights, layer normalization, peephole,
projection with clipping) and INVALID_ARGUMENT for malformed operands."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_OP = Op.QUANTIZED_LSTM


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _t(t: T, values, scale: float = 0.0, zero_point: int = 0) -> Tensor:
    v = np.asarray(values, dtype=Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zero_point, value=v)


def _omit(t: T, scale: float = 0.0) -> Tensor:
    return Tensor(t, (), scale, omitted=True)


def _inputs(*, n_input: int, n_units: int, n_output: int, x, c_prev, h_prev=None,
            in_w=None, rec_w=None, bias=None, peephole=None, layer_norm=None, proj=None,
            proj_bias=None, cifg=True, cell_scale=2.0 ** -15, cell_clip=0.0, proj_clip=0.0,
            inter=2.0 ** -12, hidden_zp=0, hidden_scale=2.0 ** -7) -> list[Tensor]:
    """The 32 inputs; weights default to zero, gate k = 0 input, 1 forget, 2 cell, 3 output."""
    q8, q16, i32 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_INT32
    w_scale = 1 / 127
    in_w = in_w or {}
    rec_w = rec_w or {}
    bias = bias or {}
    ins = [_t(T.TENSOR_QUANT8_ASYMM_SIGNED, x, 2.0 ** -7)]
    for k in range(4):
        ins.append(_omit(q8, w_scale) if cifg and k == 0 else
                   _t(q8, in_w.get(k, np.zeros((n_units, n_input))), w_scale))
    for k in range(4):
        ins.append(_omit(q8, w_scale) if cifg and k == 0 else
                   _t(q8, rec_w.get(k, np.zeros((n_units, n_output))), w_scale))
    for k in range(3):
        if peephole is None or (cifg and k == 0):
            ins.append(_omit(q16, 1.0))
        else:
            ins.append(_t(q16, peephole[0][k], peephole[1]))
    for k in range(4):
        ins.append(_omit(i32) if cifg and k == 0 else _t(i32, bias.get(k, np.zeros(n_units))))
    ins.append(_omit(q8, 1 / 127) if proj is None else _t(q8, proj[0], proj[1]))
    ins.append(_omit(i32) if proj_bias is None else _t(i32, proj_bias))
    h_prev = np.zeros((len(x), n_output)) if h_prev is None else h_prev
    ins.append(_t(T.TENSOR_QUANT8_ASYMM_SIGNED, h_prev, hidden_scale, hidden_zp))
    ins.append(_t(q16, c_prev, cell_scale))
    for k in range(4):
        if layer_norm is None or (cifg and k == 0):
            ins.append(_omit(q16, 2.0 ** -14))
        else:
            ins.append(_t(q16, layer_norm[0][k], layer_norm[1]))
    for v in (cell_clip, proj_clip, inter, inter, inter, inter):
        ins.append(_t(T.FLOAT32, v))
    ins += [_t(T.INT32, hidden_zp), _t(T.FLOAT32, hidden_scale)]
    return ins


def _outs() -> list[Tensor]:
    return [Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (), 2.0 ** -7), Tensor(T.TENSOR_QUANT16_SYMM, (), 2.0 ** -15),
            Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, (), 2.0 ** -7)]


def _run(ins: list[Tensor], outs: list[Tensor] | None = None) -> list[np.ndarray]:
    outs = outs or _outs()
    reg = find_operation(_OP)
    reg.validate(OpContext(_OP, ins, outs, compile_time=True))
    ctx = OpContext(_OP, ins, outs)
    shapes = reg.prepare(ctx)
    res = reg.execute(ctx)
    for r, s, o in zip(res, shapes, outs):
        assert r.shape == tuple(s) and r.dtype == o.dtype
    return res


def _invalid(ins: list[Tensor], *words: str, outs: list[Tensor] | None = None) -> None:
    with pytest.raises(NnError) as e:
        _run(ins, outs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in ("QUANTIZED_LSTM",) + words:
        assert w in e.value.message, e.value.message


@pytest.mark.parametrize("cifg", [True, False])
def test_zero_weights_halve_the_cell_state(cifg: bool) -> None:
    # All gate pre-activations are 0: forget = input = output = sigmoid(0) = 1/2 and the cell
    # gate tanh(0) = 0, so c = c_prev / 2 and h = tanh(c) / 2 (hidden scale 2^-7).
    c_prev = [[20000, -6000]]
    h_state, cell, out = _run(_inputs(n_input=1, n_units=2, n_output=2, x=[[50]], c_prev=c_prev, cifg=cifg))
    assert cell.tolist() == [[10000, -3000]]
    want = [round(0.5 * math.tanh(c * 2.0 ** -15) * 128) for c in (10000, -3000)]  # 19, -6
    assert np.abs(out[0].astype(int) - want).max() <= 1
    assert np.array_equal(h_state, out)


def test_gate_biases_unused_without_layer_norm() -> None:
    # Android's QLSTM folds only the zero points into the matmul bias; the gate biases are added
    # by the layer normalization alone.
    base = _run(_inputs(n_input=1, n_units=1, n_output=1, x=[[50]], c_prev=[[20000]]))
    biased = _run(_inputs(n_input=1, n_units=1, n_output=1, x=[[50]], c_prev=[[20000]],
                          bias={1: [1 << 20], 2: [-(1 << 20)], 3: [1 << 20]}))
    for a, b in zip(base, biased):
        assert np.array_equal(a, b)


def test_layer_norm_normalizes_gates_and_adds_bias() -> None:
    # Forget gate: x = 0.5 times rows +1 / -1 gives +0.5 / -0.5, normalized to z = +1 / -1, times
    # layer norm weight 1 (16384 * 2^-14): forget = sigmoid(+-1). Cell gate: zero matmul,
    # bias 2^23 * 2^-14 / 1024 = 0.5: tanh(0.5). Output gate: sigmoid(0) = 1/2. CIFG: i = 1 - f.
    ln = ([None, [16384, 16384], [16384, 16384], [16384, 16384]], 2.0 ** -14)
    ins = _inputs(n_input=2, n_units=2, n_output=2, x=[[64, 0]], c_prev=[[16384, -16384]],
                  in_w={1: [[127, 0], [-127, 0]]}, bias={2: [1 << 23, 1 << 23]}, layer_norm=ln)
    _, cell, out = _run(ins)
    f = [_sig(1.0), _sig(-1.0)]
    g = math.tanh(0.5)
    c = [f[0] * 0.5 + (1 - f[0]) * g, f[1] * -0.5 + (1 - f[1]) * g]   # 0.4898, 0.2034
    assert np.abs(cell[0] * 2.0 ** -15 - c).max() < 2e-3
    h = [0.5 * math.tanh(v) * 128 for v in c]                           # 29.06, 12.84
    assert np.abs(out[0] - np.round(h)).max() <= 1


def test_forget_peephole_reads_previous_cell_state() -> None:
    # cell-to-forget 16384 * 2^-13 = 2 on c_prev = 0.5 gives forget = sigmoid(1); CIFG input
    # gate 1 - f times tanh(0) adds nothing: c = 0.5 * sigmoid(1).
    peep = ([None, [16384], [0]], 2.0 ** -13)
    _, cell, _ = _run(_inputs(n_input=1, n_units=1, n_output=1, x=[[0]], c_prev=[[16384]], peephole=peep))
    assert abs(cell[0, 0] - 0.5 * _sig(1.0) * 32768) <= 4


def test_cell_clip() -> None:
    # c = c_prev / 2 = 0.3 is clipped to 0.25 (8192 in 2^-15 units).
    _, cell, _ = _run(_inputs(n_input=1, n_units=1, n_output=1, x=[[0]], c_prev=[[19661]], cell_clip=0.25))
    assert cell.tolist() == [[8192]]


def test_projection_and_projection_clip() -> None:
    # Zero gates: hidden = tanh(c) / 2 * 128 = 19 (c = 10000 * 2^-15). Projection weight 127/127 = 1
    # and bias 381 (scale weight scale * hidden scale: 381 / 127 = 3 output units) give 22; the
    # projection clip counts in projection weight units (Android): 0.1 / (1/127) = 12.7 -> 12.
    kw = dict(n_input=1, n_units=1, n_output=1, x=[[0]], c_prev=[[20000]], proj=([[127]], 1 / 127))
    _, _, out = _run(_inputs(**kw, proj_bias=[381]))
    assert abs(int(out[0, 0]) - 22) <= 1
    h_state, _, out = _run(_inputs(**kw, proj_bias=[381], proj_clip=0.1))
    assert out.tolist() == [[12]] and h_state.tolist() == [[12]]


def test_projection_to_smaller_output() -> None:
    kw = dict(n_input=1, n_units=2, n_output=1, x=[[0]], c_prev=[[20000, 20000]],
              proj=([[127, -127]], 1 / 127), proj_bias=[0])
    h_state, cell, out = _run(_inputs(**kw))
    assert out.shape == (1, 1) and cell.shape == (1, 2) and h_state.shape == (1, 1)
    assert out.tolist() == [[0]]


def _good(**kw) -> list[Tensor]:
    return _inputs(n_input=1, n_units=1, n_output=1, x=[[0]], c_prev=[[0]], **kw)


def test_wrong_counts_and_types() -> None:
    _invalid(_good()[:31], "expected 32 inputs")
    _invalid(_good(), "expected 3 outputs", outs=_outs()[:2])
    ins = _good()
    ins[0] = _t(T.TENSOR_QUANT8_ASYMM, [[0]], 2.0 ** -7, 128)
    _invalid(ins, "input 0 has type")
    ins = _good()
    ins[19] = _t(T.TENSOR_QUANT8_ASYMM_SIGNED, [[0]], 2.0 ** -7)
    _invalid(ins, "input 19")


def test_cifg_all_or_none() -> None:
    ins = _good()
    ins[1] = _t(T.TENSOR_QUANT8_SYMM, [[1]], 1 / 127)
    _invalid(ins, "CIFG")
    ins = _good()
    ins[12] = _t(T.TENSOR_INT32, [0])
    _invalid(ins, "input gate bias", "CIFG")


def test_required_and_shapes() -> None:
    ins = _good()
    ins[2] = _omit(T.TENSOR_QUANT8_SYMM, 1 / 127)
    _invalid(ins, "input 2", "omitted")
    ins = _good()
    ins[3] = _t(T.TENSOR_QUANT8_SYMM, [[1, 2]], 1 / 127)
    _invalid(ins, "input 3", "shape")
    ins = _good()
    ins[19] = _t(T.TENSOR_QUANT16_SYMM, [[0, 0]], 2.0 ** -15)
    _invalid(ins, "input 19", "shape")


def test_partial_peephole_and_layer_norm_rejected() -> None:
    ins = _good()
    ins[10] = _t(T.TENSOR_QUANT16_SYMM, [1], 1.0)
    _invalid(ins, "peephole")
    ins = _good()
    ins[21] = _t(T.TENSOR_QUANT16_SYMM, [1], 2.0 ** -14)
    _invalid(ins, "layer norm")


def test_cell_state_scale_must_be_small_power_of_two() -> None:
    _invalid(_good(cell_scale=3e-5), "input 19", "power of two")
    _invalid(_good(cell_scale=2.0 ** -8), "input 19", "2^-9")


def test_hidden_zero_point_cancels_through_projection() -> None:
    # Android stores the hidden state as q - zero point and adds zero point * row sums to the
    # projection bias, so the projected output is the zp = 0 result (22) plus the output zero point.
    kw = dict(n_input=1, n_units=1, n_output=1, x=[[0]], c_prev=[[20000]], proj=([[127]], 1 / 127),
              proj_bias=[381])
    _, _, out0 = _run(_inputs(**kw))
    _, _, out10 = _run(_inputs(**kw, hidden_zp=10))
    assert int(out10[0, 0]) == int(out0[0, 0]) + 10


def test_params_resolve_sizes_flags_scalars_and_operand_positions() -> None:
    from nnapi.ops import resolve
    ins = _inputs(n_input=3, n_units=2, n_output=2, x=np.zeros((1, 3)), c_prev=np.zeros((1, 2)), cifg=False,
                  cell_clip=0.5, hidden_zp=200, inter=2.0 ** -10)
    p = resolve(OpContext(_OP, ins, _outs(), compile_time=True))
    assert (p.batch, p.input_size, p.num_units, p.output_size) == (1, 3, 2, 2)
    assert (p.use_cifg, p.use_peephole, p.use_layer_norm, p.use_projection) == (False, False, False, False)
    assert (p.cell_shift, p.cell_clip, p.intermediate_scales) == (-15, 0.5, (2.0 ** -10,) * 4)
    assert p.hidden_zero_point == 200 - 256  # read as int8, as Android does
    assert (p.input_weights, p.output_state_in, p.cell_state_in) == ((1, 2, 3, 4), 18, 19)
    assert p.out_dims == ((1, 2), (1, 2), (1, 2))
