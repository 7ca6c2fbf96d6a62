"""Where services live: sockets `<name>.sock` in the service directory (`NNAPI_SERVICE_DIR`)."""
from __future__ import annotations

import os
import stat

ENV = "NNAPI_SERVICE_DIR"
SUFFIX = ".sock"


def service_dir() -> str | None:
    """The service directory from the environment, or None (no services: drivers run in-process)."""
    return os.environ.get(ENV) or None


def default_socket(name: str, directory: str | None = None) -> str:
    """`<directory>/<name>.sock` (the directory defaults to `NNAPI_SERVICE_DIR`); ValueError without one."""
    directory = directory or service_dir()
    if not directory:
        raise ValueError(f"no socket path: give --socket or set {ENV}")
    return os.path.join(os.path.abspath(directory), name + SUFFIX)


def sockets(directory: str) -> list[str]:
    """The service sockets in `directory`, sorted by name (nothing when it does not exist)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                found.append(os.path.abspath(path))
        except OSError:
            continue
    return found


def socket_key(path: str) -> tuple[int, int, int] | None:
    """What changes when a service binds its socket anew (device, inode, change time), None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns
