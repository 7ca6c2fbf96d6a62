"""VTS `CompilationCachingSecurityTest` (VTS-BEHAVIOURS 1.3): device x {float32, quant8} x seed 0..9.

For each cache file i: save fresh, change that file (or the token), retrieve. A changed model cache
or token must give exactly GENERAL_FAILURE and no model; a changed data cache must not crash, and
a model comes back exactly when the status is NONE (wrong values would be allowed; the reference
driver in fact rejects it, since the model cache records the data blobs' digests).
"""
from __future__ import annotations

import random

import pytest

from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import ErrorStatus

from caching_kit import MODELS, VtsCache, check_outputs, retrieve, run_hal, save

SEEDS = range(10)
TOKEN = bytes(32)


@pytest.fixture(scope="module")
def device() -> ReferenceDevice:
    return ReferenceDevice()


@pytest.fixture(scope="module", params=sorted(MODELS))
def test_model(request):
    return MODELS[request.param]()


@pytest.fixture
def cache(tmp_path, device):
    c = VtsCache(tmp_path / "cache", device.get_number_of_cache_files_needed())
    yield c
    c.close()


def _fresh_save(device, cache, test_model, token=TOKEN) -> None:
    for p in (*cache.model, *cache.data):
        p.write_bytes(b"")
    save(device, test_model, cache.handles(), token)
    cache.close()


def _flip_bit(path, rng: random.Random) -> bool:
    data = bytearray(path.read_bytes())
    if not data:
        return False
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return True


def _append(path, rng: random.Random) -> None:
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(rng.randint(1, 256))))


def _check_tolerated(device, cache, test_model, token=TOKEN) -> None:
    """Data-cache rule: no crash; model iff NONE; a returned model runs (values may be wrong)."""
    status, prepared = retrieve(device, cache.handles(), token)
    assert (prepared is not None) == (status == ErrorStatus.NONE)
    if prepared is not None:
        run_hal(prepared, test_model.hal, test_model.inputs)
    # The reference driver goes further: the index in the model cache catches any data-cache change.
    assert status == ErrorStatus.GENERAL_FAILURE


@pytest.mark.parametrize("seed", SEEDS)
def test_corrupted_model_cache(device, cache, test_model, seed):
    rng = random.Random(seed)
    for i, path in enumerate(cache.model):
        _fresh_save(device, cache, test_model)
        if not _flip_bit(path, rng):
            continue
        status, prepared = retrieve(device, cache.handles(), TOKEN)
        assert status == ErrorStatus.GENERAL_FAILURE and prepared is None, i


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_length_model_cache(device, cache, test_model, seed):
    rng = random.Random(seed)
    for i, path in enumerate(cache.model):
        _fresh_save(device, cache, test_model)
        _append(path, rng)
        status, prepared = retrieve(device, cache.handles(), TOKEN)
        assert status == ErrorStatus.GENERAL_FAILURE and prepared is None, i


@pytest.mark.parametrize("seed", SEEDS)
def test_corrupted_data_cache(device, cache, test_model, seed):
    rng = random.Random(seed)
    for path in cache.data:
        _fresh_save(device, cache, test_model)
        if _flip_bit(path, rng):
            _check_tolerated(device, cache, test_model)


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_length_data_cache(device, cache, test_model, seed):
    rng = random.Random(seed)
    for path in cache.data:
        _fresh_save(device, cache, test_model)
        _append(path, rng)
        _check_tolerated(device, cache, test_model)


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_token(device, cache, test_model, seed):
    rng = random.Random(seed)
    token = bytes(rng.randrange(256) for _ in range(32))
    _fresh_save(device, cache, test_model, token)
    bit = rng.randrange(256)
    wrong = bytearray(token)
    wrong[bit // 8] ^= 1 << (bit % 8)
    status, prepared = retrieve(device, cache.handles(), bytes(wrong))
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None
    status, prepared = retrieve(device, cache.handles(), token)   # the right token still works
    assert status == ErrorStatus.NONE
    check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))


def test_restored_model_cache_is_accepted_again(device, cache, test_model):
    """Rejection is about content, not a sticky flag: the original bytes put back are accepted."""
    _fresh_save(device, cache, test_model)
    original = cache.model[0].read_bytes()
    _flip_bit(cache.model[0], random.Random(0))
    assert retrieve(device, cache.handles(), TOKEN)[0] == ErrorStatus.GENERAL_FAILURE
    cache.model[0].write_bytes(original)
    status, prepared = retrieve(device, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))


def test_model_cache_from_an_older_driver_version_is_rejected(cache, test_model):
    """C9: the registry is keyed by driver version, so a driver update never prepares an old cache."""
    from caching_kit import VersionedReference
    old, new = VersionedReference("1.0.0"), VersionedReference("1.0.1")
    save(old, test_model, cache.handles(), TOKEN)
    status, prepared = retrieve(new, cache.handles(), TOKEN)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None
    status, _ = retrieve(old, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE


def test_integrity_registry_survives_a_restart(cache, test_model, tmp_path):
    """The mapping is persistent: a new driver object (a restarted service) accepts the cache."""
    save(ReferenceDevice(), test_model, cache.handles(), TOKEN)
    status, prepared = retrieve(ReferenceDevice(), cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
