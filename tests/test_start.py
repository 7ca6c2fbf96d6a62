"""An app's start pays only for what it uses: `import nnapi` imports no backend (nor the .tflite reader,
until a .tflite is loaded), and with a state
directory that remembers the drivers (their calibrations), `nnapi.devices()` asks no backend anything;
a backend is imported when a device of its own is prepared for or run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

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
