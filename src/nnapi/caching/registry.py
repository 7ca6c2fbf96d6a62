"""The integrity registry: token -> SHA-256 digests of the model cache, persistent, per driver name and
version and per app (uid).

It lives in SQLite in the driver's private state directory (`NNAPI_STATE_DIR`, default
`$XDG_STATE_HOME/nnapi` or `~/.local/state/nnapi`). Rows are keyed by (driver, version, uid, token,
digest): a new driver version starts with an empty view and never trusts caches an older one wrote
(C9), and one app's compile never vouches for another app's cache files (the uid is the caller's, from
SO_PEERCRED behind a service), whatever token the other app can guess.

A token may have several verified digests (at most `MAX_DIGESTS_PER_TOKEN`, the least recently used
dropped first): a compiler whose output bytes differ between compiles (XLA) writes copies of one model
in several cache directories (an app's, a benchmark's, the caching engine's), and each copy keeps
hitting. The registry stays bounded: at most `MAX_ROWS` rows per driver version (least recently used
first), and `prune` drops the rows of other driver versions and rows unused for `max_age_s`. A dropped
digest is remembered (bounded alike) so that a cache it vouched for reads as *not recorded* (a miss),
not as changed.
"""
from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ._sqlite import ThreadConnections, transaction
from .state import state_dir

#: Verified digests kept per app and token.
MAX_DIGESTS_PER_TOKEN = 64
#: Rows kept per driver name and version (and as many dropped digests remembered).
MAX_ROWS = 20_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vouched (
    driver TEXT NOT NULL,
    version TEXT NOT NULL,
    uid INTEGER NOT NULL,
    token BLOB NOT NULL,
    digest BLOB NOT NULL,
    last_used REAL NOT NULL,
    PRIMARY KEY (driver, version, uid, token, digest)
);
CREATE TABLE IF NOT EXISTS dropped (
    driver TEXT NOT NULL,
    version TEXT NOT NULL,
    uid INTEGER NOT NULL,
    token BLOB NOT NULL,
    digest BLOB NOT NULL,
    dropped_at REAL NOT NULL,
    PRIMARY KEY (driver, version, uid, token, digest)
);
"""
#: The columns a dropped row keeps, and what is kept of them.
_DROP = ("INSERT OR REPLACE INTO dropped SELECT driver, version, uid, token, digest, ? FROM vouched WHERE {where}",
         "DELETE FROM vouched WHERE {where}")


@dataclass(frozen=True)
class PruneReport:
    """What `IntegrityRegistry.prune` removed: rows of other driver versions, stale rows, rows kept."""

    other_versions: int
    unused: int
    kept: int


class IntegrityRegistry:
    """Records and checks (token, digest) pairs for one driver name and version, per app uid (default:
    this process's)."""

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

    def _key(self, token: bytes, uid: int | None) -> tuple[str, str, int, bytes]:
        return self.driver, self.version, os.geteuid() if uid is None else int(uid), bytes(token)

    def _drop(self, conn: sqlite3.Connection, where: str, args: tuple) -> None:
        """Move the rows `where` selects to the dropped digests."""
        conn.execute(_DROP[0].format(where=where), (time.time(), *args))
        conn.execute(_DROP[1].format(where=where), args)

    def record(self, token: bytes, digest: bytes, uid: int | None = None) -> None:
        """Remember that a model cache saved for app `uid` and `token` hashes to `digest` (keeping the
        token's most recently used other digests, up to MAX_DIGESTS_PER_TOKEN in all)."""
        conn = self._conn()
        key = self._key(token, uid)
        scope = "driver = ? AND version = ? AND uid = ? AND token = ?"
        with transaction(conn):
            conn.execute("INSERT OR REPLACE INTO vouched VALUES (?, ?, ?, ?, ?, ?)", (*key, bytes(digest), time.time()))
            conn.execute(f"DELETE FROM dropped WHERE {scope} AND digest = ?", (*key, bytes(digest)))
            self._drop(conn, f"{scope} AND digest NOT IN (SELECT digest FROM vouched WHERE {scope} "
                             "ORDER BY last_used DESC LIMIT ?)", (*key, *key, MAX_DIGESTS_PER_TOKEN))
            version = "driver = ? AND version = ?"
            self._drop(conn, f"{version} AND rowid NOT IN (SELECT rowid FROM vouched WHERE {version} "
                             "ORDER BY last_used DESC LIMIT ?)", (*key[:2], *key[:2], MAX_ROWS))
            conn.execute(f"DELETE FROM dropped WHERE {version} AND rowid NOT IN (SELECT rowid FROM dropped "
                         f"WHERE {version} ORDER BY dropped_at DESC LIMIT ?)", (*key[:2], *key[:2], MAX_ROWS))

    def lookup(self, token: bytes, uid: int | None = None) -> set[bytes]:
        """Every verified digest of app `uid`'s `token` (empty: nothing was saved for it by this driver
        version for that app)."""
        rows = self._conn().execute("SELECT digest FROM vouched WHERE driver = ? AND version = ? AND uid = ? "
                                    "AND token = ?", self._key(token, uid)).fetchall()
        return {bytes(r[0]) for r in rows}

    def was_dropped(self, token: bytes, digest: bytes, uid: int | None = None) -> bool:
        """Whether `digest` was recorded for app `uid`'s `token` and dropped since (bounded memory)."""
        return self._conn().execute("SELECT 1 FROM dropped WHERE driver = ? AND version = ? AND uid = ? AND "
                                    "token = ? AND digest = ?", (*self._key(token, uid), bytes(digest))
                                    ).fetchone() is not None

    def any_dropped(self, token: bytes, uid: int | None = None) -> bool:
        """Whether any digest recorded for app `uid`'s `token` was dropped since."""
        return self._conn().execute("SELECT 1 FROM dropped WHERE driver = ? AND version = ? AND uid = ? AND "
                                    "token = ? LIMIT 1", self._key(token, uid)).fetchone() is not None

    def touch(self, token: bytes, digest: bytes, uid: int | None = None) -> None:
        """Mark a digest used now (a hit), so it is the last to be dropped."""
        try:
            self._conn().execute("UPDATE vouched SET last_used = ? WHERE driver = ? AND version = ? AND uid = ? "
                                 "AND token = ? AND digest = ?", (time.time(), *self._key(token, uid), bytes(digest)))
        except sqlite3.Error:  # only the eviction order suffers
            pass

    def forget(self, token: bytes, uid: int | None = None) -> None:
        self._conn().execute("DELETE FROM vouched WHERE driver = ? AND version = ? AND uid = ? AND token = ?",
                             self._key(token, uid))

    def prune(self, max_age_s: float | None = None) -> PruneReport:
        """Drop this driver's rows of other versions and, with `max_age_s`, rows unused for longer."""
        conn = self._conn()
        with transaction(conn):
            other = conn.execute("DELETE FROM vouched WHERE driver = ? AND version != ?",
                                 (self.driver, self.version)).rowcount
            conn.execute("DELETE FROM dropped WHERE driver = ? AND version != ?", (self.driver, self.version))
            unused = 0
            if max_age_s is not None:
                unused = conn.execute("DELETE FROM vouched WHERE driver = ? AND version = ? AND last_used < ?",
                                      (self.driver, self.version, time.time() - max_age_s)).rowcount
            kept = conn.execute("SELECT COUNT(*) FROM vouched WHERE driver = ? AND version = ?",
                                (self.driver, self.version)).fetchone()[0]
        return PruneReport(other, unused, kept)

    def rows(self) -> int:
        """Rows of this driver version."""
        return self._conn().execute("SELECT COUNT(*) FROM vouched WHERE driver = ? AND version = ?",
                                    (self.driver, self.version)).fetchone()[0]
