"""The integrity registry: token -> SHA-256 of the model cache, persistent, per driver name and version.

It lives in SQLite in the driver's private state directory (`NNAPI_STATE_DIR`, default
`$XDG_STATE_HOME/nnapi` or `~/.local/state/nnapi`). Rows are keyed by (driver, version, token),
so a new driver version starts with an empty view and never trusts caches written by an older one (C9).
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ._sqlite import ThreadConnections

_SCHEMA = """
CREATE TABLE IF NOT EXISTS integrity (
    driver TEXT NOT NULL,
    version TEXT NOT NULL,
    token BLOB NOT NULL,
    digest BLOB NOT NULL,
    PRIMARY KEY (driver, version, token)
)
"""


def state_dir() -> Path:
    """The drivers' private state directory (created on first use)."""
    env = os.environ.get("NNAPI_STATE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        path = Path(base) / "nnapi"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


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
        """Remember that the model cache saved for `token` hashes to `digest` (replacing any older one)."""
        self._conn().execute("INSERT OR REPLACE INTO integrity VALUES (?, ?, ?, ?)",
                             (self.driver, self.version, bytes(token), bytes(digest)))

    def lookup(self, token: bytes) -> bytes | None:
        row = self._conn().execute("SELECT digest FROM integrity WHERE driver = ? AND version = ? AND token = ?",
                                   (self.driver, self.version, bytes(token))).fetchone()
        return None if row is None else bytes(row[0])

    def forget(self, token: bytes) -> None:
        self._conn().execute("DELETE FROM integrity WHERE driver = ? AND version = ? AND token = ?",
                             (self.driver, self.version, bytes(token)))
