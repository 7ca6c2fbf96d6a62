"""The reference driver behind `nnapi serve` in another process: discovery, the proxies of every HAL
interface, the runtime API unchanged on top (sync, async, shared memory, memory domains, caching,
bursts, fenced execution), and errors crossing the boundary as they are."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import nnapi
from nnapi.qos import threads
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError, Priority,
                       Request, RequestArgument, ResultCode)
from nnapi.memory import allocate_ashmem, close_handle, map_handle
from nnapi.service import ENV, connect, default_socket
from nnapi.service.cli import start

from conftest import add_relu_model

pytestmark = pytest.mark.timing

X = np.array([1, -2, 3, -4], np.float32)
Y = np.array([10, 20, -30, 40], np.float32)


@pytest.fixture(scope="module")
def service():
    directory = tempfile.mkdtemp(prefix="nnapi-test-service-")
    os.chmod(directory, 0o755)
    served = start("reference", default_socket("reference", directory), os.path.join(directory, "state"))
    yield served
    served.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def services_dir(service, monkeypatch):
    """NNAPI_SERVICE_DIR pointing at the served reference driver, for this test."""
    monkeypatch.setenv(ENV, os.path.dirname(service.socket))
    return os.path.dirname(service.socket)


@pytest.fixture
def remote(service):
    device = connect(service.socket)
    yield device
    device.close()


def test_served_device_takes_the_place_of_the_in_process_driver(service, services_dir):
    found = [d for d in nnapi.devices() if d.name == "reference"]
    assert len(found) == 1
    device = found[0]
    assert (device.location, device.pid, device.socket) == ("service", service.pid, service.socket)
    assert device.where == f"service pid {service.pid}"
    assert nnapi.devices()[-1] is device  # still the fallback, last
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices", "--json"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120, check=True)
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert listed["reference"]["location"] == "service" and listed["reference"]["pid"] == service.pid
    assert all(d["location"] == "in-process" for name, d in listed.items() if name != "reference")
    table = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices"], capture_output=True, text=True,
                           env=dict(os.environ), timeout=120, check=True).stdout
    row = next(line for line in table.splitlines() if line.startswith("│ reference "))
    assert f"service pid {service.pid}" in row, table


def test_without_a_service_directory_drivers_stay_in_process(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert all(d.location == "in-process" for d in nnapi.devices())


def test_runtime_results_match_in_process(services_dir):
    model = add_relu_model(64, large_constant=True)  # a constant in shared memory crosses as a descriptor
    x = np.linspace(-3, 3, 64).astype(np.float32)
    expected = np.maximum(x + x[::-1] + np.arange(64, dtype=np.float32), 0)
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    assert c.steps[0].device.location == "service"
    (y,) = c.execute([x, x[::-1].copy()])
    np.testing.assert_array_equal(y, expected)
    # asynchronous, and inputs and outputs in shared memory
    mem_in, mem_out = nnapi.Memory.ashmem(256), nnapi.Memory.ashmem(256)
    mem_in.array(np.float32, (64,))[:] = x[::-1]
    e = nnapi.Execution(c)
    e.set_input(0, x)
    e.set_input_from_memory(1, mem_in, 0, 256)
    e.set_output_from_memory(0, mem_out, 0, 256)
    e.set_measure_timing(True)
    e.start_compute().wait(30)
    np.testing.assert_array_equal(mem_out.array(np.float32, (64,)), expected)
    timing = e.get_duration()
    assert timing.time_on_device <= timing.time_in_driver


def test_dynamic_output_shapes_cross_the_boundary(services_dir):
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,))
    b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (0,))  # size known only when the driver runs
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    c = nnapi.Compilation(m, devices=["reference"]).finish()
    e = nnapi.Execution(c)
    e.set_input(0, X)
    e.set_input(1, Y)
    e.set_output(0, np.zeros(2, np.float32))
    with pytest.raises(NnError) as err:
        e.compute()
    assert err.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert e.get_output_shape(0) == (4,)
    (y,) = c.execute([X, Y])  # run() grows the output as the service reports
    np.testing.assert_array_equal(y, X + Y)


def test_memory_domain_buffers_in_the_service(services_dir):
    model = add_relu_model()
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    desc = nnapi.MemoryDesc()
    desc.add_output_role(c, 0, 1.0)
    desc.add_input_role(c, 0, 1.0)
    desc.finish()
    state = nnapi.Memory.from_desc(desc)
    assert state.is_device  # a token of the service's driver
    e = nnapi.Execution(c)
    e.set_input(0, X)
    e.set_input(1, Y)
    e.set_output_from_memory(0, state, 0, 0)
    e.compute()
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, state, 0, 0)
    e.set_input(1, Y)
    y = np.zeros(4, np.float32)
    e.set_output(0, y)
    e.compute()
    np.testing.assert_array_equal(y, np.maximum(np.maximum(X + Y, 0) + Y, 0))
    host = nnapi.Memory.ashmem(16)
    nnapi.Memory.copy(state, host)  # IBuffer.copy_to through the proxy
    np.testing.assert_array_equal(host.array(np.float32, (4,)), np.maximum(X + Y, 0))


def test_caching_through_the_service(services_dir, tmp_path):
    model = add_relu_model(8)
    token = nnapi.model_token(model)
    first = nnapi.Compilation(model, devices=["reference"], cache_dir=tmp_path, token=token).finish()
    again = nnapi.Compilation(model, devices=["reference"], cache_dir=tmp_path, token=token).finish()
    assert [o.outcome for o in first.cache_outcomes] == ["miss"]
    assert [o.outcome for o in again.cache_outcomes] == ["hit"]
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(again.execute([x, x])[0], 2 * x)
    assert sorted(os.listdir(tmp_path))  # the app's cache files, written by the service through descriptors


def _hal_io(n: int = 4):
    """Request with inputs X, Y in one ashmem pool and the output in another."""
    inputs, outputs = allocate_ashmem(8 * n), allocate_ashmem(4 * n)
    mapped = map_handle(inputs)
    mapped.write(0, X)
    mapped.write(16, Y)
    request = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(0, 16, 16))],
                      [RequestArgument(False, DataLocation(1, 0, 16))],
                      [MemoryPool(handle=inputs), MemoryPool(handle=outputs)])
    return request, map_handle(outputs), (inputs, outputs)


def test_hal_async_fenced_and_errors(remote):
    prepared = remote.prepare_model(add_relu_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER,
                                    Priority.MEDIUM, None, None, None)
    request, out, handles = _hal_io()
    expected = np.maximum(X + Y, 0)
    try:
        done = threading.Event()
        got = {}
        prepared.execute(request, MeasureTiming.YES, None, None,
                         lambda status, shapes, timing: (got.update(status=status, shapes=shapes, timing=timing),
                                                         done.set()))
        assert done.wait(30)
        assert got["status"] == ErrorStatus.NONE and got["shapes"][0].dimensions == (4,)
        np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), expected)

        # Fenced: the service waits on our sync fence (sent as a descriptor) before running.
        out.write(0, np.zeros(4, np.float32))
        fence = os.eventfd(0, os.EFD_CLOEXEC)
        timer = threading.Timer(0.2, os.eventfd_write, (fence, 1))
        start_ns = time.monotonic_ns()
        timer.start()
        sync_fd, callback = prepared.execute_fenced(request, [fence], MeasureTiming.YES, None, None, None)
        assert time.monotonic_ns() - start_ns >= 150_000_000  # not before the fence was signalled
        status, launched, fenced = callback.get_execution_info()
        assert status == ErrorStatus.NONE and fenced.time_on_device <= launched.time_in_driver
        np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), expected)
        os.close(fence)
        with pytest.raises(NnError) as err:  # a null fence, as the VTS sends
            prepared.execute_fenced(request, [-1], MeasureTiming.NO, None, None, None)
        assert err.value.status == ErrorStatus.INVALID_ARGUMENT

        # The driver's own validation message comes back as it is.
        bad = Request(request.inputs[:1], request.outputs, request.pools)
        with pytest.raises(NnError) as err:
            prepared.execute_synchronously(bad, MeasureTiming.NO, None, None)
        assert err.value.status == ErrorStatus.INVALID_ARGUMENT and "input" in err.value.message
        # An object this connection does not own, and a method the service does not have.
        with pytest.raises(NnError, match="not a live prepared model"):
            remote.connection.call("execute_synchronously", 10**6, [[[], [], []], 0, None, None])
        with pytest.raises(NnError, match="unknown method 'format_disk'"):
            remote.connection.call("format_disk", 0, [])
        # A `client` value is not even sent: the service takes the caller from the socket.
        remote.prepare_model(add_relu_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                             None, None, None, client=nnapi.hal.ClientId(4321))
        assert set(remote.status()["prepared_client_uids"]) == {os.getuid()}
    finally:
        for h in handles:
            close_handle(h)


def test_burst_sends_each_pool_once(services_dir):
    model = add_relu_model(16)
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    conn = c.steps[0].device.driver.connection
    a, b, y = nnapi.Memory.ashmem(64), nnapi.Memory.ashmem(64), nnapi.Memory.ashmem(64)
    with c.create_burst() as burst:
        sent = []
        for k in range(5):
            a.array(np.float32, (16,))[:] = k
            b.array(np.float32, (16,))[:] = np.arange(16)
            e = nnapi.Execution(c)
            e.set_input_from_memory(0, a, 0, 64)
            e.set_input_from_memory(1, b, 0, 64)
            e.set_output_from_memory(0, y, 0, 64)
            before = conn.fds_sent
            e.burst_compute(burst)
            sent.append(conn.fds_sent - before)
            np.testing.assert_array_equal(y.array(np.float32, (16,)), k + np.arange(16))
        assert sent == [1 + 3, 0, 0, 0, 0]  # the burst's channel, then three pools: with the first execution only
        # numpy arguments: staged in one shared-memory region the burst keeps: one descriptor, once
        sent = []
        for k in range(3):
            e = nnapi.Execution(c)
            out = np.zeros(16, np.float32)
            e.set_input(0, np.full(16, k, np.float32))
            e.set_input(1, np.ones(16, np.float32))
            e.set_output(0, out)
            before = conn.fds_sent
            burst.compute(e)
            sent.append(conn.fds_sent - before)
            np.testing.assert_array_equal(out, np.full(16, k + 1, np.float32))
        assert sent == [1, 0, 0]  # one staging region holds all three
        busy = nnapi.Execution(c)
        burst.acquire()
        try:
            with pytest.raises(NnError) as err:
                busy.burst_compute(burst)
            assert err.value.code == ResultCode.BAD_STATE
        finally:
            burst.release()
        assert c.steps[0].device.driver.status()["objects"]["burst"] == 1
    assert c.steps[0].device.driver.status()["objects"]["burst"] == 0  # closed: freed in the service too


def test_fenced_dependencies_through_the_service(services_dir):
    model = add_relu_model()
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    y1, y2 = np.zeros(4, np.float32), np.zeros(4, np.float32)
    e1 = nnapi.Execution(c)
    e1.set_input(0, X)
    e1.set_input(1, Y)
    e1.set_output(0, y1)
    gate = os.eventfd(0, os.EFD_CLOEXEC)
    first = e1.start_compute_with_dependencies([nnapi.Event.create_from_sync_fence_fd(gate)])
    e2 = nnapi.Execution(c)
    e2.set_input(0, y1)  # reads e1's output: runs only after e1's sync fence
    e2.set_input(1, Y)
    e2.set_output(0, y2)
    second = e2.start_compute_with_dependencies([first])
    time.sleep(0.1)
    assert not first.is_done() and not second.is_done()
    os.eventfd_write(gate, 1)
    second.wait(30)
    os.close(gate)
    np.testing.assert_array_equal(y1, np.maximum(X + Y, 0))
    np.testing.assert_array_equal(y2, np.maximum(y1 + Y, 0))


@pytest.fixture(params=["in-process", "service"])
def reference(request, service, monkeypatch):
    """The reference device in this process, or served: burst and fenced execution work on both."""
    if request.param == "service":
        monkeypatch.setenv(ENV, os.path.dirname(service.socket))
    else:
        monkeypatch.delenv(ENV, raising=False)
    device = nnapi.runtime.find_device("reference")
    assert device.location == request.param
    return device


def test_burst_runtime_api(reference):
    model = add_relu_model(16, large_constant=True)
    c = nnapi.Compilation(model, devices=[reference]).finish()
    expected = lambda a, b: np.maximum(a + b + np.arange(16, dtype=np.float32), 0)  # noqa: E731
    with c.create_burst() as burst:
        for k in range(4):  # numpy arguments, then shared memory, alternating, and new memories each time
            a, b = np.full(16, k - 2, np.float32), np.linspace(-1, 1, 16).astype(np.float32)
            e = nnapi.Execution(c)
            out = np.zeros(16, np.float32)
            if k % 2:
                mem = nnapi.Memory.ashmem(64)
                mem.array(np.float32, (16,))[:] = a
                e.set_input_from_memory(0, mem, 0, 64)
            else:
                e.set_input(0, a)
            e.set_input(1, b)
            e.set_output(0, out)
            burst.compute(e)
            np.testing.assert_allclose(out, expected(a, b), rtol=1e-6)
        other = nnapi.Compilation(model, devices=[reference]).finish()
        with pytest.raises(NnError) as err:
            nnapi.Execution(other).burst_compute(burst)
        assert err.value.code == ResultCode.BAD_DATA
    with pytest.raises(NnError) as err:  # closed
        nnapi.Execution(c).burst_compute(burst)
    assert err.value.code == ResultCode.BAD_STATE


def test_fenced_runtime_api(reference):
    c = nnapi.Compilation(add_relu_model(), devices=[reference]).finish()

    def execution(x, out, timeout=None):
        e = nnapi.Execution(c)
        e.set_input(0, x)
        e.set_input(1, Y)
        e.set_output(0, out)
        if timeout is not None:
            e.set_timeout(timeout)
        return e

    y1, y2, y3 = (np.zeros(4, np.float32) for _ in range(3))
    gate = os.eventfd(0, os.EFD_CLOEXEC)
    first = execution(X, y1).start_compute_with_dependencies([nnapi.Event.create_from_sync_fence_fd(gate)])
    second = execution(y1, y2).start_compute_with_dependencies([first], timeout=10.0)
    third = execution(y2, y3).start_compute_with_dependencies([second])
    fence = third.get_sync_fence_fd()
    time.sleep(0.05)
    assert not first.is_done() and not third.is_done()
    os.eventfd_write(gate, 1)
    third.wait(30)
    assert os.eventfd_read(fence) >= 1  # the chain's last fence is signalled too
    np.testing.assert_array_equal(y3, np.maximum(np.maximum(np.maximum(X + Y, 0) + Y, 0) + Y, 0))

    # A dependency that fails (its deadline passes while it waits) fails what depends on it.
    never = os.eventfd(0, os.EFD_CLOEXEC)
    late = execution(X, np.zeros(4, np.float32), timeout=0.05).start_compute_with_dependencies(
        [nnapi.Event.create_from_sync_fence_fd(never)])
    after = execution(X, np.zeros(4, np.float32)).start_compute_with_dependencies([late])
    with pytest.raises(NnError) as err:
        late.wait(30)
    assert err.value.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
    with pytest.raises(NnError) as err:
        after.wait(30)
    assert err.value.code == ResultCode.OP_FAILED and "dependency 0 failed" in err.value.message
    with pytest.raises(NnError) as err:
        execution(X, y1).start_compute_with_dependencies(["not an event"])
    assert err.value.code == ResultCode.BAD_DATA
    for fd in (gate, never):
        os.close(fd)


def test_serve_command(service, tmp_path):
    run = lambda *args, **kw: subprocess.run([sys.executable, "-m", "nnapi.cli", "serve", *args],  # noqa: E731
                                             capture_output=True, text=True, timeout=120, **kw)
    env = {k: v for k, v in os.environ.items() if k != ENV}
    out = run("--driver", "no_such_driver", "--socket", str(tmp_path / "x.sock"), env=env)
    assert out.returncode == 1 and "no driver named 'no_such_driver'" in out.stderr and "reference" in out.stderr
    out = run("--driver", "reference", env=env)
    assert out.returncode == 2 and "NNAPI_SERVICE_DIR" in out.stderr
    out = run("--driver", "reference", "--socket", service.socket, env=env)  # never takes over a live one
    assert out.returncode == 1 and "already listens" in out.stderr
    (tmp_path / "file.sock").write_text("not a socket")
    out = run("--driver", "reference", "--socket", str(tmp_path / "file.sock"), env=env)
    assert out.returncode == 1 and "not a socket" in out.stderr
    # A stale socket (its service killed) is replaced; ready on stdout and on --ready-fd; SIGTERM stops it.
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "serve", "--driver", "reference", "--socket",
                             str(stale), "--state-dir", str(tmp_path / "state"), "--ready-fd", str(w)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(w,), env=env)
    os.close(w)
    try:
        with os.fdopen(r) as ready:
            assert ready.readline().strip() == f"ready {stale}"
        assert connect(str(stale)).get_info().name == "reference"
        assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    finally:
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0 and stdout.strip() == f"ready {stale}" and not stale.exists()
    assert "serving reference" in stderr


def _service_memfd_mappings(service) -> int:
    with open(f"/proc/{service.pid}/maps") as f:
        return sum(1 for line in f if "/memfd:nnapi-test-pool" in line)


def test_a_clients_shared_memory_is_mapped_once_and_let_go_when_it_disconnects(service):
    """Memory sent with every request is mapped by the service once (not per request), and what the
    service keeps mapped for a client goes with it: the app's memory is not held after it leaves."""
    from nnapi.memory import allocate_ashmem as allocate
    device = connect(service.socket)
    prepared = device.prepare_model(add_relu_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER,
                                    Priority.MEDIUM, None, None, None)
    big = allocate(1 << 20, name="nnapi-test-pool")  # over the size the service keeps mapped
    out = allocate_ashmem(16)
    try:
        map_handle(big).write(0, np.concatenate([X, Y]))
        request = Request([RequestArgument(False, DataLocation(0, 0, 16)),
                           RequestArgument(False, DataLocation(0, 16, 16))],
                          [RequestArgument(False, DataLocation(1, 0, 16))],
                          [MemoryPool(handle=big), MemoryPool(handle=out)])
        before = _service_memfd_mappings(service)
        for _ in range(3):
            prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
            np.testing.assert_array_equal(map_handle(out).array(0, 16, np.float32, (4,)), np.maximum(X + Y, 0))
        assert _service_memfd_mappings(service) == before + 1
        device.close()
        end = time.monotonic() + 10
        while _service_memfd_mappings(service) != before:
            assert time.monotonic() < end, "the service still maps the memory of a client that left"
            time.sleep(0.02)
    finally:
        close_handle(big)
        close_handle(out)


def test_an_app_connecting_again_and_again_keeps_its_descriptors_and_works_past_fd_1024(service):
    """Each connection's staging memory goes when it closes (the app's descriptor count stays flat over
    connect / prepare / execute / close cycles), and a connection whose descriptors are numbered beyond
    FD_SETSIZE (1024) still waits for its answers (poll, not select)."""
    import resource
    n = 1 << 21  # executions of milliseconds: the app sleeps until the answer is due, then polls
    model = add_relu_model(n).to_hal()
    x, y = np.resize(X, n), np.resize(Y, n)
    out = np.zeros(n, np.float32)
    request = Request([RequestArgument(False, DataLocation(k, 0, 4 * n)) for k in (0, 1)],
                      [RequestArgument(False, DataLocation(2, 0, 4 * n))],
                      [MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)])

    def cycle(executions: int = 2) -> None:
        device = connect(service.socket)
        prepared = device.prepare_model(model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None,
                                        None)
        for _ in range(executions):  # after 8, the app knows when an answer is due and sleeps till then
            prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
        device.close()
        np.testing.assert_array_equal(out, np.maximum(x + y, 0))

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def settled() -> int:
        # (what earlier tests left for the collector, e.g. store clients, is closed first; and the idle driver
        # threads they left retire, with what each thread keeps open, such as its SQLite connections)
        end = time.monotonic() + threads.IDLE_S + 10
        while any(t.name == threads.IDLE_NAME for t in threading.enumerate()) and time.monotonic() < end:
            time.sleep(0.05)
        gc.collect()
        return open_fds()

    cycle()
    import gc
    before = settled()
    for _ in range(10):
        cycle()
    assert settled() == before
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100 - open_fds())]  # the next ones: > 1024
    try:
        out[:] = 0
        cycle(executions=12)
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_service_has_its_drivers_low_work_give_way_to_calls(tmp_path):
    """A service installs its probe on the driver's scheduler: LOW work should give way while a
    synchronous execution of MEDIUM or HIGH work is handled, not during LOW work's own executions,
    and not once the service is idle; work of other priorities never gives way (the scheduler
    arbitrates it). So LOW work pauses at its checkpoints only while the threads handling calls need
    the interpreter lock."""
    from nnapi.drivers.reference import ReferenceDevice
    from nnapi.service.server import Service
    seen: list = []

    class Spy(ReferenceDevice):
        def prepare_model(self, *args, **kwargs):
            prepared = super().prepare_model(*args, **kwargs)
            run = prepared.execute_synchronously

            def spied(*a, **k):
                probe = self.scheduler.foreground
                seen.append((Priority(prepared.priority).name, probe(Priority.LOW), probe(Priority.MEDIUM)))
                return run(*a, **k)
            prepared.execute_synchronously = spied
            return prepared

    driver = Spy(engine=False)
    service = Service(driver, str(tmp_path / "spy.sock"))
    service.start()
    threading.Thread(target=service.serve_forever, daemon=True).start()
    device = connect(service.socket_path)

    def goes_idle() -> bool:  # (a call's thread leaves the foreground just after its answer)
        end = time.monotonic() + 30
        while driver.scheduler.foreground(Priority.LOW) and time.monotonic() < end:
            time.sleep(0.001)
        return not driver.scheduler.foreground(Priority.LOW)

    try:
        assert callable(driver.scheduler.foreground) and goes_idle()
        request, out, handles = _hal_io()
        for priority in (Priority.HIGH, Priority.LOW, Priority.MEDIUM):
            prepared = device.prepare_model(add_relu_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER,
                                            priority, None, None, None)
            assert goes_idle()  # (the preparation's call has left)
            prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
            np.testing.assert_array_equal(out.array(0, 16, np.float32, (4,)), np.maximum(X + Y, 0))
        assert seen == [("HIGH", True, False), ("LOW", False, False), ("MEDIUM", True, False)]
        assert goes_idle()
    finally:
        device.close()
        service.stop()
    end = time.monotonic() + 30  # a stopped service takes its probe back
    while driver.scheduler.foreground is not None and time.monotonic() < end:
        time.sleep(0.01)
    assert driver.scheduler.foreground is None


def _ashmem_memory(n: int, value: float | None = None) -> nnapi.Memory:
    """Runtime memory of n floats in a memfd named for `_service_memfd_mappings`."""
    from nnapi.memory import allocate_ashmem as allocate
    memory = nnapi.Memory(allocate(4 * n, name="nnapi-test-pool"))
    if value is not None:
        memory.array(np.float32, (n,))[:] = value
    return memory


def test_memory_the_service_keeps_mapped_can_be_sealed_and_is_let_go_when_freed(services_dir, service):
    """The service maps large memory once and keeps it mapped between calls; that must not keep the app
    from sealing it (a seal needs no writable mapping alive anywhere), nor hold it after the app frees it."""
    import gc
    n = 1 << 16  # 256 KB: kept mapped
    model = add_relu_model(n)
    c = nnapi.Compilation(model, devices=["reference"]).finish()
    conn = c.steps[0].device.driver  # (its `status()` says what the service holds for this app)
    a, b, out = _ashmem_memory(n, 1.0), _ashmem_memory(n, 2.0), _ashmem_memory(n)

    def run(x: nnapi.Memory, y: nnapi.Memory, z: nnapi.Memory) -> None:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, x, 0, 4 * n)
        e.set_input_from_memory(1, y, 0, 4 * n)
        e.set_output_from_memory(0, z, 0, 4 * n)
        e.compute()

    before = _service_memfd_mappings(service)
    run(a, b, out)
    run(a, b, out)
    assert conn.status()["mappings"] == 3
    assert _service_memfd_mappings(service) == before + 3
    np.testing.assert_array_equal(out.array(np.float32, (n,))[:3], [3, 3, 3])
    out.seal()  # an output the service wrote into, still mapped there: sealed all the same
    a.seal()
    assert out.sealed and a.sealed
    assert conn.status()["mappings"] == 1  # b's
    result = _ashmem_memory(n)
    run(out, a, result)  # sealed memory is still an input (mapped read-only now)
    np.testing.assert_array_equal(result.array(np.float32, (n,))[-2:], [4, 4])
    with pytest.raises(NnError) as err:  # but no driver can write into it any more
        run(a, b, out)
    assert err.value.code == ResultCode.BAD_DATA
    mapped = conn.status()["mappings"]
    b.close()
    assert conn.status()["mappings"] == mapped - 1  # freed by the app: let go of with the next call
    spare = _ashmem_memory(n, 1.0)
    run(spare, spare, result)
    assert conn.status()["mappings"] == mapped
    del spare  # and when the app just drops it
    gc.collect()
    assert conn.status()["mappings"] == mapped - 1
    for memory in (a, out, result):
        memory.close()
    conn.status()
    end = time.monotonic() + 10
    while _service_memfd_mappings(service) != before:  # nothing of this app's memory stays mapped there
        assert time.monotonic() < end, "the service still maps memory the app has freed"
        time.sleep(0.02)


def test_memory_a_burst_holds_can_be_sealed_and_the_burst_goes_on(reference):
    """A burst keeps its executions' memory mapped (or sent) by slot; sealing such memory lets go of it
    first, and the burst goes on with the memory, sealed, as an input."""
    n = 1 << 10
    c = nnapi.Compilation(add_relu_model(n), devices=[reference]).finish()
    a, b, out = _ashmem_memory(n, 1.0), _ashmem_memory(n, 2.0), _ashmem_memory(n)

    def run(burst: nnapi.Burst, x: nnapi.Memory, y: nnapi.Memory, z: nnapi.Memory) -> np.ndarray:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, x, 0, 4 * n)
        e.set_input_from_memory(1, y, 0, 4 * n)
        e.set_output_from_memory(0, z, 0, 4 * n)
        burst.compute(e)
        return z.array(np.float32, (n,))

    with c.create_burst() as burst:
        for _ in range(2):
            np.testing.assert_array_equal(run(burst, a, b, out)[:2], [3, 3])
        out.seal()  # held by the burst as an output: sealed all the same
        b.seal()
        assert out.sealed and b.sealed
        np.testing.assert_array_equal(run(burst, out, b, a)[-2:], [5, 5])  # sealed inputs, through the burst
        with pytest.raises(NnError) as err:
            run(burst, a, b, out)
        assert err.value.code == ResultCode.BAD_DATA


def test_a_regular_file_as_memory_reads_and_writes_through_every_kind_of_execution(reference, tmp_path):
    """mmap_fd memory over a regular file (which a service copies, since the app could shrink the file
    under a mapping): inputs read as the file holds them at each execution, outputs land in the file,
    through compute, start_compute, start_compute_with_dependencies and a burst (whose slot is kept)."""
    n = 1 << 10
    path = tmp_path / "io.bin"
    path.write_bytes(np.zeros(3 * n, np.float32).tobytes())
    fd = os.open(path, os.O_RDWR)
    memory = nnapi.Memory.from_fd(fd, 0, 12 * n)
    os.close(fd)
    c = nnapi.Compilation(add_relu_model(n), devices=[reference]).finish()

    def file_floats() -> np.ndarray:
        return np.frombuffer(path.read_bytes(), np.float32)

    def execution(k: float) -> nnapi.Execution:
        with open(path, "r+b") as f:  # the app writes the inputs into the file itself
            f.write(np.full(n, k, np.float32).tobytes() + np.arange(n, dtype=np.float32).tobytes())
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, memory, 0, 4 * n)
        e.set_input_from_memory(1, memory, 4 * n, 4 * n)
        e.set_output_from_memory(0, memory, 8 * n, 4 * n)
        return e

    with c.create_burst() as burst:
        runs = [("compute", lambda e: e.compute()), ("start_compute", lambda e: e.start_compute().wait(30)),
                ("dependencies", lambda e: e.start_compute_with_dependencies([]).wait(30)),
                ("burst", lambda e: e.burst_compute(burst)), ("burst again", lambda e: e.burst_compute(burst))]
        for k, (how, run) in enumerate(runs):
            run(execution(k + 1.0))
            np.testing.assert_array_equal(file_floats()[2 * n:], k + 1 + np.arange(n, dtype=np.float32),
                                          err_msg=how)
    memory.close()


def test_a_burst_lets_go_of_an_apps_file_once_the_app_closes_its_memory(services_dir, service, tmp_path):
    """A burst slot over a regular file holds the service's copy and the app's file; closing the memory
    has the service drop the slot, so it holds the file no longer (while the burst lives on)."""
    n = 1 << 10
    path = tmp_path / "held.bin"
    path.write_bytes(np.ones(n, np.float32).tobytes())
    fd = os.open(path, os.O_RDWR)
    memory = nnapi.Memory.from_fd(fd, 0, 4 * n)
    os.close(fd)
    c = nnapi.Compilation(add_relu_model(n), devices=["reference"]).finish()

    def service_holds_the_file() -> bool:
        links = []
        for entry in os.listdir(f"/proc/{service.pid}/fd"):
            try:
                links.append(os.readlink(f"/proc/{service.pid}/fd/{entry}"))
            except OSError:
                pass
        return str(path) in links

    with c.create_burst() as burst:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, memory, 0, 4 * n)
        e.set_input(1, np.ones(n, np.float32))
        e.set_output(0, np.zeros(n, np.float32))
        burst.compute(e)
        assert service_holds_the_file()
        memory.close()
        c.steps[0].device.driver.status()  # (what the app freed is told with its next call)
        assert not service_holds_the_file()


def test_a_call_stuck_in_the_driver_leaves_a_thread_that_answers_others(tmp_path):
    """The service retires idle threads, but never the last one waiting for I/O: with one call stuck
    in the driver, an idle thread that leaves would leave nobody to read the next call."""
    from nnapi.drivers.reference import ReferenceDevice
    from nnapi.service.server import Service
    release = threading.Event()

    class Stuck(ReferenceDevice):
        def prepare_model(self, *args, **kwargs):
            release.wait(60)
            return super().prepare_model(*args, **kwargs)

    service = Service(Stuck(engine=False), str(tmp_path / "stuck.sock"), idle_retire_s=0.2)
    service.start()
    threading.Thread(target=service.serve_forever, daemon=True).start()
    stuck, other = connect(service.socket_path), connect(service.socket_path)
    caller = threading.Thread(target=lambda: stuck.prepare_model(
        add_relu_model().to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None, None))
    try:
        caller.start()
        time.sleep(1.5)  # several idle periods pass while the first call is stuck in the driver
        assert caller.is_alive()
        answered: list = []
        asker = threading.Thread(target=lambda: answered.append(other.status()), daemon=True)
        asker.start()
        asker.join(10)
        assert answered, "no service thread was left to read a second client's call"
    finally:
        release.set()
        caller.join(30)
        stuck.close()
        other.close()
        service.stop()
