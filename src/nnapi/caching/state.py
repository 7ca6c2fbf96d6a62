"""Where the drivers' private state lives (`NNAPI_STATE_DIR`, default `$XDG_STATE_HOME/nnapi` or
`~/.local/state/nnapi`): the integrity registry, calibrations, remembered claims and source digests, the
caching engine, and the runtime's device records. Finding it imports neither SQLite nor hashing."""
from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The drivers' private state directory, created 0700 on first use. OSError when it cannot be
    used (a regular file in its place, no permission): callers turn caching off, never the device."""
    env = os.environ.get("NNAPI_STATE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        path = Path(base) / "nnapi"
    if not os.path.isdir(path):  # (one stat when it is there: asked at every compilation)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.is_dir():
            raise NotADirectoryError(f"state directory {path} is not a directory")
    return path


__all__ = ["state_dir"]
