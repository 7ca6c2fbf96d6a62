"""Device discovery: every driver installed in the `nnapi.drivers` entry-point group becomes a `Device`,
and so does every driver served by `nnapi serve` in the service directory (`NNAPI_SERVICE_DIR`).

A service's device takes the place of the in-process driver of the same name (on Android the driver
is always the service); without a service directory every driver runs in-process. This is the one
place of the runtime that knows services exist: the rest uses their `IDevice` proxies like any driver.

A plug-in is a guest: what it reports is checked once, when it is created (a device whose info,
capabilities or cache-file counts are not what the HAL says is dropped); creation is bounded in time
(`DISCOVERY_TIMEOUT_S`, all plug-ins at once); any exception of a driver call is a failure of that device
(`guest_call`); and a dropped plug-in is logged at warning level, its reason kept (`dropped_devices`).

An installed driver is not created to be listed: what it reported when last created is remembered in the
state directory (`device_records`), and while nothing it depends on changed, `devices()` lists that
record (`RememberedDevice`) and creates the driver at its first use; without a usable record it is
created at once, as before, and its report remembered.

A served device whose service dies is marked dead (its calls fail with DEVICE_UNAVAILABLE). The
default device list then leaves it out and always keeps an in-process reference driver, so the
next compilation runs there; naming the dead device explicitly (`find_device`) is the error
UNAVAILABLE_DEVICE. Each `devices()` call reconnects a dead device whose service is back (a restarted service
keeps its state directory, so caches written before the crash are hits).
"""
from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable

from ..hal import (Capabilities, DeviceInfo, DeviceType, ErrorStatus, IDevice, MAX_NUMBER_OF_CACHE_FILES, NnError,
                   ResultCode)
from ..installed import EntryPoint, entry_points
from ..qos import threads
from . import device_records

if TYPE_CHECKING:
    import concurrent.futures

log = logging.getLogger("nnapi.runtime")
#: How long the installed drivers, all created at once, may take to be created and to answer what they
#: are; one still creating then is left out (logged) until a later `devices()` finds it done.
DISCOVERY_TIMEOUT_S = 5.0
#: How long a device named by the app is waited for while its driver is still being created.
NAMED_TIMEOUT_S = 60.0
#: How long a driver may take to say which operations of a model it supports; past it, none.
CLAIM_TIMEOUT_S = 5.0

IN_PROCESS, SERVICE = "in-process", "service"


@dataclass(eq=False)
class Device(device_records.Report):
    """One available device: what its driver reported once at discovery (`Report`: name, version, type,
    feature level, capabilities, cache-file counts), its driver interface, and where the driver lives
    (in this process, or a service: its pid and socket)."""

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
        try:
            return list(self.driver.get_supported_operations(model.to_hal()))
        except NnError as e:
            if e.status == ErrorStatus.INVALID_ARGUMENT:
                raise NnError(ResultCode.BAD_DATA, f"{self.name}: {e.message}") from None
            raise

    def __repr__(self) -> str:
        where = "" if self.location == IN_PROCESS else f", {self.where}"
        return f"Device(name={self.name!r}, version={self.version!r}, type={self.type.name}{where})"


class RememberedDevice(Device):
    """An installed driver's device as its record describes it (`device_records`): listing it created
    nothing. Its driver is created at the first use of `driver` (bounded as any creation); what the
    driver then reports replaces the record's fields where they differ, and a driver that can no longer
    be created is GENERAL_FAILURE naming it."""

    def __init__(self, report: device_records.Report, entry: EntryPoint) -> None:
        self._driver: IDevice | None = None
        self.entry = entry
        #: Why its driver could not be created (then every use of `driver` fails), or None.
        self.failure: str | None = None
        super().__init__(report.name, report.version, report.type, report.feature_level, report.capabilities,
                         report.cache_files, None)  # type: ignore[arg-type]  (the driver comes later)

    @property  # type: ignore[override]
    def driver(self) -> IDevice:
        """The driver, created on first use."""
        return self._driver if self._driver is not None else _materialise(self)

    @driver.setter
    def driver(self, value: IDevice | None) -> None:
        if value is not None:
            self._driver = value

    @property
    def created(self) -> bool:
        """Whether its driver exists in this process yet."""
        return self._driver is not None

    def adopt(self, made: Device) -> bool:
        """Take the created driver and what it reports (`_make` checked it): whether that differs from
        the record."""
        differs = self.reported() != made.reported()
        if differs:
            log.info("device %s: its driver reports other figures than its record said (%s): the record is "
                     "rewritten", self.name, made.version)
        for f in fields(device_records.Report):
            setattr(self, f.name, getattr(made, f.name))
        self._driver = made.driver
        return differs


_lock = threading.RLock()
_local: dict[str, Device | None] = {}   # in-process devices by entry-point name (None: broken plugin)
_registered: list[Device] = []          # register_device, listed first
_served: dict[str, Device] = {}         # socket path -> device (alive or dead)
_unanswered: dict[str, tuple] = {}      # socket path -> socket_key of a socket that did not answer
_dead: dict[str, Device] = {}           # name -> served device found dead at the last look


class Dropped(Exception):
    """A driver that cannot be a device: why (logged, and kept in `dropped_devices`)."""


def _make(driver: IDevice, **where) -> Device:
    """The device of `driver`, once what it reports is checked (Dropped saying what is wrong)."""
    if driver is None:
        raise Dropped("create_device returned None")
    info = driver.get_info()
    if not isinstance(info, DeviceInfo) or not isinstance(info.name, str) or not info.name \
            or not isinstance(info.version, str) or not isinstance(info.type, DeviceType) \
            or not isinstance(info.feature_level, int):
        raise Dropped(f"get_info returned {info!r}, not a DeviceInfo with a name, version, type and feature level")
    counts = driver.get_number_of_cache_files_needed()
    if not (isinstance(counts, (tuple, list)) and len(counts) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)):
        raise Dropped(f"get_number_of_cache_files_needed returned {counts!r}, not two counts")
    n_model, n_data = counts
    if n_model > MAX_NUMBER_OF_CACHE_FILES or n_data > MAX_NUMBER_OF_CACHE_FILES:  # (Android drops these too)
        raise Dropped(f"asks for {n_model} model and {n_data} data cache files, more than the "
                      f"{MAX_NUMBER_OF_CACHE_FILES} allowed")
    capabilities = driver.get_capabilities()
    if not isinstance(capabilities, Capabilities):
        raise Dropped(f"get_capabilities returned {type(capabilities).__name__}, not Capabilities")
    return Device(info.name, info.version, info.type, info.feature_level, capabilities, (n_model, n_data), driver,
                  **where)


def _create(ep) -> Device:
    """The device of entry point `ep` (its driver created on this thread, beside the others)."""
    for attempt in range(100):
        try:
            return _make(ep.load()())
        except Dropped:
            raise
        except Exception as e:
            # Drivers created side by side import shared modules at once; Python refuses an import that
            # would wait on one in progress on another thread (_DeadlockError): once that is done, again.
            if type(e).__name__ == "_DeadlockError" and attempt < 99:
                time.sleep(0.01)
                continue
            raise Dropped(f"{type(e).__name__}: {e}") from None
    raise AssertionError("unreachable")


def guest_call(device: "Device", what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)` of `device`'s driver: any exception that is not an NnError is a failure of that device,
    GENERAL_FAILURE naming it (so the runtime falls back as it does for any driver failure), logged."""
    try:
        return fn(*args, **kwargs)
    except NnError:
        raise
    except Exception as e:
        log.warning("device %s: %s raised %s: %s", device.name, what, type(e).__name__, e)
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"device {device.name}: {what} raised "
                                                   f"{type(e).__name__}: {e}") from None


def bounded(fn: Callable[[], Any], timeout: float, name: str) -> concurrent.futures.Future:
    """Run `fn` (a driver's code) on a driver thread (`threads.submit`), in the caller's context; the future
    is waited for with a bound, and a call that never returns costs only its thread (the process's exit
    waits for it no longer than `timeout` either: `qos.threads`)."""
    import concurrent.futures
    future: concurrent.futures.Future = concurrent.futures.Future()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            future.set_result(context.run(fn))
        except BaseException as e:
            future.set_exception(e)

    threads.submit(run, name=name, exit_wait_s=timeout)
    return future


_entry_points: list | None = None       # the `nnapi.drivers` entry points, read once per process
_creating: dict[str, tuple[concurrent.futures.Future, float]] = {}  # entry point -> its creation, waited for until
_dropped: dict[str, str] = {}            # entry point -> why it is not a device
_stamps: dict[str, str] = {}             # entry point -> the stamp its record must carry (`device_records.stamps`)


def _creation_bound(ep) -> float:
    """How long creating `ep`'s driver may take: a plug-in DISCOVERY_TIMEOUT_S; a driver of this package
    (trusted code, whose first creation in a state directory calibrates it: seconds on a busy machine)
    NAMED_TIMEOUT_S."""
    return NAMED_TIMEOUT_S if ep.value.startswith("nnapi.") else DISCOVERY_TIMEOUT_S


def dropped_devices() -> dict[str, str]:
    """The installed drivers that are not devices, and why (creation failed, timed out, or reported
    something the HAL does not allow)."""
    with _lock:
        return dict(_dropped)


def _in_process(skip: set[str], wait: bool = True, only: str | None = None) -> list[Device]:
    """The installed drivers' devices, except those named in `skip` (served ones): each remembered one
    from its record (`RememberedDevice`), the others created on first need (all at once, each within its
    bound); without `wait`, those created so far (the rest go on being created). With `only`, only the
    entry point of that name is looked at (a device the app names: the other drivers and their backends
    are not touched)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = sorted(entry_points("nnapi.drivers"), key=lambda e: e.name)
    wanted = [ep for ep in _entry_points if (only is None or ep.name == only) and ep.name not in skip
              and ep.name not in _local and ep.name not in _creating]
    _recall(wanted)
    for ep in wanted:
        if ep.name not in _local:
            _start_creating(ep)
    if wait and _creating:
        import concurrent.futures
        for future, until in list(_creating.values()):  # (each waited for once, up to its bound)
            concurrent.futures.wait([future], timeout=max(0.0, until - time.monotonic()))
    _collect()
    found = []
    for ep in _entry_points:
        dev = _local.get(ep.name)
        if ep.name not in skip and dev is not None and dev.name not in skip:
            found.append(dev)
    return found


def _recall(wanted: list[EntryPoint]) -> None:
    """Describe each of `wanted` whose record is current by that record (no driver is created)."""
    unstamped = [ep for ep in wanted if ep.name not in _stamps]
    if unstamped:
        _stamps.update(device_records.stamps(unstamped))
    for ep in wanted:
        stamp = _stamps.get(ep.name)
        report = device_records.recall(ep, stamp) if stamp is not None else None
        if report is not None:
            _local[ep.name] = RememberedDevice(report, ep)


def _start_creating(ep: EntryPoint) -> tuple[concurrent.futures.Future, float]:
    """Begin creating `ep`'s driver on a thread of its own, unless that is under way (under `_lock`)."""
    if ep.name not in _creating:
        bound = _creation_bound(ep)
        _creating[ep.name] = (bounded(lambda ep=ep: _create(ep), bound, f"nnapi-create-{ep.name}"),
                              time.monotonic() + bound)
    return _creating[ep.name]


def _collect() -> None:
    """Take every finished creation (under `_lock`): a remembered device adopts its driver, a new one
    joins `_local`, and the report is remembered where the record lacked it; a failed one is left out
    (and its record dropped); one past its bound is logged and left out until it answers."""
    for name, (future, until) in list(_creating.items()):
        ep = next(ep for ep in _entry_points or () if ep.name == name)
        if not future.done():
            if name not in _dropped and time.monotonic() >= until:
                bound = _creation_bound(ep)
                log.warning("driver %s: create_device has not answered within %g s: left out until it does",
                            name, bound)
                _dropped[name] = f"create_device has not answered within {bound:g} s"
            continue
        del _creating[name]
        _dropped.pop(name, None)
        held = _local.get(name)
        try:
            made = future.result()
        except Exception as e:  # a broken plugin must not take the runtime down
            _local[name] = None
            _dropped[name] = str(e)
            if isinstance(held, RememberedDevice):
                held.failure = str(e)
            device_records.forget(name)
            log.warning("driver %s left out: %s", name, e)
            continue
        if isinstance(held, RememberedDevice):
            changed = held.adopt(made)
        else:
            _local[name], changed = made, True
        stamp = _stamps.get(name)
        if changed and stamp is not None:
            device_records.remember(ep, stamp, made)


def _materialise(device: RememberedDevice) -> IDevice:
    """Create the driver of a remembered device (or wait for its creation under way), within its bound."""
    import concurrent.futures
    name = device.entry.name
    with _lock:
        if device.created:
            return device.driver
        if device.failure is None:
            future, until = _start_creating(device.entry)
        else:
            future = None
    if future is not None:
        concurrent.futures.wait([future], timeout=max(0.0, until - time.monotonic()))
        with _lock:
            _collect()
    if device.created:
        return device.driver
    why = device.failure or _dropped.get(name) or "its creation has not ended"
    raise NnError(ErrorStatus.GENERAL_FAILURE, f"device {device.name}: its driver could not be created: {why}")


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
    except Exception as e:
        log.warning("the service at %s left out: %s", path, e)
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
    return _devices(wait=True)


def _devices(wait: bool, only: str | None = None) -> list[Device]:
    """`devices()`; without `wait`, the in-process drivers created so far; with `only`, creating no
    in-process driver but that entry point's (`_in_process`)."""
    with _lock:
        served, dead = _services()
        _dead.clear()
        _dead.update(dead)
        names = {d.name for d in served}
        # A dead served driver is not replaced by its in-process twin, except the reference driver:
        # the default list always keeps one to fall back on.
        local = _in_process(names | (set(dead) - {"reference"}), wait, only)
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
    try:
        dev = _make(driver)
    except Dropped as e:
        raise ValueError(str(e)) from None
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
    back): an explicit device list gets the error rather than another driver. It waits for that device's
    creation only, never for another's (a plug-in that hangs costs an app that names `reference` nothing),
    and creates no other driver unless no entry point has that name (a plug-in's device may be named
    otherwise: then every driver is created to find it)."""
    found = _devices(wait=False, only=name)
    with _lock:
        dead = _dead.get(name)
    if dead is not None:
        raise NnError(ResultCode.UNAVAILABLE_DEVICE, f"device {name}: its service (pid {dead.pid}, {dead.socket}) "
                                                     "died and has not come back")
    for d in found:
        if d.name == name:
            return d
    with _lock:
        creating = _creating.get(name)
    if creating is not None:  # named, so worth waiting for
        import concurrent.futures
        concurrent.futures.wait([creating[0]], timeout=max(NAMED_TIMEOUT_S, creating[1] - time.monotonic()))
        found = _devices(wait=False, only=name)
        for d in found:
            if d.name == name:
                return d
    if name not in _creating:
        found = devices()  # (no entry point of that name: every driver, to find it or say what there is)
        for d in found:
            if d.name == name:
                return d
    why = dropped_devices().get(name)
    raise NnError(ResultCode.BAD_DATA, f"no device named {name!r} (available: {', '.join(d.name for d in found)})"
                  + (f"; the installed driver {name} was left out: {why}" if why else ""))


def _forget_services_in_child() -> None:
    """A forked child connects to services itself (with its own credentials)."""
    global _lock
    _lock = threading.RLock()
    _creating.clear()  # (their threads are not in the child: a remembered device creates its driver again)
    _served.clear()
    _unanswered.clear()
    _dead.clear()


os.register_at_fork(after_in_child=_forget_services_in_child)
