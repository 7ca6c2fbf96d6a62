"""The import memo (`importers.tflite.remembered`): a cached start reads no flatbuffers, and a memo that is
stale, tampered with, unvouched or in a folder others may write is never used."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nnapi
from nnapi.importers.tflite import remembered

MODELS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "models"


def _feeds(model, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in model.inputs:
        shape = [1 if s is None else s for s in t.shape]
        feeds[t.name] = (rng.random(shape) * 4).astype(t.dtype) if t.dtype.kind == "f" else \
            rng.integers(0, 20, shape).astype(t.dtype)
    return feeds


def _same_hal(a, b) -> None:
    ha, hb = a.to_hal(), b.to_hal()
    for ga, gb in zip(ha.all_subgraphs(), hb.all_subgraphs(), strict=True):
        assert ga.operands == gb.operands and ga.operations == gb.operations
        assert ga.input_indexes == gb.input_indexes and ga.output_indexes == gb.output_indexes
    assert ha.operand_values == hb.operand_values
    assert ha.relax_computation_float32_to_float16 == hb.relax_computation_float32_to_float16
    assert [p.size for p in ha.pools] == [p.size for p in hb.pools]


@pytest.mark.parametrize("name", ["keras/resnet_mini_int8.tflite",        # weights in the file's mapping
                                  "mediapipe/face_detection_short_range.tflite",  # weights the importer computed
                                  "keras/gru_text_f32.tflite"])            # WHILE bodies: referenced subgraphs
def test_a_remembered_import_is_the_same_model_and_computes_the_same(tmp_path, name):
    path = tmp_path / "model.tflite"
    shutil.copy(MODELS / name, path)
    cache = tmp_path / "cache"
    first = nnapi.load(path, devices="reference", cache_dir=cache)
    assert not first.imported.remembered
    assert len(list(cache.glob("*" + remembered.SUFFIX))) == 1
    second = nnapi.load(path, devices="reference", cache_dir=cache)
    assert second.imported.remembered
    assert [c.outcome for c in second.cache_outcomes] == ["hit"]
    _same_hal(first.model, second.model)
    assert second.imported.token() == first.imported.token()
    assert second.inputs == first.inputs and second.outputs == first.outputs
    assert second.input_names == first.input_names and second.output_names == first.output_names
    assert second.imported.operators == first.imported.operators
    assert second.imported.operations == first.imported.operations
    feeds = _feeds(first)
    a, b = first.run(feeds), second.run(feeds)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # The memo's pools really are the weights: the same model without a cache computes the same.
    plain = nnapi.load(path, devices="reference")
    for key, value in plain.run(feeds).items():
        np.testing.assert_array_equal(value, b[key])


@pytest.fixture
def model_and_cache(tmp_path):
    path = tmp_path / "model.tflite"
    shutil.copy(MODELS / "keras" / "resnet_mini_int8.tflite", path)
    cache = tmp_path / "cache"
    nnapi.load(path, devices="reference", cache_dir=cache)
    return path, cache


def test_a_file_written_again_is_imported_again(model_and_cache):
    path, cache = model_and_cache
    st = os.stat(path)
    data = path.read_bytes()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # (its times put back: the change time still moved)
    again = nnapi.load(path, devices="reference", cache_dir=cache)
    assert not again.imported.remembered
    assert nnapi.load(path, devices="reference", cache_dir=cache).imported.remembered  # (remembered anew)


def test_a_changed_model_file_is_never_mistaken_for_the_remembered_one(model_and_cache, tmp_path):
    path, cache = model_and_cache
    shutil.copy(MODELS / "keras" / "resnet_mini_f32.tflite", path)
    changed = nnapi.load(path, devices="reference", cache_dir=cache)
    assert not changed.imported.remembered
    assert changed.inputs[0].dtype == np.float32


@pytest.mark.parametrize("where", ["header", "pools"])
def test_a_tampered_memo_is_not_used_and_the_load_still_works(tmp_path, where):
    path = tmp_path / "model.tflite"
    shutil.copy(MODELS / "mediapipe" / "face_detection_short_range.tflite", path)
    cache = tmp_path / "cache"
    first = nnapi.load(path, devices="reference", cache_dir=cache)
    (memo,) = cache.glob("*" + remembered.SUFFIX)
    data = bytearray(memo.read_bytes())
    data[40 if where == "header" else len(data) - 5000] ^= 0x01
    memo.write_bytes(bytes(data))
    again = nnapi.load(path, devices="reference", cache_dir=cache)
    assert not again.imported.remembered
    feeds = _feeds(first)
    for key, value in first.run(feeds).items():
        np.testing.assert_array_equal(value, again.run(feeds)[key])


def test_a_memo_no_registry_vouches_for_is_not_used(model_and_cache, tmp_path, monkeypatch):
    path, cache = model_and_cache
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path / "another-state"))  # (its registry never saw the memo)
    assert not nnapi.load(path, devices="reference", cache_dir=cache).imported.remembered


def test_a_memo_in_a_folder_others_may_write_is_not_used(model_and_cache):
    path, cache = model_and_cache
    os.chmod(cache, 0o777)
    try:
        assert not nnapi.load(path, devices="reference", cache_dir=cache).imported.remembered
    finally:
        os.chmod(cache, 0o700)


def test_relaxed_and_strict_imports_are_remembered_apart(model_and_cache):
    path, cache = model_and_cache
    relaxed = nnapi.load(path, devices="reference", cache_dir=cache, relaxed=True)
    assert not relaxed.imported.remembered and relaxed.model.to_hal().relax_computation_float32_to_float16
    again = nnapi.load(path, devices="reference", cache_dir=cache, relaxed=True)
    assert again.imported.remembered and again.model.to_hal().relax_computation_float32_to_float16
    strict = nnapi.load(path, devices="reference", cache_dir=cache)
    assert strict.imported.remembered and not strict.model.to_hal().relax_computation_float32_to_float16


def test_a_cached_start_in_a_new_process_imports_no_tflite_reader(model_and_cache):
    path, cache = model_and_cache
    code = ("import sys, nnapi; m = nnapi.load(sys.argv[1], devices='reference', cache_dir=sys.argv[2]); "
            "print(m.imported.remembered, [n for n in sys.modules if n.startswith('nnapi.importers.tflite.schema')"
            " or n.startswith('nnapi.importers.tflite.operators')])")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(cache)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True []", out.stdout


def test_nnapi_cache_lists_checks_and_prunes_the_memos(model_and_cache, tmp_path):
    from nnapi.runtime.cache_admin import list_cache, prune_cache, verify_cache
    path, cache = model_and_cache
    memos = [e for e in list_cache(cache) if e["kind"] == "import"]
    assert len(memos) == 1 and memos[0]["size"] > 0
    assert [e["ok"] for e in verify_cache(cache) if e["kind"] == "import"] == [True]
    shutil.copy(MODELS / "keras" / "resnet_mini_f32.tflite", path)  # the model changed: its memo is stale
    (stale,) = [e for e in verify_cache(cache) if e["kind"] == "import"]
    assert not stale["ok"] and "changed since it was remembered" in stale["reason"]
    report = prune_cache(cache)
    assert [e["kind"] for e in report["removed"]] == ["import"]
    assert not list(cache.glob("*" + remembered.SUFFIX))
    assert any(e["kind"] == "app" for e in list_cache(cache))  # (the compiled entry is the driver's to judge)


def test_a_memo_whose_record_fails_is_not_left_in_place(tmp_path, monkeypatch):
    """The registry vouches for a memo before it is renamed into place: a record that fails (or an
    interrupted one) leaves no memo that `nnapi cache verify` would call unvouched."""
    path = tmp_path / "model.tflite"
    shutil.copy(MODELS / "keras/resnet_mini_int8.tflite", path)
    cache = tmp_path / "cache"

    class Refusing:
        def record(self, *args, **kwargs):
            raise KeyboardInterrupt  # (what Ctrl-C during the record raises)

    monkeypatch.setattr(remembered, "_registry", lambda: Refusing())
    with pytest.raises(KeyboardInterrupt):
        nnapi.load(path, devices="reference", cache_dir=cache)
    assert list(cache.iterdir()) and not [f for f in cache.iterdir() if f.name.endswith(remembered.SUFFIX)
                                          or f.name.startswith(".import-")]
