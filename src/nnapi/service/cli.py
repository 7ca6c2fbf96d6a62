"""`nnapi serve`: host one installed driver in this process, in the foreground, on a Unix socket.

    nnapi serve --driver NAME [--socket PATH] [--state-dir DIR] [--ready-fd FD] [--log-level LEVEL] [--fleet URL]

The socket defaults to `$NNAPI_SERVICE_DIR/NAME.sock`, where apps find it. Logs go to stderr. Once
the socket listens, the service prints `ready SOCKET` on stdout (and writes the same line to
`--ready-fd`, then closes it), so a script or a test can wait for it. SIGTERM or SIGINT stops it
cleanly (connections closed, socket removed). The driver's private state (its integrity
registry) lives in the state directory, created 0700 and owned by the service's user; apps never
get a path into it.

Also here: `served(...)`, which starts `nnapi serve` in a subprocess and waits until it is ready
(tests, benchmarks, `nnapi cts --service`).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..installed import entry_points
from .discovery import ENV, default_socket

log = logging.getLogger("nnapi.service")


def add_parser(sub) -> None:
    """Register `serve` on the `nnapi` command's subparsers."""
    p = sub.add_parser("serve", help="host one driver in its own process, on a Unix socket",
                       description="Host one installed driver (an `nnapi.drivers` entry point) in this process. "
                                   f"Apps find it through ${ENV}.")
    p.add_argument("--driver", required=True, help="the driver to host (a name from `nnapi devices`)")
    p.add_argument("--socket", help=f"the socket to listen on (default ${ENV}/NAME.sock)")
    p.add_argument("--state-dir", help="the driver's private state directory (integrity registry); created 0700 "
                                       "(default: NNAPI_STATE_DIR, else ~/.local/state/nnapi)")
    p.add_argument("--ready-fd", type=int, help="also write 'ready SOCKET' to this descriptor, then close it")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="stderr log level (default INFO)")
    p.add_argument("--watch-pid", type=int, help="stop when the process with this pid exits (tools that start a "
                                                 "service for one run)")
    p.add_argument("--fleet", metavar="URL", help="serve the driver with a fleet tier: this store (as NNAPI_FLEET; "
                                                  "NNAPI_FLEET_TRUST and NNAPI_FLEET_KEY as in the environment)")
    p.set_defaults(func=main)


def secure_state_dir(path: str | None) -> str:
    """The state directory, created if needed, owned by this user and closed to everyone else (0700).

    OSError when it is not a directory or belongs to another user (never handed to a foreign one)."""
    if path is None:
        from ..caching import state_dir
        path = str(state_dir())
    path = os.path.abspath(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"state directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise PermissionError(f"state directory {path} belongs to uid {st.st_uid}, not to this service's "
                              f"uid {os.geteuid()}")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def installed_drivers() -> dict:
    """The installed drivers' `nnapi.drivers` entry points, by name (none loaded)."""
    return {ep.name: ep for ep in entry_points("nnapi.drivers")}


def load_driver(name: str):
    """A new device of the installed driver `name` (its `nnapi.drivers` entry point)."""
    found = installed_drivers()
    if name not in found:
        raise LookupError(f"no driver named {name!r} is installed (installed: {', '.join(sorted(found)) or 'none'})")
    return found[name].load()()


def _socket_dir(path: str) -> None:
    """Create the socket's directory reachable by apps of every user (0755), if it does not exist."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)


def main(args: argparse.Namespace) -> int:
    from .server import Service

    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level),
                        format="%(asctime)s nnapi serve[%(process)d] %(levelname)s %(message)s")
    try:
        path = os.path.abspath(args.socket) if args.socket else default_socket(args.driver)
    except ValueError as e:
        print(f"nnapi serve: {e}", file=sys.stderr)
        return 2
    os.environ.pop(ENV, None)  # inside the service every driver is in-process
    if args.fleet:
        os.environ["NNAPI_FLEET"] = args.fleet
    os.umask(0o077)            # whatever the driver writes is private to the service's user
    try:
        state = secure_state_dir(args.state_dir)
        os.environ["NNAPI_STATE_DIR"] = state
        driver = load_driver(args.driver)
        _socket_dir(path)
        service = Service(driver, path)
        service.start()
        if args.watch_pid is not None:
            service.stop_when_exits(args.watch_pid)
    except (OSError, LookupError) as e:
        print(f"nnapi serve: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a driver that fails to start
        log.exception("the %s driver failed to start", args.driver)
        print(f"nnapi serve: the {args.driver} driver failed to start: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: service.stop())
    log.info("state directory %s", state)
    line = f"ready {path}\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    if args.ready_fd is not None:
        try:
            os.write(args.ready_fd, line.encode())
            os.close(args.ready_fd)
        except OSError as e:
            log.warning("cannot write the ready line to fd %d: %s", args.ready_fd, e)
    service.serve_forever()
    return 0


# --- starting a service from another process ---------------------------------------------------------
@dataclass
class Served:
    """A running `nnapi serve` subprocess."""

    driver: str
    socket: str
    state_dir: str
    process: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL (a crash, as tests need one) and reap it."""
        self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait; SIGKILL when it does not stop in time. Returns its exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start(driver: str, socket: str, state_dir: str, *, env: dict | None = None, timeout: float = 120.0,
          log_level: str = "WARNING", extra: Sequence[str] = ()) -> Served:
    """Start `nnapi serve` for `driver` on `socket` and wait for its ready line (RuntimeError when it
    exits or stays silent for `timeout` seconds; its stderr is passed through). It stops by itself if
    this process dies."""
    command = [sys.executable, "-m", "nnapi.cli", "serve", "--driver", driver, "--socket", socket,
               "--state-dir", state_dir, "--log-level", log_level, "--watch-pid", str(os.getpid()), *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"nnapi serve --driver {driver} was not ready within {timeout:.0f} s")
            poller = select.poll()  # (any descriptor number)
            poller.register(process.stdout, select.POLLIN | select.POLLHUP)
            if not poller.poll(max(1, int(left * 1000))):
                continue
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"nnapi serve --driver {driver} exited with status {process.wait()} before "
                                   "it was ready")
            if line.startswith("ready "):
                process.stdout.close()
                return Served(driver, line[6:].strip(), state_dir, process)
    except BaseException:
        if process.poll() is None:
            process.kill()
        process.wait()
        raise


@contextlib.contextmanager
def served(drivers: Sequence[str], *, state_dir: str | None = None, log_level: str = "WARNING",
           timeout: float = 120.0) -> Iterator[dict[str, Served]]:
    """Serve each driver from a fresh temporary service directory, set as NNAPI_SERVICE_DIR for this
    process while inside; every service is stopped (and the directory removed) on the way out."""
    directory = tempfile.mkdtemp(prefix="nnapi-services-")
    os.chmod(directory, 0o755)
    state = state_dir or os.path.join(directory, "state")
    old = os.environ.get(ENV)
    services: dict[str, Served] = {}
    try:
        for name in drivers:
            services[name] = start(name, default_socket(name, directory), state, timeout=timeout,
                                   log_level=log_level)
        os.environ[ENV] = directory
        yield services
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
        for s in services.values():
            s.stop()
        shutil.rmtree(directory, ignore_errors=True)

