"""Compilation caching across processes and under hostile conditions.

- 16 processes compiling and loading the same token at once: no corrupt read, no crash, all correct.
- A process killed with SIGKILL in the middle of a save: the next load is a clean miss and recompiles.
- A read-only cache directory and a full one: compilation still succeeds (without caching).
- The caching engine shared by several processes.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnapi

from nnapi.conformance.vts.models import float_model

from caching_kit import reference, compile_and_run_worker, engine_compile_worker, engine_worker

pytestmark = pytest.mark.timing

TESTS = os.path.dirname(os.path.abspath(__file__))
TOKEN = bytes(range(32))
SPAWN = multiprocessing.get_context("spawn")


def _gather(processes, results, n: int, timeout: float = 120) -> list:
    out = [results.get(timeout=timeout) for _ in range(n)]
    for p in processes:
        p.join(timeout=30)
        assert p.exitcode == 0, f"worker {p.pid} exited with {p.exitcode}"
    return out


def test_sixteen_processes_compile_and_load_the_same_token(tmp_path):
    n, rounds = 16, 3
    barrier, results = SPAWN.Barrier(n), SPAWN.Queue()
    processes = [SPAWN.Process(target=compile_and_run_worker, args=(str(tmp_path), TOKEN, rounds, barrier, results))
                 for _ in range(n)]
    for p in processes:
        p.start()
    reports = _gather(processes, results, n)
    assert [r[3] for r in reports] == [None] * n, [r[3] for r in reports if r[3]]
    outcomes = [o for r in reports for o in r[1]]
    assert len(outcomes) == n * rounds and set(outcomes) <= {"hit", "miss", "rejected"}
    assert "hit" in outcomes
    assert max(e for r in reports for e in r[2]) < 1e-4
    # The cache left behind is sound: one more compile hits.
    test = float_model()
    c = nnapi.Compilation(test.model, devices=[reference()], cache_dir=tmp_path, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "hit"
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)


KILLED_SAVE = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import nnapi
    import nnapi.caching.artifacts as artifacts
    from nnapi.conformance.vts.models import float_model
    from caching_kit import reference
    calls = []

    def slow_write(fd, data):   # truncate, write half, then stall mid-file: the parent kills us here
        calls.append(fd)
        view = memoryview(data)
        os.ftruncate(fd, 0)
        half = len(view) // 2
        os.pwrite(fd, view[:half], 0)
        if len(calls) == {stall_at}:
            print("SAVING", flush=True)
            time.sleep(120)
        os.pwrite(fd, view[half:], half)

    artifacts.write_file = slow_write
    test = float_model()
    nnapi.Compilation(test.model, devices=[reference()], cache_dir={cache_dir!r}, token={token!r}).finish()
    print("DONE", flush=True)
""")


@pytest.mark.parametrize("stall_at", [1, 2], ids=["during-data-cache", "during-model-cache"])
def test_process_killed_in_the_middle_of_a_save(tmp_path, stall_at):
    code = KILLED_SAVE.format(tests=TESTS, stall_at=stall_at, cache_dir=str(tmp_path), token=TOKEN)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "SAVING"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    assert len(list(tmp_path.iterdir())) == 2           # the half-written files are there
    test = float_model()
    c = nnapi.Compilation(test.model, devices=[reference()], cache_dir=tmp_path, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "miss", c.cache_outcomes[0]   # a clean miss: no crash, no hit
    assert "incomplete" in c.cache_outcomes[0].reason
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)
    c = nnapi.Compilation(test.model, devices=[reference()], cache_dir=tmp_path, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "hit"
    np.testing.assert_allclose(c.execute(test.inputs)[0], test.golden[0], atol=1e-4)


COMPILE_TWICE = textwrap.dedent("""
    import ctypes, json, os, resource, signal, sys
    if {drop_dac} and os.geteuid() == 0:
        # Root ignores permission bits through CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER:
        # drop them (capset) so the directory's mode applies as it would to an app.
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]
        libc = ctypes.CDLL(None, use_errno=True)
        header, data = Header(0x20080522, 0), (Data * 2)()
        keep = ~0b1110 & 0xFFFFFFFF
        if libc.capget(ctypes.byref(header), data) != 0:
            print("NOCAPS")
            sys.exit(0)
        data[0].effective &= keep
        data[0].permitted &= keep
        if libc.capset(ctypes.byref(header), data) != 0:
            print("NOCAPS")
            sys.exit(0)
    sys.path.insert(0, {tests!r})
    import numpy as np
    import nnapi
    from nnapi.conformance.vts.models import float_model
    from caching_kit import reference
    test = float_model(n_in={n_in}, n_hidden={n_hidden})
    if {fsize_limit}:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize_limit}, {fsize_limit}))
    report = []
    for _ in range(2):
        c = nnapi.Compilation(test.model, devices=[reference()], cache_dir={cache_dir!r}, token={token!r}).finish()
        (out,) = c.execute(test.inputs)
        report.append([c.cache_outcomes[0].outcome, c.cache_outcomes[0].reason,
                       float(np.abs(out.astype(np.float64) - test.golden[0]).max())])
    print(json.dumps(report))
""")


def _compile_twice_in_child(cache_dir, state_dir, *, fsize_limit: int = 0, drop_dac: bool = False,
                            n_in: int = 16, n_hidden: int = 32) -> list:
    code = COMPILE_TWICE.format(tests=TESTS, n_in=n_in, n_hidden=n_hidden, fsize_limit=fsize_limit,
                                drop_dac=drop_dac, cache_dir=str(cache_dir), token=TOKEN)
    env = dict(os.environ, NNAPI_STATE_DIR=str(state_dir), PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    if result.stdout.strip() == "NOCAPS":
        pytest.skip("running as root and cannot drop CAP_DAC_OVERRIDE")
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def dirs(tmp_path):
    """A cache directory and a state directory; permissions are restored for the clean-up."""
    cache_dir, state_dir = tmp_path / "cache", tmp_path / "state"
    cache_dir.mkdir()
    state_dir.mkdir()
    yield str(cache_dir), str(state_dir)
    os.chmod(cache_dir, 0o755)


@pytest.mark.parametrize("populated", [False, True], ids=["empty", "holding-a-cache"])
def test_read_only_cache_directory(dirs, populated):
    """As root, the child drops the capabilities that bypass permission bits."""
    cache_dir, state_dir = dirs
    if populated:
        test = float_model()
        nnapi.Compilation(test.model, devices=[reference()], cache_dir=cache_dir, token=TOKEN).finish()
        for name in os.listdir(cache_dir):
            os.chmod(os.path.join(cache_dir, name), 0o444)
    os.chmod(cache_dir, 0o555)
    report = _compile_twice_in_child(cache_dir, state_dir, drop_dac=True)
    for outcome, reason, error in report:
        assert outcome == "miss" and "could not be created" in reason
        assert error < 1e-4
    assert len(os.listdir(cache_dir)) == (2 if populated else 0)


def test_full_cache_directory(dirs, monkeypatch):
    """RLIMIT_FSIZE stands in for a full disk: writing the 1 MB data cache fails with EFBIG."""
    cache_dir, state_dir = dirs
    report = _compile_twice_in_child(cache_dir, state_dir, fsize_limit=256 << 10, n_in=512, n_hidden=512)
    assert [r[0] for r in report] == ["miss", "miss"]   # the failed write left an incomplete cache: a miss
    assert "incomplete" in report[1][1]
    assert all(r[2] < 1e-3 for r in report)
    sizes = sorted(os.path.getsize(os.path.join(cache_dir, f)) for f in os.listdir(cache_dir))
    assert sizes[-1] <= 256 << 10
    # With room again, the cache is written and then hit.
    test = float_model(n_in=512, n_hidden=512)
    monkeypatch.setenv("NNAPI_STATE_DIR", state_dir)
    outcomes = [nnapi.Compilation(test.model, devices=[reference()], cache_dir=cache_dir,
                                  token=TOKEN).finish().cache_outcomes[0].outcome for _ in range(2)]
    assert outcomes == ["miss", "hit"]


def test_caching_engine_shared_by_processes(tmp_path):
    n = 4
    barrier, results = SPAWN.Barrier(n), SPAWN.Queue()
    # Ten entries of about 1.5 KB against a 9 KB bound: puts and evictions race all the time.
    processes = [SPAWN.Process(target=engine_worker, args=(str(tmp_path), w, 10, 9000, barrier, results))
                 for w in range(n)]
    for p in processes:
        p.start()
    reports = _gather(processes, results, n)
    assert [r[3] for r in reports] == [None] * n, [r[3] for r in reports if r[3]]
    assert all(r[2] == [] for r in reports)           # every hit returned exactly what was stored
    assert sum(r[1] for r in reports) > 0
    from nnapi.caching import CachingEngine
    engine = CachingEngine("test", "1", root=tmp_path)
    assert all(reason is None for reason in engine.verify().values())
    assert sum(e.size for e in engine.entries()) <= 9000


def test_caching_engine_compiles_in_several_processes(tmp_path):
    n = 4
    barrier, results = SPAWN.Barrier(n), SPAWN.Queue()
    processes = [SPAWN.Process(target=engine_compile_worker, args=(str(tmp_path), barrier, results))
                 for _ in range(n)]
    for p in processes:
        p.start()
    reports = _gather(processes, results, n)
    assert [r[3] for r in reports] == [None] * n, [r[3] for r in reports if r[3]]
    assert max(e for r in reports for e in r[2]) < 1e-4
    assert sum(r[1]["hits"] for r in reports) >= n       # at least every second and third compile
