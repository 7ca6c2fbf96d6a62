"""A plug-in is a guest: a broken or hanging driver installed beside ours never breaks an app that uses
the default devices. Each plug-in is installed as a real distribution (an entry point in the
`nnapi.drivers` group) in a folder on the path of a fresh app process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timing

PLUGIN = textwrap.dedent('''
    """Broken plug-ins for tests/test_guest_plugins.py: each claims to be the fastest device."""
    import dataclasses
    import time

    from nnapi.drivers.reference import ReferenceDevice
    from nnapi.hal import Capabilities, OperandPerformance, OperandType, PerformanceInfo


    def _fastest() -> Capabilities:
        fast = PerformanceInfo(0.001, 0.001)
        return Capabilities(fast, fast, tuple(OperandPerformance(t, fast) for t in sorted(OperandType)
                                              if t != OperandType.SUBGRAPH), fast, fast)


    class Guest(ReferenceDevice):
        NAME = "guest"

        def get_info(self):
            return dataclasses.replace(super().get_info(), name="guest")

        def get_capabilities(self):
            return _fastest()


    class Garbage(Guest):
        def get_capabilities(self):
            return "the fastest device there is"


    class RaisesInPrepare(Guest):
        def prepare_model(self, *args, **kwargs):
            raise RuntimeError("the accelerator is on fire")


    class HangsInClaims(Guest):
        def get_supported_operations(self, model):
            time.sleep(3600)


    def garbage():
        return Garbage()


    def raises_in_prepare():
        return RaisesInPrepare()


    def hangs_in_claims():
        return HangsInClaims()


    def hangs_in_create():
        time.sleep(3600)
''')

APP = textwrap.dedent('''
    import json, logging, sys, time
    import numpy as np
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("nnapi").addHandler(handler)
    t0 = time.monotonic()
    import nnapi
    from nnapi import OperandType as T, OperationType as Op
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,)); b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    act = m.add_operand(T.INT32); m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (4,))
    m.add_operation(Op.ADD, [a, b, act], [out]); m.identify_inputs_and_outputs([a, b], [out]); m.finish()
    c = nnapi.Compilation(m, timeout=10).finish()
    x = np.arange(4, dtype=np.float32)
    y = c.execute([x, x])[0]
    names = [d.name for d in nnapi.devices()]
    from nnapi.runtime.devices import dropped_devices
    print(json.dumps({"y": y.tolist(), "s": time.monotonic() - t0, "ran_on": [s.device.name for s in c.steps],
                      "devices": names, "dropped": dropped_devices(), "warnings": records}))
''')


def _install(folder, entry: str) -> None:
    """A distribution `guestplug` whose entry point `guest` is `entry` (a function of the module)."""
    info = folder / "guestplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: guestplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[nnapi.drivers]\nguest = guestplug:{entry}\n")
    (folder / "guestplug.py").write_text(PLUGIN)


def _app(folder) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    env.pop("NNAPI_SERVICE_DIR", None)
    out = subprocess.run([sys.executable, "-c", APP], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("entry, says", [("garbage", "get_capabilities returned str"),
                                         ("raises_in_prepare", "RuntimeError: the accelerator is on fire"),
                                         ("hangs_in_claims", "get_supported_operations has not answered"),
                                         ("hangs_in_create", "create_device has not answered")])
def test_a_broken_plugin_beside_ours_costs_an_app_at_most_five_seconds_and_a_warning(tmp_path, entry, says):
    _install(tmp_path, entry)
    result = _app(tmp_path)
    assert result["y"] == [0.0, 2.0, 4.0, 6.0], result
    assert "guest" not in result["ran_on"], result
    assert result["s"] < 10 + 5, result  # (its timeout, plus at most 5 s)
    assert any("guest" in w and says in w for w in result["warnings"]), result["warnings"]
    if entry in ("garbage", "hangs_in_create"):
        assert "guest" not in result["devices"] and says in result["dropped"]["guest"], result


def test_nnapi_devices_and_vts_say_why_a_plugin_is_missing(tmp_path):
    _install(tmp_path, "garbage")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env.pop("NNAPI_SERVICE_DIR", None)
    listed = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "guest" in listed.stdout and "get_capabilities returned str" in listed.stdout, listed.stdout
    start = time.monotonic()
    vts = subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", "--device", "guest", "--quick"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert vts.returncode != 0 and time.monotonic() - start < 60
    assert "get_capabilities returned str" in vts.stderr + vts.stdout, vts.stderr
