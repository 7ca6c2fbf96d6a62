"""`nnapi.runtime.cache_admin`: ls / verify / prune of app cache directories and caching engines."""
from __future__ import annotations

import json
import os
import time

import pytest

import nnapi
from nnapi.drivers.reference import ReferenceDevice
from nnapi.runtime.cache_admin import (STALE_SECONDS, engine_directory, is_engine_directory, list_cache,
                                       prune_cache, verify_cache)
from nnapi.runtime.cache_files import token_from_name

from nnapi.conformance.vts import device_for
from nnapi.conformance.vts.models import float_model

from caching_kit import VersionedReference, reference

pytestmark = pytest.mark.timing

TOKEN = bytes(range(32))


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "state"
    monkeypatch.setenv("NNAPI_STATE_DIR", str(path))
    return path


@pytest.fixture
def devs():
    return [reference()]


def _compile(model, cache_dir, token=TOKEN, device=None):
    return nnapi.Compilation(model, devices=[device or reference()], cache_dir=cache_dir, token=token).finish()


def _models(n: int):
    return [float_model(seed) for seed in range(n)]


def _age(paths, seconds: float) -> None:
    for p in paths:
        t = time.time() - seconds
        os.utime(p, (t, t))


# --- app cache directories ---------------------------------------------------------------------------
def test_ls_groups_files_by_base_name(tmp_path, devs):
    for test in _models(2):
        _compile(test.model, tmp_path)
    (tmp_path / "notes.txt").write_text("not a cache file")
    (tmp_path / ("A" * 64 + "3" + "0")).write_text("not a cache file either")
    entries = list_cache(tmp_path, devices=devs)
    assert len(entries) == 2
    for e in entries:
        assert e["kind"] == "app" and e["state"] == "cached" and e["complete"]
        assert (e["model_files"], e["data_files"]) == (1, 1)
        assert e["files"] == [e["name"] + "10", e["name"] + "20"]
        assert bytes.fromhex(e["token"]) == token_from_name(e["name"])
        assert e["size"] == sum((tmp_path / f).stat().st_size for f in e["files"])
        assert e["last_used"] <= time.time()
    assert not (tmp_path / "index.sqlite3").exists()     # looking never creates anything
    json.dumps(entries)


def test_ls_names_the_device_that_wrote_each_entry(state_dir, tmp_path, devs):
    """By the integrity registry that records the entry's token; an older driver version's entry has none."""
    _compile(float_model(0).model, tmp_path)
    _compile(float_model(1).model, tmp_path, device=device_for(VersionedReference("0.0.1")))
    devices = sorted(e["device"] or "-" for e in list_cache(tmp_path, devices=devs))
    assert devices == ["-", "reference"]


def test_verify_accepts_sound_entries(tmp_path, devs):
    for test in _models(2):
        _compile(test.model, tmp_path)
    results = verify_cache(tmp_path, devices=devs)
    assert [(r["ok"], r["device"], r["reason"]) for r in results] == [(True, "reference", None)] * 2
    json.dumps(results)


def test_verify_reports_every_rejected_entry_and_why(tmp_path, devs):
    tests = _models(5)
    for test in tests[:4]:
        _compile(test.model, tmp_path)
    _compile(tests[4].model, tmp_path, device=device_for(VersionedReference("0.0.1")))
    names = {}
    for test, label in zip(tests[:4], ["sound", "corrupted", "incomplete", "extra file"]):
        (entry,) = [e for e in list_cache(tmp_path, devices=devs) if e["name"] not in names.values()
                    and _matches(tmp_path, e, test)]
        names[label] = entry["name"]
    names["old driver"] = next(e["name"] for e in list_cache(tmp_path, devices=devs) if e["name"] not in names.values())
    model_file = tmp_path / (names["corrupted"] + "10")
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 4
    model_file.write_bytes(bytes(data))
    (tmp_path / (names["incomplete"] + "10")).unlink()
    (tmp_path / (names["extra file"] + "11")).write_bytes(b"x")
    by_name = {r["name"]: r for r in verify_cache(tmp_path, devices=devs)}
    assert by_name[names["sound"]]["ok"]
    assert "integrity" in by_name[names["corrupted"]]["reason"]
    assert "incomplete" in by_name[names["incomplete"]]["reason"]
    assert "no installed device caches 2 model and 1 data files" in by_name[names["extra file"]]["reason"]
    assert "not written by this driver version" in by_name[names["old driver"]]["reason"]
    assert [r["ok"] for r in by_name.values()].count(False) == 4


def _matches(path, entry, test) -> bool:
    """Whether an app entry is the cache of `test`'s model (by its derived token)."""
    from nnapi.runtime.cache_files import content_fingerprint, device_token
    d = reference()
    token = device_token(TOKEN, None, d.name, d.version, nnapi.ExecutionPreference.FAST_SINGLE_ANSWER,
                         nnapi.Priority.MEDIUM, content_fingerprint(test.model.to_hal()))
    return bytes.fromhex(entry["token"]) == token


def test_verify_does_not_change_what_counts_as_recently_used(tmp_path, devs):
    _compile(float_model().model, tmp_path)
    files = sorted(tmp_path.iterdir())
    _age(files, 3600)
    before = [(f.stat().st_atime_ns, f.stat().st_mtime_ns) for f in files]
    verify_cache(tmp_path, devices=devs)
    assert [(f.stat().st_atime_ns, f.stat().st_mtime_ns) for f in files] == before


def test_prune_removes_rejected_entries_only(tmp_path, devs):
    tests = _models(2)
    for test in tests:
        _compile(test.model, tmp_path)
    bad = next(e for e in list_cache(tmp_path, devices=devs) if _matches(tmp_path, e, tests[1]))
    path = tmp_path / (bad["name"] + "10")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    (tmp_path / "keep.me").write_text("other files stay")
    result = prune_cache(tmp_path, devices=devs)
    assert [r["name"] for r in result["removed"]] == [bad["name"]]
    assert "integrity" in result["removed"][0]["reason"]
    assert result["kept"] == 1 and result["size_after"] < result["size_before"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(bad["name"])) == []
    assert (tmp_path / "keep.me").exists()
    assert _compile(tests[0].model, tmp_path).cache_outcomes[0].outcome == "hit"
    json.dumps(result)


def test_prune_to_a_size_drops_the_least_recently_used(tmp_path, devs):
    tests = _models(3)
    for test in tests:
        _compile(test.model, tmp_path)
    # Compiled 1 h, 2 h and 3 h ago; then model 2 (the oldest) is hit, so model 1 becomes the least recent.
    for age, test in zip((3600, 7200, 10800), tests):
        entry = next(e for e in list_cache(tmp_path, devices=devs) if _matches(tmp_path, e, test))
        _age([tmp_path / f for f in entry["files"]], age)
    assert _compile(tests[2].model, tmp_path).cache_outcomes[0].outcome == "hit"
    sizes = {e["name"]: e["size"] for e in list_cache(tmp_path, devices=devs)}
    result = prune_cache(tmp_path, max_size=max(sizes.values()) * 2, devices=devs)
    (gone,) = result["removed"]
    assert _matches(tmp_path, gone, tests[1]) and "least recently used" in gone["reason"]
    assert result["size_after"] <= max(sizes.values()) * 2
    result = prune_cache(tmp_path, max_size=0, devices=devs)
    assert len(result["removed"]) == 2 and result["size_after"] == 0 and result["kept"] == 0


def test_prune_dry_run_removes_nothing(tmp_path, devs):
    _compile(float_model().model, tmp_path)
    result = prune_cache(tmp_path, max_size=0, devices=devs, dry_run=True)
    assert len(result["removed"]) == 1 and result["dry_run"]
    assert len(list(tmp_path.iterdir())) == 2


def test_arguments_are_checked(tmp_path, devs):
    with pytest.raises(ValueError):
        list_cache(devices=devs)
    with pytest.raises(FileNotFoundError):
        list_cache(tmp_path / "missing", devices=devs)
    (tmp_path / "a-file").write_text("not a folder")
    for look in (list_cache, verify_cache, prune_cache):
        with pytest.raises(NotADirectoryError, match="not a folder: .*a-file"):
            look(tmp_path / "a-file", devices=devs)
    with pytest.raises(ValueError):
        prune_cache(tmp_path, max_size=-1, devices=devs)
    with pytest.raises(ValueError):
        list_cache(engine="no-such-driver", devices=devs)


# --- caching engines --------------------------------------------------------------------------------------
def _engine_compiles(n: int) -> ReferenceDevice:
    driver = ReferenceDevice(engine=True)
    for test in _models(n):
        nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
    return driver


def test_engine_ls_by_directory_and_by_driver(state_dir, devs):
    driver = _engine_compiles(2)
    root = driver.engine.root
    assert is_engine_directory(root) and not is_engine_directory(state_dir)
    assert engine_directory("reference", devs) == str(root)
    by_dir = list_cache(root, devices=devs)
    by_driver = list_cache(engine="reference", devices=devs)
    by_parent = list_cache(root.parent, devices=devs)
    assert by_dir == by_driver == by_parent
    assert len(by_dir) == 2
    for e in by_dir:
        assert e["kind"] == "engine" and e["state"] == "cached" and e["token"] is None
        assert e["driver"] == "reference" and e["version"] == devs[0].version
        assert e["size"] == (root / e["files"][0]).stat().st_size
    json.dumps(by_dir)


def test_engine_verify_and_prune(state_dir, devs):
    driver = _engine_compiles(3)
    root = driver.engine.root
    entries = list_cache(root, devices=devs)
    corrupted = root / entries[0]["files"][0]
    data = bytearray(corrupted.read_bytes())
    data[-1] ^= 1
    corrupted.write_bytes(bytes(data))
    (root / ("f" * 64 + ".entry")).write_bytes(b"orphan")
    (root / ("e" * 64 + ".tmp123.456")).write_bytes(b"half written")
    (root / ("d" * 64 + ".tmp9.9")).write_bytes(b"being written right now")
    _age([root / ("f" * 64 + ".entry"), root / ("e" * 64 + ".tmp123.456")], STALE_SECONDS + 60)
    results = {r["name"]: r for r in verify_cache(root, devices=devs)}
    assert results[entries[0]["name"]]["reason"] == "integrity mismatch"
    assert results[entries[1]["name"]]["ok"] and results[entries[2]["name"]]["ok"]
    assert "interrupted" in results["f" * 64]["reason"] and results["f" * 64]["state"] == "orphan"
    assert results["e" * 64]["state"] == "temporary"
    result = prune_cache(engine="reference", devices=devs)
    assert sorted(r["name"] for r in result["removed"]) == sorted([entries[0]["name"], "e" * 64, "f" * 64])
    assert (root / ("d" * 64 + ".tmp9.9")).exists()          # young: maybe a write in progress
    assert len(driver.engine.entries()) == 2
    one = max(e["size"] for e in list_cache(root, devices=devs) if e["state"] == "cached")
    result = prune_cache(root, max_size=one + 1000, devices=devs)   # the young temporary file counts too
    assert len(result["removed"]) == 1 and len(driver.engine.entries()) == 1
    assert "least recently used" in result["removed"][0]["reason"]
    for test in _models(3):    # the entry left is still served
        nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
    assert driver.engine.stats["hits"] == 1


def test_engine_of_an_older_driver_version_is_rejected_and_pruned(state_dir, devs, monkeypatch):
    old = VersionedReference("0.0.1", engine=True)
    for test in _models(2):
        nnapi.Compilation(test.model, devices=[device_for(old)]).finish()
    _engine_compiles(1)
    parent = old.engine.root.parent
    assert sorted(p.name for p in parent.iterdir()) == sorted(["reference-0.0.1", f"reference-{devs[0].version}"])
    results = verify_cache(parent, devices=devs)
    stale = [r for r in results if r["version"] == "0.0.1"]
    assert len(stale) == 2 and all("written by reference 0.0.1" in r["reason"] for r in stale)
    assert [r["ok"] for r in results if r["version"] != "0.0.1"] == [True]
    old_root = str(old.engine.root)
    result = prune_cache(parent, devices=devs)
    assert len(result["removed"]) == 2
    assert result["removed_directories"] == [old_root]
    assert [p.name for p in parent.iterdir()] == [f"reference-{devs[0].version}"]


def test_app_directory_and_engine_together(state_dir, tmp_path, devs):
    _engine_compiles(1)
    (tmp_path / "app").mkdir()
    _compile(float_model(5).model, tmp_path / "app")
    kinds = sorted(e["kind"] for e in list_cache(tmp_path / "app", engine="reference", devices=devs))
    assert kinds == ["app", "engine"]
    assert all(r["ok"] for r in verify_cache(tmp_path / "app", engine="reference", devices=devs))


def test_nnapi_cache_command_lists_verifies_and_prunes(tmp_path, capsys):
    """The `nnapi cache` command over an app cache directory, end to end."""
    import json as _json

    import nnapi
    from nnapi.cli import main
    from conftest import add_relu_model
    m = add_relu_model()
    nnapi.Compilation(m, devices=["reference"], cache_dir=tmp_path, token=nnapi.model_token(m)).finish()
    assert main(["cache", "ls", str(tmp_path), "--json"]) == 0
    listed = _json.loads(capsys.readouterr().out)
    assert len(listed) == 1 and listed[0]["kind"] == "app"
    assert main(["cache", "verify", str(tmp_path), "--json"]) == 0
    assert _json.loads(capsys.readouterr().out)[0]["ok"] is True
    model_file = next(p for p in tmp_path.iterdir() if p.name.endswith("10"))
    model_file.write_bytes(model_file.read_bytes() + b"tampered")
    assert main(["cache", "verify", str(tmp_path), "--json"]) == 1
    capsys.readouterr()
    assert main(["cache", "prune", str(tmp_path)]) == 0
    assert list(tmp_path.iterdir()) == []


def test_nnapi_cache_ls_shows_model_device_cache_files_size_and_last_use(state_dir, tmp_path, capsys):
    """Piped, each row holds the entry whole: its name (the model's token), device, model / data cache
    files, size and last use; --json has the same fields, verify adds the executable's stage."""
    from nnapi.cli import main
    from nnapi.cli.cache import size_text as _size_text
    from conftest import add_relu_model
    m = add_relu_model()
    nnapi.Compilation(m, devices=["reference"], cache_dir=tmp_path, token=nnapi.model_token(m)).finish()
    assert main(["cache", "ls", str(tmp_path), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["device"], entry["model_files"], entry["data_files"]) == ("reference", 1, 1)
    assert main(["cache", "ls", str(tmp_path)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if entry["name"] in line]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["last_used"]))
    assert cells == [entry["name"], "app", "reference", "1 model, 1 data", _size_text(entry["size"]), used, "cached"]
    assert main(["cache", "verify", str(tmp_path), "--json"]) == 0
    (checked,) = json.loads(capsys.readouterr().out)
    assert checked["ok"] and checked["device"] == "reference" and checked["stage"] is None   # single-stage driver


def test_verify_names_the_stage_of_a_cached_xla_executable(state_dir, tmp_path):
    pytest.importorskip("jax")
    from conftest import add_relu_model
    m = add_relu_model()
    nnapi.Compilation(m, devices=["xla"], cache_dir=tmp_path, token=nnapi.model_token(m)).finish()
    (checked,) = verify_cache(tmp_path)
    assert checked["ok"] and checked["device"] == "xla" and checked["stage"] == "quick"
