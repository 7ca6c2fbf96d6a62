"""The driver's side of `host`: the process in which the kit hosts the driver under test.

    python -m nnapi.conformance.vts.guest --driver SPEC --socket PATH --incidents FILE --ready-fd FD
                                          [--state-dir DIR] [--watch-pid PID] [--client-file FILE]
                                          [--checks-socket PATH] [--host-dir DIR]

loads the driver (`load`: an installed `nnapi.drivers` entry point, or `module:factory`) and serves it as
`nnapi serve` does (the service's `Service` on a Unix socket), wrapped in `Guarded`: a plain exception of
the driver comes back marked (`core.HOST_CRASH`), and so does one the driver base swallowed in
`supported()` (`core.HOST_CLAIM`); calls run as the client the kit plays while the client file exists
(M8); the kit's `Check.inside` checks run here, on the driver itself (`_serve_checks`); a fork of the
driver is written to the incident file; faulthandler writes a crash's stack (and, on SIGUSR1, every
thread's) to stderr, which the kit keeps.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import functools
import importlib
import inspect
import json
import os
import shutil
import signal
import sys
import threading
import traceback
from typing import Any, Callable

from ...hal import (ErrorStatus, IBuffer, IBurst, IDevice, IExecution, IFencedExecutionCallback, IPreparedModel,
                   NnError)
from .core import HOST_CLAIM, HOST_CRASH, claim_failure
from .leftovers import become_subreaper


@functools.lru_cache(maxsize=256)
def _takes_client(fn: Callable[..., Any]) -> bool:
    """Whether a driver function takes the service's `client` keyword (drivers without QoS need not)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "client" or p.kind == p.VAR_KEYWORD for p in params)


#: The file through which the kit asks the host to run calls as another client (`Host.impersonate`).
_client_file: str | None = None


def _as_client() -> contextlib.AbstractContextManager:
    """The identity the kit plays while it checks M8 (`uid pid` in the client file), else the caller's."""
    from ...hal.identity import calling_client
    if _client_file is None:
        return contextlib.nullcontext()
    try:
        with open(_client_file, encoding="ascii") as f:
            uid, pid = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        return contextlib.nullcontext()
    return calling_client(uid, pid)


def _guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)`; a plain exception (or SystemExit) of the driver becomes GENERAL_FAILURE marked
    `HOST_CRASH`; the service's `client` keyword reaches only a driver method that takes it."""
    if "client" in kwargs and not _takes_client(getattr(fn, "__func__", fn)):
        kwargs.pop("client")
    try:
        with _as_client():
            return fn(*args, **kwargs)
    except NnError:
        raise
    except (Exception, SystemExit) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"{HOST_CRASH}{type(e).__name__}: {e}") from None


class GuardedFenced(IFencedExecutionCallback):
    """The driver's fenced-execution callback, its exceptions marked."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def get_execution_info(self):
        return _guarded(self.inner.get_execution_info)


class GuardedBurst(IBurst):
    """The driver's burst, its exceptions marked."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def execute_synchronously(self, *args: Any, **kwargs: Any):
        return _guarded(self.inner.execute_synchronously, *args, **kwargs)

    def release_memory_resource(self, token: int):
        return _guarded(self.inner.release_memory_resource, token)


class GuardedExecution(IExecution):
    """The driver's reusable execution, its exceptions marked."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def compute(self, deadline: int | None = None):
        return _guarded(self.inner.compute, deadline)


class GuardedBuffer(IBuffer):
    """The driver's buffer, its exceptions marked (released with it: the service calls `release`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def copy_to(self, dst):
        return _guarded(self.inner.copy_to, dst)

    def copy_from(self, src, dimensions):
        return _guarded(self.inner.copy_from, src, dimensions)

    def release(self) -> None:
        release = getattr(self.inner, "release", None)
        if callable(release):
            _guarded(release)


class GuardedPrepared(IPreparedModel):
    """The driver's prepared model, its exceptions marked, and what it returns guarded in turn."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def execute(self, *args: Any, **kwargs: Any):
        return _guarded(self.inner.execute, *args, **kwargs)

    def execute_synchronously(self, *args: Any, **kwargs: Any):
        return _guarded(self.inner.execute_synchronously, *args, **kwargs)

    def execute_fenced(self, *args: Any, **kwargs: Any):
        value = _guarded(self.inner.execute_fenced, *args, **kwargs)
        if isinstance(value, (tuple, list)) and len(value) == 2 and value[1] is not None:
            return value[0], GuardedFenced(value[1])
        return value

    def create_reusable_execution(self, *args: Any, **kwargs: Any):
        create = getattr(self.inner, "create_reusable_execution", None)
        if create is None:  # (a driver that predates it: one execution per computation)
            return IPreparedModel.create_reusable_execution(self, *args, **kwargs)
        execution = _guarded(create, *args, **kwargs)
        return GuardedExecution(execution) if execution is not None else None

    def configure_execution_burst(self):
        burst = _guarded(self.inner.configure_execution_burst)
        return GuardedBurst(burst) if burst is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _prepared(value: Any) -> Any:
    return GuardedPrepared(value) if value is not None and not isinstance(value, GuardedPrepared) else value


class Guarded(IDevice):
    """The driver under test as the host serves it (see the module doc); anything else is its own."""

    def __init__(self, inner: IDevice) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:   # (its scheduler, for the service)
        return getattr(self.inner, name)

    def get_info(self):
        return _guarded(self.inner.get_info)

    def get_capabilities(self):
        return _guarded(self.inner.get_capabilities)

    def get_number_of_cache_files_needed(self):
        return _guarded(self.inner.get_number_of_cache_files_needed)

    def get_supported_operations(self, model):
        flags = _guarded(self.inner.get_supported_operations, model)
        problem = claim_failure(self.inner, model, flags)
        if problem:
            raise NnError(ErrorStatus.GENERAL_FAILURE, HOST_CLAIM + problem)
        return flags

    def prepare_model(self, *args: Any, **kwargs: Any):
        return _prepared(_guarded(self.inner.prepare_model, *args, **kwargs))

    def prepare_model_from_cache(self, *args: Any, **kwargs: Any):
        return _prepared(_guarded(self.inner.prepare_model_from_cache, *args, **kwargs))

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        models = [m.inner if isinstance(m, GuardedPrepared) else m for m in prepared_models] \
            if isinstance(prepared_models, (list, tuple)) else prepared_models
        value = _guarded(self.inner.allocate, desc, models, input_roles, output_roles)
        if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] is not None:
            return GuardedBuffer(value[0]), value[1]
        return value


def load(spec: str) -> IDevice:
    """The driver `spec` names: `module:factory` (a class or callable returning an IDevice), else an
    installed `nnapi.drivers` entry point."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        target: Any = importlib.import_module(module)
        for part in attr.split("."):
            target = getattr(target, part)
        return target()
    from ...service.cli import load_driver
    return load_driver(spec)


def _record(path: str, incident: dict[str, Any]) -> None:
    """Append one incident (a JSON line) to the kit's incident file."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(incident) + "\n")
    except OSError:
        pass


def _forking(path: str) -> None:
    """Just before the driver forks this process: say so, with where (in this process, so the incident is
    written before the call returns; the child may be ended before it runs a line), then let it fork."""
    frames = [f for f in traceback.extract_stack()[:-1]
              if "/nnapi/" not in f.filename and "threading" not in f.filename]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in reversed(frames[-2:]))
    _record(path, {"kind": "fork", "parent": os.getpid(), "where": where or "?"})


def _serve_checks(path: str, driver: IDevice) -> None:
    """Run the kit's `Check.inside` checks here, on the driver itself, for the kit: one JSON line asks
    (id, suite, quick, timeout, vectors), one JSON line answers (status, message, detail)."""
    import socket
    from pathlib import Path
    from . import collect, device_for
    from .core import Kit, Options, run_checks
    kits: dict[tuple, Kit] = {}

    def answer(conn: socket.socket) -> None:
        with conn, conn.makefile("rw", encoding="utf-8") as f:
            ask = json.loads(f.readline())
            key = (ask["quick"], ask["timeout"], ask["vectors"])
            if key not in kits:
                kits[key] = Kit(device_for(driver), Options(quick=ask["quick"], timeout=ask["timeout"],
                                                            vectors=Path(ask["vectors"]) if ask["vectors"] else None))
            kit = kits[key]
            found = [c for c in collect(kit, [ask["suite"]]) if c.id == ask["id"]]
            if not found:
                result = {"status": "failed", "message": f"the driver's process has no check {ask['id']}", "detail": ""}
            else:
                (r,) = run_checks(kit, found)
                result = {"status": r.status, "message": r.message, "detail": r.detail}
            f.write(json.dumps(result) + "\n")

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)

    def loop() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=answer, args=(conn,), name="nnapi-vts-inside", daemon=True).start()

    threading.Thread(target=loop, name="nnapi-vts-checks", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    """Host one driver for the kit (see the module doc); `ready SOCKET` goes to `--ready-fd`."""
    from ...service.cli import secure_state_dir
    from ...service.discovery import ENV
    from ...service.server import Service
    p = argparse.ArgumentParser(prog="python -m nnapi.conformance.vts.guest")
    p.add_argument("--driver", required=True)
    p.add_argument("--socket", required=True)
    p.add_argument("--state-dir")
    p.add_argument("--incidents", required=True)
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--watch-pid", type=int)
    p.add_argument("--client-file")
    p.add_argument("--checks-socket")
    p.add_argument("--host-dir", help="the kit's folder for this driver: removed here when the kit ended first")
    args = p.parse_args(argv)
    global _client_file
    _client_file = args.client_file
    os.environ.pop(ENV, None)
    os.umask(0o077)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)   # the kit asks where it hangs
    become_subreaper()   # (what the driver detaches from its tree stays in it, for the kit to find)
    os.register_at_fork(before=lambda: _forking(args.incidents))
    try:
        os.environ["NNAPI_STATE_DIR"] = secure_state_dir(args.state_dir)
        driver = load(args.driver)
        service = Service(Guarded(driver), args.socket)
        service.start()
        if args.checks_socket:
            _serve_checks(args.checks_socket, driver)
        if args.watch_pid is not None:
            service.stop_when_exits(args.watch_pid)
    except Exception as e:
        traceback.print_exc()
        print(f"the driver {args.driver} failed to start: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: service.stop())
    os.write(args.ready_fd, f"ready {args.socket}\n".encode())
    os.close(args.ready_fd)
    service.serve_forever()
    if args.host_dir and args.watch_pid is not None and not _alive(args.watch_pid):
        shutil.rmtree(args.host_dir, ignore_errors=True)   # (a kit killed: nobody else will)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # (not sys.exit: a call stuck in the driver must not keep the process alive when the kit is done)


if __name__ == "__main__":
    sys.exit(main())
