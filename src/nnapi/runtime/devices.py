"""Device discovery: every driver installed in the `nnapi.drivers` entry-point group becomes a `Device`,
and so does every driver served by `nnapi serve` in the service directory (`NNAPI_SERVICE_DIR`).

A service's device takes the place of the in-process driver of the same name (on Android the driver
is always the service); without a service directory every driver runs in-process. This is the one
place of the runtime that knows services exist: the rest uses their `IDevice` proxies like any driver.

A served device whose service dies is marked dead (its calls fail with DEVICE_UNAVAILABLE). The
default device list then leaves it out and always keeps an in-process reference driver, so the
next compilation runs there; naming the dead device explicitly (`find_device`) is the error
UNAVAILABLE_DEVICE. Each `devices()` call reconnects a dead device whose service is back (a restarted service
keeps its state directory, so caches written before the crash are hits).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points

from ..hal import Capabilities, DeviceType, IDevice, MAX_NUMBER_OF_CACHE_FILES

IN_PROCESS, SERVICE = "in-process", "service"


@dataclass(eq=False)
class Device:
    """One available device: its driver interface plus what it reported once at discovery, and where
    the driver lives (in this process, or a service: its pid and socket)."""

    name: str
    version: str
    type: DeviceType
    feature_level: int
    capabilities: Capabilities
    cache_files: tuple[int, int]
    driver: IDevice
    location: str = IN_PROCESS
    pid: int | None = None
    socket: str | None = None
    #: Set when the service behind it died: its calls fail with DEVICE_UNAVAILABLE.
    dead: bool = False

    @property
    def supports_caching(self) -> bool:
        return self.cache_files[0] > 0 or self.cache_files[1] > 0

    @property
    def where(self) -> str:
        """"in-process", or "service pid N" (and "dead" once its service is gone)."""
        if self.location == IN_PROCESS:
            return IN_PROCESS
        return f"service pid {self.pid}" + (" (dead)" if self.dead else "")

    def supported_operations(self, model) -> list[bool]:
        """Which operations of a finished `Model`'s main graph this device can run (BAD_DATA if it rejects it)."""
        from ..hal import ErrorStatus, NnError, ResultCode
        try:
            return list(self.driver.get_supported_operations(model.to_hal()))
        except NnError as e:
            if e.status == ErrorStatus.INVALID_ARGUMENT:
                raise NnError(ResultCode.BAD_DATA, f"{self.name}: {e.message}") from None
            raise

    def __repr__(self) -> str:
        where = "" if self.location == IN_PROCESS else f", {self.where}"
        return f"Device(name={self.name!r}, version={self.version!r}, type={self.type.name}{where})"


_lock = threading.RLock()
_local: dict[str, Device | None] = {}   # in-process devices by entry-point name (None: broken plugin)
_registered: list[Device] = []          # register_device, listed first
_served: dict[str, Device] = {}         # socket path -> device (alive or dead)
_unanswered: dict[str, tuple] = {}      # socket path -> socket_key of a socket that did not answer
_dead: dict[str, Device] = {}           # name -> served device found dead at the last look


def _make(driver: IDevice, **where) -> Device | None:
    info = driver.get_info()
    n_model, n_data = driver.get_number_of_cache_files_needed()
    if n_model > MAX_NUMBER_OF_CACHE_FILES or n_data > MAX_NUMBER_OF_CACHE_FILES:
        return None  # Android drops such devices
    return Device(info.name, info.version, info.type, info.feature_level, driver.get_capabilities(),
                  (n_model, n_data), driver, **where)


_entry_points: list | None = None       # the `nnapi.drivers` entry points, read once per process


def _in_process(skip: set[str]) -> list[Device]:
    """The installed drivers, created on first need, except those named in `skip` (served ones)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = sorted(entry_points(group="nnapi.drivers"), key=lambda e: e.name)
    found = []
    for ep in _entry_points:
        if ep.name in skip:
            continue
        if ep.name not in _local:
            try:
                _local[ep.name] = _make(ep.load()())
            except Exception:  # a broken plugin must not take the runtime down
                _local[ep.name] = None
        dev = _local[ep.name]
        if dev is not None and dev.name not in skip:
            found.append(dev)
    return found


def _connect(path: str) -> Device | None:
    """The device of the service on `path`, or None when nothing answers there."""
    from ..hal import NnError
    from ..service import connect
    try:
        driver = connect(path, timeout=5.0)
    except NnError:
        return None
    try:
        dev = _make(driver, location=SERVICE, pid=driver.pid, socket=path)
    except Exception:
        dev = None
    if dev is None:
        driver.close()
        return None
    driver.on_death(lambda: setattr(dev, "dead", True))
    return dev


def _services() -> tuple[list[Device], dict[str, Device]]:
    """Live served devices of the service directory (dead ones reconnected when their service is back),
    and the served devices that are dead, by name."""
    from ..service import service_dir, sockets
    from ..service.discovery import socket_key
    directory = service_dir()
    if not directory:
        return [], {}
    live: list[Device] = []
    dead: dict[str, Device] = {}
    for path in sockets(directory):
        dev = _served.get(path)
        if dev is not None and dev.dead:
            fresh = _connect(path)
            if fresh is None:
                dead.setdefault(dev.name, dev)
                continue
            _served[path] = dev = fresh
        if dev is None:
            key = socket_key(path)
            if _unanswered.get(path) == key:
                continue
            dev = _connect(path)
            if dev is None:
                _unanswered[path] = key
                continue
            _unanswered.pop(path, None)
            _served[path] = dev
        if all(d.name != dev.name for d in live):
            live.append(dev)
    return live, {name: d for name, d in dead.items() if all(name != f.name for f in live)}


def devices() -> list[Device]:
    """All devices; the reference device comes last (the fallback). In-process drivers are found once
    per process; services are looked up in `NNAPI_SERVICE_DIR` at every call (see the module doc)."""
    with _lock:
        served, dead = _services()
        _dead.clear()
        _dead.update(dead)
        names = {d.name for d in served}
        # A dead served driver is not replaced by its in-process twin, except the reference driver:
        # the default list always keeps one to fall back on.
        local = _in_process(names | (set(dead) - {"reference"}))
        found = [d for d in _registered if d.name not in names]
        for d in [*served, *local]:
            if all(d.name != f.name for f in found):
                found.append(d)
        head = [d for d in found if d in _registered]
        rest = sorted((d for d in found if d not in _registered), key=lambda d: d.name)
        result = head + rest
        result.sort(key=lambda d: d.name == "reference")
        return result


def register_device(driver: IDevice) -> Device:
    """Add a driver at run time (tests, in-process plugins); it joins the list before the reference device."""
    dev = _make(driver)
    if dev is None:
        raise ValueError("driver asks for too many cache files")
    with _lock:
        _registered[:] = [d for d in _registered if d.name != dev.name]
        _registered.insert(0, dev)
    return dev


def unregister_device(name: str) -> None:
    """Take back a device added with `register_device` (the installed driver of that name, if any,
    is listed again)."""
    with _lock:
        _registered[:] = [d for d in _registered if d.name != name]


def find_device(name: str) -> Device:
    """The device called `name`. UNAVAILABLE_DEVICE when it is served and its service died (and is not
    back): an explicit device list gets the error rather than another driver."""
    from ..hal import NnError, ResultCode
    found = devices()
    with _lock:
        dead = _dead.get(name)
    if dead is not None:
        raise NnError(ResultCode.UNAVAILABLE_DEVICE, f"device {name}: its service (pid {dead.pid}, {dead.socket}) "
                                                     "died and has not come back")
    for d in found:
        if d.name == name:
            return d
    raise NnError(ResultCode.BAD_DATA, f"no device named {name!r} (available: {', '.join(d.name for d in found)})")


def _forget_services_in_child() -> None:
    """A forked child connects to services itself (with its own credentials)."""
    global _lock
    _lock = threading.RLock()
    _served.clear()
    _unanswered.clear()
    _dead.clear()


os.register_at_fork(after_in_child=_forget_services_in_child)
