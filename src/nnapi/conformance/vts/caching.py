"""Suite `caching`: compilation caching as VTS-BEHAVIOURS section 1 requires it of any driver.

Through the HAL, with the VTS fixture (empty `model{i}`, `data{i}` and `tmp` files, handles in any
access mode, a token unique to the check) on the two parameter models: save then retrieve, stale content
and fd offsets, wrong handle counts, unusable descriptors, access modes, the TOCTOU races and the
replaced model cache, then the security mutations (bit flips at several offsets, truncation, extra
bytes, another model's cache, model and data files swapped, a wrong token). A model cache must be
rejected with GENERAL_FAILURE; a data cache may give wrong values but never a crash. Through the
public API, as the CTS does: compile twice with the same token and compare the outputs.

A driver that needs no cache files (caching unsupported) must answer every retrieval with
GENERAL_FAILURE; the checks that need caching are skipped for it.
"""
from __future__ import annotations

import os
import random
import resource
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ...hal import (MAX_NUMBER_OF_CACHE_FILES, CacheHandles, ErrorStatus, ExecutionPreference, NnError,
                    OperationType as Op, Priority)
from ...ops import numpy_dtype
from .core import Check, Fail, Kit, Skip, make, status_name
from .hal_exec import execute, vts_io
from .models import CACHING_MODELS, Subject, op_chain

SUITE = "caching"
TOKEN = bytes(32)
FAILURES = (ErrorStatus.GENERAL_FAILURE, ErrorStatus.INVALID_ARGUMENT)
V12 = "§1.2 CompilationCachingTest"
V13 = "§1.3 CompilationCachingSecurityTest"


# --- the fixture ----------------------------------------------------------------------------------------
class VtsCache:
    """The VTS fixture: empty `model{i}`, `data{i}` and `tmp` files and handles opened on them."""

    def __init__(self, root: Path, counts: tuple[int, int]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.counts = counts
        self.model = [self.root / f"model{i}" for i in range(counts[0])]
        self.data = [self.root / f"data{i}" for i in range(counts[1])]
        self.tmp = self.root / "tmp"
        for p in (*self.model, *self.data, self.tmp):
            p.touch()
        self._fds: list[int] = []
        self._keep: list[Any] = []
        #: The token of this fixture: unique per check and run (a driver's integrity registry persists).
        self.token = TOKEN

    def open(self, path: Path, mode: int = os.O_RDWR) -> int:
        flags = mode | (os.O_CREAT if mode != os.O_RDONLY else 0)
        fd = os.open(path, flags, 0o600)
        self._fds.append(fd)
        return fd

    def handles(self, mode: int = os.O_RDWR, *, model: list[Path] | None = None, data: list[Path] | None = None,
                modes: dict[tuple[str, int], int] | None = None) -> CacheHandles:
        """Handles on `model` / `data` paths (default the fixture's), `modes[("model"|"data", i)]` overriding."""
        modes = modes or {}
        model = self.model if model is None else model
        data = self.data if data is None else data
        return CacheHandles(tuple(self.open(p, modes.get(("model", i), mode)) for i, p in enumerate(model)),
                            tuple(self.open(p, modes.get(("data", i), mode)) for i, p in enumerate(data)))

    def slots(self) -> list[tuple[str, int]]:
        return [("model", i) for i in range(self.counts[0])] + [("data", i) for i in range(self.counts[1])]

    def bad_fd(self, kind: str) -> int:
        """A descriptor that is no usable cache file. (A closed descriptor is not used: in process its
        number is soon reused by another open, the caller's bug, which no driver could detect.)"""
        if kind == "-1":
            return -1
        if kind == "past the fd limit":
            return resource.getrlimit(resource.RLIMIT_NOFILE)[0] + 7
        if kind == "pipe":
            r, w = os.pipe()
            self._fds.extend((r, w))
            return r
        a, b = socket.socketpair()   # read and write, but not a regular file
        self._keep.extend((a, b))
        return a.fileno()

    def with_bad_fd(self, slot: tuple[str, int], kind: str) -> CacheHandles:
        handles = self.handles()
        fds = {"model": list(handles.model_cache), "data": list(handles.data_cache)}
        fds[slot[0]][slot[1]] = self.bad_fd(kind)
        return CacheHandles(tuple(fds["model"]), tuple(fds["data"]))

    def empty(self) -> None:
        for p in (*self.model, *self.data):
            p.write_bytes(b"")

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        for s in self._keep:
            s.close()
        self._keep.clear()


BAD_FDS = ("-1", "past the fd limit", "pipe", "socket")


def _fixture(kit: Kit, name: str) -> VtsCache:
    cache = VtsCache(kit.scratch(name), kit.cache_files())
    cache.token = kit.token(name)
    kit.on_close(cache.close)
    return cache


def claims_caching(kit: Kit) -> tuple[int, int]:
    """The cache-file counts of a driver that caches: Skip when it needs no files; Fail when it asks for
    files but caches none of the kit's models (`caches_something`)."""
    counts = kit.cache_files()
    if counts == (0, 0):
        raise Skip("the driver needs no cache files: compilation caching is not supported")
    kit.memo("caches-something", lambda: caches_something(kit, counts))
    return counts


def caches_something(kit: Kit, counts: tuple[int, int]) -> str:
    """The name of a kit model the driver caches (saved with prepare_model, then prepared from cache).
    A driver may choose not to cache a model, but one that asks for cache files and caches none of the
    kit's models only pretends to support caching: Fail saying so (Skip when it supports none)."""
    tried = []
    for name in CACHING_MODELS:
        try:
            subject = _subject(kit, name)
        except Skip:
            continue
        cache = _fixture(kit, f"probe-{name}")
        save(kit, subject, cache.handles(), cache.token)
        cache.close()
        status, _ = retrieve(kit, cache.handles(), cache.token)
        cache.close()
        if status == ErrorStatus.NONE:
            return name
        tried.append(f"{name}: {status_name(status)}")
    if not tried:
        raise Skip(f"the driver supports none of the kit's caching models ({', '.join(CACHING_MODELS)})")
    raise Fail(f"get_number_of_cache_files_needed reports {counts[0]} model and {counts[1]} data cache files, but "
               f"the driver cached none of the kit's models (prepare_model_from_cache after a correct save: "
               f"{'; '.join(tried)}); a driver that caches nothing reports (0, 0)")


def _subject(kit: Kit, name: str) -> Subject:
    subject = kit.memo(("caching-model", name), CACHING_MODELS[name])
    kit.supports(subject.hal, f"the {name} caching model")
    return subject


def save(kit: Kit, subject: Subject, handles: CacheHandles, token: bytes | None, what: str = "") -> Any:
    """saveModelToCache: prepare_model with cache handles must succeed whatever the handles are."""
    try:
        prepared = kit.call("prepare_model with cache handles", kit.driver.prepare_model, subject.hal,
                            ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, handles, token)
    except NnError as e:
        raise Fail(f"prepare_model failed with cache handles{what}: {status_name(e.status)}: {e.message} "
                   "(cache arguments must never change the preparation result)") from None
    if prepared is None:
        raise Fail(f"prepare_model returned no prepared model{what}")
    return prepared


def retrieve(kit: Kit, handles: CacheHandles, token: bytes) -> tuple[ErrorStatus, Any]:
    """prepareModelFromCache: (NONE, model) or (the failure status, None)."""
    status, prepared, _ = kit.attempt("prepare_model_from_cache", kit.driver.prepare_model_from_cache,
                                      None, handles, token)
    if status == ErrorStatus.NONE and prepared is None:
        raise Fail("prepare_model_from_cache returned no prepared model and no error")
    return status, prepared


def run(kit: Kit, prepared: Any, subject: Subject) -> list[np.ndarray]:
    """Execute synchronously (VTS request layout); any error fails the check."""
    main = subject.hal.main
    operands = [main.operands[i] for i in main.output_indexes]
    with vts_io(subject.inputs, [o.byte_size() for o in operands]) as io:
        outcome = execute(kit, prepared, io.request, "sync")
        if outcome.status != ErrorStatus.NONE:
            raise Fail(f"executing the {subject.name} model failed: {outcome.describe()}")
        return [io.output_array(k, numpy_dtype(o.type), o.dimensions).copy() for k, o in enumerate(operands)]


def check_outputs(kit: Kit, prepared: Any, subject: Subject, what: str) -> None:
    problem = subject.problem(run(kit, prepared, subject))
    if problem:
        raise Fail(f"{what}: wrong outputs: {problem}")


def expect_rejected(status: ErrorStatus, prepared: Any, allowed: tuple[ErrorStatus, ...], what: str) -> None:
    if status not in allowed or prepared is not None:
        got = "a prepared model" if prepared is not None else status_name(status)
        raise Fail(f"prepare_model_from_cache {what}: the driver returned {got}, expected "
                   f"{' or '.join(status_name(s) for s in allowed)} and no model")


def _retrieve_or_skip(kit: Kit, handles: CacheHandles, token: bytes, subject: Subject) -> Any:
    """Retrieval after a correct save: NONE and a model, or GENERAL_FAILURE ("the driver chose not to
    cache this model", which ends the check early as the VTS allows)."""
    status, prepared = retrieve(kit, handles, token)
    if status == ErrorStatus.GENERAL_FAILURE:
        raise Skip(f"the driver chose not to cache the {subject.name} model (retrieval after a correct save "
                   "gave GENERAL_FAILURE)")
    if status != ErrorStatus.NONE:
        raise Fail(f"prepare_model_from_cache after a correct save answered {status_name(status)}, expected NONE "
                   "(or GENERAL_FAILURE: not cached)")
    return prepared


def _other_token(token: bytes) -> bytes:
    return bytes([token[0] ^ 1]) + token[1:]


# --- §1.2 CompilationCachingTest -----------------------------------------------------------------------
def number_of_cache_files(kit: Kit) -> None:
    n_model, n_data = kit.cache_files()
    if not (0 <= n_model <= MAX_NUMBER_OF_CACHE_FILES and 0 <= n_data <= MAX_NUMBER_OF_CACHE_FILES):
        raise Fail(f"get_number_of_cache_files_needed returned ({n_model}, {n_data}): each count must be in "
                   f"0..{MAX_NUMBER_OF_CACHE_FILES}")


def save_and_retrieve(kit: Kit, name: str) -> None:
    subject = _subject(kit, name)
    cache = _fixture(kit, f"save-{name}")
    if kit.cache_files() == (0, 0):
        prepared = save(kit, subject, cache.handles(), cache.token)
        check_outputs(kit, prepared, subject, "the model prepared with (empty) cache handles")
        status, from_cache = retrieve(kit, cache.handles(), cache.token)
        expect_rejected(status, from_cache, (ErrorStatus.GENERAL_FAILURE,),
                        "on a driver that does not support caching")
        return
    claims_caching(kit)
    prepared = save(kit, subject, cache.handles(), cache.token)
    check_outputs(kit, prepared, subject, "the model prepared while saving")
    from_cache = _retrieve_or_skip(kit, cache.handles(), cache.token, subject)
    check_outputs(kit, from_cache, subject, "the model prepared from cache")


def non_zero_offset(kit: Kit, name: str) -> None:
    """Stale content and fd offsets: the driver truncates before writing and never trusts the position."""
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"offset-{name}")
    handles = cache.handles()
    for fd in (*handles.model_cache, *handles.data_cache):
        os.write(fd, b"\xde\xad")
    save(kit, subject, handles, cache.token, " (files holding 2 stale bytes, fd offset 2)")
    handles = cache.handles()
    for fd in (*handles.model_cache, *handles.data_cache):
        os.read(fd, 1)
    from_cache = _retrieve_or_skip(kit, handles, cache.token, subject)
    check_outputs(kit, from_cache, subject, "the model prepared from cache read at fd offset 1")


def larger_stale_content(kit: Kit, name: str) -> None:
    """Files longer than the new content: the driver must truncate them to zero before writing."""
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"stale-{name}")
    for p in (*cache.model, *cache.data):
        p.write_bytes(os.urandom(100_000))
    save(kit, subject, cache.handles(), cache.token, " (files holding 100000 stale bytes)")
    from_cache = _retrieve_or_skip(kit, cache.handles(), cache.token, subject)
    check_outputs(kit, from_cache, subject, "the model prepared from files that held stale content")


def _wrong_counts(cache: VtsCache) -> list[tuple[str, list[Path], list[Path]]]:
    """The four wrong-count vectors of the VTS: one extra / one missing model-cache, then data-cache handle."""
    n_model, n_data = cache.counts
    variants = [("one extra model-cache handle", cache.model + [cache.tmp], cache.data),
                ("one extra data-cache handle", cache.model, cache.data + [cache.tmp])]
    if n_model > 0:
        variants.append(("one model-cache handle missing", cache.model[:-1], cache.data))
    if n_data > 0:
        variants.append(("one data-cache handle missing", cache.model, cache.data[:-1]))
    return variants


def save_invalid_num_cache(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"savenum-{name}")
    for label, model_paths, data_paths in _wrong_counts(cache):
        prepared = save(kit, subject, cache.handles(model=model_paths, data=data_paths), cache.token, f" ({label})")
        check_outputs(kit, prepared, subject, f"the model prepared with {label}")
        status, from_cache = retrieve(kit, cache.handles(model=model_paths, data=data_paths), cache.token)
        expect_rejected(status, from_cache, FAILURES, f"with {label}")
        cache.close()


def retrieve_invalid_num_cache(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"getnum-{name}")
    save(kit, subject, cache.handles(), cache.token)
    for label, model_paths, data_paths in _wrong_counts(cache):
        status, from_cache = retrieve(kit, cache.handles(model=model_paths, data=data_paths), cache.token)
        expect_rejected(status, from_cache, FAILURES, f"with {label}")
        cache.close()


def save_invalid_fd(kit: Kit, name: str) -> None:
    """SaveToCacheInvalidNumFd in its closest representable form: a slot holds one int fd, so a handle
    with 0 or 2 fds cannot be written; instead a slot holds a descriptor that is no usable cache file."""
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"savefd-{name}")
    for slot in cache.slots():
        for bad in BAD_FDS:
            label = f"{slot[0]}-cache slot {slot[1]} holding a bad descriptor ({bad})"
            prepared = save(kit, subject, cache.with_bad_fd(slot, bad), cache.token, f" ({label})")
            check_outputs(kit, prepared, subject, f"the model prepared with {label}")
            status, from_cache = retrieve(kit, cache.with_bad_fd(slot, bad), cache.token)
            expect_rejected(status, from_cache, FAILURES, f"with {label}")
            cache.close()


def retrieve_invalid_fd(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"getfd-{name}")
    save(kit, subject, cache.handles(), cache.token)
    for slot in cache.slots():
        for bad in BAD_FDS:
            status, from_cache = retrieve(kit, cache.with_bad_fd(slot, bad), cache.token)
            expect_rejected(status, from_cache, FAILURES,
                            f"with {slot[0]}-cache slot {slot[1]} holding a bad descriptor ({bad})")
            cache.close()


def save_invalid_access_mode(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"savemode-{name}")
    for kind, i in cache.slots():
        modes = {(kind, i): os.O_RDONLY}
        label = f"{kind}-cache handle {i} opened read-only"
        prepared = save(kit, subject, cache.handles(modes=modes), cache.token, f" ({label})")
        check_outputs(kit, prepared, subject, f"the model prepared with {label}")
        status, from_cache = retrieve(kit, cache.handles(modes=modes), cache.token)
        expect_rejected(status, from_cache, FAILURES, f"with {label}")
        cache.close()


def retrieve_invalid_access_mode(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"getmode-{name}")
    save(kit, subject, cache.handles(), cache.token)
    for kind, i in cache.slots():
        status, from_cache = retrieve(kit, cache.handles(modes={(kind, i): os.O_WRONLY}), cache.token)
        expect_rejected(status, from_cache, (ErrorStatus.GENERAL_FAILURE,),
                        f"with {kind}-cache handle {i} opened write-only")
        cache.close()


# --- TOCTOU and replacement -------------------------------------------------------------------------------
def _chains(kit: Kit, quant: bool) -> tuple[Subject, Subject]:
    label = "quant8" if quant else "float32"
    mul = kit.memo(("chain", Op.MUL, quant), lambda: op_chain(Op.MUL, quant))
    add = kit.memo(("chain", Op.ADD, quant), lambda: op_chain(Op.ADD, quant))
    kit.supports(mul.hal, f"the {label} MUL chain")
    kit.supports(add.hal, f"the {label} ADD chain")
    return mul, add


def _mul_paths(cache: VtsCache) -> list[Path]:
    return [p.with_name(p.name + "_mul") for p in cache.model]


def _copy_over(sources: list[Path], targets: list[Path]) -> None:
    """The attacker: copy each source over its target, O_WRONLY|O_CREAT without truncation, 1 MB chunks."""
    for src, dst in zip(sources, targets):
        with open(src, "rb") as f_in:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while chunk := f_in.read(1 << 20):
                    os.write(fd, chunk)
            finally:
                os.close(fd)


def _copy_until(stop: threading.Event, sources: list[Path], targets: list[Path]) -> None:
    _copy_over(sources, targets)
    while not stop.is_set():
        _copy_over(sources, targets)


def _race_setup(kit: Kit, quant: bool, name: str) -> tuple[VtsCache, Subject, Subject]:
    n_model, _ = claims_caching(kit)
    if n_model == 0:
        raise Skip("the driver uses no model-cache files, so there is no model cache to race")
    mul, add = _chains(kit, quant)
    cache = _fixture(kit, name)
    for p in _mul_paths(cache):
        p.touch()
    save(kit, mul, cache.handles(model=_mul_paths(cache)), cache.token)
    cache.close()
    return cache, mul, add


def _check_race(kit: Kit, status: ErrorStatus, prepared: Any, add: Subject, what: str) -> bool:
    if status != ErrorStatus.NONE:
        return False
    (out,) = run(kit, prepared, add)
    if out.reshape(-1).tolist() != add.golden[0].tolist():
        raise Fail(f"{what}: the model prepared from cache computed {out.reshape(-1).tolist()}, expected the ADD "
                   f"chain's {add.golden[0].tolist()} (the driver prepared from a model cache it did not verify)")
    return True


def _iterations(kit: Kit) -> int:
    return 4 if kit.quick else 20


def save_toctou(kit: Kit, quant: bool) -> None:
    """Even iterations: one copy racing the save, as the VTS does; odd ones: copies over and over until
    the save returns, so the copy often lands after the write. A retrieval that succeeds must give 101."""
    cache, mul, add = _race_setup(kit, quant, f"toctou-save-{quant}")
    token = _other_token(cache.token)
    for i in range(_iterations(kit)):
        stop = threading.Event()
        target = _copy_until if i % 2 else _copy_over
        args = (stop, _mul_paths(cache), cache.model) if i % 2 else (_mul_paths(cache), cache.model)
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        try:
            save(kit, add, cache.handles(), token, " (while another thread overwrites the model cache)")
        finally:
            stop.set()
            thread.join()
        _check_race(kit, *retrieve(kit, cache.handles(), token), add, f"iteration {i}")
        cache.close()


def retrieve_toctou(kit: Kit, quant: bool) -> None:
    cache, mul, add = _race_setup(kit, quant, f"toctou-get-{quant}")
    token = _other_token(cache.token)
    for i in range(_iterations(kit)):
        save(kit, add, cache.handles(), token)
        thread = threading.Thread(target=_copy_over, args=(_mul_paths(cache), cache.model), daemon=True)
        thread.start()
        try:
            result = retrieve(kit, cache.handles(), token)
        finally:
            thread.join()
        _check_race(kit, *result, add, f"iteration {i}")
        cache.close()


def replace_security_sensitive_cache(kit: Kit, quant: bool) -> None:
    cache, mul, add = _race_setup(kit, quant, f"replace-{quant}")
    token = _other_token(cache.token)
    save(kit, add, cache.handles(), token)
    for src, dst in zip(_mul_paths(cache), cache.model):
        shutil.copyfile(src, dst)
    status, prepared = retrieve(kit, cache.handles(), token)
    expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                    "with the MUL chain's model cache copied over the ADD chain's")
    cache.close()
    save(kit, add, cache.handles(), token)   # the TOCTOU copy that landed before the read: no truncation
    cache.close()
    _copy_over(_mul_paths(cache), cache.model)
    status, prepared = retrieve(kit, cache.handles(), token)
    expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                    "with the MUL chain's model cache written over the ADD chain's without truncation")
    cache.close()
    status, prepared = retrieve(kit, cache.handles(model=_mul_paths(cache)), cache.token)
    if status == ErrorStatus.NONE:   # the MUL cache under its own token may still be used (its data cache moved on)
        (out,) = run(kit, prepared, mul)
        if out.reshape(-1).tolist() != mul.golden[0].tolist():
            raise Fail(f"the MUL chain prepared from its own cache computed {out.reshape(-1).tolist()}, expected "
                       f"{mul.golden[0].tolist()}")


# --- §1.3 CompilationCachingSecurityTest and the other tamperings ----------------------------------------------
def _seeds(kit: Kit) -> range:
    return range(2) if kit.quick else range(10)


def _fresh(kit: Kit, cache: VtsCache, subject: Subject, token: bytes | None = None) -> None:
    cache.empty()
    save(kit, subject, cache.handles(), cache.token if token is None else token)
    cache.close()


def _flip_bit(path: Path, rng: random.Random) -> str | None:
    data = bytearray(path.read_bytes())
    if not data:
        return None
    offset = rng.randrange(len(data))
    bit = rng.randrange(8)
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))
    return f"bit {bit} of byte {offset} of {len(data)}"


def _append(path: Path, rng: random.Random) -> str:
    n = rng.randint(1, 256)
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(n)))
    return f"{n} bytes appended"


def _truncate(path: Path, rng: random.Random) -> str | None:
    size = path.stat().st_size
    if size == 0:
        return None
    keep = rng.randrange(size)
    os.truncate(path, keep)
    return f"truncated from {size} to {keep} bytes"


def _tolerated(kit: Kit, cache: VtsCache, subject: Subject, what: str) -> None:
    """Data-cache rule: no crash; a model exactly when the status is NONE; a returned model runs (its
    values may be wrong)."""
    status, prepared = retrieve(kit, cache.handles(), cache.token)
    if status == ErrorStatus.NONE:
        main = subject.hal.main
        with vts_io(subject.inputs, [main.operands[i].byte_size() for i in main.output_indexes]) as io:
            execute(kit, prepared, io.request, "sync")   # any status; a crash or a hang fails
    cache.close()


def _model_tamper(kit: Kit, name: str, mutate: Any, label: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"{label}-{name}")
    if not cache.model:
        raise Skip("the driver uses no model-cache files")
    for seed in _seeds(kit):
        rng = random.Random(seed)
        for i, path in enumerate(cache.model):
            _fresh(kit, cache, subject)
            change = mutate(path, rng)
            if change is None:
                continue
            status, prepared = retrieve(kit, cache.handles(), cache.token)
            expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                            f"with model cache {i} changed ({change}, seed {seed})")
            cache.close()


def corrupted_model_cache(kit: Kit, name: str) -> None:
    _model_tamper(kit, name, _flip_bit, "flip")


def wrong_length_model_cache(kit: Kit, name: str) -> None:
    _model_tamper(kit, name, _append, "append")


def truncated_model_cache(kit: Kit, name: str) -> None:
    _model_tamper(kit, name, _truncate, "truncate")


def _data_tamper(kit: Kit, name: str, mutate: Any, label: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"{label}-{name}")
    if not cache.data:
        raise Skip("the driver uses no data-cache files")
    for seed in _seeds(kit):
        rng = random.Random(seed)
        for i, path in enumerate(cache.data):
            _fresh(kit, cache, subject)
            change = mutate(path, rng)
            if change is not None:
                _tolerated(kit, cache, subject, f"data cache {i} changed ({change})")


def corrupted_data_cache(kit: Kit, name: str) -> None:
    _data_tamper(kit, name, _flip_bit, "dflip")


def wrong_length_data_cache(kit: Kit, name: str) -> None:
    _data_tamper(kit, name, _append, "dappend")


def truncated_data_cache(kit: Kit, name: str) -> None:
    _data_tamper(kit, name, _truncate, "dtruncate")


def wrong_token(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"token-{name}")
    for seed in _seeds(kit):
        rng = random.Random(seed)
        token = kit.token(f"wrong-token-{name}-{rng.random()}")
        _fresh(kit, cache, subject, token)
        bit = rng.randrange(256)
        wrong = bytearray(token)
        wrong[bit // 8] ^= 1 << (bit % 8)
        status, prepared = retrieve(kit, cache.handles(), bytes(wrong))
        expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                        f"with bit {bit} of the token flipped (seed {seed})")
        cache.close()


def other_models_cache(kit: Kit, name: str) -> None:
    """Both caches of the other parameter model put in place of this model's, under this model's token."""
    claims_caching(kit)
    subject = _subject(kit, name)
    other = _subject(kit, "quant8" if name == "float32" else "float32")
    cache = _fixture(kit, f"other-{name}")
    if not cache.model:
        raise Skip("the driver uses no model-cache files")
    save(kit, subject, cache.handles(), cache.token)
    cache.close()
    elsewhere = _fixture(kit, f"other-src-{name}")
    save(kit, other, elsewhere.handles(), _other_token(cache.token))
    elsewhere.close()
    for src, dst in zip((*elsewhere.model, *elsewhere.data), (*cache.model, *cache.data)):
        shutil.copyfile(src, dst)
    status, prepared = retrieve(kit, cache.handles(), cache.token)
    expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                    f"with the {other.name} model's cache files copied over the {name} model's")


def swapped_files(kit: Kit, name: str) -> None:
    """Model-cache file 0 and data-cache file 0 swapped: the model cache changed, so it is rejected."""
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"swap-{name}")
    if not cache.model or not cache.data:
        raise Skip("the driver does not use both model-cache and data-cache files")
    _fresh(kit, cache, subject)
    model_bytes, data_bytes = cache.model[0].read_bytes(), cache.data[0].read_bytes()
    if model_bytes == data_bytes:
        raise Skip("model-cache file 0 and data-cache file 0 hold the same bytes")
    cache.model[0].write_bytes(data_bytes)
    cache.data[0].write_bytes(model_bytes)
    status, prepared = retrieve(kit, cache.handles(), cache.token)
    expect_rejected(status, prepared, (ErrorStatus.GENERAL_FAILURE,),
                    "with model-cache file 0 and data-cache file 0 swapped")


# --- HAL argument rules --------------------------------------------------------------------------------------
def empty_vectors_ignore_token(kit: Kit, name: str) -> None:
    """Both vectors empty: no caching information, whatever the token (even a malformed one)."""
    subject = _subject(kit, name)
    for token in (TOKEN, b"short", None):
        prepared = save(kit, subject, CacheHandles(), token, f" (no cache handles, token {token!r})")
        check_outputs(kit, prepared, subject, f"the model prepared without cache handles (token {token!r})")


def retrieve_bad_token(kit: Kit, name: str) -> None:
    claims_caching(kit)
    subject = _subject(kit, name)
    cache = _fixture(kit, f"badtoken-{name}")
    save(kit, subject, cache.handles(), cache.token)
    cache.close()
    for token in (cache.token[:31], cache.token + b"\0", b""):
        status, prepared = retrieve(kit, cache.handles(), token)
        expect_rejected(status, prepared, FAILURES, f"with a token of {len(token)} bytes")
        cache.close()


def retrieve_unknown_token(kit: Kit) -> None:
    """Nothing was ever saved for this token and the files are empty: the retrieval fails."""
    cache = _fixture(kit, "unknown")
    status, prepared = retrieve(kit, cache.handles(), kit.token("never saved"))
    expect_rejected(status, prepared, FAILURES if kit.cache_files() != (0, 0) else (ErrorStatus.GENERAL_FAILURE,),
                    "for a token nothing was saved under, on empty files")


# --- through the public API -----------------------------------------------------------------------------------
def compile_twice(kit: Kit, name: str) -> None:
    """CTS GeneratedTests: compile with a cache directory and token twice (the second may hit the cache)
    and compare both compilations' outputs with the golden ones."""
    from ...runtime import Compilation
    subject = _subject(kit, name)
    directory = kit.scratch(f"runtime-{name}")
    for attempt in ("first", "second"):
        try:
            compilation = Compilation(subject.model, devices=[kit.device], cache_dir=directory,
                                      token=bytes(range(32)))
            kit.call("Compilation.finish", compilation.finish)
            outputs = kit.call("Compilation.execute", compilation.execute, subject.inputs)
        except NnError as e:
            raise Fail(f"the {attempt} compilation with a cache directory failed: {e}") from None
        problem = subject.problem(outputs)
        if problem:
            outcome = compilation.cache_outcomes[0].outcome if compilation.cache_outcomes else "?"
            raise Fail(f"the {attempt} compilation with a cache directory (cache {outcome}) gave wrong outputs: "
                       f"{problem}")


def checks(kit: Kit) -> Iterator[Check]:
    yield make(SUITE, "number-of-cache-files", "§1.3 NeuralnetworksHidlTest.getNumberOfCacheFilesNeeded",
               number_of_cache_files)
    per_model = [
        ("save-and-retrieve", f"{V12}.CacheSavingAndRetrieval", save_and_retrieve),
        ("save-and-retrieve-non-zero-offset", f"{V12}.CacheSavingAndRetrievalNonZeroOffset", non_zero_offset),
        ("save-over-larger-stale-files", "§1.3 prepareModel_1_3: truncate a cache file before writing it",
         larger_stale_content),
        ("save-invalid-num-cache", f"{V12}.SaveToCacheInvalidNumCache", save_invalid_num_cache),
        ("retrieve-invalid-num-cache", f"{V12}.PrepareModelFromCacheInvalidNumCache", retrieve_invalid_num_cache),
        ("save-invalid-fd", f"{V12}.SaveToCacheInvalidNumFd", save_invalid_fd),
        ("retrieve-invalid-fd", f"{V12}.PrepareModelFromCacheInvalidNumFd", retrieve_invalid_fd),
        ("save-invalid-access-mode", f"{V12}.SaveToCacheInvalidAccessMode", save_invalid_access_mode),
        ("retrieve-invalid-access-mode", f"{V12}.PrepareModelFromCacheInvalidAccessMode",
         retrieve_invalid_access_mode),
        ("corrupted-model-cache", f"{V13}.CorruptedModelCache", corrupted_model_cache),
        ("wrong-length-model-cache", f"{V13}.WrongLengthModelCache", wrong_length_model_cache),
        ("truncated-model-cache", "§1.3 model cache is security-sensitive: any change makes retrieval fail",
         truncated_model_cache),
        ("corrupted-data-cache", f"{V13}.CorruptedDataCache", corrupted_data_cache),
        ("wrong-length-data-cache", f"{V13}.WrongLengthDataCache", wrong_length_data_cache),
        ("truncated-data-cache", "§1.3 data cache: tampering gives at worst wrong values", truncated_data_cache),
        ("wrong-token", f"{V13}.WrongToken", wrong_token),
        ("other-models-cache", "§1.3 prepareModelFromCache_1_3: a cache changed since the driver wrote it fails",
         other_models_cache),
        ("swapped-model-and-data-files", "§1.3 model cache is security-sensitive: any change makes retrieval fail",
         swapped_files),
        ("empty-vectors-ignore-token", "§1.3 prepareModel_1_3: both vectors empty, the token is ignored",
         empty_vectors_ignore_token),
        ("retrieve-bad-token-length", "§1.3 prepareModelFromCache_1_3: invalid arguments fail", retrieve_bad_token),
        ("compile-twice", "§1.5 / §6.4 CTS GeneratedTests: compile twice with the same token", compile_twice),
    ]
    for name in CACHING_MODELS:
        for check_name, behaviour, fn in per_model:
            yield make(SUITE, f"{check_name}[{name}]", behaviour, fn, name)
    yield make(SUITE, "retrieve-unknown-token", "§1.3 prepareModelFromCache_1_3: an unknown cache fails",
               retrieve_unknown_token)
    for quant in (False, True):
        label = "quant8" if quant else "float32"
        yield make(SUITE, f"save-toctou[{label}]", f"{V12}.SaveToCache_TOCTOU", save_toctou, quant)
        yield make(SUITE, f"retrieve-toctou[{label}]", f"{V12}.PrepareFromCache_TOCTOU", retrieve_toctou, quant)
        yield make(SUITE, f"replace-security-sensitive-cache[{label}]", f"{V12}.ReplaceSecuritySensitiveCache",
                   replace_security_sensitive_cache, quant)
