"""Identity and cache security across the boundary, with apps running as other users (the machine
runs as root: a forked child drops to another uid after the imports)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import traceback
from typing import Callable

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import (ClientId, DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError,
                       Priority, Request, RequestArgument)
from nnapi.runtime import find_device
from nnapi.service import ENV, connect, default_socket
from nnapi.service.cli import start

pytestmark = [pytest.mark.filterwarnings("ignore:os.fork"),
              pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")]

APP_A, APP_B = 1000, 1001


def binary_model(op: Op) -> nnapi.Model:
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,))
    b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (4,))
    m.add_operation(op, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


@pytest.fixture(scope="module")
def service():
    directory = tempfile.mkdtemp(prefix="nnapi-test-security-")
    os.chmod(directory, 0o755)  # apps of every user reach the socket
    served = start("reference", default_socket("reference", directory), os.path.join(directory, "state"))
    nnapi.devices()  # in-process drivers found before forking: children only connect
    yield served
    served.stop()
    shutil.rmtree(directory, ignore_errors=True)


def fork_as(uid: int, fn: Callable[[], dict]) -> Callable[[], dict]:
    """Start `fn` in a forked child as user `uid`; returns a call that waits for its JSON-able result
    (or raises with its traceback)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = fn()
        except BaseException:
            result = {"error": traceback.format_exc()}
        with os.fdopen(w, "w") as f:
            json.dump(result, f)
        os._exit(0)
    os.close(w)

    def wait() -> dict:
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(pid, 0)
        result = json.loads(text)
        assert "error" not in result, result.get("error")
        return result
    return wait


def run_as(uid: int, fn: Callable[[], dict]) -> dict:
    """Run `fn` in a forked child as user `uid`; its JSON-able result (or its traceback) comes back."""
    return fork_as(uid, fn)()


def _owned_dir(uid: int) -> str:
    path = tempfile.mkdtemp(prefix=f"nnapi-app-{uid}-")
    os.chown(path, uid, uid)
    return path


def test_state_directory_is_private_to_the_service(service):
    st = os.stat(service.state_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_app_cannot_reach_the_registry_and_swapped_caches_miss(service, monkeypatch):
    monkeypatch.setenv(ENV, os.path.dirname(service.socket))
    cache_dir = _owned_dir(APP_A)
    registry = os.path.join(service.state_dir, "integrity.sqlite3")
    x, y = np.full(4, 40, np.float32), np.full(4, 60, np.float32)

    def app() -> dict:
        out: dict = {"uid": os.getuid()}
        for what, probe in (("list", lambda: os.listdir(service.state_dir)),
                            ("read", lambda: open(registry, "rb").close()),
                            ("write", lambda: open(registry, "ab").close())):
            try:
                probe()
                out[what] = "allowed"
            except PermissionError:
                out[what] = "denied"
        add, mul = binary_model(Op.ADD), binary_model(Op.MUL)
        token = bytes(range(32))

        def compile_add():
            c = nnapi.Compilation(add, devices=["reference"], cache_dir=cache_dir, token=token).finish()
            return c.cache_outcomes[0].outcome, float(c.execute([x, y])[0][0]), c.steps[0].device.where

        before = set(os.listdir(cache_dir))
        out["add"] = [compile_add(), compile_add()]
        add_files = sorted(set(os.listdir(cache_dir)) - before)
        before = set(os.listdir(cache_dir))
        nnapi.Compilation(mul, devices=["reference"], cache_dir=cache_dir, token=bytes(32)).finish()
        mul_files = sorted(set(os.listdir(cache_dir)) - before)
        for a, m in zip(add_files, mul_files):  # a MUL cache served under the ADD token
            shutil.copyfile(os.path.join(cache_dir, m), os.path.join(cache_dir, a))
        out["swapped"] = compile_add()
        model_file = os.path.join(cache_dir, add_files[0])
        data = bytearray(open(model_file, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(model_file, "wb").write(bytes(data))
        out["edited"] = compile_add()
        status = find_device("reference").driver.status()
        out["status_uid"] = status["uid"]
        out["service_wide"] = "fds" in status
        return out

    result = run_as(APP_A, app)
    shutil.rmtree(cache_dir, ignore_errors=True)
    assert result["uid"] == APP_A and result["status_uid"] == APP_A
    assert (result["list"], result["read"], result["write"]) == ("denied", "denied", "denied")
    assert not result["service_wide"]  # other clients' figures are not an app's business
    (miss, value, where), (hit, value2, _) = result["add"]
    assert (miss, hit, value, value2) == ("miss", "hit", 100.0, 100.0)
    assert where == f"service pid {service.pid}"
    for case in ("swapped", "edited"):
        outcome, value, _ = result[case]
        assert outcome in ("miss", "rejected") and value == 100.0, (case, result[case])


def test_each_app_is_its_peer_uid_whatever_it_says(service):
    def app() -> dict:
        device = connect(service.socket)
        hal_model = binary_model(Op.ADD)
        prepared = device.prepare_model(hal_model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.LOW,
                                        None, None, None, client=ClientId(0))  # claims to be root: ignored
        status = device.status()
        prepared.release()
        return {"uid": status["uid"], "prepared": status["prepared_client_uids"]}

    assert run_as(APP_A, app) == {"uid": APP_A, "prepared": [APP_A]}
    assert run_as(APP_B, app) == {"uid": APP_B, "prepared": [APP_B]}


def test_driver_buffer_of_another_process_is_refused(service):
    device = connect(service.socket)
    model = binary_model(Op.ADD)
    prepared = device.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                    None, None)
    from nnapi.hal import BufferDesc, BufferRole
    buffer, token = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])

    def other_app() -> dict:
        other = connect(service.socket)
        theirs = other.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                     None, None)
        x = np.ones(4, np.float32)
        out = np.zeros(4, np.float32)
        request = Request([RequestArgument(False, DataLocation(0, 0, 0)), RequestArgument(False, DataLocation(1, 0, 16))],
                          [RequestArgument(False, DataLocation(2, 0, 16))],
                          [MemoryPool(token=token), MemoryPool(pointer=x), MemoryPool(pointer=out)])
        try:
            theirs.execute_synchronously(request, MeasureTiming.NO, None, None)
            return {"status": "NONE"}
        except NnError as e:
            return {"status": e.status.name, "message": e.message}

    result = run_as(APP_A, other_app)
    assert result["status"] == ErrorStatus.INVALID_ARGUMENT.name and "token" in result["message"]
    del buffer
    device.close()
