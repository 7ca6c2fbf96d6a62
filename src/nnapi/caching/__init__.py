"""Driver-side compilation caching shared by every driver (C1-C12).

- `registry`: the persistent integrity registry (token -> SHA-256 of the model cache), SQLite,
  keyed by driver name and version (C9).
- `files`: cache-file I/O on the runtime's descriptors: truncate-then-write under an exclusive
  lock, read under a shared lock, access-mode checks (C8, C11).
- `artifacts`: save/load of a driver's model-cache and data-cache blobs with the registry check
  done on the in-memory copy that is then used (C10).
- `engine`: the driver-internal persistent cache used without app caching information (C12).
- `fingerprint`: the content fingerprint of a model (structure and constants) caches key by.
- `ThreadConnections`: SQLite databases of the state directory opened safely by many processes at once
  (the registry, the engine, the runtime's latency record).
"""
from typing import TYPE_CHECKING

from ..lazy import exports

#: Imported on first use (`lazy.exports`): finding the state directory needs neither SQLite nor hashing.
__getattr__ = exports(__name__, {
    "ThreadConnections": "._sqlite", "CacheError": ".artifacts", "load_artifacts": ".artifacts",
    "save_artifacts": ".artifacts", "CachingEngine": ".engine", "model_fingerprint": ".fingerprint",
    "remembered_fingerprints": ".fingerprint", "IntegrityRegistry": ".registry", "state_dir": ".state"})

if TYPE_CHECKING:
    from ._sqlite import ThreadConnections
    from .artifacts import CacheError, load_artifacts, save_artifacts
    from .engine import CachingEngine
    from .fingerprint import model_fingerprint, remembered_fingerprints
    from .registry import IntegrityRegistry
    from .state import state_dir

__all__ = ["CacheError", "load_artifacts", "save_artifacts", "CachingEngine", "IntegrityRegistry", "state_dir",
           "ThreadConnections", "model_fingerprint", "remembered_fingerprints"]
