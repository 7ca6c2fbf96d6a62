"""C11 just-in-time mode and the C12 caching engine of the reference driver."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import nnapi
from nnapi.caching import CachingEngine
from nnapi.drivers.reference import ReferenceDevice

from nnapi.conformance.vts import device_for
from nnapi.conformance.vts.models import float_model

from caching_kit import reference

TOKEN = bytes(range(32))


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private NNAPI_STATE_DIR (registry and engine) for this test."""
    path = tmp_path / "state"
    monkeypatch.setenv("NNAPI_STATE_DIR", str(path))
    return path


def _cache_sizes(path) -> list[int]:
    return sorted(p.stat().st_size for p in path.iterdir())


# --- just-in-time compilation -----------------------------------------------------------------------------
def test_jit_builds_the_plan_and_writes_the_cache_at_first_execution(tmp_path):
    test = float_model()
    jit = device_for(ReferenceDevice(jit=True))
    c = nnapi.Compilation(test.model, devices=[jit], cache_dir=tmp_path, token=TOKEN).finish()
    prepared = c.steps[0].prepared
    assert c.cache_outcomes[0].outcome == "miss"
    assert not prepared.planned
    assert _cache_sizes(tmp_path) == [0, 0]              # created by the runtime, not yet written
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    assert prepared.planned
    assert all(size > 0 for size in _cache_sizes(tmp_path))
    again = nnapi.Compilation(test.model, devices=[jit], cache_dir=tmp_path, token=TOKEN).finish()
    assert again.cache_outcomes[0].outcome == "hit"
    assert again.steps[0].prepared.planned
    np.testing.assert_allclose(again.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    plain = nnapi.Compilation(test.model, devices=[reference()], cache_dir=tmp_path, token=TOKEN).finish()
    assert plain.cache_outcomes[0].outcome == "hit"      # the same driver's cache, whichever mode wrote it


def test_jit_is_enabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("NNAPI_REFERENCE_JIT", "1")
    assert ReferenceDevice().option("jit")
    monkeypatch.setenv("NNAPI_REFERENCE_JIT", "0")
    assert not ReferenceDevice().option("jit")


def test_jit_without_caching_plans_at_first_run():
    test = float_model()
    c = nnapi.Compilation(test.model, devices=[device_for(ReferenceDevice(jit=True))]).finish()
    assert not c.steps[0].prepared.planned
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    assert c.steps[0].prepared.planned


def test_jit_concurrent_first_executions_plan_once_and_save_once(tmp_path, monkeypatch):
    test = float_model()
    saves = []
    device = ReferenceDevice(jit=True)
    real_save = device._save
    monkeypatch.setattr(device, "_save", lambda *a: (saves.append(1), real_save(*a)))
    c = nnapi.Compilation(test.model, devices=[device_for(device)], cache_dir=tmp_path, token=TOKEN).finish()
    results, errors = [], []

    def run() -> None:
        try:
            results.append(c.execute(test.inputs)[0])
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8
    for r in results:
        np.testing.assert_allclose(r, test.golden[0], atol=1e-4)
    assert saves == [1]


def test_jit_cache_write_failure_does_not_fail_the_execution(tmp_path, monkeypatch):
    test = float_model()
    c = nnapi.Compilation(test.model, devices=[device_for(ReferenceDevice(jit=True))], cache_dir=tmp_path,
                          token=TOKEN).finish()

    def full(fd, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("nnapi.caching.artifacts.write_file", full)
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    monkeypatch.undo()
    again = nnapi.Compilation(test.model, devices=[reference()], cache_dir=tmp_path, token=TOKEN).finish()
    assert again.cache_outcomes[0].outcome in ("miss", "rejected")


# --- the caching engine -----------------------------------------------------------------------------------
def test_engine_second_uncached_compile_hits(state_dir):
    test = float_model()
    driver = ReferenceDevice(engine=True)
    device = device_for(driver)
    first = nnapi.Compilation(test.model, devices=[device]).finish()
    assert driver.engine.stats["puts"] == 1 and driver.engine.stats["hits"] == 0
    second = nnapi.Compilation(test.model, devices=[device]).finish()
    assert driver.engine.stats["hits"] == 1
    for c in (first, second):
        np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    # A fresh driver object (a restarted process) finds the entry too.
    other = ReferenceDevice(engine=True)
    nnapi.Compilation(test.model, devices=[device_for(other)]).finish()
    assert other.engine.stats["hits"] == 1
    assert len(other.engine.entries()) == 1
    assert str(other.engine.root).startswith(str(state_dir))


def test_engine_is_enabled_by_the_environment(state_dir, monkeypatch):
    monkeypatch.setenv("NNAPI_REFERENCE_ENGINE", "1")
    assert ReferenceDevice().engine is not None
    monkeypatch.delenv("NNAPI_REFERENCE_ENGINE")
    assert ReferenceDevice().engine is None


def test_engine_keys_on_content_and_options(state_dir):
    driver = ReferenceDevice(engine=True)
    device = device_for(driver)
    for seed in (0, 1):
        for pref in (nnapi.ExecutionPreference.FAST_SINGLE_ANSWER, nnapi.ExecutionPreference.LOW_POWER):
            test = float_model(seed)
            c = nnapi.Compilation(test.model, devices=[device], preference=pref).finish()
            np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    assert driver.engine.stats["hits"] == 0 and len(driver.engine.entries()) == 4


def test_engine_is_not_used_when_the_app_gives_caching_information(state_dir, tmp_path):
    driver = ReferenceDevice(engine=True)
    test = float_model()
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    c = nnapi.Compilation(test.model, devices=[device_for(driver)], cache_dir=app_dir, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "miss"
    assert driver.engine.stats["puts"] == 0 and driver.engine.entries() == []


def _blob(n: int, fill: int) -> bytes:
    return bytes([fill]) * n


def test_engine_lru_eviction_with_a_small_bound(tmp_path):
    engine = CachingEngine("test", "1", root=tmp_path, max_bytes=3000)
    for k in "abc":
        engine.put(k, [_blob(900, ord(k))], [b""])
    assert {e.key for e in engine.entries()} == {"a", "b", "c"}
    assert engine.get("a") is not None                      # a is now the most recently used
    engine.put("d", [_blob(900, 0)], [b""])                 # over 3000 bytes: b (least recent) goes
    assert {e.key for e in engine.entries()} == {"a", "c", "d"}
    assert not (tmp_path / "b.entry").exists()
    assert engine.stats["evicted"] == 1
    assert engine.get("b") is None
    (model,), (data,) = engine.get("a")
    assert bytes(model) == _blob(900, ord("a")) and bytes(data) == b""
    assert sum(e.size for e in engine.entries()) <= 3000
    engine.put("huge", [_blob(5000, 1)], [b""])              # larger than the bound: not stored
    assert engine.get("huge") is None
    assert engine.evict(0) and engine.entries() == []


def test_engine_default_bound_is_256_mb(tmp_path):
    assert CachingEngine("test", "1", root=tmp_path).max_bytes == 256 << 20


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "replace"])
def test_engine_corrupted_entry_is_dropped(tmp_path, damage):
    engine = CachingEngine("test", "1", root=tmp_path)
    engine.put("k", [_blob(100, 7)], [_blob(50, 8)])
    engine.put("other", [_blob(100, 9)], [b""])
    path = tmp_path / "k.entry"
    if damage == "flip":
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-10])
    elif damage == "delete":
        path.unlink()
    else:
        path.write_bytes((tmp_path / "other.entry").read_bytes())
    assert engine.verify()["k"] is not None and engine.verify()["other"] is None
    assert engine.get("k") is None
    assert engine.stats["dropped"] == 1
    assert [e.key for e in engine.entries()] == ["other"] and not path.exists()
    engine.put("k", [_blob(100, 7)], [_blob(50, 8)])        # the next compile stores it again
    assert engine.get("k") is not None


def test_engine_corrupted_entry_means_a_recompile_through_the_driver(state_dir):
    test = float_model()
    driver = ReferenceDevice(engine=True)
    nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
    (entry,) = driver.engine.root.glob("*.entry")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x40
    entry.write_bytes(bytes(data))
    c = nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    assert driver.engine.stats["dropped"] == 1 and driver.engine.stats["puts"] == 2
    assert nnapi.Compilation(test.model, devices=[device_for(driver)]).finish() and driver.engine.stats["hits"] == 1
