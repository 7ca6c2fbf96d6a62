"""The fleet tier on an S3-compatible store (`NNAPI_FLEET=s3://BUCKET/PREFIX`, boto3): moto's S3 server in
a process of its own stands for the object store. The same promises as on Redis: a verified artifact is a
fleet hit and then a local one; every tampered entry is refused with a reason and compiles locally; a store
that is down, silent or refuses writes is a prompt miss, never an error; `nnapi fleet` lists, verifies and
prunes it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from nnapi.caching.fleet import PREFIX, Fleet
from nnapi.caching.fleet_store import S3Store, StoreError, open_store
from nnapi.drivers.reference import ReferenceDevice

from test_fleet import (EXPECTED, TAMPER_CASES, TOKEN, _driver, _free_port, _prepare, _published, _silent_server, _tamper,
                        check_fleet_ls_verify_prune, keys)  # noqa: F401 (keys: a fixture)

pytestmark = pytest.mark.timing

BUCKET = "nnapi-fleet"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """moto's S3 server on a free local port, with the bucket made; stopped after the module."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3
        deadline = time.monotonic() + 60
        while True:
            try:
                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                             aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch):
    """boto3 finds the endpoint and test credentials where users set theirs: the environment."""
    for name, value in (("AWS_ENDPOINT_URL", s3_endpoint), ("AWS_ACCESS_KEY_ID", "testing"),
                        ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    return s3_endpoint


@pytest.fixture
def published(tmp_path, s3_env, keys):  # noqa: F811
    """A host with the signing key compiled the model and published it to the bucket; returns the store."""
    store = open_store(f"s3://{BUCKET}/fleet-{os.getpid()}-{time.monotonic_ns()}", timeout=2.0)
    assert isinstance(store, S3Store)
    host = _driver(tmp_path, "host", Fleet(store, keys["trust"], keys["host"]))
    prepared, out = _prepare(host, tmp_path / "host-cache")
    assert prepared.cache_source.startswith("fleet entry refused: no fleet entry")
    np.testing.assert_array_equal(out, EXPECTED)
    _published(store, host)
    return store


def test_a_fleet_artifact_on_s3_is_prepared_verified_and_then_a_local_hit(tmp_path, published, keys):  # noqa: F811
    listed = sorted(published.keys(PREFIX))
    kinds = [k[len(PREFIX):].split(":")[0] for k in listed]
    assert [k for k in kinds if k != "claims"] == ["blob", "blob", "entry"], listed  # (and the host's claims)
    other = _driver(tmp_path, "other", Fleet(published, keys["trust"]))
    prepared, out = _prepare(other, tmp_path / "other-cache")
    assert prepared.cache_source == "fleet: signed by host.key"
    np.testing.assert_array_equal(out, EXPECTED)
    again, out = _prepare(_driver(tmp_path, "other", Fleet(published, keys["trust"])), tmp_path / "third-cache")
    assert again.cache_source == "fleet: signed by host.key"  # (a new folder: the fleet again, not a compile)


@pytest.mark.parametrize("case, says", TAMPER_CASES)
def test_the_tamper_matrix_on_s3_is_refused_and_compiles_locally(tmp_path, published, keys, case, says):  # noqa: F811
    token, version = _tamper(case, published, keys, ReferenceDevice())
    other = _driver(tmp_path, "other", Fleet(published, keys["trust"]), version=version)
    prepared, out = _prepare(other, tmp_path / "other-cache", token)
    assert prepared.cache_source.startswith("fleet entry refused:") and says in prepared.cache_source, \
        prepared.cache_source
    np.testing.assert_array_equal(out, EXPECTED)


@pytest.mark.parametrize("case", ["down", "answers after 5 s", "no such bucket"])
def test_an_s3_store_down_silent_or_missing_is_a_prompt_miss_logged_once(tmp_path, keys, case, caplog,  # noqa: F811
                                                                        monkeypatch, s3_env):
    server = None
    if case == "down":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    elif case == "answers after 5 s":
        server, port = _silent_server()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    bucket = "no-such-bucket" if case == "no such bucket" else BUCKET
    other = _driver(tmp_path, "other", Fleet(open_store(f"s3://{bucket}/p"), keys["trust"]))
    try:
        for k in range(2):
            start = time.monotonic()
            prepared, out = _prepare(other, tmp_path / f"cache{k}")
            assert time.monotonic() - start < 2.0, case  # (the store's timeout is 200 ms)
            assert prepared.cache_source.startswith("fleet entry refused: the store failed"), prepared.cache_source
            np.testing.assert_array_equal(out, EXPECTED)
        assert sum("fleet:" in r.getMessage() for r in caplog.records if r.levelname == "WARNING") == 1
    finally:
        if server is not None:
            server.close()


def test_an_s3_store_that_refuses_writes_never_fails_a_preparation(tmp_path, keys, caplog, s3_env):  # noqa: F811
    store = open_store("s3://no-such-bucket/p", timeout=1.0)
    with pytest.raises(StoreError, match="PUT"):
        store.put("k", b"v")
    host = _driver(tmp_path, "host", Fleet(store, keys["trust"], keys["host"]))
    prepared, out = _prepare(host, tmp_path / "cache")
    np.testing.assert_array_equal(out, EXPECTED)
    deadline = time.monotonic() + 10  # (publishing runs on a thread of its own)
    while not any("publishing failed" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any("publishing failed" in r.getMessage() for r in caplog.records), caplog.records


def test_nnapi_fleet_ls_verify_prune_on_s3(tmp_path, published, keys):  # noqa: F811
    check_fleet_ls_verify_prune(published, keys, tmp_path)


def test_an_s3_url_without_a_bucket_is_refused_by_name():
    with pytest.raises(StoreError, match="bucket"):
        open_store("s3:///prefix")
