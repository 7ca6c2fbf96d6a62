"""VTS `CompilationCachingTest` (VTS-BEHAVIOURS 1.1-1.2) on the reference driver, through the HAL.

Each test runs for both parameter models of the VTS fixture (float32 and quant8; small models with
weights in the data cache instead of the two MobileNets, which the vectors do not ship). The
fixture creates empty `model0..N-1`, `data0..M-1` and `tmp` files in a temporary directory; the
token starts as 32 zero bytes.
"""
from __future__ import annotations

import os
import resource
import shutil
import socket
import threading

import pytest

from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (CacheHandles, ErrorStatus, MAX_NUMBER_OF_CACHE_FILES, OperationType as Op)

from caching_kit import (MODELS, VtsCache, chain_model, check_outputs, retrieve, run_hal, save)

TOKEN = bytes(32)
FAILURES = (ErrorStatus.GENERAL_FAILURE, ErrorStatus.INVALID_ARGUMENT)


@pytest.fixture
def device() -> ReferenceDevice:
    return ReferenceDevice()


@pytest.fixture
def cache(tmp_path, device):
    counts = device.get_number_of_cache_files_needed()
    c = VtsCache(tmp_path / "cache", counts)
    yield c
    c.close()


@pytest.fixture(params=sorted(MODELS))
def test_model(request):
    return MODELS[request.param]()


def _other_token(token: bytes = TOKEN) -> bytes:
    return bytes([token[0] ^ 1]) + token[1:]


def test_number_of_cache_files_needed(device):
    """NeuralnetworksHidlTest.getNumberOfCacheFilesNeeded: both counts at most 32; the reference driver caches."""
    n_model, n_data = device.get_number_of_cache_files_needed()
    assert 0 <= n_model <= MAX_NUMBER_OF_CACHE_FILES and 0 <= n_data <= MAX_NUMBER_OF_CACHE_FILES
    assert n_model > 0 or n_data > 0


def test_cache_saving_and_retrieval(device, cache, test_model):
    prepared = save(device, test_model, cache.handles(), TOKEN)
    check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
    assert all(p.stat().st_size > 0 for p in (*cache.model, *cache.data))
    status, from_cache = retrieve(device, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE and from_cache is not None
    check_outputs(test_model, run_hal(from_cache, test_model.hal, test_model.inputs))


def test_cache_saving_and_retrieval_non_zero_offset(device, cache, test_model):
    """Stale content and fd offsets: the driver truncates before writing and never trusts the position."""
    handles = cache.handles()
    for fd in (*handles.model_cache, *handles.data_cache):
        assert os.write(fd, b"\xde\xad") == 2
    save(device, test_model, handles, TOKEN)
    handles = cache.handles()
    for fd in (*handles.model_cache, *handles.data_cache):
        assert len(os.read(fd, 1)) == 1
    status, from_cache = retrieve(device, handles, TOKEN)
    assert status == ErrorStatus.NONE
    check_outputs(test_model, run_hal(from_cache, test_model.hal, test_model.inputs))


def test_cache_saving_over_larger_stale_content(device, cache, test_model):
    """Files longer than the new content are truncated, so no stale tail survives."""
    for p in (*cache.model, *cache.data):
        p.write_bytes(os.urandom(100_000))
    save(device, test_model, cache.handles(), TOKEN)
    assert all(p.stat().st_size < 100_000 for p in (*cache.model, *cache.data))
    status, from_cache = retrieve(device, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE
    check_outputs(test_model, run_hal(from_cache, test_model.hal, test_model.inputs))


def _wrong_counts(cache: VtsCache):
    """The four wrong-count vectors of the VTS: one extra / one missing model-cache, then data-cache handle."""
    n_model, n_data = cache.counts
    variants = [("extra model", cache.model + [cache.tmp], cache.data),
                ("extra data", cache.model, cache.data + [cache.tmp])]
    if n_model > 0:
        variants.append(("missing model", cache.model[:-1], cache.data))
    if n_data > 0:
        variants.append(("missing data", cache.model, cache.data[:-1]))
    return variants


def test_wrong_count_variants_cover_all_four_cases(cache):
    assert [v[0] for v in _wrong_counts(cache)] == ["extra model", "extra data", "missing model", "missing data"]


@pytest.mark.parametrize("variant", range(4))
def test_save_to_cache_invalid_num_cache(device, cache, test_model, variant):
    name, model_paths, data_paths = _wrong_counts(cache)[variant]
    handles = cache.handles(model=model_paths, data=data_paths)
    prepared = save(device, test_model, handles, TOKEN)           # still succeeds
    check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
    status, from_cache = retrieve(device, cache.handles(model=model_paths, data=data_paths), TOKEN)
    assert status in FAILURES and from_cache is None, name


@pytest.mark.parametrize("variant", range(4))
def test_prepare_model_from_cache_invalid_num_cache(device, cache, test_model, variant):
    save(device, test_model, cache.handles(), TOKEN)
    name, model_paths, data_paths = _wrong_counts(cache)[variant]
    status, from_cache = retrieve(device, cache.handles(model=model_paths, data=data_paths), TOKEN)
    assert status in FAILURES and from_cache is None, name


BAD_FDS = ("-1", "past the fd limit", "pipe", "socket")


def _bad_fd(kind: str, keep: list) -> int:
    """A descriptor that is no usable cache file. A descriptor closed by the caller is not used: in-process
    its number is reused by the next open (an mmap's internal dup, a database file), which is the
    caller's use-after-close bug, not something a driver could detect."""
    if kind == "-1":
        return -1
    if kind == "past the fd limit":
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0] + 7
    if kind == "pipe":
        r, w = os.pipe()
        keep.extend((r, w))
        return r
    a, b = socket.socketpair()   # O_RDWR, but not a regular file
    keep.extend((a, b))
    return a.fileno()


def _bad_fd_handles(cache: VtsCache, slot: tuple[str, int], bad: str, keep: list) -> CacheHandles:
    handles = cache.handles()
    fds = {"model": list(handles.model_cache), "data": list(handles.data_cache)}
    fds[slot[0]][slot[1]] = _bad_fd(bad, keep)
    return CacheHandles(tuple(fds["model"]), tuple(fds["data"]))


def _slots(cache: VtsCache):
    return [("model", i) for i in range(cache.counts[0])] + [("data", i) for i in range(cache.counts[1])]


@pytest.fixture
def keep():
    """Descriptors a test opened for its bad handles, closed at the end."""
    objects: list = []
    yield objects
    for o in objects:
        o.close() if hasattr(o, "close") else os.close(o)


def test_save_to_cache_invalid_num_fd(device, cache, test_model, keep):
    """SaveToCacheInvalidNumFd cannot be written as such: a `CacheHandles` slot holds exactly one int fd, so
    a handle with 0 or 2 fds is unrepresentable in our types. The closest thing is a slot holding a
    descriptor that is no usable cache file (-1, a number past the fd limit, a pipe, a socket). Saving
    must still succeed and execute correctly; retrieval with the same handles fails with
    GENERAL_FAILURE and no model."""
    for slot in _slots(cache):
        for bad in BAD_FDS:
            prepared = save(device, test_model, _bad_fd_handles(cache, slot, bad, keep), TOKEN)
            check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
            status, from_cache = retrieve(device, _bad_fd_handles(cache, slot, bad, keep), TOKEN)
            assert status == ErrorStatus.GENERAL_FAILURE and from_cache is None, (slot, bad)


def test_prepare_model_from_cache_invalid_num_fd(device, cache, test_model, keep):
    """PrepareModelFromCacheInvalidNumFd, in the closest representable form (see above): a bad descriptor in
    one slot after a correct save gives GENERAL_FAILURE and no model."""
    save(device, test_model, cache.handles(), TOKEN)
    for slot in _slots(cache):
        for bad in BAD_FDS:
            status, from_cache = retrieve(device, _bad_fd_handles(cache, slot, bad, keep), TOKEN)
            assert status == ErrorStatus.GENERAL_FAILURE and from_cache is None, (slot, bad)
    status, _ = retrieve(device, cache.handles(), TOKEN)   # the cache itself is intact
    assert status == ErrorStatus.NONE


def test_save_to_cache_invalid_access_mode(device, cache, test_model):
    for kind, i in _slots(cache):
        modes = {(kind, i): os.O_RDONLY}
        prepared = save(device, test_model, cache.handles(modes=modes), TOKEN)
        check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
        status, from_cache = retrieve(device, cache.handles(modes=modes), TOKEN)
        assert status in FAILURES and from_cache is None, (kind, i)


def test_prepare_model_from_cache_invalid_access_mode(device, cache, test_model):
    save(device, test_model, cache.handles(), TOKEN)
    for kind, i in _slots(cache):
        status, from_cache = retrieve(device, cache.handles(modes={(kind, i): os.O_WRONLY}), TOKEN)
        assert status == ErrorStatus.GENERAL_FAILURE and from_cache is None, (kind, i)   # exactly
    status, _ = retrieve(device, cache.handles(), TOKEN)
    assert status == ErrorStatus.NONE


# --- TOCTOU and replacement ---------------------------------------------------------------------------
TOCTOU_ITERATIONS = 20


@pytest.fixture(params=["float32", "quant8"])
def chains(request):
    quant = request.param == "quant8"
    return chain_model(Op.MUL, quant), chain_model(Op.ADD, quant)


def _mul_paths(cache: VtsCache):
    return [p.with_name(p.name + "_mul") for p in cache.model]


def _copy_over(sources, targets) -> None:
    """The attacker: copy each source over its target, O_WRONLY|O_CREAT without truncation, 1 MB chunks."""
    for src, dst in zip(sources, targets):
        with open(src, "rb") as f_in:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while chunk := f_in.read(1 << 20):
                    os.write(fd, chunk)
            finally:
                os.close(fd)


def _save_mul(device, cache, mul) -> None:
    for p in _mul_paths(cache):
        p.touch()
    save(device, mul, cache.handles(model=_mul_paths(cache)), TOKEN)
    assert all(p.stat().st_size > 0 for p in _mul_paths(cache))


def _check_race_result(status, prepared, add) -> bool:
    if status != ErrorStatus.NONE:
        assert prepared is None
        return False
    (out,) = run_hal(prepared, add.hal, add.inputs)
    assert out.tolist() == add.golden[0].tolist() == [101]   # never MUL's 1
    return True


def _copy_until(stop: threading.Event, sources, targets) -> None:
    """A more persistent attacker: copy again and again until the save returns."""
    _copy_over(sources, targets)
    while not stop.is_set():
        _copy_over(sources, targets)


def test_save_to_cache_toctou(device, cache, chains):
    """Even iterations: one copy racing the save, as the VTS does (it usually lands before the write).
    Odd iterations: copies over and over until the save returns, so the copy often lands after the
    write too. Either way a retrieval that succeeds must compute ADD's 101."""
    mul, add = chains
    _save_mul(device, cache, mul)
    token = _other_token()
    outcomes = []
    for i in range(TOCTOU_ITERATIONS):
        stop = threading.Event()
        if i % 2:
            thread = threading.Thread(target=_copy_until, args=(stop, _mul_paths(cache), cache.model))
        else:
            thread = threading.Thread(target=_copy_over, args=(_mul_paths(cache), cache.model))
        thread.start()
        save(device, add, cache.handles(), token)
        stop.set()
        thread.join()
        outcomes.append(_check_race_result(*retrieve(device, cache.handles(), token), add))
        cache.close()
    assert any(outcomes)     # the race does not make caching useless


def test_prepare_from_cache_toctou(device, cache, chains):
    mul, add = chains
    _save_mul(device, cache, mul)
    token = _other_token()
    for _ in range(TOCTOU_ITERATIONS):
        save(device, add, cache.handles(), token)
        thread = threading.Thread(target=_copy_over, args=(_mul_paths(cache), cache.model))
        thread.start()
        result = retrieve(device, cache.handles(), token)
        thread.join()
        _check_race_result(*result, add)
        cache.close()


def test_toctou_copy_that_lands_before_the_read_is_rejected(device, cache, chains):
    """The deterministic end of the race: MUL's model cache fully copied over ADD's before retrieval."""
    mul, add = chains
    _save_mul(device, cache, mul)
    token = _other_token()
    save(device, add, cache.handles(), token)
    _copy_over(_mul_paths(cache), cache.model)
    status, prepared = retrieve(device, cache.handles(), token)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None


def test_replace_security_sensitive_cache(device, cache, chains):
    mul, add = chains
    _save_mul(device, cache, mul)
    token = _other_token()
    save(device, add, cache.handles(), token)
    for src, dst in zip(_mul_paths(cache), cache.model):
        shutil.copyfile(src, dst)
    status, prepared = retrieve(device, cache.handles(), token)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None   # exactly
    # MUL's cache is still valid for MUL's own token.
    status, prepared = retrieve(device, cache.handles(model=_mul_paths(cache)), TOKEN)
    if status == ErrorStatus.NONE:   # the data cache now holds ADD's constants: MUL may be rejected
        assert run_hal(prepared, mul.hal, mul.inputs)[0].tolist() == [1]


# --- HAL argument rules of prepareModel_1_3 / prepareModelFromCache_1_3 --------------------------------------
def test_empty_cache_vectors_mean_the_token_is_ignored(device, cache, test_model):
    """Both vectors empty: no caching information, whatever the token (even a malformed one)."""
    from nnapi.hal import CacheHandles as Handles
    for token in (TOKEN, b"short", None):
        prepared = save(device, test_model, Handles(), token)
        check_outputs(test_model, run_hal(prepared, test_model.hal, test_model.inputs))
    assert all(p.stat().st_size == 0 for p in (*cache.model, *cache.data))


def test_retrieval_checks_the_token_length(device, cache, test_model):
    save(device, test_model, cache.handles(), TOKEN)
    for token in (TOKEN[:31], TOKEN + b"\0", b""):
        status, prepared = retrieve(device, cache.handles(), token)
        assert status in FAILURES and prepared is None


def test_retrieval_with_an_unknown_token_fails_cleanly(device, cache, test_model):
    """Nothing was ever saved for this token: GENERAL_FAILURE (the driver does not know the cache)."""
    status, prepared = retrieve(device, cache.handles(), bytes([7]) * 32)
    assert status == ErrorStatus.GENERAL_FAILURE and prepared is None
