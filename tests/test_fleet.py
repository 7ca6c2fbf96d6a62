"""The fleet tier: one host compiles and publishes a signed artifact to a real Redis; another host's driver
prepares from it only when the signature, every blob and its version check out (C9 across hosts). The
tamper matrix: every case is refused with a reason, and the model then compiles locally, computing right."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time

import msgpack
import numpy as np
import pytest

from nnapi.caching import IntegrityRegistry
from nnapi.caching.fleet import Fleet, Manifest, blob_key, entry_key, keygen, load_private_key, load_trust
from nnapi.caching.fleet_store import RedisStore
from nnapi.drivers.reference import ReferenceDevice
from nnapi.runtime.cache_files import cache_paths, close_cache_files, open_cache_files

from caching_kit import VersionedReference
from test_hardening import add_model

pytestmark = pytest.mark.timing

TOKEN = bytes(range(32))
X = np.ones(4096, np.float32)
EXPECTED = 1 + np.arange(4096, dtype=np.float32)


def _redis_server() -> str:
    """Debian's redis-server, installed when missing (the machine runs as root)."""
    path = shutil.which("redis-server")
    if path is None:
        for args in (["apt-get", "install", "-y", "-q", "redis-server"], ["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "redis-server"]):
            subprocess.run(args, capture_output=True, timeout=600)
        path = shutil.which("redis-server")
    if path is None:
        pytest.fail("redis-server is not installed and apt-get could not install it")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("redis")
    port = _free_port()
    server = subprocess.Popen([_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            RedisStore(url, timeout=1.0).get("ping")
            break
        except Exception:
            time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(10)


@pytest.fixture
def keys(tmp_path):
    keygen(str(tmp_path / "host.key"))
    keygen(str(tmp_path / "evil.key"))
    return {"host": load_private_key(str(tmp_path / "host.key")), "evil": load_private_key(str(tmp_path / "evil.key")),
            "trust": load_trust(str(tmp_path / "host.key.pub"))}


def _driver(tmp_path, name: str, fleet: Fleet | None, version: str | None = None) -> ReferenceDevice:
    device = VersionedReference(version) if version else ReferenceDevice()
    device.registry = IntegrityRegistry(device.NAME, device.version, tmp_path / f"{name}.sqlite3")
    device.fleet = fleet
    return device


def _prepare(device, folder, token: bytes = TOKEN):
    """Prepare the test model with (empty, new) cache files in `folder`: the prepared model and its output."""
    paths = cache_paths(str(folder), token, device.get_number_of_cache_files_needed())
    os.makedirs(folder, exist_ok=True)
    handles = open_cache_files(paths, create=True)
    model = add_model(4096)  # (alive while prepared: its weights are in its memory)
    try:
        prepared = device.prepare_model(model.to_hal(), cache_handles=handles, token=token)
    finally:
        close_cache_files(handles)
    return prepared, _run(prepared)


def _run(prepared) -> np.ndarray:
    """The prepared model's output for X, run at driver level."""
    from nnapi.hal import DataLocation, MeasureTiming, MemoryPool, Request, RequestArgument
    out = np.zeros(4096, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, X.nbytes))],
                      [RequestArgument(False, DataLocation(1, 0, out.nbytes))],
                      [MemoryPool(pointer=X), MemoryPool(pointer=out)])
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    return out


def _published(store: RedisStore, device, token: bytes = TOKEN) -> bytes:
    key = entry_key(device.NAME, device.version, token)
    for _ in range(200):
        raw = store.get(key)
        if raw is not None:
            return raw
        time.sleep(0.01)
    raise AssertionError("nothing was published")


@pytest.fixture
def published(tmp_path, redis_url, keys):
    """A host with the signing key compiled the model and published it; returns the store."""
    store = RedisStore(redis_url, timeout=1.0)
    for key in list(store.keys("nnapi:fleet:")):
        store.delete(key)
    host = _driver(tmp_path, "host", Fleet(store, keys["trust"], keys["host"]))
    prepared, out = _prepare(host, tmp_path / "host-cache")
    assert prepared.cache_source.startswith("fleet entry refused: no fleet entry")
    np.testing.assert_array_equal(out, EXPECTED)
    _published(store, host)
    return store


def test_a_fleet_artifact_is_prepared_once_verified_and_then_a_local_hit(tmp_path, published, keys):
    other = _driver(tmp_path, "other", Fleet(published, keys["trust"]))
    prepared, out = _prepare(other, tmp_path / "other-cache")
    assert prepared.cache_source == "fleet: signed by host.key"
    np.testing.assert_array_equal(out, EXPECTED)
    # written into the app's cache files and recorded in its own registry: the next start is a local hit
    paths = cache_paths(str(tmp_path / "other-cache"), TOKEN, other.get_number_of_cache_files_needed())
    handles = open_cache_files(paths, create=False)
    try:
        again = other.prepare_model_from_cache(None, handles, TOKEN)
    finally:
        close_cache_files(handles)
    assert again.cache_source is None


def _resign(raw: bytes, manifest: bytes, key) -> bytes:
    from nnapi.caching.fleet import _raw_public
    return msgpack.packb({"manifest": manifest, "signature": key.sign(manifest), "key": _raw_public(key)})


def _tamper(case: str, store: RedisStore, keys, device) -> tuple[bytes, str | None]:
    """Change the published entry as `case` says; returns the token to ask for and the version to ask as."""
    key = entry_key(device.NAME, device.version, TOKEN)
    raw = store.get(key)
    entry = msgpack.unpackb(raw, raw=False)
    manifest = Manifest.decode(entry["manifest"])
    first = blob_key(manifest.model[0][0])
    blob = store.get(first)
    if case == "untrusted signer":
        store.put(key, _resign(raw, entry["manifest"], keys["evil"]))
    elif case == "bad signature":
        entry["signature"] = bytes([entry["signature"][0] ^ 1]) + entry["signature"][1:]
        store.put(key, msgpack.packb(entry))
    elif case == "blob swapped":
        store.put(first, store.get(blob_key(manifest.data[0][0])))
    elif case == "blob truncated":
        store.put(first, blob[:-1])
    elif case == "blob bit-flipped":
        store.put(first, blob[:-1] + bytes([blob[-1] ^ 1]))
    elif case == "replayed for another token":
        other = bytes(31) + b"\x01"
        store.put(entry_key(device.NAME, device.version, other), raw)
        return other, None
    elif case == "replayed for another version":
        store.put(entry_key(device.NAME, "9.9.9", TOKEN), raw)
        return TOKEN, "9.9.9"
    elif case == "store returns garbage":
        store.put(key, os.urandom(300))
    else:
        raise AssertionError(case)
    return TOKEN, None


#: The tamper matrix: each case (see `_tamper`) and what its refusal says.
TAMPER_CASES = [
    ("untrusted signer", "not on the fleet's trust list"),
    ("bad signature", "does not verify"),
    ("blob swapped", "does not match the manifest"),
    ("blob truncated", "does not match the manifest"),
    ("blob bit-flipped", "does not match the manifest"),
    ("replayed for another token", "replayed"),
    ("replayed for another version", "replayed"),
    ("store returns garbage", "cannot be read"),
]


@pytest.mark.parametrize("case, says", TAMPER_CASES)
def test_the_tamper_matrix_is_refused_and_compiles_locally(tmp_path, published, keys, case, says):
    host = ReferenceDevice()
    token, version = _tamper(case, published, keys, host)
    other = _driver(tmp_path, "other", Fleet(published, keys["trust"]), version=version)
    prepared, out = _prepare(other, tmp_path / "other-cache", token)
    assert prepared.cache_source.startswith("fleet entry refused:") and says in prepared.cache_source, \
        prepared.cache_source
    np.testing.assert_array_equal(out, EXPECTED)


def _silent_server() -> tuple[socket.socket, int]:
    """A server that accepts connections and never answers (a store slower than any timeout)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(16)], daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.parametrize("case", ["down", "answers after 5 s"])
def test_a_store_down_or_slow_is_a_prompt_miss_logged_once(tmp_path, keys, case, caplog):
    if case == "down":
        url, server = f"redis://127.0.0.1:{_free_port()}/0", None
    else:
        server, port = _silent_server()
        url = f"redis://127.0.0.1:{port}/0"
    other = _driver(tmp_path, "other", Fleet(RedisStore(url), keys["trust"]))
    for k in range(2):
        start = time.monotonic()
        prepared, out = _prepare(other, tmp_path / f"cache{k}")
        assert time.monotonic() - start < 2.0, case  # (the store's timeout is 200 ms)
        assert prepared.cache_source.startswith("fleet entry refused: the store failed"), prepared.cache_source
        np.testing.assert_array_equal(out, EXPECTED)
    assert sum("fleet:" in r.getMessage() for r in caplog.records if r.levelname == "WARNING") == 1
    if server is not None:
        server.close()


def test_a_full_store_never_fails_a_preparation(tmp_path, redis_url, keys, caplog):
    store = RedisStore(redis_url, timeout=1.0)
    import redis
    admin = redis.Redis.from_url(redis_url)
    admin.config_set("maxmemory", "1")  # full: every write refused (OOM), reads still answered
    admin.config_set("maxmemory-policy", "noeviction")
    try:
        host = _driver(tmp_path, "host", Fleet(store, keys["trust"], keys["host"]))
        prepared, out = _prepare(host, tmp_path / "cache")
        np.testing.assert_array_equal(out, EXPECTED)
        time.sleep(0.5)  # (publishing runs on a thread of its own)
        assert any("publishing failed" in r.getMessage() for r in caplog.records), caplog.records
    finally:
        admin.config_set("maxmemory", "0")


def test_the_app_sees_outcome_fleet_through_the_runtime_and_nnapi_run(tmp_path, published, keys):
    """A new app process on another 'host' (its own state directory and cache folder): `fleet` in
    cache_outcomes and in `nnapi run --json`, the signer in the reason."""
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path / "state"), NNAPI_FLEET=published.url,
               NNAPI_FLEET_TRUST=str(tmp_path / "host.key.pub"), NNAPI_FLEET_KEY=str(tmp_path / "host.key"))
    env.pop("NNAPI_SERVICE_DIR", None)
    model = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "face_detection_short_range.tflite")
    publisher = subprocess.run([sys.executable, "-m", "nnapi.cli", "run", model, "--device", "openvino",
                                "--cache-dir", str(tmp_path / "a"), "--json"], capture_output=True, text=True,
                               env=env, timeout=300)
    assert publisher.returncode == 0, publisher.stderr
    time.sleep(1.0)
    env.pop("NNAPI_FLEET_KEY")
    env["NNAPI_STATE_DIR"] = str(tmp_path / "other-state")
    runs = [json.loads(subprocess.run([sys.executable, "-m", "nnapi.cli", "run", model, "--device", "openvino",
                                       "--cache-dir", str(tmp_path / "b"), "--json"], capture_output=True, text=True,
                                      env=env, timeout=300).stdout) for _ in range(2)]
    (first,), (second,) = (r["partitions"] for r in runs)
    assert (first["cache"], first["reason"]) == ("fleet", "fleet: signed by host.key"), first
    assert second["cache"] == "hit", second
    assert runs[0]["outputs"] == runs[1]["outputs"] == json.loads(publisher.stdout)["outputs"]


def test_nnapi_fleet_keygen_ls_verify_prune(tmp_path, published, keys):
    key = tmp_path / "new.key"
    made = subprocess.run([sys.executable, "-m", "nnapi.cli", "fleet", "keygen", str(key)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    (line,) = open(f"{key}.pub").read().splitlines()
    assert line.startswith("ed25519 ") and load_trust(f"{key}.pub")
    check_fleet_ls_verify_prune(published, keys, tmp_path)


def check_fleet_ls_verify_prune(published, keys, tmp_path) -> None:
    """`nnapi fleet ls`, `verify` (rc 1 once a blob is changed) and `prune` against the published store."""
    env = dict(os.environ, NNAPI_FLEET=published.url, NNAPI_FLEET_TRUST=str(tmp_path / "host.key.pub"))

    def fleet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nnapi.cli", "fleet", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    listed = fleet("ls")
    assert listed.returncode == 0 and "reference" in listed.stdout and "1 entries" in listed.stdout, listed.stdout
    assert fleet("verify").returncode == 0
    _tamper("blob bit-flipped", published, keys, ReferenceDevice())
    checked = fleet("verify")
    assert checked.returncode == 1 and "refused: blob" in checked.stdout, checked.stdout
    pruned = fleet("prune")
    assert pruned.returncode == 0 and "dropped 1 entries" in pruned.stdout, pruned.stdout
    assert "0 entries" in fleet("ls").stdout


def test_a_served_driver_with_a_fleet_tier_reports_fleet_to_the_app(tmp_path, published, keys, monkeypatch):
    """`nnapi serve --driver reference --fleet URL` on two hosts (two services with their own state
    directories): the first publishes what its app compiles; the second's driver prepares from the verified
    artifact, and its app sees `fleet` with the signer through the service (the app never writes the driver's
    registry)."""
    import nnapi
    from nnapi.service import ENV, default_socket
    from nnapi.service.cli import start
    model = add_model(4096)
    outcomes = []
    for host, signing in (("a", True), ("b", False)):
        folder = tmp_path / f"services-{host}"
        folder.mkdir()
        env = dict(os.environ, NNAPI_FLEET_TRUST=str(tmp_path / "host.key.pub"))
        if signing:
            env["NNAPI_FLEET_KEY"] = str(tmp_path / "host.key")
        served = start("reference", default_socket("reference", str(folder)), str(tmp_path / f"state-{host}"),
                       env=env, extra=["--fleet", published.url])
        try:
            monkeypatch.setenv(ENV, str(folder))
            c = nnapi.Compilation(model, devices=["reference"], cache_dir=tmp_path / f"cache-{host}",
                                  token=TOKEN).finish()
            assert c.steps[0].device.where == f"service pid {served.pid}"
            outcomes.append((c.cache_outcomes[0].outcome, c.cache_outcomes[0].reason))
            np.testing.assert_array_equal(c.execute([X])[0], EXPECTED)
            time.sleep(0.5)  # (publishing runs in the background)
        finally:
            served.stop()
    assert outcomes[0][0] == "miss" and "no fleet entry" in outcomes[0][1], outcomes
    assert outcomes[1] == ("fleet", "fleet: signed by host.key"), outcomes


# --- claims across the fleet ------------------------------------------------------------------------------
class CountingReference(ReferenceDevice):
    """The reference driver, counting the claim analyses it makes itself (claims not remembered in the state
    directory, which the test's hosts share: only the fleet may spare an analysis)."""

    analyses = 0
    REMEMBER_CLAIMS = False

    def supported(self, model):
        type(self).analyses += 1
        return super().supported(model)


def _claiming_driver(tmp_path, name: str, fleet: Fleet) -> CountingReference:
    device = CountingReference()
    device.registry = IntegrityRegistry(device.NAME, device.version, tmp_path / f"{name}.sqlite3")
    device.fleet = fleet
    return device


def _published_claims(store: RedisStore, device, model) -> bytes:
    from nnapi.caching import model_fingerprint
    from nnapi.caching.fleet import claims_key
    key = claims_key(device.NAME, device.version, model_fingerprint(model.to_hal()).hex())
    for _ in range(200):
        raw = store.get(key)
        if raw is not None:
            return key, raw
        time.sleep(0.01)
    raise AssertionError("no claims were published")


def test_a_host_partitions_from_the_claims_a_trusted_host_published(tmp_path, redis_url, keys):
    """A new host asks the fleet before analysing a model (so it imports no backend the model does not go
    to); what it reads is signed by a trusted key and for its own driver version and these very bytes."""
    store = RedisStore(redis_url, timeout=1.0)
    for key in list(store.keys("nnapi:fleet:")):
        store.delete(key)
    model = add_model(64)
    CountingReference.analyses = 0
    host = _claiming_driver(tmp_path, "host", Fleet(store, keys["trust"], keys["host"]))
    assert host.get_supported_operations(model.to_hal()) == [True]
    assert CountingReference.analyses == 1
    key, raw = _published_claims(store, host, model)
    other = _claiming_driver(tmp_path, "other", Fleet(store, keys["trust"]))
    assert other.get_supported_operations(model.to_hal()) == [True] and CountingReference.analyses == 1
    # refused claims are analysed locally: another signer, another model's claims replayed, too few flags
    entry = msgpack.unpackb(raw, raw=False)
    said = json.loads(entry["manifest"])
    cases = {"untrusted signer": _resign(raw, entry["manifest"], keys["evil"]),
             "replayed": _resign(raw, json.dumps(dict(said, fingerprint="00" * 16)).encode(), keys["host"]),
             "flags": _resign(raw, json.dumps(dict(said, flags="")).encode(), keys["host"])}
    for case, forged in cases.items():
        store.put(key, forged)
        fresh = _claiming_driver(tmp_path, f"fresh-{case}", Fleet(store, keys["trust"]))
        before = CountingReference.analyses
        assert fresh.get_supported_operations(model.to_hal()) == [True], case
        assert CountingReference.analyses == before + 1, case
