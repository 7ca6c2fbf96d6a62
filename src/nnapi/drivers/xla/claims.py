"""What the XLA driver claimed for a model before, kept across processes.

`get_supported_operations` proves each claim by tracing the lowering abstractly, which costs
about as much as a third of a compilation; a process that prepares a model from a cache would pay
it again before the runtime even looks at the cache. So the answers are kept in the driver's state
directory, keyed by the model's content fingerprint and the driver version (a new driver version
starts empty). A wrong answer could only make a compilation fail with the lowering's own error,
never run unchecked code: preparation analyses the model again (or loads a verified executable).
"""
from __future__ import annotations

import sqlite3
import time

from ...caching import state_dir
from ...caching._sqlite import ThreadConnections

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
    """(fingerprint -> supported flags) for one driver version, in `<state dir>/xla-claims.sqlite3`."""

    def __init__(self, version: str) -> None:
        self.version = version
        self._connections = ThreadConnections(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        return self._connections.get(str(state_dir() / "xla-claims.sqlite3"))

    def get(self, fingerprint: bytes) -> list[bool] | None:
        try:
            row = self._conn().execute("SELECT flags FROM claims WHERE version = ? AND fingerprint = ?",
                                       (self.version, fingerprint)).fetchone()
        except (sqlite3.Error, OSError):  # no usable state directory: nothing remembered
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
        except (sqlite3.Error, OSError):  # only a lost shortcut
            pass
