"""The fleet tier of the compilation cache: compile once per fleet, with signed artifacts.

Layout in the store (`fleet_store`):

    nnapi:fleet:v1:entry:<driver>:<sha256(version)[:16]>:<token hex>   one entry (msgpack):
        {"manifest": canonical JSON bytes, "signature": Ed25519 over them, "key": the signer's public key}
    nnapi:fleet:v1:blob:<sha256 hex>                                     a blob, by its SHA-256
    nnapi:fleet:v1:claims:<driver>:<sha256(version)[:16]>:<fingerprint>  what the driver claims of a model
        (msgpack, signed as an entry is): {"kind": "claims", driver, version, fingerprint, flags, created}

The manifest names the driver, its full version (CPU features included), the per-device token, the
model-cache and data-cache blobs (SHA-256 and size each, in the driver's order) and the creation time.

Trust: a driver prepares from a fleet entry only when (a) its signature verifies against a key of the
trust list (`NNAPI_FLEET_TRUST`: one public key per line, as `nnapi fleet keygen` writes them), (b) every
blob's SHA-256 matches the manifest, and (c) its driver, version and token are the ones asked for (no
replay for another token or version). The driver then writes the bytes into the app's cache files and
records them in its own registry (C9 holds across hosts: the registry only ever vouches for bytes it
checked). Anything else is a miss with the reason; a store that is down, slow, full or wrong is a miss,
logged once, never an error and never a wait beyond the store's timeout.

Publishing: a host that holds a signing key (`NNAPI_FLEET_KEY`) publishes what it compiles, blobs first,
entry last, on a thread of its own: it never delays or fails a preparation.

Claims: a host also publishes what its driver claims of a model's content (`get_supported_operations`,
keyed by the driver, its version and the model's fingerprint), so a new host partitions a model without
analysing it, or importing a backend the model does not go to: a fleet hit then costs about what a local
hit does. They are read under the same three checks (a trusted signer, the payload's driver, version and
fingerprint the ones asked for, and as many flags as the model has operations); a claim is only what
that driver version answered for those very bytes, so it is believed as the driver's own memory is.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import msgpack

from ..qos import threads
from .fleet_store import DEFAULT_TIMEOUT_S, Store, StoreError, open_store

#: How long a process's exit waits for a publication in flight (`qos.threads`: a compile that ends just
#: before the app does still reaches the fleet; a store that hangs costs the exit no more than this).
PUBLISH_EXIT_WAIT_S = 10.0

log = logging.getLogger("nnapi.caching")
PREFIX = "nnapi:fleet:v1:"
#: Environment: the store's URL, the trust list, this host's signing key.
ENV_URL, ENV_TRUST, ENV_KEY = "NNAPI_FLEET", "NNAPI_FLEET_TRUST", "NNAPI_FLEET_KEY"
#: How a public key line starts (then the base64 of the raw 32-byte key, then an optional comment).
KEY_KIND = "ed25519"
#: Largest entry or blob read from a store (a store is not trusted to be small).
MAX_BLOB_BYTES = 4 << 30


class Refused(Exception):
    """A fleet entry that is not used: why (a miss, with this reason)."""


def entry_key(driver: str, version: str, token: bytes) -> str:
    return f"{PREFIX}entry:{driver}:{hashlib.sha256(version.encode()).hexdigest()[:16]}:{bytes(token).hex()}"


def blob_key(digest_hex: str) -> str:
    return f"{PREFIX}blob:{digest_hex}"


def claims_key(driver: str, version: str, fingerprint_hex: str) -> str:
    return f"{PREFIX}claims:{driver}:{hashlib.sha256(version.encode()).hexdigest()[:16]}:{fingerprint_hex}"


# --- keys ------------------------------------------------------------------------------------------------
def keygen(path: str) -> str:
    """Write a new Ed25519 private key to `path` (PEM, mode 0600) and its public key line to
    `path`.pub; returns that line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    line = f"{KEY_KIND} {base64.b64encode(_raw_public(key)).decode()} {os.path.basename(path)}"
    with open(f"{path}.pub", "w", encoding="utf-8") as f:
        f.write(line + "\n")
    return line


def _raw_public(private) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_private_key(path: str):
    """This host's signing key (a PEM Ed25519 private key, as `keygen` writes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def load_trust(path: str) -> dict[bytes, str]:
    """The trust list: raw public key -> its name (the line's comment, else its fingerprint). Blank
    lines and lines starting with # are skipped; a malformed line is a ValueError naming it."""
    trusted: dict[bytes, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            try:
                if words[0] != KEY_KIND:
                    raise ValueError(f"starts with {words[0]!r}, not {KEY_KIND!r}")
                raw = base64.b64decode(words[1], validate=True)
                if len(raw) != 32:
                    raise ValueError(f"a key of {len(raw)} bytes, not 32")
            except (ValueError, IndexError) as e:
                raise ValueError(f"{path} line {number}: not a public key: {e}") from None
            trusted[raw] = " ".join(words[2:]) or fingerprint(raw)
    return trusted


def fingerprint(raw_public: bytes) -> str:
    return "ed25519:" + hashlib.sha256(raw_public).hexdigest()[:16]


# --- entries ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Manifest:
    """What a fleet entry says it holds."""

    driver: str
    version: str
    token: bytes
    model: tuple[tuple[str, int], ...]   # (SHA-256 hex, size) of each model-cache blob
    data: tuple[tuple[str, int], ...]    # the same of each data-cache blob
    created: float

    def encode(self) -> bytes:
        """Canonical JSON: what the signature covers."""
        return json.dumps({"driver": self.driver, "version": self.version, "token": self.token.hex(),
                           "model": [list(b) for b in self.model], "data": [list(b) for b in self.data],
                           "created": self.created}, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Manifest":
        try:
            m = json.loads(data)
            blobs = [tuple((str(h), int(n)) for h, n in m[part]) for part in ("model", "data")]
            manifest = cls(str(m["driver"]), str(m["version"]), bytes.fromhex(m["token"]), blobs[0], blobs[1],
                           float(m["created"]))
        except (ValueError, KeyError, TypeError) as e:
            raise Refused(f"the manifest cannot be read: {type(e).__name__}: {e}") from None
        if any(len(h) != 64 or n < 0 or n > MAX_BLOB_BYTES for h, n in (*manifest.model, *manifest.data)):
            raise Refused("the manifest names a blob that is not a SHA-256 and a size")
        return manifest


def _sha(blob) -> str:
    return hashlib.sha256(blob).hexdigest()


class Fleet:
    """The fleet tier of one driver process: its store, trust list and (optional) signing key."""

    def __init__(self, store: Store, trust: dict[bytes, str], signing_key=None) -> None:
        self.store = store
        self.trust = trust
        self.signing_key = signing_key
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, url: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> "Fleet | None":
        """The fleet `NNAPI_FLEET` (or `url`) names, with `NNAPI_FLEET_TRUST` and `NNAPI_FLEET_KEY`; None
        when none is named, or it cannot be set up (logged: caching goes on without it)."""
        url = url or os.environ.get(ENV_URL)
        if not url:
            return None
        try:
            trust_path = os.environ.get(ENV_TRUST)
            trust = load_trust(trust_path) if trust_path else {}
            key_path = os.environ.get(ENV_KEY)
            key = load_private_key(key_path) if key_path else None
            store = open_store(url, timeout)
        except (OSError, ValueError, StoreError, ImportError) as e:
            log.warning("fleet %s not used: %s", url, e)
            return None
        if not trust:
            log.warning("fleet %s: no trust list (%s): nothing will be prepared from it", url, ENV_TRUST)
        return cls(store, trust, key)

    def _once(self, reason: str, kind: str | None = None) -> None:
        """Log a store's failure once (a miss each time, a line once): once per `kind` of failure when
        given (a store that is down fails every key, and says so once), else once per reason."""
        with self._lock:
            if (kind or reason) in self._logged:
                return
            self._logged.add(kind or reason)
        log.warning("fleet: %s (a miss; said once)", reason)

    # --- reading ----------------------------------------------------------------------------------------
    def fetch(self, driver: str, version: str, token: bytes,
              counts: tuple[int, int]) -> tuple[list[bytes], list[bytes], str]:
        """The verified blobs of the entry for (driver, version, token), and who signed them; Refused
        with the reason otherwise (not there, unknown signer, bad signature, a blob that does not match,
        another token or version, a store that failed)."""
        try:
            raw = self.store.get(entry_key(driver, version, token))
        except StoreError as e:
            self._once(str(e), "read")
            raise Refused(f"the store failed: {e}") from None
        if raw is None:
            raise Refused("no fleet entry for this token")
        payload, signer = self._verified(raw)
        manifest = Manifest.decode(payload)
        if (manifest.driver, manifest.version, manifest.token) != (driver, version, bytes(token)):
            raise Refused(f"the entry is for {manifest.driver} {manifest.version} token {manifest.token.hex()[:12]}…, "
                          "not this driver version and token (replayed)")
        if (len(manifest.model), len(manifest.data)) != tuple(counts):
            raise Refused(f"the entry holds {len(manifest.model)} model and {len(manifest.data)} data blobs, "
                          f"the driver needs {counts[0]} and {counts[1]}")
        blobs = []
        for digest, size in (*manifest.model, *manifest.data):
            try:
                blob = self.store.get(blob_key(digest))
            except StoreError as e:
                self._once(str(e), "read")
                raise Refused(f"the store failed: {e}") from None
            if blob is None:
                raise Refused(f"blob {digest[:12]}… is missing from the store")
            if len(blob) != size or _sha(blob) != digest:
                raise Refused(f"blob {digest[:12]}… does not match the manifest (changed, truncated or swapped)")
            blobs.append(blob)
        n = len(manifest.model)
        return blobs[:n], blobs[n:], signer

    def claims(self, driver: str, version: str, fingerprint_hex: str, n: int) -> list[bool] | None:
        """What a trusted host's driver of this version claimed of the model with this content fingerprint
        (one flag per operation of its `n`), or None (not there, or refused: logged at debug level)."""
        try:
            raw = self.store.get(claims_key(driver, version, fingerprint_hex))
            if raw is None:
                return None
            payload, _ = self._verified(raw)
            said = json.loads(payload)
            if (said.get("kind"), said.get("driver"), said.get("version"), said.get("fingerprint")) != (
                    "claims", driver, version, fingerprint_hex):
                raise Refused("the claims are for another driver, version or model (replayed)")
            flags = said.get("flags")
            if not isinstance(flags, str) or len(flags) != n or set(flags) - {"0", "1"}:
                raise Refused(f"the claims do not hold one flag for each of the model's {n} operations")
            return [f == "1" for f in flags]
        except StoreError as e:
            self._once(str(e), "read")
        except (Refused, ValueError) as e:
            log.debug("fleet: claims of %s not used: %s", fingerprint_hex[:12], e)
        return None

    def publish_claims(self, driver: str, version: str, fingerprint_hex: str, flags: Sequence[bool]) -> None:
        """Publish what this driver claims of a model (with a signing key; on a thread of its own)."""
        if self.signing_key is None:
            return
        payload = json.dumps({"kind": "claims", "driver": driver, "version": version, "fingerprint": fingerprint_hex,
                              "flags": "".join("1" if f else "0" for f in flags), "created": time.time()},
                             sort_keys=True, separators=(",", ":")).encode()
        entry = self._signed(payload)
        try:
            threads.start(self._put, claims_key(driver, version, fingerprint_hex), entry, name="nnapi-fleet-publish",
                          exit_wait_s=PUBLISH_EXIT_WAIT_S)
        except threads.ProcessExiting:
            pass  # (the process is exiting: nothing would wait for the publication)

    def _put(self, key: str, value: bytes) -> None:
        try:
            self.store.put(key, value)
        except StoreError as e:
            self._once(f"publishing failed: {e}")

    def _signed(self, payload: bytes) -> bytes:
        """A signed entry of `payload` (msgpack: the payload, its Ed25519 signature, this host's public key)."""
        return msgpack.packb({"manifest": payload, "signature": self.signing_key.sign(payload),
                              "key": _raw_public(self.signing_key)})

    def _verified(self, raw: bytes) -> tuple[bytes, str]:
        """The payload of a signed entry and its signer's name, when a trusted key signed it; Refused otherwise."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        try:
            entry = msgpack.unpackb(raw, raw=False)
            manifest_bytes, signature, key = entry["manifest"], entry["signature"], entry["key"]
            if not all(isinstance(v, bytes) for v in (manifest_bytes, signature, key)):
                raise TypeError("fields are not bytes")
        except Exception as e:  # (anything a store may return)
            self._once(f"{self.store.url} returned an entry that cannot be read")
            raise Refused(f"the entry cannot be read: {type(e).__name__}") from None
        if key not in self.trust:
            raise Refused(f"signed by {fingerprint(key)}, a key not on the fleet's trust list")
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(signature, manifest_bytes)
        except (InvalidSignature, ValueError):
            raise Refused(f"the signature of {self.trust[key]} does not verify") from None
        return manifest_bytes, self.trust[key]

    # --- publishing -------------------------------------------------------------------------------------
    def publish(self, driver: str, version: str, token: bytes, model_blobs: Sequence[bytes],
                data_blobs: Sequence[bytes]) -> threading.Thread | None:
        """Publish a compile, on a thread of its own (None without a signing key): blobs first, the
        signed entry last, so a reader never finds an entry whose blobs are not there yet."""
        if self.signing_key is None:
            return None
        model = [bytes(b) for b in model_blobs]
        data = [bytes(b) for b in data_blobs]
        try:
            return threads.start(self._publish, driver, version, bytes(token), model, data,
                                 name="nnapi-fleet-publish", exit_wait_s=PUBLISH_EXIT_WAIT_S)
        except threads.ProcessExiting:
            return None  # (the process is exiting: nothing would wait for the publication)

    def _publish(self, driver: str, version: str, token: bytes, model: list[bytes], data: list[bytes]) -> None:
        manifest = Manifest(driver, version, token, tuple((_sha(b), len(b)) for b in model),
                            tuple((_sha(b), len(b)) for b in data), time.time())
        entry = self._signed(manifest.encode())
        try:
            for blob in (*model, *data):
                self.store.put(blob_key(_sha(blob)), blob)
            self.store.put(entry_key(driver, version, token), entry)
            log.info("fleet: published %s %s token %s…", driver, version, token.hex()[:12])
        except StoreError as e:
            self._once(f"publishing failed: {e}")

    # --- administration ---------------------------------------------------------------------------------
    def entries(self) -> list[dict]:
        """Every entry of the store: its key, what its manifest says, and whether it verifies."""
        rows = []
        for key in sorted(self.store.keys(f"{PREFIX}entry:")):
            row: dict = {"key": key}
            try:
                raw = self.store.get(key) or b""
                try:  # what it says, before it is believed (ls shows it either way)
                    entry = msgpack.unpackb(raw, raw=False)
                    said = Manifest.decode(entry["manifest"])
                    row.update(driver=said.driver, version=said.version, token=said.token.hex(),
                               signer=fingerprint(entry["key"]), created=said.created,
                               bytes=sum(n for _, n in (*said.model, *said.data)))
                except Exception:
                    pass
                payload, signer = self._verified(raw)
                manifest = Manifest.decode(payload)
                row.update(signer=signer, ok=True, reason="")
                for digest, size in (*manifest.model, *manifest.data):
                    blob = self.store.get(blob_key(digest))
                    if blob is None or len(blob) != size or _sha(blob) != digest:
                        row.update(ok=False, reason=f"blob {digest[:12]}… missing or changed")
                        break
            except (Refused, StoreError) as e:
                row.update(ok=False, reason=str(e))
            rows.append(row)
        return rows

    def prune(self, max_age_s: float | None = None, dry_run: bool = False) -> dict:
        """Drop entries that do not verify (or are older than `max_age_s`), then blobs no entry names."""
        keep: set[str] = set()
        dropped = kept = 0
        for row in self.entries():
            old = max_age_s is not None and row.get("created", 0) < time.time() - max_age_s
            if not row["ok"] or old:
                dropped += 1
                if not dry_run:
                    self.store.delete(row["key"])
                continue
            kept += 1
            manifest = Manifest.decode(msgpack.unpackb(self.store.get(row["key"]), raw=False)["manifest"])
            keep.update(blob_key(d) for d, _ in (*manifest.model, *manifest.data))
        blobs = [k for k in self.store.keys(f"{PREFIX}blob:") if k not in keep]
        claims = [k for k in self.store.keys(f"{PREFIX}claims:") if not self._claims_fresh(k, max_age_s)]
        if not dry_run:
            for k in (*blobs, *claims):
                self.store.delete(k)
        return {"entries_dropped": dropped, "blobs_dropped": len(blobs), "entries_kept": kept,
                "claims_dropped": len(claims)}

    def _claims_fresh(self, key: str, max_age_s: float | None) -> bool:
        """Whether a claims entry verifies and is younger than `max_age_s` (prune keeps only those)."""
        try:
            said = json.loads(self._verified(self.store.get(key) or b"")[0])
            return max_age_s is None or float(said["created"]) >= time.time() - max_age_s
        except (Refused, StoreError, ValueError, KeyError, TypeError):
            return False
