"""The runtime side of compilation caching (VTS-BEHAVIOURS 1.4-1.5) and the stale-hit matrix.

1.4 uses a recording fake driver (Android's `CachingDriver`): it writes 256 known bytes to every
cache file, checks them when asked to prepare from cache, and records how it was called.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import stat
import struct

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import ErrorStatus, ExecutionPreference, NnError, Priority, ResultCode
import importlib
devices_module = importlib.import_module("nnapi.runtime.devices")
from nnapi.runtime.cache_files import (NDK_PRIORITY, base_name, cache_paths, content_fingerprint, device_token,
                                       token_from_name)

from nnapi.conformance.vts import device_for
from nnapi.conformance.vts.models import float_model

from caching_kit import RecordingDriver, VersionedReference, reference
from conftest import CTS, add_relu_model

TOKEN = bytes(range(32))
X = np.array([1, -2, 3, -4], np.float32)


@pytest.fixture(scope="module")
def add_relu() -> nnapi.Model:
    """One model for the whole module (each model built holds a shared-memory descriptor)."""
    return add_relu_model()


def _run(compilation: nnapi.Compilation, *inputs):
    return compilation.execute(list(inputs))


def _cache_files(path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# --- 1.4 TestCompilationCaching.cpp -----------------------------------------------------------------------
COUNTS = (0, 1, 32)
FROM_CACHE = (ErrorStatus.NONE, ErrorStatus.GENERAL_FAILURE, ErrorStatus.DEVICE_UNAVAILABLE,
              ErrorStatus.INVALID_ARGUMENT)
GRID = list(itertools.product(COUNTS, COUNTS, FROM_CACHE))


def _grid_id(p) -> str:
    return f"model{p[0]}-data{p[1]}-{p[2].name}"


def _compile(driver: RecordingDriver, model: nnapi.Model, cache_dir=None, token=None) -> nnapi.Compilation:
    return nnapi.Compilation(model, devices=[device_for(driver)], cache_dir=cache_dir, token=token).finish()


@pytest.mark.parametrize("params", GRID, ids=_grid_id)
def test_token_provided_and_cache_not_exist(tmp_path, add_relu, params):
    n_model, n_data, status = params
    driver = RecordingDriver(n_model, n_data, status)
    c = _compile(driver, add_relu, tmp_path, TOKEN)
    supported = n_model > 0 or n_data > 0
    assert driver.calls == [("prepare_model", supported)]      # never prepare_model_from_cache
    assert len(_cache_files(tmp_path)) == n_model + n_data
    assert c.cache_outcomes[0].outcome == ("miss" if supported else "disabled")
    np.testing.assert_array_equal(_run(c, X, X)[0], np.maximum(2 * X, 0))


def test_a_single_device_hit_asks_nothing_else_and_a_miss_looks_up_the_cache_once(tmp_path, add_relu):
    """As Android's runtime gives a single device the whole model, its cache is looked up before any
    partitioning: a hit asks the driver for nothing else (no supported operations: through a service,
    no trip of the model there); a miss partitions as before and never looks the cache up twice."""
    driver = RecordingDriver(1, 1)
    asked: list[int] = []
    supported = driver.get_supported_operations
    driver.get_supported_operations = lambda model: asked.append(1) or supported(model)
    first = _compile(driver, add_relu, tmp_path, TOKEN)
    assert first.cache_outcomes[0].outcome == "miss" and asked and driver.calls == [("prepare_model", True)]
    asked.clear()
    driver.calls.clear()
    hit = _compile(driver, add_relu, tmp_path, TOKEN)
    assert hit.cache_outcomes[0].outcome == "hit" and driver.calls == [("prepare_model_from_cache", True)]
    assert asked == []
    np.testing.assert_array_equal(_run(hit, X, X)[0], np.maximum(2 * X, 0))
    driver.from_cache_status = ErrorStatus.GENERAL_FAILURE  # rejected: partitioned, compiled, one look-up
    driver.calls.clear()
    again = _compile(driver, add_relu, tmp_path, TOKEN)
    assert again.cache_outcomes[0].outcome == "rejected" and asked
    assert driver.calls == [("prepare_model_from_cache", False), ("prepare_model", True)]


@pytest.mark.parametrize("params", GRID, ids=_grid_id)
def test_token_provided_and_cache_exist(tmp_path, add_relu, params):
    n_model, n_data, status = params
    driver = RecordingDriver(n_model, n_data, status)
    _compile(driver, add_relu, tmp_path, TOKEN)                 # creates the cache files
    driver.calls.clear()
    c = _compile(driver, add_relu, tmp_path, TOKEN)
    if n_model == 0 and n_data == 0:
        assert driver.calls == [("prepare_model", False)]
        assert c.cache_outcomes[0].outcome == "disabled"
    elif status == ErrorStatus.NONE:
        assert driver.calls == [("prepare_model_from_cache", True)]   # and no prepare_model
        assert c.cache_outcomes[0].outcome == "hit"
    else:
        assert driver.calls == [("prepare_model_from_cache", False), ("prepare_model", True)]
        assert c.cache_outcomes[0].outcome == "rejected"
        assert "told to fail" in c.cache_outcomes[0].reason
    np.testing.assert_array_equal(_run(c, X, X)[0], np.maximum(2 * X, 0))


@pytest.mark.parametrize("params", GRID, ids=_grid_id)
def test_token_not_provided(tmp_path, add_relu, params):
    n_model, n_data, status = params
    driver = RecordingDriver(n_model, n_data, status)
    for _ in range(2):
        c = _compile(driver, add_relu)
    assert driver.calls == [("prepare_model", False)] * 2
    assert driver.tokens == [None, None]
    assert c.cache_outcomes[0].outcome == "disabled"


@pytest.fixture
def restore_devices():
    """register_device changes the process-wide list: take back what the test registered."""
    before = {d.name for d in nnapi.devices()}
    yield
    for d in nnapi.devices():
        if d.name not in before:
            devices_module.unregister_device(d.name)


@pytest.mark.parametrize("status", [ErrorStatus.NONE, ErrorStatus.DEVICE_UNAVAILABLE], ids=lambda s: s.name)
@pytest.mark.parametrize("n_model", [0, 1, 32, 33])
@pytest.mark.parametrize("n_data", [0, 1, 32, 33])
def test_device_registration_caching_failure(restore_devices, status, n_model, n_data):
    driver = RecordingDriver(n_model, n_data, files_status=status, name=f"fake-{status.name}-{n_model}-{n_data}")
    expect = status == ErrorStatus.NONE and n_model <= 32 and n_data <= 32
    if expect:
        device = nnapi.register_device(driver)
        assert device.cache_files == (n_model, n_data)
    else:
        with pytest.raises((ValueError, NnError)):
            nnapi.register_device(driver)
    assert any(d.name == driver.name for d in nnapi.devices()) == expect


def test_handles_passed_are_exactly_the_advertised_counts(tmp_path, add_relu):
    """checkNumberOfCacheHandles: RecordingDriver asserts it on every call; here with 3 and 5 files."""
    driver = RecordingDriver(3, 5)
    _compile(driver, add_relu, tmp_path, TOKEN)
    _compile(driver, add_relu, tmp_path, TOKEN)
    assert driver.calls == [("prepare_model", True), ("prepare_model_from_cache", True)]
    names = _cache_files(tmp_path)
    assert [n[64:] for n in names] == ["10", "11", "12", "20", "21", "22", "23", "24"]


def test_cache_files_that_cannot_be_created_compile_without_caching(tmp_path, add_relu, monkeypatch):
    import nnapi.runtime.compilation as compilation
    real = compilation.open_cache_files
    monkeypatch.setattr(compilation, "open_cache_files", lambda paths, create: None if create else real(paths, create))
    driver = RecordingDriver(1, 1)
    c = _compile(driver, add_relu, tmp_path, TOKEN)
    assert driver.calls == [("prepare_model", False)]
    assert c.cache_outcomes[0].outcome == "miss" and "could not be created" in c.cache_outcomes[0].reason


# --- 1.5 token derivation and file names -----------------------------------------------------------------
def _token(**changes) -> bytes:
    args = dict(app_token=TOKEN, operations=None, device_name="dev", device_version="1.0",
                preference=ExecutionPreference.FAST_SINGLE_ANSWER, priority=Priority.MEDIUM,
                fingerprint=b"\x01" * 16)
    args.update(changes)
    return device_token(**args)


@pytest.mark.parametrize("compound", [None, [0, 1]], ids=["simple", "compound"])
@pytest.mark.parametrize("field,values", [
    ("device_name", ["dev", "dev2", "other"]),
    ("device_version", ["1.0", "1.1", "2.0"]),
    ("preference", list(ExecutionPreference)),
    ("priority", list(Priority)),
    ("app_token", [TOKEN, bytes(32), bytes([1]) + bytes(31)]),
    ("fingerprint", [b"\x01" * 16, b"\x02" * 16]),
])
def test_derived_tokens_differ(field, values, compound):
    tokens = [_token(**{field: v, "operations": compound}) for v in values]
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) == 32 for t in tokens)
    for _ in range(10):   # deterministic
        assert [_token(**{field: v, "operations": compound}) for v in values] == tokens


def test_derived_tokens_differ_by_partition():
    """CacheTokenDifferentPartitionsCompoundBody: same device, other operations -> other token."""
    tokens = {_token(operations=ops) for ops in ([0], [1], [0, 1], [1, 2], [0, 1, 2])}
    assert len(tokens) == 5


def test_derived_token_is_androids_hash_plus_the_fingerprint():
    """SHA-256 of app token, (model index, operation index) u32 pairs, name, version, int32 preference,
    int32 NDK priority (90/100/110), then our content fingerprint."""
    for ops in (None, [3, 7]):
        h = hashlib.sha256(TOKEN)
        for i in ops or ():
            h.update(struct.pack("<II", 0, i))
        h.update(b"dev1.0")
        h.update(struct.pack("<ii", 2, 110))
        h.update(b"\x01" * 16)
        assert _token(operations=ops, preference=ExecutionPreference.SUSTAINED_SPEED,
                      priority=Priority.HIGH) == h.digest()
    assert NDK_PRIORITY == {0: 90, 1: 100, 2: 110}


def test_file_name_format(tmp_path):
    token = bytes([0x00, 0x1F, 0xF0, 0xA5]) + bytes(28)
    name = base_name(token)
    assert name.startswith("AAPBAPFK") and len(name) == 64 and set(name) <= set("ABCDEFGHIJKLMNOP")
    assert token_from_name(name) == token and token_from_name(name + "10") == token
    assert token_from_name("x" * 64) is None and token_from_name("AB") is None
    model, data = cache_paths(str(tmp_path), token, (2, 11))
    assert [os.path.basename(p) for p in model] == [name + "10", name + "11"]
    assert [os.path.basename(p) for p in data][-1] == name + "210"
    for t in (bytes(32), bytes(range(32)), bytes([255] * 32)):
        assert token_from_name(base_name(t)) == t


def test_runtime_names_files_from_the_derived_token(tmp_path, add_relu):
    device = reference()
    c = nnapi.Compilation(add_relu, devices=[device], cache_dir=tmp_path, token=TOKEN).finish()
    expected = device_token(TOKEN, None, device.name, device.version, c.preference, c.priority,
                            content_fingerprint(add_relu.to_hal()))
    assert _cache_files(tmp_path) == [base_name(expected) + "10", base_name(expected) + "20"]
    for p in tmp_path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_no_token_means_no_derived_token_and_no_files(tmp_path, add_relu):
    c = nnapi.Compilation(add_relu, devices=[reference()]).finish()
    assert [o.outcome for o in c.cache_outcomes] == ["disabled"]
    assert c.cache_outcomes[0].reason == "no cache directory"


def test_preferences_and_priorities_get_their_own_files(tmp_path, add_relu):
    combos = list(itertools.product(ExecutionPreference, Priority))
    for pref, prio in combos:
        c = nnapi.Compilation(add_relu, devices=[reference()], preference=pref, priority=prio, cache_dir=tmp_path,
                              token=TOKEN).finish()
        assert c.cache_outcomes[0].outcome == "miss"
    assert len(_cache_files(tmp_path)) == 2 * len(combos)
    for pref, prio in combos:
        c = nnapi.Compilation(add_relu, devices=[reference()], preference=pref, priority=prio, cache_dir=tmp_path,
                              token=TOKEN).finish()
        assert c.cache_outcomes[0].outcome == "hit"
        np.testing.assert_array_equal(_run(c, X, X)[0], np.maximum(2 * X, 0))


def test_ndk_priority_codes_are_accepted_and_hash_like_the_hal_values(tmp_path, add_relu):
    nnapi.Compilation(add_relu, devices=[reference()], priority=Priority.HIGH, cache_dir=tmp_path, token=TOKEN).finish()
    c = nnapi.Compilation(add_relu, devices=[reference()], priority=110, cache_dir=tmp_path, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "hit"


def _two_device_compile(tmp_path, model, driver, token=TOKEN):
    ref = reference()
    return nnapi.Compilation(model, devices=[device_for(driver), ref], cache_dir=tmp_path, token=token).finish()


def test_compound_plan_tokens_differ_per_partition_and_are_deterministic(tmp_path, add_relu, android_partitioning):
    """A fake device takes ADD, the reference device RELU: two steps, two distinct tokens, each stable
    over 10 compiles (every compile after the first hits both)."""
    driver = RecordingDriver(1, 1, name="adds-only", supported=lambda op: op.type == Op.ADD)
    first = _two_device_compile(tmp_path, add_relu, driver)
    assert [s.device.name for s in first.steps] == ["adds-only", "reference"]
    files = _cache_files(tmp_path)
    assert len(files) == 4 and len({f[:64] for f in files}) == 2
    for _ in range(10):
        c = _two_device_compile(tmp_path, add_relu, driver)
        assert [o.outcome for o in c.cache_outcomes] == ["hit", "hit"]
        assert _cache_files(tmp_path) == files
        np.testing.assert_array_equal(_run(c, X, X)[0], np.maximum(2 * X, 0))
    assert len({t for t in driver.tokens}) == 1


def test_compound_token_differs_from_simple_token_for_the_same_device(tmp_path, add_relu, android_partitioning):
    """The same operations on the same device as a whole model and as one partition: other tokens."""
    whole = RecordingDriver(1, 1, name="adds-only")
    _compile(whole, add_relu, tmp_path, TOKEN)
    part = RecordingDriver(1, 1, name="adds-only", supported=lambda op: op.type == Op.ADD)
    _two_device_compile(tmp_path, add_relu, part)
    assert whole.tokens[0] != part.tokens[0]


def test_device_name_and_version_give_other_files(tmp_path, add_relu):
    for driver in (RecordingDriver(1, 1, name="a"), RecordingDriver(1, 1, name="b")):
        _compile(driver, add_relu, tmp_path, TOKEN)
    for version in ("1.0", "2.0"):
        nnapi.Compilation(add_relu, devices=[device_for(VersionedReference(version))], cache_dir=tmp_path,
                          token=TOKEN).finish()
    assert len({f[:64] for f in _cache_files(tmp_path)}) == 4


def test_set_caching_checks(tmp_path, add_relu):
    with pytest.raises(NnError) as e:
        nnapi.Compilation(add_relu, devices=[reference()], cache_dir=tmp_path)
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(NnError):
        nnapi.Compilation(add_relu, devices=[reference()], token=TOKEN)
    with pytest.raises(NnError):
        nnapi.Compilation(add_relu, devices=[reference()], cache_dir=tmp_path, token=TOKEN[:31])
    c = nnapi.Compilation(add_relu, devices=[reference()])
    c.set_caching(str(tmp_path), bytearray(TOKEN))     # no trailing slash needed; bytes are copied
    c.finish()
    with pytest.raises(NnError) as e:
        c.set_caching(tmp_path, TOKEN)
    assert e.value.code == ResultCode.BAD_STATE
    assert c.cache_outcomes[0].outcome == "miss"


# --- the stale-hit matrix: an app reusing its token for something else always misses -------------------
def fc_model(weights: np.ndarray, memory: nnapi.Memory | None = None, relaxed: bool = False) -> nnapi.Model:
    """out = FC(x, weights) with weights [4, n] (in `memory` when given)."""
    m = nnapi.Model()
    n = weights.shape[1]
    x = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    w = m.add_operand(T.TENSOR_FLOAT32, weights.shape)
    if memory is not None:
        memory.mapped().view(0, weights.nbytes)[:] = weights.astype(np.float32).tobytes()
        m.set_operand_value_from_memory(w, memory, 0, weights.nbytes)
    else:
        m.set_operand_value(w, weights.astype(np.float32))
    b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    m.set_operand_value(b, np.zeros(4, np.float32))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (1, 4))
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    if relaxed:
        m.relax_computation_float32_to_float16(True)
    m.finish()
    return m


def _check_fc(c: nnapi.Compilation, weights: np.ndarray) -> None:
    x = np.arange(weights.shape[1], dtype=np.float32)[None] / 10
    np.testing.assert_allclose(_run(c, x)[0], x @ weights.T.astype(np.float32), rtol=1e-5, atol=1e-5)


def _outcome(model, cache_dir, devices=None, **kwargs) -> nnapi.Compilation:
    return nnapi.Compilation(model, devices=devices or [reference()], cache_dir=cache_dir, token=TOKEN,
                             **kwargs).finish()


@pytest.mark.parametrize("n", [40, 16384])  # (16384: 256 KiB of weights, which the runtime keeps mapped)
def test_stale_changed_weights_in_app_memory(tmp_path, n):
    """The app rewrites the shared memory its weights live in, then recompiles with the same token."""
    w1 = np.arange(4 * n, dtype=np.float32).reshape(4, n) / n
    memory = nnapi.Memory.ashmem(w1.nbytes)
    model = fc_model(w1, memory)
    _check_fc(_outcome(model, tmp_path), w1)
    w2 = -w1
    memory.mapped().view(0, w2.nbytes)[:] = w2.tobytes()
    c = _outcome(model, tmp_path)
    assert c.cache_outcomes[0].outcome == "miss"
    _check_fc(c, w2)


def test_a_finished_models_structure_is_hashed_once_and_its_weights_at_every_compilation(monkeypatch):
    """The runtime hashes a finished model's structure once per model object (nothing changes it) and
    the app's weights every time (the app may rewrite their memory); the memo keeps no model alive."""
    import gc
    import weakref
    from nnapi.caching import fingerprint
    w = np.ones((4, 40), np.float32)
    memory = nnapi.Memory.ashmem(w.nbytes)
    model = fc_model(w, memory)
    hal_model = model.to_hal()
    serialized = []
    original = fingerprint.model_to_bytes
    monkeypatch.setattr(fingerprint, "model_to_bytes", lambda m: serialized.append(1) or original(m))
    first = content_fingerprint(hal_model)
    assert content_fingerprint(hal_model) == first and len(serialized) == 1
    memory.mapped().view(0, w.nbytes)[:] = (-w).tobytes()
    changed = content_fingerprint(hal_model)
    assert changed != first and len(serialized) == 1
    assert fingerprint.model_fingerprint(hal_model) == changed and len(serialized) == 2  # (the full hash)
    gone = weakref.ref(hal_model)
    del hal_model, model
    gc.collect()
    assert gone() is None
    memory.close()


def test_app_weights_are_mapped_once_for_the_fingerprint_and_let_go_of_with_their_memory():
    """Each compilation fingerprints the app's weights (the token hashes them); from 256 KiB they stay
    mapped between compilations instead of being mapped and faulted in again each time, until the app
    closes their memory."""
    import resource
    from nnapi.memory import file_identity, process_mappings
    w = np.ones((4, 65536), np.float32)  # 1 MiB: 256 pages a fresh mapping would fault in
    memory = nnapi.Memory.ashmem(w.nbytes)
    model = fc_model(w, memory)
    hal_model = model.to_hal()
    first = content_fingerprint(hal_model)

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    before = faults()
    for _ in range(4):
        assert content_fingerprint(hal_model) == first
    assert faults() - before < 64
    dev, ino = file_identity(memory.handle)
    del hal_model, model
    memory.close()
    assert process_mappings().forget_file(dev, ino) == 0  # let go of with the memory


def test_stale_same_structure_other_weights(tmp_path):
    w1 = np.ones((4, 40), np.float32)
    _outcome(fc_model(w1), tmp_path)
    w2 = w1.copy()
    w2[3, 39] = 2.0                      # one value differs
    c = _outcome(fc_model(w2), tmp_path)
    assert c.cache_outcomes[0].outcome == "miss"
    _check_fc(c, w2)
    c = _outcome(fc_model(w1), tmp_path)
    assert c.cache_outcomes[0].outcome == "hit"
    _check_fc(c, w1)


def test_stale_same_name_other_shapes(tmp_path):
    w1 = np.ones((4, 40), np.float32)
    _outcome(fc_model(w1), tmp_path)
    w2 = np.ones((4, 41), np.float32)
    c = _outcome(fc_model(w2), tmp_path)
    assert c.cache_outcomes[0].outcome == "miss"
    _check_fc(c, w2)


def test_stale_changed_options(tmp_path):
    w = np.ones((4, 40), np.float32)
    model = fc_model(w)
    _outcome(model, tmp_path)
    for kwargs in ({"preference": ExecutionPreference.LOW_POWER}, {"priority": Priority.LOW}):
        c = _outcome(model, tmp_path, **kwargs)
        assert c.cache_outcomes[0].outcome == "miss", kwargs
        assert _outcome(model, tmp_path, **kwargs).cache_outcomes[0].outcome == "hit"
    c = _outcome(fc_model(w, relaxed=True), tmp_path)   # relaxed float16 computation is a model option
    assert c.cache_outcomes[0].outcome == "miss"
    _check_fc(c, w)


def test_stale_driver_version_bump(tmp_path):
    w = np.ones((4, 40), np.float32)
    model = fc_model(w)
    old = [device_for(VersionedReference("0.9.0"))]
    new = [device_for(VersionedReference("0.9.1"))]
    _outcome(model, tmp_path, old)
    assert _outcome(model, tmp_path, old).cache_outcomes[0].outcome == "hit"
    c = _outcome(model, tmp_path, new)
    assert c.cache_outcomes[0].outcome == "miss"
    _check_fc(c, w)


def test_stale_driver_version_bump_with_the_same_files(tmp_path, monkeypatch):
    """Even if the new driver were handed the old files (same derived token), its empty registry rejects them."""
    w = np.ones((4, 40), np.float32)
    model = fc_model(w)
    monkeypatch.setattr("nnapi.runtime.compilation.device_token", lambda *a: TOKEN)
    _outcome(model, tmp_path, [device_for(VersionedReference("0.9.0"))])
    c = _outcome(model, tmp_path, [device_for(VersionedReference("0.9.1"))])
    assert c.cache_outcomes[0].outcome == "rejected"
    assert "not written by this driver version" in c.cache_outcomes[0].reason
    _check_fc(c, w)


# --- cache outcomes and fallback ---------------------------------------------------------------------
def test_rejected_cache_falls_back_and_rewrites(tmp_path):
    test = float_model()
    _outcome(test.model, tmp_path)
    (model_file,) = [p for p in tmp_path.iterdir() if p.name.endswith("10")]
    data = bytearray(model_file.read_bytes())
    data[-1] ^= 1
    model_file.write_bytes(bytes(data))
    c = _outcome(test.model, tmp_path)
    assert c.cache_outcomes[0].outcome == "rejected" and "integrity" in c.cache_outcomes[0].reason
    np.testing.assert_allclose(_run(c, *test.inputs)[0], test.golden[0], atol=1e-4)
    c = _outcome(test.model, tmp_path)
    assert c.cache_outcomes[0].outcome == "hit"
    np.testing.assert_allclose(_run(c, *test.inputs)[0], test.golden[0], atol=1e-4)


@pytest.mark.parametrize("cut", ["empty", "half", "last byte"])
def test_a_cache_whose_write_did_not_finish_is_a_miss(tmp_path, cut):
    """An empty or cut-short model cache (another compilation still writing it, or a writer killed
    mid-write) is a miss, not a rejection; the compilation rewrites it."""
    test = float_model()
    _outcome(test.model, tmp_path)
    (model_file,) = [p for p in tmp_path.iterdir() if p.name.endswith("10")]
    data = model_file.read_bytes()
    model_file.write_bytes({"empty": b"", "half": data[:len(data) // 2], "last byte": data[:-1]}[cut])
    c = _outcome(test.model, tmp_path)
    assert c.cache_outcomes[0].outcome == "miss" and "incomplete" in c.cache_outcomes[0].reason
    np.testing.assert_allclose(_run(c, *test.inputs)[0], test.golden[0], atol=1e-4)
    assert _outcome(test.model, tmp_path).cache_outcomes[0].outcome == "hit"


def test_cache_outcome_reasons(tmp_path, add_relu):
    c = _outcome(add_relu, tmp_path)
    assert (c.cache_outcomes[0].device, c.cache_outcomes[0].outcome) == ("reference", "miss")
    assert c.cache_outcomes[0].reason == "cache files missing"
    assert _outcome(add_relu, tmp_path).cache_outcomes[0].reason == ""
    d = nnapi.Compilation(add_relu, devices=[device_for(RecordingDriver(0, 0, name="nocache"))],
                          cache_dir=tmp_path, token=TOKEN).finish()
    assert d.cache_outcomes[0].outcome == "disabled" and "does not cache" in d.cache_outcomes[0].reason


# --- CTS GeneratedTests: every model compiled twice with the same token, the second from the cache ---------
CTS_FILES = ["V1_3/if_simple.json", "V1_3/if_constant.json", "V1_3/while_fib.json", "V1_3/while_sum_of_powers.json",
             "V1_3/qlstm_projection.json", "V1_3/conv2d_quant8_signed.json", "V1_2/conv2d_per_channel.json",
             "V1_2/lstm2.json", "V1_1/mean_float_1.json", "V1_0/conv_float.json"]


def _cts_models():
    from nnapi.conformance.vectors import load_vectors
    for name in CTS_FILES:
        path = os.path.join(CTS, name)
        if os.path.exists(path):
            yield from itertools.islice((t for t in load_vectors([path]) if not t.expect_failure), 3)


@pytest.mark.skipif(not os.path.isdir(CTS), reason="conformance vectors not available")
def test_cts_models_compile_twice_and_the_second_hits(tmp_path):
    from nnapi.conformance.runner import compare
    from nnapi.conformance.vectors import build
    count = 0
    for test in _cts_models():
        built = build(test)
        token = nnapi.model_token(built.model)
        first = nnapi.Compilation(built.model, devices=[reference()], cache_dir=tmp_path, token=token).finish()
        second = nnapi.Compilation(built.model, devices=[reference()], cache_dir=tmp_path, token=token).finish()
        assert [o.outcome for o in second.cache_outcomes] == ["hit"], (test.name, second.cache_outcomes)
        expected = first.execute(built.inputs)
        got = second.execute(built.inputs)
        for a, b in zip(expected, got):
            np.testing.assert_array_equal(a, b, err_msg=test.name)
        assert compare(test, built, got) is None, test.name
        count += 1
        del first, second
    assert count >= 20
