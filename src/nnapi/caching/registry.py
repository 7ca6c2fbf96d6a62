"""The integrity registry: token -> SHA-256 digests of the model cache, persistent, per driver name and version.

It lives in SQLite in the driver's private state directory (`NNAPI_STATE_DIR`, default
`$XDG_STATE_HOME/nnapi` or `~/.local/state/nnapi`). Rows are keyed by (driver, version, token, digest),
so a new driver version starts with an empty view and never trusts caches an older one wrote (C9).

A token may have several verified digests (at most `MAX_DIGESTS_PER_TOKEN`, the least recently used
dropped first): a compiler whose output bytes differ between compiles (XLA) writes copies of one model
in two cache directories, or in the app cache and the caching engine, and each copy keeps hitting.
The registry stays bounded: at most `MAX_ROWS` rows per driver version (least recently used first),
and `prune` drops the rows of other driver versions and rows unused for `max_age_s`.
"""
from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ._sqlite import ThreadConnections, transaction

#: Verified digests kept per token.
MAX_DIGESTS_PER_TOKEN = 4
#: Rows kept per driver name and version.
MAX_ROWS = 20_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS digests (
    driver TEXT NOT NULL,
    version TEXT NOT NULL,
    token BLOB NOT NULL,
    digest BLOB NOT NULL,
    last_used REAL NOT NULL,
    PRIMARY KEY (driver, version, token, digest)
)
"""


def state_dir() -> Path:
    """The drivers' private state directory, created 0700 on first use. OSError when it cannot be
    used (a regular file in its place, no permission): callers turn caching off, never the device."""
    env = os.environ.get("NNAPI_STATE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        path = Path(base) / "nnapi"
    if not os.path.isdir(path):  # (one stat when it is there: asked at every compilation)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.is_dir():
            raise NotADirectoryError(f"state directory {path} is not a directory")
    return path


@dataclass(frozen=True)
class PruneReport:
    """What `IntegrityRegistry.prune` removed: rows of other driver versions, stale rows, rows kept."""

    other_versions: int
    unused: int
    kept: int


class IntegrityRegistry:
    """Records and checks (token, digest) pairs for one driver name and version."""

    def __init__(self, driver: str, version: str, path: Path | None = None) -> None:
        self.driver = driver
        self.version = version
        self._path = path
        self._connections = ThreadConnections(_SCHEMA)

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else state_dir() / "integrity.sqlite3"

    def _conn(self) -> sqlite3.Connection:
        """One connection per thread and database file (the state directory may change between tests)."""
        return self._connections.get(str(self.path))

    def record(self, token: bytes, digest: bytes) -> None:
        """Remember that a model cache saved for `token` hashes to `digest` (keeping the token's most
        recently used other digests, up to MAX_DIGESTS_PER_TOKEN in all)."""
        conn = self._conn()
        key = (self.driver, self.version, bytes(token))
        with transaction(conn):
            conn.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?)", (*key, bytes(digest), time.time()))
            conn.execute("DELETE FROM digests WHERE driver = ? AND version = ? AND token = ? AND digest NOT IN "
                         "(SELECT digest FROM digests WHERE driver = ? AND version = ? AND token = ? "
                         "ORDER BY last_used DESC LIMIT ?)", (*key, *key, MAX_DIGESTS_PER_TOKEN))
            conn.execute("DELETE FROM digests WHERE driver = ? AND version = ? AND rowid NOT IN (SELECT rowid FROM "
                         "digests WHERE driver = ? AND version = ? ORDER BY last_used DESC LIMIT ?)",
                         (self.driver, self.version, self.driver, self.version, MAX_ROWS))

    def lookup(self, token: bytes) -> set[bytes]:
        """Every verified digest of `token` (empty: nothing was saved for it by this driver version)."""
        rows = self._conn().execute("SELECT digest FROM digests WHERE driver = ? AND version = ? AND token = ?",
                                    (self.driver, self.version, bytes(token))).fetchall()
        return {bytes(r[0]) for r in rows}

    def touch(self, token: bytes, digest: bytes) -> None:
        """Mark a digest used now (a hit), so it is the last to be dropped."""
        try:
            self._conn().execute("UPDATE digests SET last_used = ? WHERE driver = ? AND version = ? AND token = ? "
                                 "AND digest = ?", (time.time(), self.driver, self.version, bytes(token),
                                                    bytes(digest)))
        except sqlite3.Error:  # only the eviction order suffers
            pass

    def forget(self, token: bytes) -> None:
        self._conn().execute("DELETE FROM digests WHERE driver = ? AND version = ? AND token = ?",
                             (self.driver, self.version, bytes(token)))

    def prune(self, max_age_s: float | None = None) -> PruneReport:
        """Drop this driver's rows of other versions and, with `max_age_s`, rows unused for longer."""
        conn = self._conn()
        with transaction(conn):
            other = conn.execute("DELETE FROM digests WHERE driver = ? AND version != ?",
                                 (self.driver, self.version)).rowcount
            unused = 0
            if max_age_s is not None:
                unused = conn.execute("DELETE FROM digests WHERE driver = ? AND version = ? AND last_used < ?",
                                      (self.driver, self.version, time.time() - max_age_s)).rowcount
            kept = conn.execute("SELECT COUNT(*) FROM digests WHERE driver = ? AND version = ?",
                                (self.driver, self.version)).fetchone()[0]
        return PruneReport(other, unused, kept)

    def rows(self) -> int:
        """Rows of this driver version."""
        return self._conn().execute("SELECT COUNT(*) FROM digests WHERE driver = ? AND version = ?",
                                    (self.driver, self.version)).fetchone()[0]
