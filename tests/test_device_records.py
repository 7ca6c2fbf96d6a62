"""Listing the devices creates no driver once the state directory remembers them (`runtime.device_records`):
a remembered device creates its driver at first use, takes the driver's report where the record was
wrong, and a record that no longer fits (another environment, a damaged file, `--calibrate`) is not used.
Each case runs in fresh app processes sharing one state directory, as apps do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timing

HERE = os.path.dirname(os.path.abspath(__file__))

LIST = textwrap.dedent("""
    import json, sys, threading
    import nnapi
    devices = nnapi.devices()
    print(json.dumps({
        "devices": {d.name: {"kind": type(d).__name__, "version": d.version, "type": d.type.name,
                             "feature_level": d.feature_level, "cache_files": list(d.cache_files),
                             "capabilities": repr(d.capabilities)} for d in devices},
        "driver_modules": sorted(m for m in sys.modules if m.startswith("nnapi.drivers.")),
        "creating": sorted(t.name for t in threading.enumerate() if t.name.startswith("nnapi-create-"))}))
""")


def _run(code: str, state, *args: str, extra_env: dict | None = None, path: str | None = None) -> dict:
    env = dict(os.environ, NNAPI_STATE_DIR=str(state), **(extra_env or {}))
    env.pop("NNAPI_SERVICE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, HERE, env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _record(state, name: str) -> dict:
    with open(os.path.join(state, "devices", f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)


def test_a_remembered_device_list_creates_no_driver_and_says_what_the_drivers_said(tmp_path):
    created = _run(LIST, tmp_path)  # a fresh state directory: every driver is created (and calibrated)
    assert {"openvino", "xla", "reference"} <= set(created["devices"])
    assert {d["kind"] for d in created["devices"].values()} == {"Device"}
    for name in created["devices"]:
        assert _record(tmp_path, name)["device"]["version"] == created["devices"][name]["version"]
    listed = _run(LIST, tmp_path)
    assert listed["driver_modules"] == [] and listed["creating"] == [], listed
    assert {d["kind"] for d in listed["devices"].values()} == {"RememberedDevice"}
    for name, seen in created["devices"].items():
        assert {k: v for k, v in listed["devices"][name].items() if k != "kind"} == \
               {k: v for k, v in seen.items() if k != "kind"}, name


USE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import nnapi
    from test_hardening import add_model
    device = next(d for d in nnapi.devices() if d.name == sys.argv[1])
    before = {"kind": type(device).__name__, "version": device.version, "created": device.created}
    compiled = nnapi.Compilation(add_model(4), devices=[device]).finish()
    y = compiled.execute([np.ones(4, np.float32)])[0]
    print(json.dumps({"before": before, "after": {"version": device.version, "created": device.created},
                      "y": y.tolist(), "ran_on": [s.device.name for s in compiled.steps]}))
""")


def test_a_remembered_device_creates_its_driver_at_first_use_and_a_wrong_record_is_corrected(tmp_path):
    created = _run(LIST, tmp_path)
    true_version = created["devices"]["reference"]["version"]
    record = _record(tmp_path, "reference")
    record["device"]["version"] = "0.0.0-stale"  # (the stamp still fits: only the driver can tell)
    with open(os.path.join(tmp_path, "devices", "reference.json"), "w", encoding="utf-8") as f:
        json.dump(record, f)
    used = _run(USE, tmp_path, "reference")
    assert used["before"] == {"kind": "RememberedDevice", "version": "0.0.0-stale", "created": False}, used
    assert used["after"] == {"version": true_version, "created": True}, used
    assert used["y"] == [1.0, 2.0, 3.0, 4.0] and used["ran_on"] == ["reference"], used
    assert _record(tmp_path, "reference")["device"]["version"] == true_version
    again = _run(USE, tmp_path, "reference")
    assert again["before"] == {"kind": "RememberedDevice", "version": true_version, "created": False}, again


def test_a_record_of_another_environment_or_a_damaged_one_is_not_used(tmp_path):
    _run(LIST, tmp_path)
    elsewhere = _run(LIST, tmp_path, extra_env={"NNAPI_REFERENCE_WORKERS": "3"})
    assert {d["kind"] for d in elsewhere["devices"].values()} == {"Device"}, elsewhere
    with open(os.path.join(tmp_path, "devices", "xla.json"), "w", encoding="utf-8") as f:
        f.write('{"stamp": ')
    damaged = _run(LIST, tmp_path)
    assert damaged["devices"]["xla"]["kind"] == "Device", damaged
    assert damaged["devices"]["reference"]["kind"] == "Device", damaged  # (the other environment's record replaced it)
    assert _record(tmp_path, "xla")["device"]["version"] == damaged["devices"]["xla"]["version"]
    assert {d["kind"] for d in _run(LIST, tmp_path)["devices"].values()} == {"RememberedDevice"}


def test_calibrate_measures_again_and_rewrites_the_records(tmp_path):
    _run(LIST, tmp_path)
    record = _record(tmp_path, "xla")
    record["device"]["capabilities"]["operands"] = [[0, 123.0, 123.0]]
    with open(os.path.join(tmp_path, "devices", "xla.json"), "w", encoding="utf-8") as f:
        json.dump(record, f)
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices", "--calibrate", "--json"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    xla = next(d for d in json.loads(out.stdout) if d["name"] == "xla")
    assert xla["performance"].get("FLOAT32", {}).get("exec_time") != 123.0, xla
    assert _record(tmp_path, "xla")["device"]["capabilities"]["operands"] != [[0, 123.0, 123.0]]


PLUGIN = textwrap.dedent('''
    """A plug-in that works until its accelerator is unplugged (GUEST_UNPLUGGED, which no record stamps)."""
    import dataclasses
    import os

    from nnapi.drivers.reference import ReferenceDevice


    class Guest(ReferenceDevice):
        NAME = "guest"

        def get_info(self):
            return dataclasses.replace(super().get_info(), name="guest")


    def create():
        if os.environ.get("GUEST_UNPLUGGED"):
            raise RuntimeError("the accelerator is unplugged")
        return Guest()
''')

BROKEN = textwrap.dedent("""
    import json
    import numpy as np
    import nnapi
    from nnapi.runtime.devices import dropped_devices, find_device
    from test_hardening import add_model
    devices = nnapi.devices()
    listed = {d.name: type(d).__name__ for d in devices}
    compiled = nnapi.Compilation(add_model(4)).finish()  # (the default devices: the guest among them)
    y = compiled.execute([np.ones(4, np.float32)])[0]
    errors = []
    for use in (lambda: next(d for d in devices if d.name == "guest").driver, lambda: find_device("guest")):
        try:
            use()
            errors.append(None)
        except nnapi.NnError as e:
            errors.append([e.status.name, e.message])
    print(json.dumps({"listed": listed, "y": y.tolist(), "errors": errors,
                      "after": [d.name for d in nnapi.devices()], "dropped": dropped_devices()}))
""")


def test_a_remembered_plugin_that_can_no_longer_be_created_fails_by_name_and_is_left_out(tmp_path):
    plugin = tmp_path / "plugin"
    info = plugin / "guestplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: guestplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[nnapi.drivers]\nguest = guestplug:create\n")
    (plugin / "guestplug.py").write_text(PLUGIN)
    state = tmp_path / "state"
    assert "guest" in _run(LIST, state, path=str(plugin))["devices"]
    assert _record(state, "guest")["entry"] == "guestplug:create"
    broken = _run(BROKEN, state, path=str(plugin), extra_env={"GUEST_UNPLUGGED": "1"})
    assert broken["listed"]["guest"] == "RememberedDevice", broken
    assert broken["y"] == [1.0, 2.0, 3.0, 4.0], broken
    (status, message), (named_status, named) = broken["errors"]  # (the device the app held; naming it again)
    assert status == "GENERAL_FAILURE" and "guest" in message and "the accelerator is unplugged" in message, broken
    assert named_status == "INVALID_ARGUMENT" and "the installed driver guest was left out" in named, broken
    assert "guest" not in broken["after"] and "unplugged" in broken["dropped"]["guest"], broken
    assert not os.path.exists(os.path.join(state, "devices", "guest.json"))
