"""Relaxed float32 (Android's relax_computation_float32_to_float16) runs in float16 where the hardware
gains by it: openvino on a CPU with float16 matrix units (AMX-FP16), or with float16 vector arithmetic
(AVX512-FP16) when NNAPI_OPENVINO_RELAXED_F16=1 asks, never bf16; elsewhere in float32 as before."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import nnapi
from nnapi.drivers.base.shared import cpu_flags
from nnapi.drivers.openvino.device import FLOAT16_DEFAULT, FLOAT16_FORCED, native_float16
from nnapi.hal import NnError

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")
MODEL = os.path.join(MODELS, "keras", "resnet_mini_f32.tflite")


def _precision(session) -> str:
    return str(session.compilation.steps[0].prepared.compiled.get_property("INFERENCE_PRECISION_HINT"))


def test_a_relaxed_model_runs_in_float16_on_openvino_where_the_cpu_has_it():
    x = np.load(os.path.join(MODELS, "reference", "resnet_mini_f32.npz"))["input_0"]
    exact = nnapi.load(MODEL, devices=["openvino"])
    relaxed = nnapi.load(MODEL, devices=["openvino"], relaxed=True)
    assert relaxed.compilation.model.to_hal().relax_computation_float32_to_float16
    assert "float32" in _precision(exact)
    assert ("float16" if native_float16() else "float32") in _precision(relaxed)
    y, y16 = (np.asarray(list(s.run([x]).values())[0]) for s in (exact, relaxed))
    assert np.argmax(y) == np.argmax(y16) and np.abs(y - y16).max() < 0.02, np.abs(y - y16).max()


def test_relaxed_float16_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("NNAPI_OPENVINO_RELAXED_F16", "0")
    native_float16.cache_clear()
    try:
        assert "float32" in _precision(nnapi.load(MODEL, devices=["openvino"], relaxed=True))
    finally:
        monkeypatch.delenv("NNAPI_OPENVINO_RELAXED_F16")
        native_float16.cache_clear()


def test_relaxed_float16_by_default_only_on_matrix_units_and_on_vector_units_when_asked(monkeypatch):
    """OpenVINO's f16 kernels on AVX512-FP16 alone ran slower than its f32 on every float shared model
    (Sapphire Rapids): there f16 is an opt-in, and the driver's version says which, since an imported
    export keeps the precision it was compiled in."""
    from nnapi.drivers.openvino.device import OpenVinoDevice
    assert "avx512_fp16" not in FLOAT16_DEFAULT and "avx512_fp16" in FLOAT16_FORCED
    versions = {}
    try:
        for setting, features in (("", FLOAT16_DEFAULT), ("1", FLOAT16_FORCED)):
            monkeypatch.setenv("NNAPI_OPENVINO_RELAXED_F16", setting)
            native_float16.cache_clear()
            want = "float16" if cpu_flags() & features else "float32"
            assert want in _precision(nnapi.load(MODEL, devices=["openvino"], relaxed=True)), setting
            assert "float32" in _precision(nnapi.load(MODEL, devices=["openvino"]))
            versions[want] = OpenVinoDevice().driver_version()
    finally:
        monkeypatch.delenv("NNAPI_OPENVINO_RELAXED_F16")
        native_float16.cache_clear()
    if len(versions) == 2:  # (this CPU computes float16: the two settings are two driver versions)
        assert versions["float16"] != versions["float32"] and "+f16" in versions["float16"]


def test_relaxed_needs_a_tflite_path_or_a_model_that_relaxed_itself():
    m = nnapi.Model()
    a = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (2,))
    out = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (2,))
    m.add_operation(nnapi.OperationType.RELU, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    with pytest.raises(NnError) as e:
        nnapi.load(m, relaxed=True)
    assert "relax_computation_float32_to_float16" in e.value.message


def test_nnapi_run_and_bench_take_relaxed():
    for command in (["run", MODEL, "--device", "openvino", "--relaxed"],
                    ["bench", MODEL, "--device", "openvino", "--relaxed", "--runs", "3", "--warmup", "0"]):
        out = subprocess.run([sys.executable, "-m", "nnapi.cli", *command], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-1500:]
