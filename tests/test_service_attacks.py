"""Attacks on `nnapi serve` by a local user, as the audit tried them: each one is bounded in time, and
each checks that the service stays up and that another uid's ADD is still served by the service, with
its usual latency (never silently in-process)."""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Callable

import numpy as np
import pytest

import nnapi
from nnapi import OperationType as Op
from nnapi.hal import ErrorStatus, NnError
from nnapi.service import ENV, connect, default_socket
from nnapi.service.cli import start
from nnapi.service.codec import Encoder

from test_service_security import APP_A, APP_B, binary_model, fork_as, run_as

pytestmark = [pytest.mark.filterwarnings("ignore:os.fork"), pytest.mark.filterwarnings("ignore:This process"),
              pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")]


@pytest.fixture(scope="module")
def service():
    directory = tempfile.mkdtemp(prefix="nnapi-test-attacks-")
    os.chmod(directory, 0o755)  # apps of every user reach the socket
    served = start("reference", default_socket("reference", directory), os.path.join(directory, "state"))
    nnapi.devices()  # in-process drivers found before forking: children only connect
    yield served
    served.stop()
    shutil.rmtree(directory, ignore_errors=True)


def victim_latency(service, uid: int, seconds: float, attack: Callable[[float], dict] | None = None,
                   attacker: int = APP_A) -> tuple[dict, dict]:
    """`uid`'s ADD through the runtime on the served reference driver for `seconds`, while
    `attack(until)` runs as `attacker` (if given): where it ran, its p50 and p99 in ms; and what the
    attack returned."""
    os.environ[ENV] = os.path.dirname(service.socket)

    def app() -> dict:
        c = nnapi.Compilation(binary_model(Op.ADD), devices=["reference"]).finish()
        x = np.arange(4, dtype=np.float32)
        times, end = [], time.monotonic() + seconds
        while time.monotonic() < end or len(times) < 50:
            t0 = time.perf_counter()
            (y,) = c.execute([x, x])
            times.append(time.perf_counter() - t0)
            assert np.array_equal(y, 2 * x)
        times.sort()
        return {"where": c.steps[0].device.where, "p50": 1e3 * statistics.median(times),
                "p99": 1e3 * times[int(0.99 * (len(times) - 1))], "n": len(times)}

    if attack is None:
        return run_as(uid, app), {}
    until = time.monotonic() + seconds + 1.0
    attacked = fork_as(attacker, lambda: attack(until))
    time.sleep(0.5)  # (the attack under way first)
    victim = run_as(uid, app)
    return victim, attacked()


def assert_served_as_usual(service, loaded: dict, alone: dict) -> None:
    assert service.process.poll() is None, f"the service exited with {service.process.returncode}"
    assert loaded["where"] == alone["where"] == f"service pid {service.pid}", (loaded, alone)
    # 2x the unloaded p99, with 2 ms for the noise of a small shared machine
    assert loaded["p99"] <= 2 * alone["p99"] + 2.0, (loaded, alone)


def test_a_model_blob_shrunk_while_it_is_read_neither_kills_nor_slows_the_service(service):
    alone, _ = victim_latency(service, APP_B, 1.0)

    def attack(until: float) -> dict:
        conn, outcomes = connect(service.socket).connection, []
        while time.monotonic() < until:
            for dense in (False, True):
                fd = os.memfd_create("m", 0)  # not sealed
                size = 16 << 20
                if dense:
                    os.pwrite(fd, b"\x01" * size, 0)
                else:
                    os.ftruncate(fd, size)  # sparse: 16 MiB for nothing
                threading.Timer(0.002, os.ftruncate, (fd, 0)).start()
                enc = Encoder()
                try:
                    conn.call("get_supported_operations", 0, [[enc.fd(fd), size, []]], enc, timeout=10)
                    outcomes.append("accepted")
                except NnError as e:
                    outcomes.append(e.status.name)
                finally:
                    enc.close()
                    time.sleep(0.005)
                    os.close(fd)
        return {"outcomes": outcomes}

    loaded, attacked = victim_latency(service, APP_A, 1.5, attack, attacker=APP_B)
    assert attacked["outcomes"] and set(attacked["outcomes"]) == {ErrorStatus.INVALID_ARGUMENT.name}, attacked
    assert_served_as_usual(service, loaded, alone)
