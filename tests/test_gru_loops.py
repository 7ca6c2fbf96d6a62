"""A WHILE that runs a GRU cell over a sequence (Keras's GRU as TFLite converts it) runs on openvino as one
GRUSequence node, computing what the loop computes; a body that differs from the cell in any way (gate
order, activation, which step it reads) keeps its loop, and is as right as before."""
from __future__ import annotations

import os

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import ExecutionPreference

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")


def _scalar(m: nnapi.Model, value: int) -> int:
    k = m.add_operand(T.INT32)
    m.set_operand_value(k, value)
    return k


def _const(m: nnapi.Model, array: np.ndarray, kind: T = T.TENSOR_FLOAT32) -> int:
    k = m.add_operand(kind, array.shape)
    m.set_operand_value(k, array)
    return k


def _body(steps: int, batch: int, inputs: int, hidden: int, rng: np.random.Generator, *, gates: str,
          candidate: Op) -> nnapi.Model:
    """The cell as Keras writes it: (i, j, slot, h, seq) -> (i + 1, j + 1, h' as [1, B, H], h')."""
    m = nnapi.Model()
    i, j = m.add_operand(T.TENSOR_INT32, (1,)), m.add_operand(T.TENSOR_INT32, (1,))
    slot = m.add_operand(T.TENSOR_FLOAT32, (1, batch, hidden))
    h = m.add_operand(T.TENSOR_FLOAT32, (batch, hidden))
    seq = m.add_operand(T.TENSOR_FLOAT32, (steps, batch, inputs))
    one = _const(m, np.array([1], np.int32), T.TENSOR_INT32)
    act = _scalar(m, 0)

    def new(shape, kind=T.TENSOR_FLOAT32):
        return m.add_operand(kind, shape)

    i2, j2 = new((1,), T.TENSOR_INT32), new((1,), T.TENSOR_INT32)
    m.add_operation(Op.ADD, [i, one, act], [i2])
    m.add_operation(Op.ADD, [j, one, act], [j2])
    hp = new((batch, 3 * hidden))
    m.add_operation(Op.FULLY_CONNECTED, [h, _const(m, rng.normal(0, 0.3, (3 * hidden, hidden)).astype(np.float32)),
                                         _const(m, rng.normal(0, 0.3, 3 * hidden).astype(np.float32)), act], [hp])
    hz, hr, hh = new((batch, hidden)), new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.SPLIT, [hp, _scalar(m, 1), _scalar(m, 3)], [hz, hr, hh])
    picked, x = new((1, batch, inputs)), new((batch, inputs))
    m.add_operation(Op.GATHER, [seq, _scalar(m, 0), j], [picked])
    m.add_operation(Op.RESHAPE, [picked, _const(m, np.array([batch, inputs], np.int32), T.TENSOR_INT32)], [x])
    xp = new((batch, 3 * hidden))
    m.add_operation(Op.FULLY_CONNECTED, [x, _const(m, rng.normal(0, 0.3, (3 * hidden, inputs)).astype(np.float32)),
                                         _const(m, rng.normal(0, 0.3, 3 * hidden).astype(np.float32)), act], [xp])
    xz, xr, xh = new((batch, hidden)), new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.SPLIT, [xp, _scalar(m, 1), _scalar(m, 3)], [xz, xr, xh])
    parts = {"z": (xz, hz), "r": (xr, hr)}
    z_in, r_in = new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.ADD, [*parts[gates[0]], act], [z_in])
    m.add_operation(Op.ADD, [*parts[gates[1]], act], [r_in])
    z, r = new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.LOGISTIC, [z_in], [z])
    m.add_operation(Op.LOGISTIC, [r_in], [r])
    rh, n_in, n = new((batch, hidden)), new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.MUL, [r, hh, act], [rh])
    m.add_operation(Op.ADD, [xh, rh, act], [n_in])
    m.add_operation(candidate, [n_in], [n])
    keep, rest, take, h2 = new((batch, hidden)), new((batch, hidden)), new((batch, hidden)), new((batch, hidden))
    m.add_operation(Op.MUL, [z, h, act], [keep])
    m.add_operation(Op.SUB, [_const(m, np.ones(1, np.float32)), z, act], [rest])
    m.add_operation(Op.MUL, [rest, n, act], [take])
    m.add_operation(Op.ADD, [keep, take, act], [h2])
    slot2 = new((1, batch, hidden))
    m.add_operation(Op.RESHAPE, [h2, _const(m, np.array([1, batch, hidden], np.int32), T.TENSOR_INT32)], [slot2])
    m.identify_inputs_and_outputs([i, j, slot, h, seq], [i2, j2, slot2, h2])
    m.finish()
    return m


def _cond(steps: int, batch: int, inputs: int, hidden: int, trips: int) -> nnapi.Model:
    m = nnapi.Model()
    i, j = m.add_operand(T.TENSOR_INT32, (1,)), m.add_operand(T.TENSOR_INT32, (1,))
    others = [m.add_operand(T.TENSOR_FLOAT32, s) for s in ((1, batch, hidden), (batch, hidden), (steps, batch, inputs))]
    bound = _const(m, np.array([trips], np.int32), T.TENSOR_INT32)
    a, b, go = (m.add_operand(T.TENSOR_BOOL8, (1,)) for _ in range(3))
    m.add_operation(Op.LESS, [i, bound], [a])
    m.add_operation(Op.LESS, [j, bound], [b])
    m.add_operation(Op.LOGICAL_AND, [a, b], [go])
    m.identify_inputs_and_outputs([i, j, *others], [go])
    m.finish()
    return m


def gru_model(steps: int = 12, batch: int = 1, inputs: int = 8, hidden: int = 6, *, seed: int = 0, gates: str = "zr",
              candidate: Op = Op.TANH, start: int = 0, state_input: bool = False) -> nnapi.Model:
    """seq [steps, B, I] (and h0 [B, H] with `state_input`) -> (h [B, H], the last output [1, B, H]),
    a GRU over the steps from `start`."""
    rng = np.random.default_rng(seed)
    m = nnapi.Model()
    c, b = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, _cond(steps, batch, inputs, hidden, steps))
    m.set_operand_value_from_model(b, _body(steps, batch, inputs, hidden, rng, gates=gates, candidate=candidate))
    counter = _const(m, np.array([start], np.int32), T.TENSOR_INT32)
    slot0 = _const(m, np.zeros((1, batch, hidden), np.float32))
    if state_input:
        h0 = m.add_operand(T.TENSOR_FLOAT32, (batch, hidden))
    else:
        h0 = _const(m, np.zeros((batch, hidden), np.float32))
    seq = m.add_operand(T.TENSOR_FLOAT32, (steps, batch, inputs))
    outs = [m.add_operand(T.TENSOR_INT32, (1,)), m.add_operand(T.TENSOR_INT32, (1,)),
            m.add_operand(T.TENSOR_FLOAT32, (1, batch, hidden)), m.add_operand(T.TENSOR_FLOAT32, (batch, hidden))]
    m.add_operation(Op.WHILE, [c, b, counter, counter, slot0, h0, seq], outs)
    m.identify_inputs_and_outputs([seq, h0] if state_input else [seq], [outs[3], outs[2]])
    m.finish()
    return m


def _layer_types(compilation: nnapi.Compilation) -> set[str]:
    compiled = compilation.steps[0].prepared.compiled
    return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}


def _compare(model: nnapi.Model, feeds: list[np.ndarray], **options) -> set[str]:
    """Runs `model` on openvino and on the reference driver; the openvino program's layer types."""
    ov = nnapi.Compilation(model, devices=["openvino"], **options).finish()
    want = nnapi.Compilation(model, devices=["reference"]).finish().execute(feeds)
    for got, ref in zip(ov.execute(feeds), want):
        np.testing.assert_allclose(got, ref, atol=2e-6, rtol=1e-5)
    return _layer_types(ov)


@pytest.mark.parametrize("preference", [ExecutionPreference.FAST_SINGLE_ANSWER, ExecutionPreference.SUSTAINED_SPEED])
@pytest.mark.parametrize("shape", [(12, 1, 8, 6), (5, 3, 4, 7), (1, 2, 3, 4), (100, 1, 3, 5)])
def test_a_gru_loop_is_one_gru_sequence_computing_what_the_loop_computes(shape, preference):
    steps, batch, inputs, hidden = shape
    rng = np.random.default_rng(steps)
    model = gru_model(steps, batch, inputs, hidden, seed=steps, state_input=True)
    feeds = [rng.normal(0, 2, (steps, batch, inputs)).astype(np.float32),
             rng.uniform(-1, 1, (batch, hidden)).astype(np.float32)]
    layers = _compare(model, feeds, preference=preference)
    assert "RNNSeq" in layers and not layers & {"TensorIterator", "Loop"}, layers


@pytest.mark.parametrize("change", [dict(gates="rz"), dict(candidate=Op.RELU), dict(candidate=Op.LOGISTIC),
                                    dict(start=1)], ids=["gates-swapped", "relu", "logistic", "reads-one-ahead"])
def test_a_loop_that_is_not_the_cell_keeps_its_loop_and_computes_right(change):
    rng = np.random.default_rng(7)
    model = gru_model(12, 2, 5, 4, seed=3, **change)
    layers = _compare(model, [rng.normal(0, 2, (12, 2, 5)).astype(np.float32)])
    assert "RNNSeq" not in layers, layers


def test_the_keras_gru_text_model_runs_as_one_gru_sequence_as_litert_computes_it():
    path = os.path.join(MODELS, "keras", "gru_text_f32.tflite")
    ref = np.load(os.path.join(MODELS, "reference", "gru_text_f32.npz"))
    for preference in ("fast-single-answer", "sustained-speed"):
        session = nnapi.load(path, devices="openvino", preference=preference)
        assert "RNNSeq" in _layer_types(session.compilation)
        got = np.asarray(session.run(ref["input_0"])["output_0"])
        np.testing.assert_allclose(got, ref["output_0"], atol=1e-5)
