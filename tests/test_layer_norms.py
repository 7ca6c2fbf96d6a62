"""A layer normalization (Keras's LayerNormalization as TFLite converts it: MEAN, SUB, MUL, MEAN, ADD eps,
RSQRT and the scale and shift) runs on openvino as one MVN node, computing what its operations compute; a
chain that differs in any way (another axis, another variance, a scale that is not one per channel, an
intermediate value read elsewhere) lowers operation by operation, and is as right as before."""
from __future__ import annotations

import os

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.openvino.norms import find_layer_norms
from nnapi.validation import ConstantReader, infer_model_shapes

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")


def _const(m: nnapi.Model, array: np.ndarray, kind: T = T.TENSOR_FLOAT32) -> int:
    k = m.add_operand(kind, array.shape)
    m.set_operand_value(k, array)
    return k


def norm_model(shape: tuple[int, ...], *, seed: int = 0, form: str = "keras", axis: int = -1, square: str = "dd",
               gamma_per_row: bool = False, leak_mean: bool = False, clamp: bool = False) -> nnapi.Model:
    """x -> FULLY_CONNECTED-free layer norm of x + 1 -> RELU (the norm between two other operations).
    form "keras": y = x * g + (-mean) * g with g = rsqrt(var + eps) * gamma (beta folded away, as in
    tiny_transformer_f32); "shifted": y = x * g + (beta - mean * g)."""
    rng = np.random.default_rng(seed)
    m = nnapi.Model()
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    keep = m.add_operand(T.INT32)
    m.set_operand_value(keep, 1)
    channels = shape[-1]

    def new(s=shape):
        return m.add_operand(T.TENSOR_FLOAT32, s)

    reduced = shape[:-1] + (1,) if axis == -1 else tuple(1 if k == len(shape) + axis else d for k, d in enumerate(shape))
    inp = new()
    x = new()
    m.add_operation(Op.ADD, [inp, _const(m, np.ones(1, np.float32)), act], [x])
    axes = _const(m, np.array([axis], np.int32), T.TENSOR_INT32)
    mean, d, sq, var, ve, r = new(reduced), new(), new(), new(reduced), new(reduced), new(reduced)
    m.add_operation(Op.MEAN, [x, axes, keep], [mean])
    m.add_operation(Op.SUB, [x, mean, act], [d])
    m.add_operation(Op.MUL, [d, d if square == "dd" else x, act], [sq])
    m.add_operation(Op.MEAN, [sq, axes, keep], [var])
    m.add_operation(Op.ADD, [var, _const(m, np.array([1e-5], np.float32)), act], [ve])
    m.add_operation(Op.RSQRT, [ve], [r])
    gamma_shape = shape if gamma_per_row else (1,) * (len(shape) - 1) + (channels,)
    scaled = tuple(np.broadcast_shapes(reduced, gamma_shape))
    g = new(scaled)
    m.add_operation(Op.MUL, [r, _const(m, rng.uniform(0.5, 2, gamma_shape).astype(np.float32)), act], [g])
    xg, y = new(), new()
    m.add_operation(Op.MUL, [x, g, act], [xg])
    if form == "keras":
        negm, shift = new(reduced), new(scaled)
        m.add_operation(Op.NEG, [mean], [negm])
        m.add_operation(Op.MUL, [negm, g, act], [shift])
    else:
        mg, shift = new(scaled), new(scaled)
        m.add_operation(Op.MUL, [mean, g, act], [mg])
        m.add_operation(Op.SUB, [_const(m, rng.normal(0, 1, (channels,)).astype(np.float32)), mg, act], [shift])
    if clamp:  # (RELU fused into the last ADD, with a shift that random draws hardly ever take below 0)
        relu = m.add_operand(T.INT32)
        m.set_operand_value(relu, 1)
        shifted = new()
        m.add_operation(Op.ADD, [xg, shift, act], [shifted])
        m.add_operation(Op.ADD, [shifted, _const(m, np.full(1, 30, np.float32)), relu], [y])
    else:
        m.add_operation(Op.ADD, [xg, shift, act], [y])
    out = new()
    m.add_operation(Op.RELU, [y], [out])
    outputs = [out]
    if leak_mean:
        outputs.append(mean)
    m.identify_inputs_and_outputs([inp], outputs)
    m.finish()
    return m


def _layer_types(compilation: nnapi.Compilation) -> list[str]:
    compiled = compilation.steps[0].prepared.compiled
    return [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()]


def _compare(model: nnapi.Model, feeds: list[np.ndarray]) -> list[str]:
    """Runs `model` on openvino and on the reference driver; the openvino program's layer types."""
    ov = nnapi.Compilation(model, devices=["openvino"]).finish()
    want = nnapi.Compilation(model, devices=["reference"]).finish().execute(feeds)
    for got, ref in zip(ov.execute(feeds), want):
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    return _layer_types(ov)


def _norms(model: nnapi.Model) -> dict:
    hal = model.to_hal()
    return find_layer_norms(hal.main, infer_model_shapes(hal), ConstantReader(hal))


@pytest.mark.parametrize("form", ["keras", "shifted"])
@pytest.mark.parametrize("shape", [(1, 32, 64), (3, 16), (2, 5, 7, 8)])
def test_a_layer_norm_is_one_mvn_computing_what_its_operations_compute(shape, form):
    """Found with the model's own gamma and beta, and the graph's result what the reference driver gives.
    (OpenVINO's CPU plugin may run an MVN as its own nodes again: over 8 channels it keeps a mean and an
    RMS norm; over 64, the MVN.)"""
    rng = np.random.default_rng(len(shape))
    model = norm_model(shape, seed=len(shape), form=form)
    (norm,) = _norms(model).values()
    hal = model.to_hal()
    reader = ConstantReader(hal)
    values = [v for v in (reader.value(o) for o in hal.main.operands) if v is not None and v.size == shape[-1]]
    assert any(np.array_equal(norm.gamma, v.reshape(-1)) for v in values)
    assert np.array_equal(norm.beta, np.zeros(shape[-1], np.float32)) if form == "keras" else any(
        np.array_equal(norm.beta, v.reshape(-1)) for v in values if not np.array_equal(v.reshape(-1), norm.gamma))
    feeds = [(rng.normal(0, 3, shape) + rng.normal(0, 1, shape[-1])).astype(np.float32)]
    layers = _compare(model, feeds)
    if shape[-1] == 64:
        assert layers.count("MVN") == 1 and "Reduce" not in layers, layers


@pytest.mark.parametrize("change", [dict(axis=-2), dict(square="dx"), dict(gamma_per_row=True), dict(leak_mean=True)],
                         ids=["other-axis", "not-the-variance", "gamma-per-row", "mean-read-elsewhere"])
def test_a_chain_that_is_not_a_layer_norm_lowers_operation_by_operation_and_computes_right(change):
    rng = np.random.default_rng(5)
    shape = (2, 6, 8)
    model = norm_model(shape, seed=5, **change)
    assert not _norms(model)
    layers = _compare(model, [rng.normal(0, 3, shape).astype(np.float32)])
    assert "MVN" not in layers and "RMS" not in layers, layers


def test_the_keras_tiny_transformer_runs_its_five_layer_norms_as_mvn_as_litert_computes_it():
    path = os.path.join(MODELS, "keras", "tiny_transformer_f32.tflite")
    ref = np.load(os.path.join(MODELS, "reference", "tiny_transformer_f32.npz"))
    session = nnapi.load(path, devices="openvino")
    assert _layer_types(session.compilation).count("MVN") == 5
    got = np.asarray(session.run(ref["input_0"])["output_0"])
    np.testing.assert_allclose(got, ref["output_0"], atol=1e-5)


def test_a_fused_activation_ends_the_norm_before_it():
    """A clamp that random draws hardly ever reach (RELU after a shift of 30) is not taken for part of the
    norm: the norm ends at the value before it, and the clamp lowers as itself."""
    rng = np.random.default_rng(9)
    shape = (4, 16)
    model = norm_model(shape, seed=9, clamp=True)
    (norm,) = _norms(model).values()
    hal = model.to_hal()
    reader = ConstantReader(hal)
    ops_ = hal.main.operations
    code = [int(reader.value(hal.main.operands[op.inputs[2]])) for op in (ops_[norm.last], ops_[norm.last + 1])]
    assert ops_[norm.last].outputs[0] == norm.y and norm.y in ops_[norm.last + 1].inputs and code == [0, 1]
    _compare(model, [rng.normal(0, 3, shape).astype(np.float32)])
