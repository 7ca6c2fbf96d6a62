"""Cache security of the reference driver beyond what the kit requires of every driver.

`CompilationCachingSecurityTest` (VTS-BEHAVIOURS 1.3: changed model caches and tokens rejected, changed
data caches tolerated) is a suite of the certification kit, run on the reference driver by
test_vts_reference.py. Here: the reference driver rejects a changed data cache too (its model cache
indexes the data blobs' digests), rejection is about content (restored bytes are accepted again), and the
integrity registry is keyed by driver version and survives a restart (C9).
"""
from __future__ import annotations

import random

import pytest

from nnapi.conformance.vts import Kit, device_for
from nnapi.conformance.vts.caching import VtsCache, _append, _flip_bit, retrieve, run, save
from nnapi.conformance.vts.models import CACHING_MODELS
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import ErrorStatus

from caching_kit import VersionedReference

TOKEN = bytes(32)


def _kit(driver=None) -> Kit:
    return Kit(device_for(driver or ReferenceDevice()))


@pytest.fixture(scope="module", params=sorted(CACHING_MODELS))
def subject(request):
    return CACHING_MODELS[request.param]()


@pytest.fixture
def cache(tmp_path):
    c = VtsCache(tmp_path / "cache", ReferenceDevice().get_number_of_cache_files_needed())
    yield c
    c.close()


def _fresh_save(kit, cache, subject, token=TOKEN) -> None:
    cache.empty()
    save(kit, subject, cache.handles(), token)
    cache.close()


@pytest.mark.parametrize("mutate", [_flip_bit, _append], ids=["flipped-bit", "extra-bytes"])
@pytest.mark.parametrize("seed", range(3))
def test_a_changed_data_cache_is_rejected_too(cache, subject, mutate, seed):
    kit = _kit()
    rng = random.Random(seed)
    for path in cache.data:
        _fresh_save(kit, cache, subject)
        mutate(path, rng)
        status, prepared = retrieve(kit, cache.handles(), TOKEN)
        assert status == ErrorStatus.GENERAL_FAILURE and prepared is None
        cache.close()


def test_restored_model_cache_is_accepted_again(cache, subject):
    """Rejection is about content, not a sticky flag: the original bytes put back are accepted."""
    kit = _kit()
    _fresh_save(kit, cache, subject)
    original = cache.model[0].read_bytes()
    _flip_bit(cache.model[0], random.Random(0))
    assert retrieve(kit, cache.handles(), TOKEN)[0] == ErrorStatus.GENERAL_FAILURE
    cache.model[0].write_bytes(original)
    status, prepared = retrieve(kit, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    assert subject.problem(run(kit, prepared, subject)) is None


def test_model_cache_from_an_older_driver_version_is_rejected(cache, subject):
    """C9: the registry is keyed by driver version, so a driver update never prepares an old cache."""
    old, new = _kit(VersionedReference("1.0.0")), _kit(VersionedReference("1.0.1"))
    save(old, subject, cache.handles(), TOKEN)
    status, prepared = retrieve(new, cache.handles(), TOKEN)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None
    status, _ = retrieve(old, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE


def test_integrity_registry_survives_a_restart(cache, subject):
    """The mapping is persistent: a new driver object (a restarted service) accepts the cache."""
    save(_kit(), subject, cache.handles(), TOKEN)
    kit = _kit()
    status, prepared = retrieve(kit, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    assert subject.problem(run(kit, prepared, subject)) is None
