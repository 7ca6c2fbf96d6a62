"""Compilation caching of the reference driver beyond what the kit requires of every driver.

The VTS `CompilationCachingTest` behaviours (VTS-BEHAVIOURS 1.1-1.3) are checks of the certification kit
(`nnapi.conformance.vts.caching`), run on the reference driver by test_vts_reference.py. Here: what the
reference driver does more strictly than the VTS allows (exactly GENERAL_FAILURE where INVALID_ARGUMENT
would also pass, the cache still usable after a failed retrieval, caching that survives the TOCTOU race).
"""
from __future__ import annotations

import os
import threading

import pytest

from nnapi.conformance.vts import Kit, device_for
from nnapi.conformance.vts.caching import BAD_FDS, VtsCache, _copy_over, _mul_paths, retrieve, run, save
from nnapi.conformance.vts.models import CACHING_MODELS, op_chain
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import ErrorStatus, OperationType as Op

TOKEN = bytes(range(32))


@pytest.fixture
def kit():
    k = Kit(device_for(ReferenceDevice()))
    yield k
    k.close()


@pytest.fixture
def cache(tmp_path, kit):
    c = VtsCache(tmp_path / "cache", kit.cache_files())
    yield c
    c.close()


@pytest.fixture(params=sorted(CACHING_MODELS))
def subject(request):
    return CACHING_MODELS[request.param]()


def test_the_reference_driver_caches_into_every_file(kit, cache, subject):
    n_model, n_data = kit.cache_files()
    assert n_model > 0 and n_data > 0
    save(kit, subject, cache.handles(), TOKEN)
    assert all(p.stat().st_size > 0 for p in (*cache.model, *cache.data))


def test_bad_descriptors_give_exactly_general_failure_and_leave_the_cache_intact(kit, cache, subject):
    save(kit, subject, cache.handles(), TOKEN)
    for slot in cache.slots():
        for bad in BAD_FDS:
            status, prepared = retrieve(kit, cache.with_bad_fd(slot, bad), TOKEN)
            assert status == ErrorStatus.GENERAL_FAILURE and prepared is None, (slot, bad)
        status, prepared = retrieve(kit, cache.handles(modes={slot: os.O_WRONLY}), TOKEN)
        assert status == ErrorStatus.GENERAL_FAILURE and prepared is None, slot
    status, prepared = retrieve(kit, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    assert subject.problem(run(kit, prepared, subject)) is None


def test_saving_with_a_bad_descriptor_is_retrieved_as_general_failure(kit, cache, subject):
    for slot in cache.slots():
        for bad in BAD_FDS:
            save(kit, subject, cache.with_bad_fd(slot, bad), TOKEN)
            status, prepared = retrieve(kit, cache.with_bad_fd(slot, bad), TOKEN)
            assert status == ErrorStatus.GENERAL_FAILURE and prepared is None, (slot, bad)
            cache.close()


def test_an_unknown_token_is_exactly_general_failure(kit, cache):
    status, prepared = retrieve(kit, cache.handles(), bytes([7]) * 32)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None


@pytest.mark.parametrize("quant", [False, True], ids=["float32", "quant8"])
def test_caching_survives_the_toctou_race(kit, cache, quant):
    """The race of SaveToCache_TOCTOU never makes a wrong model (the kit checks that); on the reference
    driver it does not make caching useless either: some retrievals succeed."""
    mul, add = op_chain(Op.MUL, quant), op_chain(Op.ADD, quant)
    for p in _mul_paths(cache):
        p.touch()
    save(kit, mul, cache.handles(model=_mul_paths(cache)), TOKEN)
    token = bytes([TOKEN[0] ^ 1]) + TOKEN[1:]
    hits = 0
    for _ in range(6):
        thread = threading.Thread(target=_copy_over, args=(_mul_paths(cache), cache.model))
        thread.start()
        save(kit, add, cache.handles(), token)
        thread.join()
        status, prepared = retrieve(kit, cache.handles(), token)
        if status == ErrorStatus.NONE:
            hits += 1
            assert run(kit, prepared, add)[0].reshape(-1).tolist() == [101]
        cache.close()
    assert hits > 0


def test_a_compilation_fingerprints_each_model_object_once(monkeypatch, tmp_path):
    """Outside a compilation a model is hashed on every call (it may have changed in between); within
    `remembered_fingerprints` (each `Compilation.finish`) once per object, for the cache token and
    every device's claims alike."""
    import dataclasses

    import nnapi
    from conftest import add_relu_model
    from nnapi.caching import fingerprint
    model = add_relu_model()
    hal = model.to_hal()
    original = fingerprint.model_to_bytes
    ours = original(dataclasses.replace(hal, pools=[]))
    hashed = []  # hashes of this model's content (a device may measure itself on models of its own)

    def counting(m):
        data = original(m)
        if data == ours:
            hashed.append(1)
        return data

    monkeypatch.setattr(fingerprint, "model_to_bytes", counting)
    first = fingerprint.model_fingerprint(hal)
    assert fingerprint.model_fingerprint(hal) == first and len(hashed) == 2
    hashed.clear()
    with fingerprint.remembered_fingerprints():
        assert fingerprint.model_fingerprint(hal) == first == fingerprint.model_fingerprint(hal)
        assert len(hashed) == 1
        assert fingerprint.model_fingerprint(dataclasses.replace(hal)) == first and len(hashed) == 2
    hashed.clear()
    nnapi.Compilation(model, cache_dir=tmp_path, token=b"t" * 32).finish()  # every device: one hash of it
    assert len(hashed) == 1
