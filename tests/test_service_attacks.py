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
from nnapi.service import ENV, connect
from nnapi.service.codec import Encoder

from test_service_security import APP_A, APP_B, binary_model, fork_as, run_as
from test_service_security import service  # noqa: F401  (the module's own served reference driver)

pytestmark = [pytest.mark.timing, pytest.mark.filterwarnings("ignore:os.fork"), pytest.mark.filterwarnings("ignore:This process"),
              pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")]


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
    """The attacker's own writes of 4 MiB take a core of this 2-core machine for a while: the victim is
    compared with the same attacker writing the same files without sending them (the same run), so
    what is asserted is what the service adds."""
    alone, _ = victim_latency(service, APP_B, 1.0)  # (where it runs)

    def attack(send: bool) -> Callable[[float], dict]:
        def run(until: float) -> dict:
            conn, outcomes = connect(service.socket).connection, []
            while time.monotonic() < until:
                for dense in (False, True):
                    fd = os.memfd_create("m", 0)  # not sealed
                    size = 4 << 20
                    if dense:
                        os.pwrite(fd, b"\x01" * size, 0)
                    else:
                        os.ftruncate(fd, size)  # sparse: 4 MiB for nothing
                    threading.Timer(0.002, os.ftruncate, (fd, 0)).start()
                    enc = Encoder()
                    try:
                        if send:
                            conn.call("get_supported_operations", 0, [[enc.fd(fd), size, []]], enc, timeout=10)
                            outcomes.append("accepted")
                    except NnError as e:
                        outcomes.append(e.status.name)
                    finally:
                        enc.close()
                        time.sleep(0.01)  # (a steady stream, not a CPU hog on a 2-core machine)
                        os.close(fd)
            return {"outcomes": outcomes}
        return run

    noise, _ = victim_latency(service, APP_A, 1.5, attack(False), attacker=APP_B)
    loaded, attacked = victim_latency(service, APP_A, 1.5, attack(True), attacker=APP_B)
    assert attacked["outcomes"] and set(attacked["outcomes"]) == {ErrorStatus.INVALID_ARGUMENT.name}, attacked
    assert alone["where"] == noise["where"], (alone, noise)
    assert_served_as_usual(service, loaded, noise)


def test_a_cross_uid_plant_in_a_shared_cache_folder_is_never_a_hit(service):
    """The audit's S4: an attacker of another uid who knows the victim's model works out its cache file
    names, plants its own model's files under them and has the service record them. The victim's next
    compile must compute its own model: the runtime does not use a folder others may write, and the
    registry never vouches for one uid's files to another."""
    from nnapi.hal import CacheHandles, ExecutionPreference, Priority
    from nnapi.runtime.cache_files import cache_paths, open_cache_files

    os.environ[ENV] = os.path.dirname(service.socket)
    base = tempfile.mkdtemp(prefix="nnapi-test-plant-")
    os.chmod(base, 0o755)
    shared = os.path.join(base, "shared-cache")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)  # as /tmp: anyone may add files
    token = bytes(range(32))
    x = np.array([1, 2, 3, 4], np.float32)
    ten = np.full(4, 10, np.float32)

    def with_ten(op: Op) -> nnapi.Model:  # x op 10
        m = nnapi.Model()
        a = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4,))
        b = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4,))
        m.set_operand_value(b, ten)
        act = m.add_operand(nnapi.OperandType.INT32)
        m.set_operand_value(act, 0)
        out = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4,))
        m.add_operation(op, [a, b, act], [out])
        m.identify_inputs_and_outputs([a], [out])
        m.finish()
        return m

    def victim_model() -> nnapi.Model:
        return with_ten(Op.ADD)

    def evil_model() -> nnapi.Model:
        return with_ten(Op.MUL)

    def attacker() -> dict:
        # its own compile of the public model, in a folder of its own, gives the file names
        own = tempfile.mkdtemp()
        c = nnapi.Compilation(victim_model(), devices=["reference"], cache_dir=own, token=token).finish()
        names = sorted(os.listdir(own))
        device = c.steps[0].device
        from nnapi.runtime.compilation import content_fingerprint, device_token
        dtoken = device_token(token, None, device.name, device.version, ExecutionPreference.FAST_SINGLE_ANSWER,
                              Priority.MEDIUM, content_fingerprint(c.steps[0].model))
        paths = cache_paths(shared, dtoken, device.cache_files)
        handles = open_cache_files(paths, create=True)
        for fd in (*handles.model_cache, *handles.data_cache):
            os.fchmod(fd, 0o666)
        served = connect(service.socket)  # the evil model recorded under the victim's token
        served.prepare_model(evil_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                             None, handles, dtoken).release()
        planted = sorted(os.path.basename(p) for p in (*paths[0], *paths[1]))
        return {"names": names, "planted": planted}

    planted = run_as(APP_A, attacker)
    assert planted["names"] == planted["planted"]

    def victim() -> dict:
        # the shared folder: refused outright
        c = nnapi.Compilation(victim_model(), devices=["reference"], cache_dir=shared, token=token).finish()
        shared_outcome = [c.cache_outcomes[0].outcome, c.cache_outcomes[0].reason, c.execute([x])[0].tolist()]
        # the planted files handed to the service directly: this uid never recorded them
        device = c.steps[0].device
        from nnapi.runtime.compilation import content_fingerprint, device_token
        dtoken = device_token(token, None, device.name, device.version, ExecutionPreference.FAST_SINGLE_ANSWER,
                              Priority.MEDIUM, content_fingerprint(c.steps[0].model))
        paths = cache_paths(shared, dtoken, device.cache_files)
        fds = [os.open(p, os.O_RDWR) for p in (*paths[0], *paths[1])]
        n = len(paths[0])
        try:
            connect(service.socket).prepare_model_from_cache(None, CacheHandles(tuple(fds[:n]), tuple(fds[n:])),
                                                             dtoken)
            direct = ["hit", ""]
        except NnError as e:
            direct = [e.status.name, e.message]
        finally:
            for fd in fds:
                os.close(fd)
        return {"shared": shared_outcome, "direct": direct}

    result = run_as(APP_B, victim)
    shutil.rmtree(base, ignore_errors=True)
    outcome, reason, value = result["shared"]
    assert outcome == "miss" and "writable by other users" in reason, result
    assert value == [11, 12, 13, 14]
    status, message = result["direct"]
    assert status == ErrorStatus.GENERAL_FAILURE.name and "for this app" in message, result


def test_an_attacker_holding_cache_locks_and_disconnecting_stalls_no_one(service):
    """The audit's S5: 64 `prepare_model_from_cache` calls on files whose locks the attacker holds, then
    a disconnect. A cache lock is taken without blocking and retried until the deadline (then a miss):
    another uid's compile and ADD go on as usual."""
    import fcntl

    from nnapi.hal import CacheHandles

    alone, _ = victim_latency(service, APP_B, 1.0)

    def attack(until: float) -> dict:
        folder = tempfile.mkdtemp()
        fds = [os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o600) for name in ("m", "d")]
        os.pwrite(fds[0], b"x" * 4096, 0)
        for fd in fds:  # held by this process for the whole attack
            fcntl.flock(fd, fcntl.LOCK_EX)
        device = connect(service.socket)
        outcomes: list[str] = []

        def call() -> None:
            try:
                device.prepare_model_from_cache(None, CacheHandles((fds[0],), (fds[1],)), bytes(32))
                outcomes.append("prepared")
            except NnError as e:
                outcomes.append(e.status.name)

        callers = [threading.Thread(target=call, daemon=True) for _ in range(64)]
        for t in callers:
            t.start()
        time.sleep(max(0.0, until - time.monotonic() - 1.0))
        device.connection.close()  # disconnect with calls queued and blocked
        return {"outcomes": outcomes}

    def victim_compiles() -> dict:
        t0 = time.monotonic()
        c = nnapi.Compilation(binary_model(Op.ADD), devices=["reference"], timeout=10).finish()
        x = np.ones(4, np.float32)
        return {"compile_s": time.monotonic() - t0, "sum": c.execute([x, x])[0].tolist(),
                "where": c.steps[0].device.where}

    until = time.monotonic() + 4.0
    attacked = fork_as(APP_A, lambda: attack(until))
    time.sleep(1.0)
    compiled = run_as(APP_B, victim_compiles)
    loaded, _ = victim_latency(service, APP_B, 1.0)
    attacked()
    assert compiled["sum"] == [2.0] * 4 and compiled["where"] == f"service pid {service.pid}", compiled
    assert compiled["compile_s"] < 3.0, compiled  # (it waited for the attacker's whole run before)
    assert_served_as_usual(service, loaded, alone)
    after = run_as(APP_B, victim_compiles)  # once the attacker is gone, nothing of its work is left
    assert after["compile_s"] < 1.0, after
