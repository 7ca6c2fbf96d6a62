"""Small pieces compiling drivers share: a source fingerprint, the CPU's features (`nnapi.host`) and
package releases for their version string, a bounded
LRU of loaded artifacts, a one-time loader of self-registering rule modules, and the persistent
memo of what a driver claimed for a model."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import json
import os
import pkgutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Generic, Hashable, TypeVar

import xxhash

from ... import installed
from ...host import cpu_features, cpu_flags  # (the CPU is the host's fact: drivers reach it here)
from ...caching import state_dir
from ...caching._sqlite import ThreadConnections

V = TypeVar("V")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=16)
def source_fingerprint(*folders: str) -> str:
    """8 hex digits of the Python files in `folders`: a driver whose claiming or compiling code changed
    is a new driver version, which trusts no older cache (C9). A folder is relative to the `nnapi`
    package ("drivers/base"), or names an importable package of its own (a plug-in's "example_driver"),
    found without importing it. The state directory's remembered digests are read once and written
    at most once."""
    remembered = _remembered_digests()
    learned = False
    h = xxhash.xxh3_64()
    for folder in folders:
        digest, new = _folder_digest(folder, remembered)
        learned = learned or new
        h.update(digest)
    if learned:
        _remember_digests(remembered)
    return h.hexdigest()[:8]


#: Where each source folder's digest is remembered with the stamp of its files (`_folder_digest`).
SOURCE_DIGESTS = "source-digests.json"
#: A folder with a file modified this recently is not remembered: a second write within the file
#: system's time resolution could leave its stamp unchanged.
SETTLED_S = 2.0


def _folder_digest(folder: str, remembered: dict[str, list[str]]) -> tuple[bytes, bool]:
    """(the digest of one folder's Python files, names included; whether it was added to `remembered`).
    Reading them all costs about 30 ms at every start, so the state directory remembers each folder's
    digest with a stamp of its files (name, size, inode, modification and change times: one stat each);
    a folder whose stamp is unchanged is not read again."""
    where = _source_folder(folder)
    files = sorted((e.name, e.stat()) for e in os.scandir(where)
                   if e.name.endswith(".py") and not e.name.startswith(".") and e.is_file())
    stamp = xxhash.xxh3_64()
    for name, st in files:
        stamp.update(f"{name}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns};".encode())
    key, stamped = f"{folder}={where}", stamp.hexdigest()
    entry = remembered.get(key)
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == stamped:
        try:
            return bytes.fromhex(entry[1]), False
        except (TypeError, ValueError):
            pass  # (a damaged entry: computed again)
    h = xxhash.xxh3_64()
    for name, _ in files:
        h.update(f"{folder}/{name}".encode())
        h.update((where / name).read_bytes())
    newest = max((max(st.st_mtime, st.st_ctime) for _, st in files), default=0.0)
    if time.time() - newest <= SETTLED_S:
        return h.digest(), False
    remembered[key] = [stamped, h.hexdigest()]
    return h.digest(), True


def _remembered_digests() -> dict[str, list[str]]:
    """The source digests the state directory remembers ({} when there are none or they cannot be read)."""
    try:
        with open(state_dir() / SOURCE_DIGESTS, encoding="utf-8") as f:
            found = json.load(f)
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember_digests(remembered: dict[str, list[str]]) -> None:
    """Write the folders' digests (whole, renamed into place: a reader sees the old or the new file; two
    processes writing at once may lose one's entry, which is then computed again)."""
    try:
        folder = state_dir()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".source-digests-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(remembered, f)
        os.replace(tmp, folder / SOURCE_DIGESTS)
    except OSError:
        pass


def forget_source_fingerprints() -> None:
    """Read the folders again at the next `source_fingerprint` (for a process that edits its own source)."""
    source_fingerprint.cache_clear()


def _source_folder(folder: str) -> Path:
    """Where `source_fingerprint` reads `folder` (see there); LookupError naming it when it is nowhere."""
    inside = _PACKAGE_ROOT / folder
    if inside.is_dir():
        return inside
    spec = importlib.util.find_spec(folder.replace("/", "."))
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"VERSION_SOURCES: {folder!r} is neither a folder of nnapi nor an importable package")
    return Path(list(spec.submodule_search_locations)[0])


@functools.lru_cache(maxsize=16)
def package_release(name: str) -> str:
    """An installed package's release ("2026.4.1"), from its metadata (no import of it)."""
    version = installed.release(name)
    return "unknown" if version is None else version.split("-")[0]


class Lru(Generic[V]):
    """A bounded, thread-safe map that drops its least recently used entry first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: dict[Hashable, V] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._entries.pop(key, None)
            if value is not None:
                self._entries[key] = value  # most recently used last
            return value

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            while len(self._entries) > self.capacity:
                self._entries.pop(next(iter(self._entries)))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class RuleModules:
    """The rule modules of a lowering table (a package whose modules register themselves), imported
    once by whoever reads the table (modules named with a leading underscore are helpers)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self._lock = threading.Lock()
        self._loaded = False

    def load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            module = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(module.__path__):
                if not info.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True


_CLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    driver TEXT NOT NULL,
    version TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    flags BLOB NOT NULL,
    last_used REAL NOT NULL,
    PRIMARY KEY (driver, version, fingerprint)
);
CREATE INDEX IF NOT EXISTS claims_by_use ON claims (driver, version, last_used)
"""
#: Rows kept per driver version; the least recently used beyond it are dropped.
MAX_CLAIM_ROWS = 4096
#: A memo's puts between two prunes of its driver version's rows. Pruning at every put cost 3.4 ms
#: at 4096 rows (a sort of them all), a tenth of each conformance vector's time on the reference driver.
PRUNE_EVERY = 64


class ClaimMemo:
    """What a driver claimed for a validated model, by content fingerprint, across processes (in
    `<state dir>/claims.sqlite3`, per driver name and version: changed claiming code starts empty).

    Proving claims can cost as much as a good part of a compilation (tracing, lowering on stand-in
    inputs), and a process that prepares from a cache would pay it before the runtime even looks at
    the cache. A wrong answer could only make a preparation fail with the driver's own error, never
    run unchecked code: preparation validates and compiles again, or loads verified bytes. Every
    failure (no usable state directory, a locked or damaged database) only loses the shortcut."""

    def __init__(self, driver: str, version: str, max_rows: int = MAX_CLAIM_ROWS) -> None:
        self.driver, self.version = driver, version
        self.max_rows = max_rows
        self._connections = ThreadConnections(_CLAIMS_SCHEMA)
        self._puts = itertools.count()

    def _conn(self) -> sqlite3.Connection:
        return self._connections.get(str(state_dir() / "claims.sqlite3"))

    def get(self, fingerprint: bytes) -> list[bool] | None:
        try:
            row = self._conn().execute("SELECT flags FROM claims WHERE driver = ? AND version = ? AND fingerprint = ?",
                                       (self.driver, self.version, fingerprint)).fetchone()
        except (sqlite3.Error, OSError):
            return None
        if row is None or any(b not in (0, 1) for b in bytes(row[0])):
            return None
        return [bool(b) for b in bytes(row[0])]

    def put(self, fingerprint: bytes, flags: list[bool]) -> None:
        try:
            conn = self._conn()
            conn.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)",
                         (self.driver, self.version, fingerprint, bytes(int(f) for f in flags), time.time()))
            if next(self._puts) % PRUNE_EVERY == 0:  # (the first put too: a table left too long shrinks)
                self._prune(conn)
        except (sqlite3.Error, OSError):
            pass

    def _prune(self, conn: sqlite3.Connection) -> None:
        """Drop the driver version's rows used less recently than its `max_rows` most recent ones."""
        conn.execute("DELETE FROM claims WHERE driver = ? AND version = ? AND last_used < (SELECT last_used FROM "
                     "claims WHERE driver = ? AND version = ? ORDER BY last_used DESC LIMIT 1 OFFSET ?)",
                     (self.driver, self.version, self.driver, self.version, self.max_rows - 1))
