"""An app's start pays only for what it uses: `import nnapi` imports no backend (nor the .tflite reader,
until a .tflite is loaded), and with a state
directory that remembers the drivers (their calibrations), `nnapi.devices()` asks no backend anything;
a backend is imported when a device of its own is prepared for or run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timing

PROBE = """
import json, sys
import nnapi
after_import = sorted(m for m in ("jax", "jaxlib", "openvino", "tflite", "nnapi.importers.tflite.load")
                      if m in sys.modules)
devices = [d.name for d in nnapi.devices()]
after_devices = sorted(m for m in ("jax", "jaxlib", "openvino") if m in sys.modules)
print(json.dumps({"import": after_import, "devices": after_devices, "names": devices}))
"""


def _probe(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_devices_import_no_backend_once_the_state_directory_remembers_them(tmp_path):
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    first = _probe(env)  # a fresh state directory: the drivers are calibrated (that runs them)
    assert first["import"] == [] and set(first["names"]) >= {"openvino", "xla", "reference"}
    again = _probe(env)
    assert again == {"import": [], "devices": [], "names": first["names"]}


def test_a_backend_is_imported_when_its_device_prepares(tmp_path):
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    _probe(env)
    code = PROBE + """
from test_hardening import add_model
nnapi.Compilation(add_model(4), devices=["openvino"]).finish()
print(json.dumps(sorted(m for m in ("jax", "openvino") if m in sys.modules)))
"""
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["openvino"]


def test_naming_a_device_creates_no_other_driver_even_in_a_fresh_state_directory(tmp_path):
    """An app that names `reference` starts no other driver's creation, so no backend is imported and no
    other driver calibrates in the background (which an exiting app would then cut short)."""
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path / "state"))
    env.pop("NNAPI_SERVICE_DIR", None)
    model = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "face_detection_short_range.tflite")
    code = """
import json, sys, threading, numpy as np, nnapi
compiled = nnapi.load(sys.argv[1], devices=["reference"], cache_dir=sys.argv[2])
compiled.run([np.zeros(i.shape, i.dtype) for i in compiled.inputs])
creating = sorted(t.name for t in threading.enumerate() if t.name.startswith("nnapi-create-"))
print(json.dumps({"modules": sorted(m for m in ("jax", "openvino", "nnapi.drivers.openvino", "nnapi.drivers.xla")
                                    if m in sys.modules), "creating": creating}))
"""
    out = subprocess.run([sys.executable, "-c", code, model, str(tmp_path / "cache")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"modules": [], "creating": []}, found
    assert "claim analysis failed" not in out.stderr, out.stderr[-2000:]
