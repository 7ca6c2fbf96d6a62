"""RNN, UNIDIRECTIONAL/BIDIRECTIONAL_SEQUENCE_RNN and SVDF: hand-computed cells, layouts, aux
linking modes, state outputs and parameter errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

F32 = T.TENSOR_FLOAT32


def _t(v, t: T = F32) -> Tensor:
    a = np.asarray(v, Tensor(t, ()).dtype)
    return Tensor(t, a.shape, value=a)


def _scalar(v, t: T = T.INT32) -> Tensor:
    return Tensor(t, (), value=np.array(v, Tensor(t, ()).dtype))


def _omitted(t: T = F32) -> Tensor:
    return Tensor(t, (0,), omitted=True)


def _run(op: Op, ins: list[Tensor], n_out: int, out_type: T = F32) -> list[np.ndarray]:
    reg = find_operation(op)
    outs = [Tensor(out_type, ()) for _ in range(n_out)]
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    dims = reg.prepare(ctx)
    res = reg.execute(ctx)
    assert [r.shape for r in res] == [tuple(d) for d in dims]
    assert all(r.dtype == o.dtype for r, o in zip(res, outs))
    return res


def _fails(op: Op, ins: list[Tensor], n_out: int, match: str) -> None:
    with pytest.raises(NnError, match=match) as info:
        _run(op, ins, n_out)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT


# --- RNN ----------------------------------------------------------------------------------------
def _rnn_inputs(act: int, t: T = F32) -> list[Tensor]:
    # out = 2 * 0.5 + 0.25 + 1 * 2 = 3.25 before the activation
    return [_t([[2.0]], t), _t([[0.5]], t), _t([[2.0]], t), _t([0.25], t), _t([[1.0]], t), _scalar(act)]


def test_rnn_step_by_hand() -> None:
    state, out = _run(Op.RNN, _rnn_inputs(0), 2)
    assert out.tolist() == [[3.25]] and state.tolist() == [[3.25]]
    assert _run(Op.RNN, _rnn_inputs(2), 2)[1].tolist() == [[1.0]]           # RELU1


def test_rnn_tanh_activation_and_float16() -> None:
    out = _run(Op.RNN, _rnn_inputs(4, T.TENSOR_FLOAT16), 2, T.TENSOR_FLOAT16)[1]
    assert out.dtype == np.float16
    assert abs(float(out[0, 0]) - math.tanh(3.25)) < 1e-3


def test_rnn_bad_activation_and_shapes() -> None:
    _fails(Op.RNN, _rnn_inputs(5), 2, "activation")
    bad = _rnn_inputs(0)
    bad[3] = _t([0.25, 0.5])                                                 # bias of 2 for 1 unit
    _fails(Op.RNN, bad, 2, "bias")


# --- UNIDIRECTIONAL_SEQUENCE_RNN ----------------------------------------------------------------
def _cell(x, time_major: int, n_out: int = 1):
    # W = R = 1, bias 0, h0 = 0, no activation: h_t = x_t + h_{t-1}
    return [_t(x), _t([[1.0]]), _t([[1.0]]), _t([0.0]), _t([[0.0]]), _scalar(0), _scalar(time_major)]


def test_unidirectional_batch_major_and_time_major() -> None:
    out, = _run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, _cell([[[1.0], [2.0], [3.0]]], 0), 1)
    assert out.tolist() == [[[1.0], [3.0], [6.0]]]                            # [batch, time, units]
    out, state = _run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, _cell([[[1.0]], [[2.0]], [[3.0]]], 1), 2)
    assert out.tolist() == [[[1.0]], [[3.0]], [[6.0]]]                        # [time, batch, units]
    assert state.tolist() == [[6.0]]


def test_unidirectional_time_major_must_be_0_or_1() -> None:
    _fails(Op.UNIDIRECTIONAL_SEQUENCE_RNN, _cell([[[1.0]]], 2), 1, "time_major")


# --- BIDIRECTIONAL_SEQUENCE_RNN -----------------------------------------------------------------
def _bi(x, *, aux=None, fw_aux=None, bw_aux=None, time_major=False, merge=False):
    one = lambda: [_t([[1.0]]), _t([[1.0]]), _t([0.0]), _t([[0.0]])]        # noqa: E731
    return ([_t(x)] + one() + one()
            + [_t(a) if a is not None else _omitted() for a in (aux, fw_aux, bw_aux)]
            + [_scalar(0), _scalar(time_major, T.BOOL), _scalar(merge, T.BOOL)])


X = [[[1.0], [2.0], [3.0]]]                                                  # batch 1, time 3


def test_bidirectional_forward_and_backward_passes() -> None:
    fw, bw, fw_state, bw_state = _run(Op.BIDIRECTIONAL_SEQUENCE_RNN, _bi(X), 4)
    assert fw.tolist() == [[[1.0], [3.0], [6.0]]]
    assert bw.tolist() == [[[6.0], [5.0], [3.0]]]                             # runs from the last step
    assert fw_state.tolist() == [[6.0]] and bw_state.tolist() == [[6.0]]      # bw state: after step 0


def test_bidirectional_merged_time_major() -> None:
    x = np.swapaxes(np.array(X), 0, 1)
    merged, = _run(Op.BIDIRECTIONAL_SEQUENCE_RNN, _bi(x, time_major=True, merge=True), 1)
    assert merged.tolist() == [[[1.0, 6.0]], [[3.0, 5.0]], [[6.0, 3.0]]]      # forward units first


def test_bidirectional_parallel_linking_feeds_aux_to_backward_cell() -> None:
    fw, bw = _run(Op.BIDIRECTIONAL_SEQUENCE_RNN, _bi(X, aux=[[[10.0], [20.0], [30.0]]]), 2)
    assert fw.tolist() == [[[1.0], [3.0], [6.0]]]
    assert bw.tolist() == [[[60.0], [50.0], [30.0]]]


def test_bidirectional_cross_linking_adds_aux_weights() -> None:
    fw, bw = _run(Op.BIDIRECTIONAL_SEQUENCE_RNN,
                  _bi(X, aux=[[[1.0], [1.0], [1.0]]], fw_aux=[[2.0]], bw_aux=[[-1.0]]), 2)
    assert fw.tolist() == [[[3.0], [7.0], [12.0]]]                            # x + 2*aux + h
    assert bw.tolist() == [[[3.0], [3.0], [2.0]]]                             # x - aux + h, reversed


def test_bidirectional_errors() -> None:
    _fails(Op.BIDIRECTIONAL_SEQUENCE_RNN, _bi(X, fw_aux=[[1.0]]), 2, "auxiliary")
    _fails(Op.BIDIRECTIONAL_SEQUENCE_RNN, _bi(X, merge=True), 2, "merge_outputs")


# --- SVDF ---------------------------------------------------------------------------------------
def _svdf(rank: int, bias=None, act: int = 0):
    # 2 filters of memory 2, input size 1; state per filter (oldest first): f0 [3, 99], f1 [5, 99]
    return [_t([[1.0]]), _t([[1.0], [2.0]]), _t([[1.0, 10.0], [100.0, 1000.0]]),
            _t(bias) if bias is not None else _omitted(), _t([[3.0, 99.0, 5.0, 99.0]]),
            _scalar(rank), _scalar(act)]


def test_svdf_by_hand() -> None:
    # newest slot <- input * weights_feature: f0 [3, 1], f1 [5, 2]
    # f0: 3*1 + 1*10 = 13, f1: 5*100 + 2*1000 = 2500; rank 2 sums both into one unit
    state, out = _run(Op.SVDF, _svdf(2, bias=[0.5]), 2)
    assert out.tolist() == [[2513.5]]
    assert state.tolist() == [[1.0, 0.0, 2.0, 0.0]]                           # shifted left, zero in
    _, out = _run(Op.SVDF, _svdf(1), 2)                                       # rank 1: two units, no bias
    assert out.tolist() == [[13.0, 2500.0]]
    _, out = _run(Op.SVDF, _svdf(1, act=2), 2)                                # RELU1
    assert out.tolist() == [[1.0, 1.0]]


def test_svdf_bad_rank() -> None:
    _fails(Op.SVDF, _svdf(0), 2, "rank")
    _fails(Op.SVDF, _svdf(3), 2, "rank 3")


def test_bidirectional_params_resolve_linking_layout_and_shapes() -> None:
    from nnapi.ops import resolve
    ins = _bi(X, aux=[[[10.0], [20.0], [30.0]]], merge=True)
    p = resolve(OpContext(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [Tensor(F32, ())]))
    assert (p.activation, p.time_major, p.merge_outputs, p.linking) == (0, False, True, "parallel")
    assert (p.fw_units, p.bw_units, p.out_dims) == (1, 1, ((1, 3, 2),))
