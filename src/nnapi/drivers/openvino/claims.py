"""What the OpenVINO driver claimed for a model before, kept across processes.

Proving the claims lowers every operation on stand-in inputs, which costs about as much as the import
of a cached compiled model; a process that prepares a model from the cache would pay it again before
the runtime even looks at the cache. So the answers are kept in the driver's state directory, keyed by
the model's content fingerprint and the driver version (which fingerprints the lowering code: a new
version starts empty). A stale answer could only make a compilation fail with the lowering's own
error, never run unchecked code: preparation lowers the model again, or imports verified bytes.
"""
from __future__ import annotations

import sqlite3
import threading
import time

from ...caching import state_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    version TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    flags BLOB NOT NULL,
    last_used REAL NOT NULL,
    PRIMARY KEY (version, fingerprint)
)
"""
#: Rows kept per driver version; the least recently used beyond it are dropped.
MAX_ROWS = 4096


class ClaimMemo:
    """(fingerprint -> supported flags) for one driver version, in `<state dir>/openvino-claims.sqlite3`.
    Every failure (an unwritable state directory, a locked or damaged database) only loses the shortcut."""

    def __init__(self, version: str) -> None:
        self.version = version
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        path = str(state_dir() / "openvino-claims.sqlite3")
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "path", None) != path:
            conn = sqlite3.connect(path, timeout=2.0, isolation_level=None)
            conn.execute(_SCHEMA)
            self._local.conn, self._local.path = conn, path
        return conn

    def get(self, fingerprint: bytes) -> list[bool] | None:
        try:
            row = self._conn().execute("SELECT flags FROM claims WHERE version = ? AND fingerprint = ?",
                                       (self.version, fingerprint)).fetchone()
        except (sqlite3.Error, OSError):
            return None
        if row is None or any(b not in (0, 1) for b in bytes(row[0])):
            return None
        return [bool(b) for b in bytes(row[0])]

    def put(self, fingerprint: bytes, flags: list[bool]) -> None:
        try:
            conn = self._conn()
            conn.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                         (self.version, fingerprint, bytes(int(f) for f in flags), time.time()))
            conn.execute("DELETE FROM claims WHERE version = ? AND fingerprint NOT IN (SELECT fingerprint FROM "
                         "claims WHERE version = ? ORDER BY last_used DESC LIMIT ?)",
                         (self.version, self.version, MAX_ROWS))
        except (sqlite3.Error, OSError):
            pass


__all__ = ["ClaimMemo"]
