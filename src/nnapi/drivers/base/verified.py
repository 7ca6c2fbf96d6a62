"""What verified cache content decoded to, for reuse within the process (one registry per driver class).

The integrity registry vouches for a cache's bytes by their SHA-256 (`CompileJob.verified`), and the
digest names the content: what one load decoded of it (a structure, loaded executables, an imported
compiled model) serves every later load of the same digest, for any app. What a preparation holds on
the device (constants) is shared only within the app that loaded or saved it, and only as long as a
prepared model still holds it. A driver keeps what it decoded in `load` and what it wrote in `saved`;
the base's `holds` answers from here.
"""
from __future__ import annotations

import threading
import weakref
from typing import Hashable

from .shared import Lru

#: Decoded contents kept per driver class (the least recently used beyond it are dropped).
CAPACITY = 32


class VerifiedContent:
    """Decoded content by (verified digest, the driver's variant key), and held content by (digest, app)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._decoded: Lru[object] = Lru(capacity)
        self._held: "weakref.WeakValueDictionary[tuple[bytes, int], object]" = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def decoded(self, digest: bytes | None, variant: Hashable = None) -> object | None:
        """What content `digest` decoded to before (under `variant`: e.g. the properties it was compiled
        with), or None."""
        return None if digest is None else self._decoded.get((digest, variant))

    def keep(self, digest: bytes | None, value: object, variant: Hashable = None) -> None:
        """Remember what content `digest` decodes to (nothing without a digest)."""
        if digest is not None:
            self._decoded.put((digest, variant), value)

    def held(self, digest: bytes | None, uid: int) -> object | None:
        """What a live preparation of app `uid` holds of content `digest`, or None."""
        if digest is None:
            return None
        with self._lock:
            return self._held.get((digest, uid))

    def hold(self, digest: bytes | None, uid: int, value: object) -> object:
        """Offer `value` as what app `uid` holds of content `digest` (for as long as something else
        references it); returns the one to use (the one already held, if any)."""
        if digest is None:
            return value
        with self._lock:
            return self._held.setdefault((digest, uid), value)

    def clear(self) -> None:
        self._decoded.clear()
        with self._lock:
            self._held.clear()


_lock = threading.Lock()
_registries: dict[type, VerifiedContent] = {}


def content_of(cls: type) -> VerifiedContent:
    """The registry of driver class `cls` in this process."""
    with _lock:
        registry = _registries.get(cls)
        if registry is None:
            registry = _registries[cls] = VerifiedContent()
        return registry


__all__ = ["CAPACITY", "VerifiedContent", "content_of"]
