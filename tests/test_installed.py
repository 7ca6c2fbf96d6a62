"""`nnapi.installed` finds what `importlib.metadata` finds, without importing it."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import zipfile

import pytest

from nnapi import installed

pytestmark = pytest.mark.timing


def _dist(folder, name: str, version: str, entry: str | None = None, suffix: str = ".dist-info") -> None:
    info = folder / f"{name}-{version}{suffix}"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nVersion: 9.9 in text\n")
    if entry is not None:
        (info / "entry_points.txt").write_text(f"# a comment\n[console_scripts]\nx = y:z\n\n[nnapi.drivers]\n"
                                               f"{name} = {entry}\n")


def test_every_installed_release_and_entry_point_is_the_one_importlib_metadata_reads():
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        assert installed.release(name) == importlib.metadata.version(name), name
    for group in ("console_scripts", "nnapi.drivers", "pytest11"):
        ours = sorted((e.name, e.value) for e in installed.entry_points(group))
        theirs = sorted((e.name, e.value) for e in importlib.metadata.entry_points(group=group))
        assert ours == theirs, group
    assert installed.release("no-such-distribution-anywhere") is None


def test_the_first_distribution_on_the_path_wins_and_new_ones_are_seen(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _dist(first, "Guest_Plug", "2.0", "guestplug:create")
    _dist(second, "guest.plug", "1.0", "old:create")
    _dist(second, "eggy", "0.3", "eggy:create", suffix=".egg-info")
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    assert installed.release("guest-plug") == "2.0"
    assert installed.release("EGGY") == "0.3"
    found = {e.name: e.value for e in installed.entry_points("nnapi.drivers")}
    assert found["Guest_Plug"] == "guestplug:create" and found["eggy"] == "eggy:create"
    assert "guest.plug" not in found
    _dist(first, "later", "1.1", "later:create")  # installed while the process runs
    assert installed.release("later") == "1.1"
    (first / "guestplug.py").write_text("def create():\n    return 'created'\n")
    assert next(e for e in installed.entry_points("nnapi.drivers") if e.name == "Guest_Plug").load()() == "created"


def test_an_archive_on_the_path_is_read_by_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "dists.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-4.5.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 4.5\n")
        z.writestr("zipped-4.5.dist-info/entry_points.txt", "[nnapi.drivers]\nzipped = zipped:create\n")
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    assert installed.release("zipped") == "4.5"
    assert ("zipped", "zipped:create") in [(e.name, e.value) for e in installed.entry_points("nnapi.drivers")]


#: What listing the devices has no use for: a metadata parser, a backend, the operation helpers, the
#: validator's shape inference, the drivers' lowerings and interpreters.
NOT_FOR_LISTING = ("importlib.metadata", "email", "zipfile", "openvino", "jax", "nnapi.ops._lstm_cell",
                   "nnapi.ops.registry", "nnapi.validation.shapes", "nnapi.validation.model",
                   "nnapi.drivers.base.lowering", "nnapi.drivers.openvino.lowering", "nnapi.drivers.xla.lowering",
                   "nnapi.drivers.reference.interpreter", "nnapi.importers.tflite.schema")


def test_listing_the_devices_imports_no_metadata_parser(tmp_path):
    """Once the state directory knows the drivers (the first listing calibrates them), a listing imports
    neither a metadata parser nor a backend, nor any compile-time module of ours."""
    code = ("import sys, nnapi; nnapi.devices(); "
            f"print([m for m in {NOT_FOR_LISTING!r} if m in sys.modules])")
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_a_lazy_export_is_imported_once_and_an_unknown_name_is_an_attribute_error():
    import nnapi.ops as ops
    from nnapi.ops.context import OpContext
    assert ops.OpContext is OpContext and "OpContext" in vars(ops)
    from nnapi.ops._lstm_cell import step
    assert ops.lstm_step is step
    try:
        ops.no_such_export
    except AttributeError as e:
        assert "no_such_export" in str(e)
    else:
        raise AssertionError("an unknown export must be an AttributeError")
