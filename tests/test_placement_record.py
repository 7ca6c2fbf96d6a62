"""Placement by measurements that hold: a compilation that runs its whole model on one device records
the median of its first executions, `nnapi bench` too, and later compilations of that model on several
devices go by those measurements rather than by the devices' calibrated capabilities."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnapi
from nnapi.runtime import latency

from test_hardening import add_model

pytestmark = pytest.mark.timing

APP = textwrap.dedent('''
    import json, sys
    import numpy as np
    import nnapi
    from nnapi.runtime import latency
    from nnapi.runtime.cache_files import content_fingerprint
    sys.path.insert(0, {tests!r})
    from test_hardening import add_model
    model = add_model(4096)
    key = content_fingerprint(model.to_hal())
    devices = {{d.name: d for d in nnapi.devices()}}
    for name, ms in json.loads(sys.argv[1]).items():
        latency.record(key, devices[name], int(ms * 1e6), 10)
    c = nnapi.Compilation(model, devices=["xla", "openvino"]).finish()
    print(json.dumps([s.device.name for s in c.steps]))
''')


def _plan(tmp_path, recorded: dict[str, float]) -> list[str]:
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path), NNAPI_XLA_PERFORMANCE="0.001",
               NNAPI_OPENVINO_PERFORMANCE="0.5")  # the capabilities say xla, by far
    env.pop("NNAPI_SERVICE_DIR", None)
    out = subprocess.run([sys.executable, "-c", APP.format(tests=os.path.dirname(__file__)), json.dumps(recorded)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_measured_latency_overrides_the_capabilities(tmp_path):
    assert _plan(tmp_path, {}) == ["xla"]
    assert _plan(tmp_path, {"xla": 5.0, "openvino": 1.0}) == ["openvino"]  # measured: openvino is faster
    assert _plan(tmp_path, {"xla": 1.0, "openvino": 5.0}) == ["xla"]


def test_a_compilation_records_the_median_of_its_first_executions(tmp_path, monkeypatch):
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path))
    model = add_model(16)
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    x = np.ones(16, np.float32)
    from nnapi.runtime.cache_files import content_fingerprint
    key = content_fingerprint(model.to_hal())
    device = c.steps[0].device
    for k in range(latency.SAMPLES):  # the first execution is not counted
        c.execute([x])
        assert latency.measured(key, [device]) == {}
    e = nnapi.Execution(c)  # (any execution path counts)
    y = np.zeros(16, np.float32)
    e.set_input(0, x)
    e.set_output(0, y)
    e.compute()
    (p50,) = latency.measured(key, [device]).values()
    assert 0 < p50 < 1e9 and c.steps[0].observer is None
