"""The fleet's artifact stores: one small interface, a Redis store (the default) and an S3-compatible one.

A store holds bytes under string keys. It is never trusted: whatever it returns is checked by
`caching.fleet` (signature, hashes, version) before a driver uses it. Every call is bounded by the
store's timeout; any failure (down, slow, full, refused) raises `StoreError` with the reason, which the
fleet tier turns into a miss.
"""
from __future__ import annotations

import urllib.parse
from typing import Iterator, Protocol

#: How long one call to a store may take, by default (a slow store is a miss, never a delay).
DEFAULT_TIMEOUT_S = 0.2


class StoreError(Exception):
    """A store call that failed: why (down, slower than its timeout, full, refused)."""


class Store(Protocol):
    """What the fleet tier needs of a store."""

    url: str

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str) -> Iterator[str]: ...


class RedisStore:
    """A Redis database (`redis://HOST:PORT/DB`) through redis-py, every call bounded by `timeout`."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        import redis
        self.url = url
        self._errors = (redis.RedisError, OSError)
        self._client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                            retry_on_timeout=False)

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except self._errors as e:
            raise StoreError(f"{self.url}: {what} failed: {type(e).__name__}: {e}") from None

    def get(self, key: str) -> bytes | None:
        value = self._call("GET", self._client.get, key)
        if value is not None and not isinstance(value, bytes):
            raise StoreError(f"{self.url}: GET returned {type(value).__name__}, not bytes")
        return value

    def put(self, key: str, value: bytes) -> None:
        self._call("SET", self._client.set, key, value)

    def delete(self, key: str) -> None:
        self._call("DEL", self._client.delete, key)

    def keys(self, prefix: str) -> Iterator[str]:
        for key in self._call("SCAN", lambda: list(self._client.scan_iter(match=prefix + "*", count=1000))):
            yield key.decode() if isinstance(key, bytes) else str(key)


class S3Store:
    """An S3-compatible bucket (`s3://BUCKET/PREFIX`) through boto3 (endpoint from `AWS_ENDPOINT_URL`,
    credentials as boto3 finds them), every call bounded by `timeout`."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError:
            raise StoreError(f"{url}: an s3:// store needs boto3 (pip install boto3)") from None
        parsed = urllib.parse.urlparse(url)
        if not parsed.netloc:
            raise StoreError(f"{url}: the URL names no bucket (s3://BUCKET/PREFIX)")
        self.url = url
        self._bucket, self._prefix = parsed.netloc, parsed.path.lstrip("/")
        config = botocore.config.Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 0})
        self._client = boto3.client("s3", config=config)
        self._errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError)
        self._missing = botocore.exceptions.ClientError

    def _key(self, key: str) -> str:
        return f"{self._prefix.rstrip('/')}/{key}" if self._prefix else key

    def get(self, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=self._bucket, Key=self._key(key))["Body"].read()
        except self._missing as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"{self.url}: GET {key} failed: {e}") from None
        except self._errors as e:
            raise StoreError(f"{self.url}: GET {key} failed: {type(e).__name__}: {e}") from None

    def put(self, key: str, value: bytes) -> None:
        try:
            self._client.put_object(Bucket=self._bucket, Key=self._key(key), Body=value)
        except self._errors as e:
            raise StoreError(f"{self.url}: PUT {key} failed: {type(e).__name__}: {e}") from None

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key(key))
        except self._errors as e:
            raise StoreError(f"{self.url}: DELETE {key} failed: {type(e).__name__}: {e}") from None

    def keys(self, prefix: str) -> Iterator[str]:
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket,
                                                                           Prefix=self._key(prefix))
            strip = len(self._key(""))
            for page in pages:
                for item in page.get("Contents", ()):
                    yield item["Key"][strip:]
        except self._errors as e:
            raise StoreError(f"{self.url}: LIST failed: {type(e).__name__}: {e}") from None


def open_store(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> Store:
    """The store a `NNAPI_FLEET` URL names (StoreError for a scheme none handles)."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in ("redis", "rediss", "unix"):
        return RedisStore(url, timeout)
    if scheme == "s3":
        return S3Store(url, timeout)
    raise StoreError(f"{url}: not a fleet store URL (redis://HOST:PORT/DB or s3://BUCKET/PREFIX)")
