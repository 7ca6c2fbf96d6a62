"""An app exits cleanly whatever driver code is running: every thread that runs driver code is started
by `qos.threads`, told to stop and waited for at exit, before the interpreter finalizes (a thread inside
XLA or OpenVINO then aborted the process: rc 134, "terminate called ... FATAL: exception not rethrown")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timing

TESTS = os.path.dirname(__file__)

DISCOVERY = textwrap.dedent('''
    import nnapi, sys
    sys.path.insert(0, {tests!r})
    from test_hardening import add_model
    nnapi.Compilation(add_model(4), devices=["reference"]).finish()  # xla and openvino calibrate meanwhile
''')

OPTIMIZING = textwrap.dedent('''
    import numpy as np, nnapi, sys
    sys.path.insert(0, {tests!r})
    from test_hardening import add_model
    c = nnapi.Compilation(add_model(4096), devices=["xla"]).finish()
    x = np.ones(4096, np.float32)
    for _ in range(2):
        c.execute([x])  # the second starts the optimised compile in the background; then the app ends
''')


def _clean(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0 and "terminate called" not in out.stderr and "FATAL" not in out.stderr, \
        (out.returncode, out.stderr[-1500:])


def test_apps_that_exit_while_the_drivers_calibrate_exit_cleanly(tmp_path):
    """Eight apps at once in a fresh state directory: each names the reference driver and exits while
    xla and openvino are still being created and calibrated on threads of their own (1 of 8 aborted)."""
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    apps = [subprocess.Popen([sys.executable, "-c", DISCOVERY.format(tests=TESTS)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    for app in apps:
        out, err = app.communicate(timeout=300)
        _clean(subprocess.CompletedProcess(app.args, app.returncode, out, err))


def test_an_app_that_exits_during_the_optimised_compile_exits_cleanly(tmp_path):
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path), NNAPI_XLA_OPTIMIZE_AFTER="2")
    env.pop("NNAPI_SERVICE_DIR", None)
    for _ in range(3):
        _clean(subprocess.run([sys.executable, "-c", OPTIMIZING.format(tests=TESTS)], capture_output=True,
                              text=True, env=env, timeout=300))


@pytest.mark.parametrize("device", ["xla", "openvino"])
def test_ctrl_c_during_a_benchmark_exits_130(tmp_path, device):
    model = os.path.join(TESTS, "..", "examples", "models", "face_detection_short_range.tflite")
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    for delay in (0.8, 2.0, 3.5):  # discovery, the cold prepare, the timed runs
        bench = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "bench", model, "--device", device, "--runs",
                                  "100000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                 # (as from a terminal: a job started in the background inherits SIGINT ignored)
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        bench.send_signal(signal.SIGINT)
        _, err = bench.communicate(timeout=120)
        # 130 from the command's own handling; -SIGINT when the signal came while Python was still importing
        # `nnapi` (before any of the command's code runs, as on a loaded machine): the shell reports 130 too.
        assert bench.returncode in (0, 130, -signal.SIGINT) and "terminate called" not in err, \
            (delay, bench.returncode, err[-800:])


LATE_START = textwrap.dedent('''
    import atexit
    def late():  # runs after nnapi's exit handler (registered before it: handlers run last first)
        from nnapi.qos import threads
        try:
            threads.start(print, "ran", name="late")
        except threads.ProcessExiting as e:
            print("refused:", e)
    atexit.register(late)
    from nnapi.qos import threads
    threads.start(lambda: None, name="early").join()
''')


def test_driver_work_asked_for_once_the_process_exits_is_refused_by_name():
    """Once the exit has waited for the driver threads, a new one is refused (it would not be waited for),
    with an error that says why, not the interpreter's "can't register atexit after shutdown"."""
    out = subprocess.run([sys.executable, "-c", LATE_START], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused: late: the process is exiting: driver work is not started", out.stdout


SUBMITTED = textwrap.dedent('''
    import sys, time
    from nnapi.qos import threads
    def slow(tag):
        time.sleep(0.5)
        sys.stdout.write(f"done {tag}\\n")  # (one write: two threads' prints interleave)
        sys.stdout.flush()
    threads.submit(lambda: print("first", flush=True), name="first")
    time.sleep(0.2)  # (its thread waits in the pool now: the next work goes to it)
    threads.submit(slow, "pooled", name="pooled")
    threads.submit(slow, "new", name="new")
''')


def test_the_exit_waits_for_submitted_work_on_pooled_and_new_threads_alike():
    out = subprocess.run([sys.executable, "-c", SUBMITTED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[1:3]) == ["done new", "done pooled"], out.stdout


SERVED_UNDER_LOAD = textwrap.dedent('''
    import os, sys, tempfile, threading, time
    import numpy as np, nnapi
    from nnapi.service.cli import start
    from nnapi.service.discovery import default_socket
    driver, model = sys.argv[1], sys.argv[2]
    folder = tempfile.mkdtemp(prefix="nnapi-exit-"); os.chmod(folder, 0o755)
    service = start(driver, default_socket(driver, folder), os.path.join(folder, "state"))
    os.environ["NNAPI_SERVICE_DIR"] = folder
    m = nnapi.load(model, devices=driver)
    feed = {t.name: np.zeros([1 if s is None else s for s in t.shape], t.dtype) for t in m.inputs}
    done = threading.Event()
    def executions():
        while not done.is_set():
            try:
                m.run(feed)
            except nnapi.NnError:
                return  # (the service is gone)
    runners = [threading.Thread(target=executions) for _ in range(2)]
    for r in runners: r.start()
    time.sleep(0.5)
    rc = service.stop()  # SIGTERM while executions run in the service
    done.set()
    for r in runners: r.join()
    print("service rc", rc)
''')


@pytest.mark.parametrize("device", ["openvino", "xla"])
def test_a_service_stopped_while_it_executes_exits_cleanly(tmp_path, device):
    """SIGTERM reaches `nnapi serve` while two executions are in its driver: the service's threads run
    driver calls, so its exit waits for them (before, 3 of 3 stops aborted: rc -6, "terminate called")."""
    model = os.path.join(TESTS, "..", "..", "shared", "models", "keras", "mobilenet_v2_f32.tflite")
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SERVED_UNDER_LOAD, device, model], capture_output=True, text=True,
                             env=env, timeout=300)
        _clean(out)
        assert out.stdout.strip().splitlines()[-1] == "service rc 0", (out.stdout[-500:], out.stderr[-1500:])
