"""Saving and loading one compilation's cache artifacts through the runtime's cache files.

Layout: model-cache file 0 starts with an index (magic, format version, the length of every
model-cache file, the length and xxh3-128 of every data-cache blob); every model-cache file then
holds its blob. The registry records the SHA-256 of all model-cache files together.

Save: build blobs in memory -> hash -> record -> write (C10), the record and the writes under one
exclusive lock. Model-cache file 0 is emptied first and written last, so a writer killed half-way
leaves a cache that reads as *incomplete* (a miss), never as a tampered one.
Load, under a shared lock: copy the model-cache files into memory -> check their lengths against the
index (shorter: incomplete) -> hash that copy -> check it against the token's verified digests ->
copy the data-cache files (unless the driver already holds the data that digest names) -> check
them against the index -> hand back exactly the bytes that were checked.
"""
from __future__ import annotations

import hashlib
import os
import struct
from typing import Callable, NamedTuple, Sequence

import xxhash

from ..hal import CacheHandles, ErrorStatus, NnError
from .files import BUSY, check_fds, check_read_write, locked, read_file, write_file
from .registry import IntegrityRegistry

_MAGIC = b"NNAPICA2"
_INDEX = struct.Struct("<8sIII")     # magic, format version, number of model files, number of data blobs
_MODEL_ENTRY = struct.Struct("<Q")   # model file length
_DATA_ENTRY = struct.Struct("<Q16s")  # data blob length, xxh3-128 digest
FORMAT_VERSION = 2
#: Largest cache file read back (guards against a file grown by an attacker).
MAX_FILE_BYTES = 4 << 30
#: How a load failure that means "not (completely) written" starts: a miss, not a rejection.
INCOMPLETE = "cache incomplete"
#: How a load failure that means "the registry holds no record of it" starts: a miss, not a rejection.
NOT_RECORDED = "not recorded"
#: What a load failure that is a miss, not a rejection, starts with: not (completely) written, not
#: recorded (dropped from the registry), or locked by another process for longer than the deadline.
MISSES = (INCOMPLETE, NOT_RECORDED, BUSY)


class CacheError(NnError):
    """A cache that cannot be used: always GENERAL_FAILURE (or INVALID_ARGUMENT for bad arguments)."""


def _fail(message: str) -> CacheError:
    return CacheError(ErrorStatus.GENERAL_FAILURE, message)


def _incomplete(message: str) -> CacheError:
    return CacheError(ErrorStatus.GENERAL_FAILURE, f"{INCOMPLETE}: {message} (not written yet, or its write "
                                                   "was interrupted)")


def check_counts(handles: CacheHandles, counts: tuple[int, int]) -> None:
    n_model, n_data = counts
    if len(handles.model_cache) != n_model or len(handles.data_cache) != n_data:
        raise CacheError(ErrorStatus.INVALID_ARGUMENT,
                         f"expected {n_model} model-cache and {n_data} data-cache files, got "
                         f"{len(handles.model_cache)} and {len(handles.data_cache)}")


def _model_digest(files: Sequence[bytes]) -> bytes:
    h = hashlib.sha256()
    for content in files:
        h.update(struct.pack("<Q", len(content)))
        h.update(content)
    return h.digest()


def _index_size(n_model: int, n_data: int) -> int:
    return _INDEX.size + n_model * _MODEL_ENTRY.size + n_data * _DATA_ENTRY.size


def encode(model_blobs: Sequence[bytes], data_blobs: Sequence[bytes]) -> list[bytes]:
    """The content of every model-cache file (file 0 carries the index of every file)."""
    n_model, n_data = len(model_blobs), len(data_blobs)
    lengths = [len(b) for b in model_blobs]
    lengths[0] += _index_size(n_model, n_data)
    index = (_INDEX.pack(_MAGIC, FORMAT_VERSION, n_model, n_data)
             + b"".join(_MODEL_ENTRY.pack(n) for n in lengths)
             + b"".join(_DATA_ENTRY.pack(len(d), xxhash.xxh3_128_digest(d)) for d in data_blobs))
    return [index + bytes(model_blobs[0])] + [bytes(b) for b in model_blobs[1:]]


def _check_lengths(model_files: Sequence[memoryview], data_files: Sequence[memoryview] | None,
                   n_given: int) -> list[tuple[int, bytes]]:
    """Check every file's length against the index (`n_given` data files were handed over; their
    lengths too unless `data_files` is None: not read); returns the data entries (length, digest)."""
    first = model_files[0]
    if len(first) == 0:
        raise _incomplete("model cache 0 is empty")
    if len(first) < _INDEX.size:
        raise _incomplete(f"model cache 0 holds {len(first)} bytes, less than its index")
    magic, version, n_model, n_data = _INDEX.unpack_from(first)
    if magic != _MAGIC or version != FORMAT_VERSION:
        raise _fail(f"model cache has format {bytes(magic)!r} v{version}, expected {_MAGIC!r} v{FORMAT_VERSION}")
    if n_model != len(model_files) or n_data != n_given:
        raise _fail(f"model cache index lists {n_model} model and {n_data} data files, "
                    f"{len(model_files)} and {n_given} were given")
    if len(first) < _index_size(n_model, n_data):
        raise _incomplete("model cache 0 ends inside its index")
    pos = _INDEX.size
    for i, content in enumerate(model_files):
        (length,) = _MODEL_ENTRY.unpack_from(first, pos)
        pos += _MODEL_ENTRY.size
        if len(content) < length:
            raise _incomplete(f"model cache {i} holds {len(content)} of its {length} bytes")
        if len(content) > length:
            raise _fail(f"model cache {i} holds {len(content)} bytes, {length} were saved (extra bytes)")
    entries = [_DATA_ENTRY.unpack_from(first, pos + i * _DATA_ENTRY.size) for i in range(n_data)]
    for i, (content, (length, _)) in enumerate(zip(data_files or (), entries)):
        if len(content) < length:
            raise _incomplete(f"data cache {i} holds {len(content)} of its {length} bytes")
    return entries


def decode(model_files: Sequence[memoryview], data_files: Sequence[memoryview] | None,
           entries: list[tuple[int, bytes]]) -> tuple[list[memoryview], list[memoryview] | None]:
    """Split verified model-cache files back into blobs and check the data blobs against the index."""
    data = None if data_files is None else []
    for i, (content, (length, digest)) in enumerate(zip(data_files or (), entries)):
        if len(content) != length or xxhash.xxh3_128_digest(content) != digest:
            raise _fail(f"data cache {i} does not match what was saved (corrupted or replaced)")
        data.append(memoryview(content))
    first = memoryview(model_files[0])
    blobs = [first[_index_size(len(model_files), len(entries)):]] + [memoryview(f) for f in model_files[1:]]
    return blobs, data


def save_artifacts(handles: CacheHandles, token: bytes, registry: IntegrityRegistry, counts: tuple[int, int],
                   model_blobs: Sequence[bytes], data_blobs: Sequence[bytes], uid: int | None = None) -> bytes:
    """Hash, record for app `uid`, then write; returns the SHA-256 recorded (what a load of this content is
    vouched for by). Raises CacheError/OSError; callers treat any failure as "not cached"."""
    check_counts(handles, counts)
    if len(model_blobs) != counts[0] or len(data_blobs) != counts[1] or not model_blobs:
        raise CacheError(ErrorStatus.GENERAL_FAILURE, "artifact count does not match the advertised cache files")
    check_fds(handles.model_cache, "model cache")
    check_fds(handles.data_cache, "data cache")
    model_files = encode(model_blobs, data_blobs)
    digest = _model_digest(model_files)
    fds = (*handles.model_cache, *handles.data_cache)
    with locked(fds, exclusive=True):  # record and files change together for every reader
        os.ftruncate(handles.model_cache[0], 0)  # emptied first, written last: a killed writer leaves "incomplete"
        registry.record(token, digest, uid)
        try:
            for fd, content in zip(handles.data_cache, data_blobs):
                write_file(fd, content)
            for fd, content in zip(handles.model_cache[1:], model_files[1:]):
                write_file(fd, content)
            write_file(handles.model_cache[0], model_files[0])
        except OSError:  # (a full disk: what was written goes, so the space is every other model's again)
            for fd in fds:
                try:
                    os.ftruncate(fd, 0)
                except OSError:
                    pass
            raise
    return digest


class Verified(NamedTuple):
    """What a load hands back: exactly the bytes that were checked (`data_blobs` None when the driver
    said it holds that data already), and the SHA-256 the registry vouched for (it names this content:
    the model files, whose index holds the data blobs' digests)."""

    model_blobs: list[memoryview]
    data_blobs: list[memoryview] | None
    digest: bytes


_NO_RECORD = "no integrity record for this token: the cache was not written by this driver version for this app"


def load_artifacts(handles: CacheHandles, token: bytes, registry: IntegrityRegistry, counts: tuple[int, int],
                   data_held: Callable[[bytes], bool] | None = None, uid: int | None = None,
                   deadline_ns: int | None = None) -> Verified:
    """Read, verify against what app `uid` recorded, and return the blobs; GENERAL_FAILURE with the
    reason when unusable (the files' lock is waited for until `deadline_ns`, `files.locked`).

    `data_held(digest)`, asked once the model files are verified: whether the driver already holds the
    data blobs of the content `digest` names (checked when it read them), so they are not read again."""
    check_counts(handles, counts)
    if not isinstance(token, (bytes, bytearray)) or len(token) != 32:
        raise CacheError(ErrorStatus.INVALID_ARGUMENT, "cache token must be 32 bytes")
    check_read_write(handles.model_cache, "model cache")
    check_read_write(handles.data_cache, "data cache")
    fds = (*handles.model_cache, *handles.data_cache)
    try:
        with locked(fds, exclusive=False, deadline_ns=deadline_ns):  # the files and the record as one writer left them
            expected = registry.lookup(token, uid)
            if not expected and not registry.any_dropped(token, uid):  # (nothing to compare: read nothing)
                if os.fstat(handles.model_cache[0]).st_size == 0:  # not written yet: a miss, not a rejection
                    raise _incomplete("model cache 0 is empty")
                raise _fail(_NO_RECORD)
            model_files = [read_file(fd, MAX_FILE_BYTES) for fd in handles.model_cache]
            _check_lengths(model_files, None, len(handles.data_cache))
            digest = _model_digest(model_files)
            if digest not in expected:
                if registry.was_dropped(token, digest, uid):
                    raise _fail(f"{NOT_RECORDED}: the registry no longer holds this cache's digest (dropped as "
                                "the least recently used)")
                if not expected:
                    raise _fail(_NO_RECORD)
                raise _fail("model cache failed its integrity check (changed since this driver wrote it)")
            held = data_held is not None and data_held(digest)
            data_files = None if held else [read_file(fd, MAX_FILE_BYTES) for fd in handles.data_cache]
    except OSError as e:
        raise _fail(f"cache files cannot be read: {e}") from None
    entries = _check_lengths(model_files, data_files, len(handles.data_cache))
    registry.touch(token, digest, uid)
    return Verified(*decode(model_files, data_files, entries), digest)
