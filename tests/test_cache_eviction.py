"""Benchmarking a model, or caching it in several folders, never evicts an app's live cache: the registry
keeps many digests per token (least recently used first), and a cache whose digest was dropped reads as
*not recorded* (a miss), never as changed (a rejection)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nnapi.caching import IntegrityRegistry, load_artifacts, registry as registry_module, save_artifacts
from nnapi.caching.artifacts import NOT_RECORDED
from nnapi.hal import CacheHandles, NnError

MODEL = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "face_detection_short_range.tflite")
TOKEN = bytes(range(32))


def _handles(folder) -> CacheHandles:
    os.makedirs(folder, exist_ok=True)
    fds = [os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o600) for name in ("m0", "d0")]
    return CacheHandles((fds[0],), (fds[1],))


def _close(handles: CacheHandles) -> None:
    for fd in (*handles.model_cache, *handles.data_cache):
        os.close(fd)


def test_a_dropped_digest_reads_as_not_recorded_never_as_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(registry_module, "MAX_DIGESTS_PER_TOKEN", 2)
    registry = IntegrityRegistry("reference", "1.0", tmp_path / "integrity.sqlite3")
    first = _handles(tmp_path / "first")
    save_artifacts(first, TOKEN, registry, (1, 1), [b"model one"], [b"data one"])
    for k in range(2):  # two later compiles of the same token elsewhere (a benchmark's scratch folder)
        other = _handles(tmp_path / f"other{k}")
        save_artifacts(other, TOKEN, registry, (1, 1), [b"model %d" % k], [b"data"])
        _close(other)
    with pytest.raises(NnError) as dropped:
        load_artifacts(first, TOKEN, registry, (1, 1))
    assert dropped.value.message.startswith(NOT_RECORDED) and "changed" not in dropped.value.message
    os.pwrite(first.model_cache[0], b"X", 40)  # a changed file is still a rejection
    with pytest.raises(NnError) as changed:
        load_artifacts(first, TOKEN, registry, (1, 1))
    assert "changed since this driver wrote it" in changed.value.message
    _close(first)


def test_one_uids_record_never_vouches_for_another_uids_files(tmp_path):
    registry = IntegrityRegistry("reference", "1.0", tmp_path / "integrity.sqlite3")
    files = _handles(tmp_path / "c")
    save_artifacts(files, TOKEN, registry, (1, 1), [b"evil model"], [b"data"], uid=1000)
    assert load_artifacts(files, TOKEN, registry, (1, 1), uid=1000).digest
    with pytest.raises(NnError) as refused:
        load_artifacts(files, TOKEN, registry, (1, 1), uid=1001)
    assert "for this app" in refused.value.message
    _close(files)


def _nnapi(env: dict, *args: str) -> dict | None:
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if "--json" in args else None


def test_benchmarks_between_two_runs_leave_every_cache_folder_a_hit(tmp_path):
    """`nnapi run` in two folders, three `nnapi bench` (each compiles the model afresh: XLA's bytes
    differ between compiles), then both folders hit (3 of 23 held-out folders failed before)."""
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path / "state"))
    folders = [str(tmp_path / "app"), str(tmp_path / "other")]
    for folder in folders:
        first = _nnapi(env, "run", MODEL, "--device", "xla", "--cache-dir", folder, "--json")
        assert [p["cache"] for p in first["partitions"]] == ["miss"]
    for _ in range(3):
        _nnapi(env, "bench", MODEL, "--device", "xla", "--runs", "1", "--warmup", "0")
    for folder in folders:
        again = _nnapi(env, "run", MODEL, "--device", "xla", "--cache-dir", folder, "--json")
        assert [(p["cache"], p["reason"]) for p in again["partitions"]] == [("hit", "")], again["partitions"]
