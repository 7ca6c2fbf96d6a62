"""The `nnapi vts` command: its arguments, progress lines, summary line, JSON report and exit status."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np

from conftest import CTS


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
