"""The driver under test in a process of its own, so the kit survives its subject (the default of
`nnapi vts`; `--in-process` runs it in the kit's own process).

`Host` starts `python -m nnapi.conformance.vts.guest`, which serves the driver as `nnapi serve` does
(see `guest`); the kit reaches it through the service's client proxy, so every check runs unchanged.
Around each check (`Host` is the kit's `core.Supervisor`) the kit sees what only another process can:
the driver's process ending (`os._exit`, a crash: its exit status or signal and the crashing frames
faulthandler wrote) fails the check, the kind of call that was running then fails fast afterwards, and
the driver is started again (at most `RESTARTS` times); a fork is a failure; a process the driver left
behind (`leftovers`: its descendants, its session, what carries its mark) is reported and ended.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

from ...hal import NnError
from . import leftovers
from .core import CheckResult, Kit, Supervisor
from .guest import load

__all__ = ["Host", "HostError", "load"]

#: How many times the kit starts the driver again after its process ended.
RESTARTS = 5
#: Seconds the driver's process may take to be ready (its first creation may calibrate it).
START_TIMEOUT_S = 120.0
#: Calls of the kit stuck in the driver after which the kit starts it again (the service refuses a
#: connection's calls beyond 64 in flight, so every later check would fail on that), at most `RENEWALS` times.
STUCK_CALLS = 48
RENEWALS = 10
#: Seconds between two scans of every process for those of the driver's (`leftovers.find`): its
#: descendants are looked for after each check, a process that left its tree within this.
SCAN_EVERY_S = 1.0


class HostError(RuntimeError):
    """The driver's process could not be started (its stderr's tail says why)."""


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


class Host(Supervisor):
    """The driver's process as the kit sees it (see the module doc): `device` is its runtime `Device`."""

    def __init__(self, spec: str, state_dir: str | None = None) -> None:
        self.spec = spec
        self.state_dir = state_dir or os.environ.get("NNAPI_STATE_DIR") or None
        self.dir = tempfile.mkdtemp(prefix="nnapi-vts-host-")
        self.socket = os.path.join(self.dir, "driver.sock")
        self.incidents = os.path.join(self.dir, "incidents.jsonl")
        self.log = os.path.join(self.dir, "driver.log")
        self.client_file = os.path.join(self.dir, "client")
        self.checks_socket = os.path.join(self.dir, "checks.sock")
        self._read = 0
        self.process: subprocess.Popen | None = None
        self.deaths: list[str] = []
        #: Kinds of call (`core._kind`) during which the driver's process ended -> where and how.
        self.fatal: dict[str, str] = {}
        #: Driver methods that forked its process (`_incidents`) -> why they are not called again.
        self.forked: dict[str, str] = {}
        self.last_kind = ""
        #: What happened outside any check (at the end of the run), for the report.
        self.notes: list[str] = []
        self.starts = 0
        #: Why the kit started the driver again though it had not died (its calls were stuck in it).
        self.renewals: list[str] = []
        self._stuck_base = 0
        #: The mark of the driver's processes (`leftovers.MARK`) and the start time of the first of them.
        self.token = os.path.basename(self.dir)
        self.since = 0
        self._scanned = 0.0
        self.device: Any = None
        self.start()

    # --- the process ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the driver's process and connect to it (HostError when it does not become ready)."""
        from ...runtime.devices import SERVICE
        from ...service import connect
        from . import device_for
        for path in (self.socket, self.checks_socket):
            if os.path.exists(path):
                os.unlink(path)
        r, w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
        env[leftovers.MARK] = self.token
        command = [sys.executable, "-m", "nnapi.conformance.vts.guest", "--driver", self.spec, "--socket", self.socket,
                   "--incidents", self.incidents, "--ready-fd", str(w), "--watch-pid", str(os.getpid()),
                   "--client-file", self.client_file, "--checks-socket", self.checks_socket, "--host-dir", self.dir]
        if self.state_dir:
            command += ["--state-dir", self.state_dir]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                            pass_fds=(w,), start_new_session=True)
        os.close(w)
        self.starts += 1
        self.since = self.since or leftovers.start_time(self.process.pid)
        try:
            line = self._ready(r)
        finally:
            os.close(r)
        if not line.startswith("ready "):
            code = self.process.poll()
            self.stop()
            raise HostError(f"the driver {self.spec} did not start in a process of its own"
                            + (f" (it {_exit_text(code)})" if code is not None else "") + f": {self.tail(1)}")
        driver = connect(self.socket, timeout=30.0)
        device = device_for(driver)
        device.location, device.pid, device.socket = SERVICE, self.process.pid, self.socket
        self.device = device

    def _ready(self, fd: int) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        data = b""
        while b"\n" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                data += chunk
            elif self.process is not None and self.process.poll() is not None:
                break
        return data.decode(errors="replace")

    def tail(self, lines: int = 6) -> str:
        """What the driver's stderr says last: the error and the crashing thread's innermost frames when
        faulthandler wrote a crash, else its last lines."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
        fatal = max((i for i, ln in enumerate(kept) if ln.startswith("Fatal Python error")), default=None)
        if fatal is not None:
            current = next((i for i in range(fatal, len(kept)) if kept[i].startswith("Current thread")), None)
            frames = [ln for ln in kept[current + 1:current + 1 + lines] if ln.startswith("File")] \
                if current is not None else []
            return " | ".join([kept[fatal], *frames[:3]])
        return " | ".join(kept[-lines:])

    @property
    def where(self) -> str:
        return f"in a process of its own, pid {self.process.pid if self.process else '?'}"

    def exit_status(self, wait: float = 0.0) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(wait) if wait else self.process.poll()
        except subprocess.TimeoutExpired:
            return None

    @contextlib.contextmanager
    def impersonate(self, uid: int, pid: int) -> Iterator[None]:
        """While inside, the host runs every driver call as client (uid, pid), as `calling_client` does
        in-process: the kit plays another client of the driver (M8)."""
        tmp = f"{self.client_file}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{int(uid)} {int(pid)}")
        os.replace(tmp, self.client_file)
        try:
            yield
        finally:
            os.unlink(self.client_file)

    def inside(self, kit: Kit, check: Any) -> tuple[str, str, str] | None:
        """Run `check` in the driver's process, on the driver itself (`guest._serve_checks`), within the
        kit's hang budget; a failure when that process cannot be reached or does not answer."""
        import socket
        kind = "a check run in the driver's process"
        if kind in self.fatal:
            return "failed", self.fatal[kind], ""
        self.last_kind = kind
        limit, note = kit.hangs.limit(kind)
        ask = {"id": check.id, "suite": check.suite, "quick": kit.options.quick, "timeout": kit.options.timeout,
               "vectors": str(kit.options.vectors) if kit.options.vectors else None}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(limit)
                conn.connect(self.checks_socket)
                conn.sendall((json.dumps(ask) + "\n").encode())
                with conn.makefile("r", encoding="utf-8") as f:
                    answer = json.loads(f.readline())
            return answer["status"], answer["message"], answer.get("detail", "")
        except socket.timeout:
            kit.hangs.hung(kind, kind, check.id, limit)
            return "failed", f"run in the driver's process, the check did not finish within {limit:g} s{note}", ""
        except (OSError, ValueError, KeyError) as e:
            self.exit_status(wait=5.0)   # (a process that ended while it ran the check: `after` reports it)
            return "failed", f"the check could not be run in the driver's process: {type(e).__name__}: {e}", ""

    # --- around each check -----------------------------------------------------------------------------
    def refuse(self, kind: str) -> str | None:
        """Called before each driver call: a reason not to make it (that kind ended the process before)."""
        self.last_kind = kind
        return self.fatal.get(kind) or self.forked.get(kind.rpartition(".")[2])

    def before(self, kit: Kit, check: Any) -> str | None:
        if self.device is None:
            return (f"not run: the driver's process ended {len(self.deaths)} times ({'; '.join(self.deaths[-2:])}) "
                    f"and is not started again")
        return None

    def after(self, kit: Kit, result: CheckResult) -> CheckResult:
        driver = getattr(self.device, "driver", None) if self.device is not None else None
        code = self.exit_status()
        if code is None and driver is not None and not getattr(driver, "alive", True):
            code = self.exit_status(wait=5.0)   # its connection broke: it is ending
        died = code is not None and self.device is not None
        problems = self._incidents(result.id) + self._left_behind(scan=died)   # (what outlived it, too)
        if died:
            how, where = _exit_text(code), self.tail(6)
            self.deaths.append(f"it {how} in {result.id}")
            if self.last_kind:
                self.fatal.setdefault(self.last_kind, f"not called: the driver's process {how} during a call of "
                                                      f"this kind in {result.id}")
            problems.insert(0, f"the driver's process {how} during this check (a driver must never end its process)"
                            + (f"; its stderr: {where}" if where else ""))
            self._restart(kit)
        elif self.device is not None and kit.abandoned - self._stuck_base >= STUCK_CALLS \
                and len(self.renewals) < RENEWALS:
            self.renewals.append(f"after {result.id}: {kit.abandoned - self._stuck_base} calls stuck in it")
            self._stuck_base = kit.abandoned
            self.stop(grace=1.0)   # (stuck in the driver, it would not end soon by itself)
            self._restart(kit)
        if not problems:
            return result
        message = "; ".join(problems)
        if result.status == "failed" and result.message:
            message += f" (the check said: {result.message})"
        return CheckResult(result.id, result.suite, result.behaviour, "failed", message, result.seconds, result.detail)

    def _restart(self, kit: Kit) -> None:
        self.device = None
        if len(self.deaths) > RESTARTS:
            return
        try:
            self.start()
        except (HostError, NnError, OSError) as e:
            self.deaths.append(f"not started again: {e}")
            return
        kit.replace_device(self.device)

    def _incidents(self, check: str) -> list[str]:
        """The forks the driver's process wrote since the last look (`guest._forked`); the driver method
        that forked is then not called again (`forked`: every later call would fork too)."""
        try:
            with open(self.incidents, encoding="utf-8") as f:
                f.seek(self._read)
                text = f.read()
                self._read = f.tell()
        except OSError:
            return []
        found = []
        guest = self.process.pid if self.process is not None else 0
        forks = [c for c in leftovers.children(guest) if leftovers.cmdline(c) == leftovers.cmdline(guest)]
        for line in text.splitlines():
            try:
                incident = json.loads(line)
            except ValueError:
                continue
            if incident.get("kind") == "fork":
                where = incident.get("where") or "?"
                pids = ", ".join(map(str, forks)) or "ended already"
                found.append(f"the driver forked its process (child pid {pids}, at {where}): a driver never forks "
                             "the process that hosts it")
                method = where.split(" <- ")[0].rpartition(" in ")[2]
                if method and method != "?":
                    self.forked.setdefault(method, f"not called: the driver forked its process in {method} during "
                                                   f"{check} (a driver never forks the process that hosts it)")
        return found

    def _left_behind(self, scan: bool = False) -> list[str]:
        """Processes of the driver's other than its own (`leftovers.find`), ended; what to report. Its
        descendants each time; every process (its session, its mark) when `scan` or `SCAN_EVERY_S` passed."""
        if self.process is None:
            return []
        now = time.monotonic()
        scan = scan or now - self._scanned >= SCAN_EVERY_S
        if scan:
            self._scanned = now
        pids = leftovers.find(self.process.pid, self.token, self.since, scan)
        if not pids:
            return []
        found = [f"pid {pid} ({leftovers.cmdline(pid)})" for pid in pids]
        leftovers.end(pids)
        return [f"the driver left {'a process' if len(found) == 1 else f'{len(found)} processes'} behind: "
                f"{', '.join(found)} (ended by the kit)"]

    def stop(self, grace: float = 10.0) -> None:
        """End the driver's process (SIGTERM, then SIGKILL after `grace` seconds) and what it left behind
        (before, and what outlived it); bounded."""
        if self.device is not None:
            close = getattr(self.device.driver, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    pass
        if self.process is None:
            return
        if self.process.poll() is None:
            self.notes.extend(self._left_behind(scan=True))
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(10.0)
        self.notes.extend(self._left_behind(scan=True))

    def close(self) -> None:
        self.stop()
        self.device = None
        shutil.rmtree(self.dir, ignore_errors=True)
