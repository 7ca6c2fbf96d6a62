"""The `nnapi vts` command: its arguments, progress lines, summary line, JSON report and exit status."""
from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from typing import Iterator

import numpy as np
import pytest

from conftest import CTS

pytestmark = pytest.mark.timing


def _vts(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_clean_run_exits_0_with_the_summary_last(tmp_path):
    report = tmp_path / "vts.json"
    out = _vts("--device", "reference", "--suite", "caching,memory", "-k", "[float32]", "--json", str(report),
               "--vectors", CTS)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(report.read_text())
    summary = data["summary"]
    assert summary["failed"] == 0 and summary["passed"] == len(data["results"]) > 10
    assert out.stdout.strip().splitlines()[-1] == f"{summary['passed']} passed, 0 failed, 0 skipped"
    assert all("[float32]" in r["id"] and r["suite"] == "caching" for r in data["results"])
    assert all(r["behaviour"].startswith("§1") for r in data["results"])
    assert "vts: " in out.stderr   # plain progress lines when not on a terminal


def test_a_failure_exits_1_and_names_the_check_the_behaviour_and_what_happened(tmp_path):
    """A vector whose expected output is wrong makes the reference driver "fail" it: the kit reports it."""
    with open(f"{CTS}/V1_0/add.json", encoding="utf-8") as f:
        data = json.load(f)
    spec = next(m for m in data["models"] if m["name"] == "add")
    out_index = spec["main"]["outputs"][0]
    operand = spec["main"]["operands"][out_index]
    wrong = np.frombuffer(base64.b64decode(operand["data"]["b64"]), np.float32) + 1
    operand["data"]["b64"] = base64.b64encode(wrong.astype("<f4").tobytes()).decode()
    corpus = tmp_path / "cts"
    corpus.mkdir()
    (corpus / "add.json").write_text(json.dumps({"source": "spec_V1_0/add", "models": [spec]}))
    out = _vts("--device", "reference", "--suite", "vectors", "--vectors", str(corpus), "--json",
               str(tmp_path / "r.json"))
    assert out.returncode == 1
    assert out.stdout.strip().splitlines()[-1] == "0 passed, 1 failed, 0 skipped"
    assert "FAILED vectors/add [§6.4 CTS GeneratedTests" in out.stdout and "values off" in out.stdout
    (result,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["status"] == "failed" and "output 0" in result["message"]


def test_bad_arguments_are_reported():
    out = _vts("--device", "no-such-device")
    assert out.returncode == 2 and "no device named 'no-such-device'" in out.stderr
    out = _vts("--device", "reference", "--suite", "caching,bogus")
    assert out.returncode != 0 and "unknown suite bogus" in out.stderr
    out = _vts("--device", "reference", "--vectors", "/nonexistent/cts")
    assert out.returncode == 2 and "no test vectors at /nonexistent/cts" in out.stderr


def test_without_a_corpus_the_corpus_checks_are_skipped_with_the_reason(tmp_path, monkeypatch):
    from nnapi.conformance import vts
    from nnapi.conformance.vts.core import Kit, Options, run_checks
    from nnapi.drivers.reference import ReferenceDevice
    kit = Kit(vts.device_for(ReferenceDevice()), Options(vectors=None))
    try:
        checks = [c for c in vts.collect(kit, ["validation", "execution", "vectors"]) if c.id.endswith("/corpus")]
        results = run_checks(kit, checks)
    finally:
        kit.close()
    assert [r.id for r in results] == ["validation/corpus", "execution/corpus", "vectors/corpus"]
    assert all(r.status == "skipped" and "no test-vector corpus" in r.message for r in results)


def test_the_header_warns_when_no_corpus_was_found():
    """Without a corpus, the header says so and a warning says every corpus check is skipped and how to give
    one; with one, no warning."""
    import argparse
    import io
    from rich.console import Console
    from nnapi.cli.vts import Report, _header
    for vectors, warned in ((None, True), ("/some/cts", False)):
        out = io.StringIO()
        head = {"device": "reference", "version": "0.1.0", "where": "in-process", "suites": ["memory", "execution"]}
        _header(Console(file=out, width=200), Report(None, head), argparse.Namespace(quick=True), 12, vectors)
        text = out.getvalue()
        assert ("warning: no test-vector corpus was found" in text) == warned, text
        assert ("vectors not found" in text) == warned and (warned or "vectors /some/cts" in text), text
    out = io.StringIO()
    _header(Console(file=out, width=200), Report(None, dict(head, suites=["memory"])), argparse.Namespace(quick=True),
            3, None)
    assert "warning" not in out.getvalue()  # (no suite of this run reads the corpus)


# --- issue 33: what a log and a report must hold, whatever happens ----------------------------------------------
def _broken(*args: str, **kwargs) -> subprocess.CompletedProcess:
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", *args, "--vectors", CTS], capture_output=True,
                          text=True, timeout=kwargs.get("timeout", 120), env=env)


def test_in_a_piped_log_each_failure_is_printed_once_and_whole():
    out = _broken("--driver", "broken_drivers:WritesInputs", "--suite", "execution,memory", "-k", "[sync]")
    assert out.returncode == 1
    log = (out.stdout + out.stderr).splitlines()
    failed = [line for line in log if line.startswith("FAILED ")]
    assert len(failed) >= 3 and len(failed) == len(set(failed)), failed
    assert all(line.endswith("a driver never writes to an execution's inputs (§2.2 rule 8)") for line in failed)
    assert not any("FAILED" in line for line in out.stderr.splitlines())   # (once: on stdout)
    assert out.stdout.strip().splitlines()[-1].endswith(f" passed, {len(failed)} failed, 0 skipped")


def test_the_header_lists_the_drivers_claims_and_the_json_has_them(tmp_path):
    report = tmp_path / "r.json"
    out = _broken("--driver", "broken_drivers:RaisingClaims", "--suite", "memory", "-k", "io-pool[ashmem][sync]",
                  "--json", str(report))
    header = [line for line in out.stderr.splitlines() if line.startswith("nnapi vts: claims: ")]
    assert header and header[0].startswith("nnapi vts: claims: 13 of 15 of the kit's models fully supported")
    assert "ADD + RELU float32: the driver's supported() raised KeyError" in header[0]
    claims = json.loads(report.read_text())["summary"]["claims"]
    assert len(claims) == 15 and sum(c["supported"] for c in claims) == 13


@contextlib.contextmanager
def _started(tmp_path, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`nnapi vts ARGS --json r.json` running in the background; ended (and its pipes drained) on the way out
    whatever happened, so a failed assertion leaves no kit running."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    report = str(tmp_path / "r.json")
    process = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "vts", *args, "--vectors", CTS, "--json", report],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        yield process, report
    finally:
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            process.communicate(timeout=30)


def _gone(pid: int, within: float = 20.0) -> bool:
    """Whether process `pid` ends (or is a zombie) within `within` seconds."""
    import time
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def _wait_for_results(report: str, process: subprocess.Popen, n: int = 1) -> dict:
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None
        try:
            with open(report, encoding="utf-8") as f:
                data = json.load(f)
            if len(data["results"]) >= n:
                return data
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError("no results written")


def test_a_run_ended_by_a_signal_prints_its_summary_line_and_leaves_a_partial_json(tmp_path):
    import signal
    with _started(tmp_path, "--driver", "broken_drivers:NeverCallsBack", "--suite", "execution",
                  "--timeout", "60") as (process, report):
        _wait_for_results(report, process, 2)   # the async check after these waits 60 s for its callback
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    data = json.loads(open(report, encoding="utf-8").read())
    summary = data["summary"]
    assert summary["complete"] is False and summary["interrupted"] == "SIGTERM"
    assert 2 <= len(data["results"]) < summary["planned"]
    assert stdout.strip().splitlines()[-1] == (f"{summary['passed']} passed, {summary['failed']} failed, "
                                               f"{summary['skipped']} skipped")
    assert f"interrupted by SIGTERM after {len(data['results'])} of {summary['planned']} checks" in stderr


def test_a_killed_run_leaves_a_partial_json_with_its_summary_and_no_driver_process(tmp_path):
    import signal
    with _started(tmp_path, "--driver", "broken_drivers:NeverCallsBack", "--suite", "execution",
                  "--timeout", "60") as (process, report):
        _wait_for_results(report, process, 2)
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    data = json.loads(open(report, encoding="utf-8").read())
    assert data["summary"]["complete"] is False and len(data["results"]) >= 2
    assert data["summary"]["passed"] + data["summary"]["failed"] + data["summary"]["skipped"] == len(data["results"])
    driver = int(stderr.split("in a process of its own, pid ")[1].split(")")[0])
    assert _gone(driver), f"the driver's process {driver} outlived the killed kit"
