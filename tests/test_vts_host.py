"""The kit survives its subject: `nnapi vts` hosts the driver under test in a process of its own (as `nnapi
serve` does), so a driver that ends its process (os._exit), crashes, forks or leaves a process behind gets a
failure naming it, and the kit goes on; `--in-process` keeps the driver in the kit's own process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnapi.conformance import vts
from nnapi.conformance.vts import host

from conftest import CTS

TESTS = str(Path(__file__).resolve().parent)


def _vts(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", *args, "--vectors", CTS], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_driver_that_exits_fails_the_check_and_the_kit_goes_on_with_it_started_again(tmp_path):
    report = tmp_path / "r.json"
    out = _vts("--driver", "broken_drivers:ExitsInFenced", "--suite", "execution", "-k", "]", "--json", str(report))
    assert out.returncode == 1, out.stderr[-2000:]
    data = json.loads(report.read_text())
    by_id = {r["id"]: r for r in data["results"]}
    died = by_id["execution/fenced[timing-no]"]
    assert died["status"] == "failed" and "the driver's process exited with status 3 during this check" in \
        died["message"]
    after = by_id["execution/fenced[timing-yes]"]   # the same kind of call fails fast, naming the first
    assert after["status"] == "failed" and "not called: the driver's process exited with status 3 during a call " \
        "of this kind in execution/fenced[timing-no]" in after["message"]
    assert by_id["execution/burst[timing-no]"]["status"] == "passed"   # the driver was started again
    assert data["summary"]["host"]["starts"] == 2 and data["summary"]["where"].startswith("in a process of its own")
    assert out.stdout.strip().splitlines()[-1].endswith("skipped")


def test_a_crash_names_the_signal_and_the_drivers_frame():
    results = vts.run_kit("broken_drivers:CrashesInBurst", ["execution"], k="burst[timing-no]", timeout=10,
                          vectors=CTS)
    (r,) = results
    assert r.status == "failed" and "the driver's process was killed by SIGSEGV during this check" in r.message
    assert "Fatal Python error: Segmentation fault" in r.message and "in configure_execution_burst" in r.message


@pytest.mark.parametrize("driver, says", [("ForksInPrepare", "the driver forked its process (child pid "),
                                          ("LeavesAProcess", "the driver left a process behind: pid "),
                                          ("DetachesAProcess", "the driver left a process behind: pid ")])
def test_a_fork_or_a_process_left_behind_is_a_failure_and_the_process_is_ended(driver, says):
    results = vts.run_kit(f"broken_drivers:{driver}", ["execution"], k="execution/sync[timing-no]", timeout=10,
                          vectors=CTS)
    (r,) = results
    assert r.status == "failed" and says in r.message and "(ended by the kit)" in r.message, r.describe()
    pid = int(r.message.split("pid ")[-1].split()[0])
    assert not _alive(pid)


def _subreaper() -> int:
    import ctypes
    value = ctypes.c_int(-1)
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(value), 0, 0, 0) == 0   # PR_GET_CHILD_SUBREAPER
    return value.value


def test_the_kit_run_in_a_process_leaves_that_process_as_it_was(capsys):
    """`nnapi vts` run in an app's (or a test runner's) process never makes it the reaper of orphans (its
    zombies would pile up), nor leaves a process of the driver's or its folder behind."""
    from nnapi.cli import main
    before = _subreaper()
    assert main(["vts", "--device", "reference", "--suite", "memory", "-k", "io-pool[ashmem][sync]", "--vectors",
                 CTS]) == 0
    assert _subreaper() == before == 0
    out = capsys.readouterr()
    assert out.out.strip().splitlines()[-1] == "1 passed, 0 failed, 0 skipped", out.out
    pid = int(out.err.split("in a process of its own, pid ")[1].split(")")[0])
    assert not _alive(pid)


def test_plain_exceptions_of_a_hosted_driver_are_still_named():
    (r,) = vts.run_kit("broken_drivers:FencedRaisesRuntimeError", ["execution"], k="fenced[timing-no]", timeout=10,
                       vectors=CTS)
    assert r.status == "failed" and "execute_fenced raised RuntimeError: the fence machinery is not implemented" in \
        r.message


def test_the_kit_plays_another_client_of_a_hosted_driver():
    broken = vts.run_kit("broken_drivers:SharesBufferTokens", ["domains"], k="another-clients-token[TENSOR_FLOAT32]",
                         timeout=10, vectors=CTS)
    assert [r.status for r in broken] == ["failed"] and "another client" in broken[0].message
    fine = vts.run_kit("broken_drivers:Delegating", ["domains"], k="another-clients-token[TENSOR_FLOAT32]",
                       timeout=10, vectors=CTS)
    assert [r.status for r in fine] == ["passed"], [r.describe() for r in fine]


def test_in_process_is_an_option_documented_in_help(tmp_path):
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert "--in-process" in out.stdout and "--driver" in out.stdout
    report = tmp_path / "r.json"
    out = _vts("--driver", "broken_drivers:Delegating", "--in-process", "--suite", "memory", "-k", "io-pool[ashmem]",
               "--json", str(report))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(report.read_text())["summary"]["where"] == "in-process"


def test_what_the_service_answers_for_a_driver_is_checked_in_the_drivers_own_process():
    """Across the service the proxy checks burst tokens (the driver gets slots of its own), so the kit runs
    validateBurst where the driver is (`Check.inside`)."""
    broken = vts.run_kit("broken_drivers:BurstIgnoresTokens", ["validation"], k="burst-tokens", timeout=10,
                         vectors=CTS)
    assert [r.status for r in broken] == ["failed"] and "memory identifier tokens" in broken[0].message
    for suite, k in (("validation", "validation/burst-tokens"), ("memory", "memory/fenced-bad-wait-fence")):
        fine = vts.run_kit("broken_drivers:Delegating", [suite], k=k, timeout=10, vectors=CTS)
        assert [(r.id, r.status) for r in fine] == [(k, "passed")], [r.describe() for r in fine]


def test_a_driver_with_many_calls_stuck_in_it_is_started_again_so_the_later_checks_still_run(monkeypatch):
    """(`host.STUCK_CALLS` made small, so a few checks get there.)"""
    from nnapi.conformance.vts.corpus import find_corpus
    monkeypatch.setattr(host, "STUCK_CALLS", 5)
    options = vts.Options(quick=True, timeout=2, vectors=find_corpus(CTS))
    kit = vts.open_kit("broken_drivers:FencedCallbackHangs", options)
    try:
        results = vts.run_checks(kit, vts.collect(kit, ["execution", "vectors"], "int32"))
        renewals, starts = list(kit.supervisor.renewals), kit.supervisor.starts
    finally:
        kit.close()
    fenced = [r for r in results if r.status == "failed"]
    assert len(fenced) >= 15 and all("execute_fenced did not return within" in r.message for r in fenced)
    assert len(renewals) >= 3 and starts == len(renewals) + 1 and "calls stuck in it" in renewals[0], renewals
    vectors = [r for r in results if r.suite == "vectors"]
    assert vectors and all(r.status == "passed" for r in vectors), [r.describe() for r in vectors
                                                                    if r.status != "passed"][:3]
