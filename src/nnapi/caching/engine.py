"""The caching engine (C12): a driver's own persistent cache, for compilations without app caching info.

Entries are keyed by a content hash of the model and its options. Each entry is one file written
to a temporary name and renamed into place (atomic for readers in any process); an SQLite index
holds its SHA-256, size and last use. Reads are integrity-checked like the model cache; the total
size is bounded (default 256 MB) by evicting the least recently used entries.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ._sqlite import ThreadConnections
from .registry import state_dir

DEFAULT_MAX_BYTES = 256 << 20
_HEADER = struct.Struct("<8sII")   # magic, model blobs, data blobs
_LEN = struct.Struct("<Q")
_MAGIC = b"NNENGIN1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    digest BLOB NOT NULL,
    size INTEGER NOT NULL,
    last_used REAL NOT NULL
)
"""


@dataclass(frozen=True)
class EngineEntry:
    key: str
    size: int
    last_used: float


class CachingEngine:
    """A bounded, LRU, multi-process-safe artifact cache in a driver's state directory."""

    def __init__(self, driver: str, version: str, root: Path | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.driver, self.version = driver, version
        self._root = root
        self.max_bytes = max_bytes
        self._connections = ThreadConnections(_SCHEMA)
        #: What this object has done: hits, misses, puts, evicted and dropped (failed integrity) entries.
        self.stats = {"hits": 0, "misses": 0, "puts": 0, "evicted": 0, "dropped": 0}

    @property
    def root(self) -> Path:
        root = self._root if self._root is not None else state_dir() / "engine" / f"{self.driver}-{self.version}"
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return root

    def _conn(self) -> sqlite3.Connection:
        """One connection per thread and database file (the state directory may change between tests)."""
        return self._connections.get(str(self.root / "index.sqlite3"))

    @staticmethod
    def key_for(*parts: bytes) -> str:
        """A key from the model's content hash and its options."""
        h = hashlib.sha256()
        for p in parts:
            h.update(_LEN.pack(len(p)))
            h.update(p)
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.entry"

    # --- use --------------------------------------------------------------------------------------
    def put(self, key: str, model_blobs: Sequence[bytes], data_blobs: Sequence[bytes]) -> None:
        """Store an entry (replacing one with the same key), then evict down to the size bound."""
        body = _HEADER.pack(_MAGIC, len(model_blobs), len(data_blobs)) + b"".join(
            _LEN.pack(len(b)) + bytes(b) for b in (*model_blobs, *data_blobs))
        if len(body) > self.max_bytes:
            return
        digest = hashlib.sha256(body).digest()
        path = self._path(key)
        tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, path)  # replaces the entry (a link in its place included), never a link's target
        self._conn().execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                             (key, digest, len(body), time.time()))
        self.stats["puts"] += 1
        self.stats["evicted"] += len(self.evict(self.max_bytes))

    def get(self, key: str) -> tuple[list[memoryview], list[memoryview]] | None:
        """The entry's (model blobs, data blobs), or None when absent or failing its integrity check."""
        row = self._conn().execute("SELECT digest FROM entries WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.stats["misses"] += 1
            return None
        try:
            body = _read_entry(self._path(key))
        except OSError:
            body = None
        parsed = None if body is None or hashlib.sha256(body).digest() != bytes(row[0]) else _parse(body)
        if parsed is None:
            self._drop(key)
            self.stats["dropped"] += 1
            self.stats["misses"] += 1
            return None
        self._conn().execute("UPDATE entries SET last_used = ? WHERE key = ?", (time.time(), key))
        self.stats["hits"] += 1
        return parsed

    # --- maintenance ----------------------------------------------------------------------------------
    def entries(self) -> list[EngineEntry]:
        rows = self._conn().execute("SELECT key, size, last_used FROM entries ORDER BY last_used DESC").fetchall()
        return [EngineEntry(k, s, t) for k, s, t in rows]

    def verify(self) -> dict[str, str | None]:
        """Every entry and why it would be rejected (None when it is sound)."""
        result: dict[str, str | None] = {}
        for key, digest in self._conn().execute("SELECT key, digest FROM entries").fetchall():
            try:
                body = _read_entry(self._path(key))
            except OSError as e:
                result[key] = f"unreadable: {e.strerror}"
                continue
            if hashlib.sha256(body).digest() != bytes(digest):
                result[key] = "integrity mismatch"
            elif _parse(body) is None:
                result[key] = "malformed entry"
            else:
                result[key] = None
        return result

    def evict(self, max_bytes: int) -> list[str]:
        """Drop least recently used entries until the total is at most `max_bytes`; returns the keys dropped."""
        rows = self._conn().execute("SELECT key, size FROM entries ORDER BY last_used ASC").fetchall()
        total = sum(size for _, size in rows)
        dropped = []
        for key, size in rows:
            if total <= max_bytes:
                break
            self._drop(key)
            total -= size
            dropped.append(key)
        return dropped

    def remove(self, key: str) -> None:
        """Forget one entry and delete its file (maintenance: `nnapi cache prune`)."""
        self._drop(key)

    def _drop(self, key: str) -> None:
        self._conn().execute("DELETE FROM entries WHERE key = ?", (key,))
        try:
            self._path(key).unlink()
        except OSError:
            pass


def _parse(body: bytes) -> tuple[list[memoryview], list[memoryview]] | None:
    view = memoryview(body)
    if len(view) < _HEADER.size:
        return None
    magic, n_model, n_data = _HEADER.unpack_from(view)
    if magic != _MAGIC or n_model + n_data > 64:
        return None
    pos = _HEADER.size
    blobs = []
    for _ in range(n_model + n_data):
        if pos + _LEN.size > len(view):
            return None
        (n,) = _LEN.unpack_from(view, pos)
        pos += _LEN.size
        if pos + n > len(view):
            return None
        blobs.append(view[pos:pos + n])
        pos += n
    return blobs[:n_model], blobs[n_model:]


def _read_entry(path: Path) -> bytes:
    """An entry file's bytes, never through a link and only from a regular file (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()
