"""Opening the caching databases safely when several processes create them at once."""
from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from typing import Iterator


class ThreadConnections:
    """One SQLite connection per thread and database path, opened in WAL mode with `schema` applied."""

    def __init__(self, schema: str) -> None:
        self._schema = schema
        self._local = threading.local()

    def get(self, path: str) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.path != path:
            conn = _open(path, self._schema)
            self._local.conn, self._local.path = conn, path
        return conn


def _open(path: str, schema: str, attempts: int = 50) -> sqlite3.Connection:
    """Connect, switch to WAL and create the schema. Switching the journal mode takes an exclusive
    lock without waiting on SQLite's busy handler, so concurrent first openings retry here."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    for attempt in range(attempts):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: safe against a crashed process
            conn.executescript(schema)
            return conn
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or attempt == attempts - 1:
                conn.close()
                raise
            time.sleep(0.005 + random.random() * 0.02)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on an autocommit connection (BEGIN IMMEDIATE ... COMMIT, rolled back on error)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
