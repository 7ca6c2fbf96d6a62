"""Every real model of ../shared/models runs whole on the OpenVINO driver (one partition, int8 models
included) within LiteRT's tolerances (the criterion of tests/test_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

import nnapi
from nnapi.importers import load_tflite

from test_models import CATALOG, SHARED, check_output

pytestmark = pytest.mark.skipif(not CATALOG, reason=f"no shared models at {SHARED}")


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_model_runs_whole_on_openvino_within_litert_tolerance(name):
    entry = CATALOG[name]
    imported = load_tflite(SHARED / entry["file"])
    compilation = nnapi.Compilation(imported.model, devices=["openvino"]).finish()
    assert [s.device.name for s in compilation.steps] == ["openvino"]
    if not entry.get("reference_npz"):  # no LiteRT reference (a custom operator stock LiteRT lacks)
        rng = np.random.default_rng(0)
        inputs = [rng.uniform(0, 1, i.shape).astype(i.dtype) for i in imported.inputs]
        outputs = compilation.execute(inputs)
        want = nnapi.Compilation(imported.model, devices=["reference"]).finish().execute(inputs)
        for got, ref in zip(outputs, want):
            scale = float(np.abs(ref).max()) or 1.0
            assert float(np.abs(got.astype(np.float64) - ref).max()) / scale <= 1e-3
        return
    ref = np.load(SHARED / entry["reference_npz"])
    outputs = compilation.execute([ref[f"input_{k}"] for k in range(len(imported.inputs))])
    print("\n".join(check_output(name, k, got, ref) for k, got in enumerate(outputs)))
