"""Measured latency per model and device, which later placements of that model use.

A compilation that runs its whole model on one device times that step's first executions (after the
first, which pays one-time costs) and records their median; `nnapi bench` records what it measured
too. The record lives in the app's state directory (`latency.sqlite3`), keyed by the model's content
fingerprint and the device's name and version (a new driver version measures again). The
partitioner prefers a measured figure to an estimate (`partitioner.assign_devices`).
"""
from __future__ import annotations

import logging
import sqlite3
import statistics
import time
from typing import Callable

from ..caching import ThreadConnections, state_dir
from .devices import Device

log = logging.getLogger("nnapi.runtime")
#: Executions a compilation times (after the first one) before it records their median.
SAMPLES = 10
_SCHEMA = """
CREATE TABLE IF NOT EXISTS latency (
    model BLOB NOT NULL,
    device TEXT NOT NULL,
    version TEXT NOT NULL,
    p50_ns INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (model, device, version)
)
"""
_connections = ThreadConnections(_SCHEMA)


def _conn() -> sqlite3.Connection:
    return _connections.get(str(state_dir() / "latency.sqlite3"))


def record(model: bytes, device: Device, p50_ns: int, samples: int) -> None:
    """Remember `device`'s median latency for the model whose content fingerprint is `model` (best
    effort: an unusable state directory only means nothing is remembered)."""
    try:
        _conn().execute("INSERT OR REPLACE INTO latency VALUES (?, ?, ?, ?, ?, ?)",
                        (bytes(model), device.name, device.version, int(p50_ns), int(samples), time.time()))
        log.info("%s: a median of %.3g ms over %d executions recorded for this model", device.name, p50_ns / 1e6,
                 samples)
    except (OSError, sqlite3.Error) as e:
        log.debug("latency not recorded: %s", e)


def measured(model: bytes, devices: list[Device]) -> dict[str, float]:
    """The recorded median latency in ns of the model on each of `devices` that has one (their
    current versions only)."""
    try:
        rows = _conn().execute("SELECT device, version, p50_ns FROM latency WHERE model = ?",
                               (bytes(model),)).fetchall()
    except (OSError, sqlite3.Error):
        return {}
    versions = {d.name: d.version for d in devices}
    return {name: float(p50) for name, version, p50 in rows if versions.get(name) == version}


class Observer:
    """Times the first executions of one whole-model step and records their median (`observe`); it is
    done, and costs nothing more, once it has."""

    def __init__(self, model: Callable[[], bytes], device: Device) -> None:
        self.model = model  # (its fingerprint, worked out only when there is something to record)
        self.device = device
        self.times: list[int] = []
        self.skipped = False
        self.done = False

    def observe(self, ns: int) -> None:
        if self.done:
            return
        if not self.skipped:  # (the first execution pays for what later ones reuse)
            self.skipped = True
            return
        self.times.append(ns)
        if len(self.times) >= SAMPLES:
            self.done = True
            record(self.model(), self.device, int(statistics.median(self.times)), len(self.times))
