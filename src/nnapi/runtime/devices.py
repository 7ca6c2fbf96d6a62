"""Device discovery: every driver installed in the `nnapi.drivers` entry-point group becomes a `Device`."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.metadata import entry_points

from ..hal import Capabilities, DeviceType, IDevice, MAX_NUMBER_OF_CACHE_FILES


@dataclass(eq=False)
class Device:
    """One available device: its driver interface plus what it reported once at discovery."""

    name: str
    version: str
    type: DeviceType
    feature_level: int
    capabilities: Capabilities
    cache_files: tuple[int, int]
    driver: IDevice

    @property
    def supports_caching(self) -> bool:
        return self.cache_files[0] > 0 or self.cache_files[1] > 0

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
        return f"Device(name={self.name!r}, version={self.version!r}, type={self.type.name})"


_lock = threading.Lock()
_devices: list[Device] | None = None


def _make(driver: IDevice) -> Device | None:
    info = driver.get_info()
    n_model, n_data = driver.get_number_of_cache_files_needed()
    if n_model > MAX_NUMBER_OF_CACHE_FILES or n_data > MAX_NUMBER_OF_CACHE_FILES:
        return None  # Android drops such devices
    return Device(info.name, info.version, info.type, info.feature_level, driver.get_capabilities(),
                  (n_model, n_data), driver)


def devices() -> list[Device]:
    """All devices, found once per process; the reference device comes last (the fallback)."""
    global _devices
    with _lock:
        if _devices is None:
            found = []
            for ep in sorted(entry_points(group="nnapi.drivers"), key=lambda e: e.name):
                try:
                    dev = _make(ep.load()())
                except Exception:  # a broken plugin must not take the runtime down
                    continue
                if dev is not None and all(d.name != dev.name for d in found):
                    found.append(dev)
            found.sort(key=lambda d: d.name == "reference")
            _devices = found
        return list(_devices)


def register_device(driver: IDevice) -> Device:
    """Add a driver at run time (tests, in-process plugins); it joins the list before the reference device."""
    dev = _make(driver)
    if dev is None:
        raise ValueError("driver asks for too many cache files")
    current = devices()
    with _lock:
        global _devices
        _devices = [d for d in current if d.name != dev.name]
        _devices.insert(0, dev)
        _devices.sort(key=lambda d: d.name == "reference")
    return dev


def find_device(name: str) -> Device:
    for d in devices():
        if d.name == name:
            return d
    from ..hal import NnError, ResultCode
    raise NnError(ResultCode.BAD_DATA, f"no device named {name!r} (available: {', '.join(d.name for d in devices())})")
