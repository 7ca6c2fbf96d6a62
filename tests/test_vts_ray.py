"""`nnapi vts --ray-address`: the kit sharded across the tasks of a local Ray gives a local run's per-check
outcomes in its order, its last line and its exit status; a shard whose worker dies is run again and each
check comes back once; an address where no Ray listens is one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import CTS

pytestmark = pytest.mark.xdist_group("ray")

ray = pytest.importorskip("ray")  # (the extra nnapi[ray]; `make` installs it)

TESTS = os.path.dirname(os.path.abspath(__file__))
#: The file whose creation marks the one Ray worker that `dies_once` ended.
DIES = "NNAPI_TEST_VTS_RAY_DIES"


def dies_once():
    """`--driver test_vts_ray:dies_once`: a driver that gets LOGISTIC's values wrong (broken_drivers), except that
    the first process to create it exits at once, as a worker killed mid-shard would."""
    try:
        os.close(os.open(os.environ[DIES], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        from broken_drivers import WrongLogisticValues
        return WrongLogisticValues()
    os._exit(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray of 2 CPUs whose workers import this folder (`dies_once`, broken_drivers): its address."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", DIES)}
    os.environ["PYTHONPATH"] = os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])
    os.environ[DIES] = str(tmp_path_factory.mktemp("ray") / "died")
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield context.address_info["gcs_address"]
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _vts(tmp_path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, list[tuple[str, str]], dict]:
    """`nnapi vts ARGS --json`: the process, each check's (id, status) in the report's order, its summary."""
    report = tmp_path / f"{name}.json"
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", *args, "--vectors", CTS, "--json", str(report)],
                         capture_output=True, text=True, timeout=120)
    data = json.loads(report.read_text())
    return out, [(r["id"], r["status"]) for r in data["results"]], data["summary"]


def _last(out: subprocess.CompletedProcess) -> str:
    return out.stdout.strip().splitlines()[-1]


def test_the_sharded_kit_gives_a_local_runs_outcomes_in_its_order(cluster, tmp_path):
    """The driver hosted in a process of its own in each shard, as a local run hosts it."""
    selection = ("--device", "reference", "--quick", "-k", "conv")
    local, expected, head = _vts(tmp_path, "local", *selection)
    sharded, got, summary = _vts(tmp_path, "sharded", *selection, "--ray-address", cluster)
    assert 30 <= len(expected) <= 80 and local.returncode == 0, local.stdout + local.stderr
    assert got == expected
    assert (sharded.returncode, _last(sharded)) == (0, _last(local)), sharded.stderr
    assert summary["complete"] and summary["shards"] == 2 and summary["host"]["starts"] == 2
    assert summary["per_suite"] == head["per_suite"] and summary["claims"] == head["claims"]
    assert "vts: shard 2/2 done" in sharded.stderr


def test_a_shard_whose_worker_dies_runs_again_and_each_check_comes_once(cluster, tmp_path):
    """`--driver MODULE:FACTORY --in-process` on the workers; the driver fails some checks: the same failures,
    each printed once, whole, and exit status 1."""
    selection = ("--quick", "-k", "logistic", "--in-process")
    local, expected, _ = _vts(tmp_path, "local", "--driver", "broken_drivers:WrongLogisticValues", *selection)
    sharded, got, summary = _vts(tmp_path, "sharded", "--driver", "test_vts_ray:dies_once", *selection,
                                 "--ray-address", cluster)
    assert os.path.exists(os.environ[DIES])   # (a worker died)
    failed = [i for i, status in expected if status == "failed"]
    assert failed and len(failed) < len(expected), expected
    assert got == expected
    assert (sharded.returncode, _last(sharded)) == (local.returncode, _last(local)) == \
        (1, f"{len(expected) - len(failed)} passed, {len(failed)} failed, 0 skipped")
    for check in failed:
        (line,) = [ln for ln in sharded.stdout.splitlines() if ln.startswith(f"FAILED {check} ")]
        assert "values off" in line
    assert summary["complete"] and "host" not in summary


def test_an_address_without_a_ray_is_one_line(tmp_path):
    for address, why in (("127.0.0.1:1", "no Ray cluster there"), ("nowhere", "not a Ray address")):
        out = subprocess.run([sys.executable, "-m", "nnapi.cli", "vts", "--device", "reference", "--ray-address",
                              address], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.strip().splitlines() == [out.stderr.strip()], out.stderr
        assert out.stderr.startswith(f"nnapi vts: --ray-address {address}: {why}")
