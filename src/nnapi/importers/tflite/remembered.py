"""The import memo: a `.tflite` imported once is remembered in the app's cache folder, so a cached start
neither reads the file's flatbuffers again, nor validates the model again, nor hashes the file for its
token (together about 0.1 s of a 0.5 s start, and the importer's modules are not imported at all).

One file per model path (and `relaxed`): `<cache_dir>/<32 hex digits>.tflite-import`, holding

    b"NNTFLM1\\n", u64 header length, header (msgpack), padding to 4 KiB,
    then each constant pool the importer computed (not the file's own weights), 4 KiB aligned.

The header has the `.tflite` file's identity (device, inode, size, modification and change times: a
file written again, even with its times put back, has a new change time), its cache token, the HAL
model without its pools, where each pool comes from (the `.tflite` file's mapping, or a section of
this file), and the inputs and outputs as the app sees them.

A memo is used only when the integrity registry vouches for its SHA-256 (recorded when this runtime
wrote it, after the model was validated and compiled), the folder is the app's own
(`untrusted_folder`), and the `.tflite` file is the one it remembers; anything else is a miss, and the
file is imported as usual. The key has nnapi's and the importer's versions and a stamp of the
importer's and validator's sources, so a changed importer never uses an old memo.
"""
from __future__ import annotations

import hashlib
import logging
import mmap
import os
import stat
import struct
import tempfile
from collections import Counter
from typing import Any

import msgpack
import numpy as np

from ... import hal
from ..._version import __version__
from ...caching import IntegrityRegistry
from ...hal import CacheHandles
from ...memory import map_pool
from ...runtime import Memory, Model
from ...runtime.cache_files import FILE_CHECKS, IMPORT_MEMO_SUFFIX, mark_used, untrusted_folder
from .imported import IMPORTER_VERSION, ImportedModel, TensorInfo

log = logging.getLogger("nnapi.importers")

MAGIC = b"NNTFLM1\n"
SUFFIX = IMPORT_MEMO_SUFFIX
_PAGE = mmap.ALLOCATIONGRANULARITY
_HEAD = struct.Struct("<Q")
#: The sources whose change makes every memo stale (relative to the nnapi package).
_SOURCES = ("importers/tflite", "importers/tflite/operators", "validation", "runtime")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _registry() -> IntegrityRegistry:
    return IntegrityRegistry("tflite-import", f"{__version__}/{IMPORTER_VERSION}")


def _code_stamp() -> bytes:
    """Names, sizes and modification times of the importer's and validator's sources (no reads)."""
    h = hashlib.sha256()
    for folder in _SOURCES:
        try:
            entries = sorted((e.name, e.stat()) for e in os.scandir(os.path.join(_PACKAGE, folder))
                             if e.name.endswith(".py"))
        except OSError:
            continue
        for name, st in entries:
            h.update(f"{folder}/{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.digest()


def _key(path: str, relaxed: bool) -> bytes:
    h = hashlib.sha256(b"nnapi-tflite-import")
    h.update(f"{os.path.realpath(path)}\0{int(relaxed)}\0{__version__}/{IMPORTER_VERSION}\0".encode())
    h.update(_code_stamp())
    return h.digest()


def _memo_path(cache_dir: str, key: bytes) -> str:
    return os.path.join(cache_dir, key[:16].hex() + SUFFIX)


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


# --- the HAL model as plain lists ------------------------------------------------------------------
def _subgraph(g: hal.Subgraph) -> list:
    operands = [[int(o.type), list(o.dimensions), o.number_of_consumers, o.scale, o.zero_point, int(o.lifetime),
                 o.location.pool_index, o.location.offset, o.location.length,
                 None if o.channel_quant is None else [list(o.channel_quant.scales), o.channel_quant.channel_dim]]
                for o in g.operands]
    operations = [[int(op.type), list(op.inputs), list(op.outputs)] for op in g.operations]
    return [operands, operations, list(g.input_indexes), list(g.output_indexes)]


def _from_subgraph(data: list) -> hal.Subgraph:
    operands, operations, inputs, outputs = data
    T, L, Loc = hal.OperandType, hal.OperandLifeTime, hal.DataLocation
    return hal.Subgraph(
        [hal.Operand(T(t), tuple(dims), consumers, scale, zp, L(life), Loc(pool, offset, length),
                     None if cq is None else hal.SymmPerChannelQuantParams(tuple(cq[0]), cq[1]))
         for t, dims, consumers, scale, zp, life, pool, offset, length, cq in operands],
        [hal.Operation(hal.OperationType(t), tuple(i), tuple(o)) for t, i, o in operations],
        tuple(inputs), tuple(outputs))


def _tensor(t: TensorInfo) -> list:
    return [t.name, list(t.shape), t.dtype.str, t.scale, t.zero_point, t.signature_name]


def _from_tensor(data: list) -> TensorInfo:
    name, shape, dtype, scale, zp, signature = data
    return TensorInfo(name, tuple(shape), np.dtype(dtype), scale, zp, signature)


# --- writing ---------------------------------------------------------------------------------------
def remember(imported: ImportedModel, cache_dir: str, relaxed: bool) -> None:
    """Write the memo of a validated, compiled import (failures are logged: the memo is only a speed-up)."""
    try:
        _remember(imported, cache_dir, relaxed)
    except Exception as e:  # (a full disk, a read-only folder: the next start imports the file again)
        log.debug("the import memo of %s was not written: %s: %s", imported.path, type(e).__name__, e)


def _remember(imported: ImportedModel, cache_dir: str, relaxed: bool) -> None:
    if untrusted_folder(cache_dir) is not None or imported.memory.handle is None:
        return
    model = imported.model.to_hal()
    file_pool = imported.memory.pool
    sources: list[list] = []
    sections: list[bytes | memoryview] = []
    offset = 0
    for pool in model.pools:
        if pool == file_pool:
            sources.append(["file"])
            continue
        data = map_pool(pool).view(0, pool.size)
        sources.append(["data", offset, len(data)])
        sections.append(data)
        offset += len(data) + (-len(data) % _PAGE)
    header = msgpack.packb({
        "path": os.path.realpath(imported.path), "relaxed": relaxed,
        "stamp": _stamp(os.fstat(imported.memory.handle.fds[0])), "token": imported.token(),
        "model": [_subgraph(model.main), [_subgraph(g) for g in model.referenced], bytes(model.operand_values),
                  model.relax_computation_float32_to_float16],
        "pools": sources, "inputs": [_tensor(t) for t in imported.inputs],
        "outputs": [_tensor(t) for t in imported.outputs], "referenced_bytes": imported.referenced_bytes,
        "copied_bytes": imported.copied_bytes, "operators": dict(imported.operators),
        "operations": dict(imported.operations), "signature_key": imported.signature_key},
        use_bin_type=True)
    start = len(MAGIC) + _HEAD.size + len(header)
    start += -start % _PAGE
    key = _key(imported.path, relaxed)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".import-")
    try:
        with os.fdopen(fd, "wb") as f:
            def write(data: bytes | memoryview) -> None:
                f.write(data)
                digest.update(data)
            write(MAGIC + _HEAD.pack(len(header)) + header)
            write(b"\0" * (start - len(MAGIC) - _HEAD.size - len(header)))
            for data in sections:
                write(data)
                write(b"\0" * (-len(data) % _PAGE))
        # Vouched for before it is in place: a memo in place is always one the registry vouches for (a
        # failed or interrupted record leaves no memo; a digest vouched for without a file is harmless).
        _registry().record(key, digest.digest())
        os.replace(tmp, _memo_path(cache_dir, key))
    except BaseException:
        os.unlink(tmp)
        raise


# --- reading ---------------------------------------------------------------------------------------
def recall(path: str | os.PathLike, cache_dir: str, relaxed: bool) -> ImportedModel | None:
    """The remembered import of `path`, or None (no memo, a stale or unvouched one, anything odd)."""
    try:
        return _recall(os.fspath(path), cache_dir, relaxed)
    except Exception as e:
        log.debug("the import memo of %s is not used: %s: %s", path, type(e).__name__, e)
        return None


class Unusable(Exception):
    """Why a memo file is not used (a miss for `recall`, a rejection for `check`)."""


def _read(fd: int, key: bytes | None) -> tuple[dict[str, Any], int]:
    """(header, offset of the pools) of the memo open on `fd`, once its owner, its form and the registry's
    word on its SHA-256 are checked (Unusable saying what is wrong). `key`: the one it must be filed
    under (None: the one its header names)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0):
        raise Unusable("not a regular file of this app's")
    if st.st_size < _PAGE:
        raise Unusable("truncated")
    with mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ) as mapped:
        if mapped[:len(MAGIC)] != MAGIC:
            raise Unusable("not an import memo")
        digest = hashlib.sha256(mapped).digest()
        (n,) = _HEAD.unpack_from(mapped, len(MAGIC))
        head: dict[str, Any] = msgpack.unpackb(mapped[len(MAGIC) + _HEAD.size:len(MAGIC) + _HEAD.size + n],
                                               raw=False, strict_map_key=False)
    if key is None:
        key = _key(head["path"], head["relaxed"])
    if digest not in _registry().lookup(key):
        raise Unusable("the integrity registry does not vouch for its content (changed since it was written, "
                       "another state directory's, or written by another nnapi or importer version)")
    start = len(MAGIC) + _HEAD.size + n
    return head, start + (-start % _PAGE)


def check(memo: str | os.PathLike) -> str | None:
    """Why the memo file `memo` would never be used again, or None (`nnapi cache verify` and `prune`)."""
    try:
        fd = os.open(memo, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    try:
        head, _ = _read(fd, None)
        if os.path.basename(memo) != os.path.basename(_memo_path("", _key(head["path"], head["relaxed"]))):
            return "written by another version of the importer (never read again)"
        try:
            if _stamp(os.stat(head["path"])) != head["stamp"]:
                return f"{head['path']} changed since it was remembered"
        except OSError:
            return f"{head['path']} is gone"
        return None
    except Unusable as e:
        return str(e)
    except Exception as e:
        return f"unreadable: {type(e).__name__}: {e}"
    finally:
        os.close(fd)


def _recall(path: str, cache_dir: str, relaxed: bool) -> ImportedModel | None:
    if not os.path.isdir(cache_dir) or untrusted_folder(cache_dir) is not None:
        return None
    key = _key(path, relaxed)
    try:
        memo_fd = os.open(_memo_path(cache_dir, key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    model_fd = -1
    try:
        head, start = _read(memo_fd, key)
        model_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        model_st = os.fstat(model_fd)
        if _stamp(model_st) != head["stamp"]:
            return None  # (the file changed since it was remembered)
        mark_used(CacheHandles((memo_fd,), ()))  # (a hit: `nnapi cache prune --max-size` drops the least used)
        file_memory = Memory.from_fd(model_fd, 0, model_st.st_size, prot=mmap.PROT_READ)
        memories = [file_memory if source[0] == "file" else
                    Memory.from_fd(memo_fd, start + source[1], source[2], prot=mmap.PROT_READ)
                    for source in head["pools"]]
    finally:
        os.close(memo_fd)
        if model_fd >= 0:
            os.close(model_fd)
    main, referenced, values, relax = head["model"]
    hal_model = hal.Model(_from_subgraph(main), [_from_subgraph(g) for g in referenced], values,
                          [m.pool for m in memories], relax)
    model = Model.remembered(hal_model, memories)
    return ImportedModel(model, path, [_from_tensor(t) for t in head["inputs"]],
                         [_from_tensor(t) for t in head["outputs"]], file_memory, head["referenced_bytes"],
                         head["copied_bytes"], Counter(head["operators"]),
                         Counter(head["operations"]),
                         _token=head["token"], signature_key=head["signature_key"], remembered=True)


FILE_CHECKS[SUFFIX] = check  # (`nnapi cache` verifies and prunes memos with it)

__all__ = ["check", "recall", "remember", "SUFFIX", "Unusable"]
