"""`nnapi vts`: the certification kit that proves any driver, the way Android's VTS proves a vendor driver.

It drives one device directly through the HAL (IDevice, IPreparedModel, IBuffer, IBurst,
IFencedExecutionCallback), as the VTS does, plus runtime-level checks through the public API, as the
CTS does. Suites mirror the sections of VTS-BEHAVIOURS.md:

- `caching` (1), `memory` (2), `domains` (3), `qos` (4), `validation` (5), `execution` (6), and
  `vectors` (the `nnapi cts` corpus on that device).

Use from Python:

    from nnapi.conformance import vts
    results = vts.run_kit(driver_or_device, suites=["caching"], quick=True)
    results = vts.run_kit("mypackage.driver:create_device")   # hosted in a process of its own

A driver object runs in the caller's process; a driver named by a string (an installed entry point or
`module:factory`) runs in a process of its own (`host`), unless `in_process=True`.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ...hal import IDevice
from ...runtime import Device
from .core import SUITES, Check, CheckResult, Fail, Kit, Options, Skip, per_suite, run_checks, summarize

__all__ = ["SUITES", "Check", "CheckResult", "Fail", "Kit", "Options", "Skip", "collect", "device_for",
           "open_kit", "per_suite", "run_kit", "summarize"]


def device_for(driver: IDevice | Device) -> Device:
    """A runtime `Device` for a driver object (not registered anywhere), or the device itself."""
    if isinstance(driver, Device):
        return driver
    info = driver.get_info()
    return Device(info.name, info.version, info.type, info.feature_level, driver.get_capabilities(),
                  tuple(driver.get_number_of_cache_files_needed()), driver)


def _suite_module(suite: str):
    return importlib.import_module(f"{__name__}.{suite}")


def collect(kit: Kit, suites: Iterable[str] | None = None, k: str | None = None) -> list[Check]:
    """The checks of `suites` (default: all), in suite order, whose id contains `k`."""
    wanted = list(SUITES if suites is None else suites)
    unknown = [s for s in wanted if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {', '.join(unknown)}; the suites are {', '.join(SUITES)}")
    checks: list[Check] = []
    for suite in SUITES:
        if suite in wanted:
            checks.extend(c for c in _suite_module(suite).checks(kit) if not k or k in c.id)
    return checks


def open_kit(driver: IDevice | Device | str, options: Options, *, in_process: bool = False) -> Kit:
    """A kit on `driver`: an object where it is; a name or `module:factory` hosted in a process of its own
    (`host.Host`, the kit's supervisor) unless `in_process`."""
    if not isinstance(driver, str):
        return Kit(device_for(driver), options)
    from .host import Host, load
    if in_process:
        return Kit(device_for(load(driver)), options)
    host = Host(driver)
    kit = Kit(host.device, options)
    kit.supervisor = host
    return kit


def run_kit(driver: IDevice | Device | str, suites: Sequence[str] | None = None, *, quick: bool = False,
            k: str | None = None, timeout: float = 60.0, vectors: str | Path | None = None,
            progress: Callable[[CheckResult, int, int], None] | None = None,
            in_process: bool = False) -> list[CheckResult]:
    """Run the kit on one driver (see `open_kit`) and return one result per check."""
    from .corpus import find_corpus
    kit = open_kit(driver, Options(quick=quick, timeout=timeout, vectors=find_corpus(vectors)), in_process=in_process)
    try:
        return run_checks(kit, collect(kit, suites, k), progress)
    finally:
        kit.close()
