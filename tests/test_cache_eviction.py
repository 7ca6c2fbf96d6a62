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

pytestmark = pytest.mark.timing

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


def test_cache_files_with_no_record_are_refused_before_they_are_read(tmp_path):
    """Nothing recorded for the token: the files are not read or hashed (a 5 GiB sparse model file, over the
    size limit, is refused for having no record, not for its size)."""
    registry = IntegrityRegistry("reference", "1.0", tmp_path / "integrity.sqlite3")
    files = _handles(tmp_path / "c")
    os.ftruncate(files.model_cache[0], 5 << 30)
    with pytest.raises(NnError) as refused:
        load_artifacts(files, TOKEN, registry, (1, 1))
    assert refused.value.message.startswith("no integrity record for this token"), refused.value.message
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


def test_a_cache_lock_held_by_another_process_is_a_miss_by_the_deadline(tmp_path):
    """A cache lock is taken without blocking and retried until the deadline: a process holding it (an
    attacker, a stuck writer) costs a miss with the reason, never a hang (it blocked forever before)."""
    import fcntl
    import time

    from nnapi.caching.files import BUSY

    registry = IntegrityRegistry("reference", "1.0", tmp_path / "integrity.sqlite3")
    files = _handles(tmp_path / "c")
    save_artifacts(files, TOKEN, registry, (1, 1), [b"model"], [b"data"])
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # holds the lock until told to stop
        fcntl.flock(os.open(tmp_path / "c" / "m0", os.O_RDWR), fcntl.LOCK_EX)  # (a file description of its own)
        os.write(ready_w, b"x")
        os.read(done_r, 1)
        os._exit(0)
    try:
        os.read(ready_r, 1)
        start = time.monotonic()
        with pytest.raises(NnError) as busy:
            load_artifacts(files, TOKEN, registry, (1, 1), deadline_ns=time.monotonic_ns() + 300_000_000)
        assert busy.value.message.startswith(BUSY) and time.monotonic() - start < 1.5, busy.value.message
    finally:
        os.write(done_w, b"x")
        os.waitpid(pid, 0)
    _close(files)


def test_a_cache_write_that_fails_leaves_no_partial_files_and_warns(tmp_path):
    """A full disk (here: a file size limit, which fails writes as ENOSPC does) while the cache is written:
    the files that were partly written are emptied, so the space is every other model's again, and the
    warning names the error (before: an INFO log, the partial files left)."""
    import logging
    import resource
    import signal

    import numpy as np

    import nnapi

    from test_caching_runtime import fc_model

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            records: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda record: records.append(f"{record.levelname} {record.getMessage()}")
            logging.getLogger("nnapi").addHandler(handler)
            m = fc_model(np.ones((4, 16384), np.float32))  # 256 KiB of constants: over the limit
            os.environ["NNAPI_STATE_DIR"] = str(tmp_path / "state")  # (a small registry: under the limit)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (128 << 10, resource.RLIM_INFINITY))
            cache = tmp_path / "cache"
            c = nnapi.Compilation(m, devices=["reference"], cache_dir=cache, token=TOKEN).finish()
            value = float(c.execute([np.ones((1, 16384), np.float32)])[0][0, 0])
            sizes = sorted(os.path.getsize(cache / f) for f in os.listdir(cache))
            result = json.dumps({"value": value, "sizes": sizes, "logs": records})
        except BaseException as e:
            result = json.dumps({"error": repr(e)})
        os.write(w, result.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = json.loads(f.read())
    os.waitpid(pid, 0)
    assert "error" not in out, out
    assert out["value"] == 16384.0
    assert out["sizes"] and set(out["sizes"]) == {0}, out
    assert any(line.startswith("WARNING") and "could not be written" in line and "too large" in line
               for line in out["logs"]), out["logs"]


def test_empty_cache_files_with_no_record_are_a_miss_not_a_rejection(tmp_path):
    """Files another process has not written yet (empty, nothing recorded) read as incomplete, as before the
    record is looked up first: the runtime counts that a miss, never a rejected cache."""
    registry = IntegrityRegistry("reference", "1.0", tmp_path / "integrity.sqlite3")
    files = _handles(tmp_path / "c")
    with pytest.raises(NnError) as refused:
        load_artifacts(files, TOKEN, registry, (1, 1))
    assert "model cache 0 is empty" in refused.value.message, refused.value.message
    _close(files)
