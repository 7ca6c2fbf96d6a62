"""The third-party driver template (examples/third_party_driver, on the driver base, with caching) installs as a
plug-in and passes `nnapi vts`, its cache certified by the caching suite.

It is installed with pip into a temporary virtual environment layered over this project's `.venv`
(a `.pth` file adds the project's site-packages), so the shared environment is never changed; the
build backend comes from pip's configured package index, as for `make` itself.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import CTS

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "examples" / "third_party_driver"


def _run(args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory) -> Path:
    """A fresh venv seeing this project's packages, with the template installed from its folder."""
    root = tmp_path_factory.mktemp("template-venv")
    created = _run([sys.executable, "-m", "venv", "--without-pip", str(root)], 120)
    assert created.returncode == 0, created.stderr
    python = root / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        60).stdout.strip())
    parent = sysconfig.get_paths()["purelib"]
    (purelib / "nnapi_project.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    source = root / "template"   # built from a copy: the build leaves nothing in the source tree
    shutil.copytree(TEMPLATE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    installed = _run([str(python), "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
                      str(source)], 300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def test_the_template_is_found_through_its_entry_point(venv_python):
    out = _run([str(venv_python), "-m", "nnapi.cli", "devices", "--json"], 120)
    assert out.returncode == 0, out.stderr
    names = [d["name"] for d in json.loads(out.stdout)]
    assert "example" in names and "reference" in names
    example = next(d for d in json.loads(out.stdout) if d["name"] == "example")
    assert example["cache_files"] == [1, 1] and example["type"] == "ACCELERATOR"
    assert re.search(r"\+example0\.2\.0\+src[0-9a-f]{8}$", example["version"]), example["version"]  # its release and source


def test_the_template_passes_nnapi_vts(venv_python, tmp_path):
    report = tmp_path / "vts.json"
    env = dict(os.environ, NNAPI_CTS_DIR=str(CTS))
    out = _run([str(venv_python), "-m", "nnapi.cli", "vts", "--device", "example", "--quick", "--timeout", "30",
                "--json", str(report)], 600, env=env)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    data = json.loads(report.read_text())
    summary = data["summary"]
    assert lines[-1] == f"{summary['passed']} passed, 0 failed, {summary['skipped']} skipped"
    assert summary["device"] == "example" and summary["failed"] == 0
    per_suite = summary["per_suite"]
    # what the example claims is checked, what it does not claim is skipped with the reason
    assert per_suite["memory"]["passed"] > 30 and per_suite["execution"]["passed"] > 10
    assert per_suite["caching"]["passed"] >= 20   # its own cache format, through the base's integrity registry
    skipped = {r["id"]: r["message"] for r in data["results"] if r["status"] == "skipped"}
    assert "does not support" in skipped["caching/corrupted-model-cache[quant8]"]   # a float32 driver
    passed = {r["id"] for r in data["results"] if r["status"] == "passed"}
    assert {"caching/save-and-retrieve[float32]", "caching/corrupted-model-cache[float32]",
            "caching/corrupted-data-cache[float32]", "caching/wrong-token[float32]", "caching/compile-twice[float32]",
            "qos/invalid-priority", "execution/async[timing-no]", "execution/insufficient-output[sync]",
            "memory/io-pool[mmap_fd][fenced]"} <= passed
