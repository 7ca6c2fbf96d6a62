"""`nnapi vts` certifies a driver served by `nnapi serve` exactly like an in-process one: the kit only uses the
HAL, so the service's proxy gets the same checks (the other-client check, which needs another process, is
skipped with its reason)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CTS

pytestmark = pytest.mark.timing


@pytest.fixture
def service(tmp_path):
    """The reference driver served from its own process; yields the service directory."""
    directory = tmp_path / "services"
    directory.mkdir()
    env = dict(os.environ, NNAPI_SERVICE_DIR=str(directory))
    server = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "serve", "--driver", "reference",
                               "--state-dir", str(tmp_path / "state")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (directory / "reference.sock").exists():
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.1)
        yield directory
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


def test_the_kit_certifies_a_served_driver(service, tmp_path):
    report = tmp_path / "vts.json"
    env = dict(os.environ, NNAPI_SERVICE_DIR=str(service))
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", "--device", "reference", "--quick",
                          "--suite", "caching,memory,domains,qos", "--vectors", CTS, "--json", str(report)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    data = json.loads(report.read_text())
    assert data["summary"]["where"].startswith("service pid ")
    assert data["summary"]["failed"] == 0 and data["summary"]["passed"] > 200
    skipped = [r for r in data["results"] if r["status"] == "skipped"]
    assert skipped and all(r["id"].startswith("domains/another-clients-token") for r in skipped)
    assert all("nnapi serve" in r["message"] for r in skipped)
