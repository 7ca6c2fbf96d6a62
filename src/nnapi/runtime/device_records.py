"""What each in-process driver reported when it was last created, remembered in the state directory, so
that listing the devices (`nnapi.devices()`, an app's default device list) creates no driver and asks no
backend anything (issue 32: `import nnapi` and `devices()` within 0.15 s).

Layout: `<state dir>/devices/<entry point>.json`, one file per `nnapi.drivers` entry point, written whole
and renamed into place:

    {"stamp": "<hex>", "entry": "module:attribute",
     "device": {"name", "version", "type", "feature_level", "cache_files": [model, data],
                "capabilities": {"relaxed_scalar": [exec, power], "relaxed_tensor": [...],
                                 "operands": [[operand type, exec, power], ...], "if": [...], "while": [...]}}}

A record is used only while its stamp is this process's (`stamps`): the entry point, nnapi's release,
the Python interpreter, the installed distributions (their metadata folders, versions in their names),
this CPU (`host.cpu_description`), the `NNAPI_*` environment, and a stat stamp (name, size, inode,
modification and change times) of every Python file of the package the entry point's module is in.
What a driver reports can follow from something else still (a backend's own environment, a GPU
plugged in): the runtime creates the driver at its first use and, where its report differs from the
record, takes the driver's and writes it here (`devices.RememberedDevice`). `forget` drops them all
(`nnapi devices --calibrate`). A damaged or foreign file is a miss, never an error.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .._version import __version__
from ..caching.state import state_dir
from ..hal import Capabilities, DeviceType, OperandPerformance, OperandType, PerformanceInfo
from ..host import cpu_description
from ..installed import EntryPoint, distributions

FOLDER = "devices"
#: Entry-point names that make a record's file name (any other entry point gets no record).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(eq=False)
class Report:
    """What a driver reported of itself at its creation (`devices._make` checked it): what a record holds,
    and what a `devices.Device` is besides its driver and where it lives."""

    name: str
    version: str
    type: DeviceType
    feature_level: int
    capabilities: Capabilities
    cache_files: tuple[int, int]

    def reported(self) -> tuple:
        """The report's fields, to compare two reports by."""
        return tuple(getattr(self, f.name) for f in fields(Report))


def _tree_stamp(location: str) -> list[str]:
    """One line per Python file under `location` (a package folder, or a module file): its stat stamp."""
    if os.path.isfile(location):
        st = os.stat(location)
        return [f"{location}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"]
    lines, stack = [], [location]
    while stack:
        folder = stack.pop()
        for e in sorted(os.scandir(folder), key=lambda e: e.name):
            if e.name.startswith(".") or e.name == "__pycache__":
                continue
            if e.name.endswith(".py") and e.is_file():
                st = e.stat()
                lines.append(f"{e.path}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}")
            elif e.is_dir(follow_symlinks=False):
                stack.append(e.path)
    return lines


def _package_location(module: str) -> str | None:
    """Where the top-level package of `module` is (its folder, or its file), found without importing it."""
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    spec = loaded.__spec__ if loaded is not None and loaded.__spec__ is not None else importlib.util.find_spec(top)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return spec.origin if spec.origin and os.path.isfile(spec.origin) else None


def stamps(entry_points: list[EntryPoint]) -> dict[str, str]:
    """The stamp each entry point's record must carry to be used now (see the module doc); an entry point
    whose package cannot be found, or a path that only `importlib.metadata` reads, gets none."""
    import xxhash
    found = distributions()
    if found is None:
        return {}
    common = "\n".join([__version__, sys.version, sys.executable, cpu_description(), *found,
                        *(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NNAPI_"))])
    trees: dict[str, str] = {}
    result: dict[str, str] = {}
    for ep in entry_points:
        module = ep.value.partition(":")[0].strip()
        try:
            location = _package_location(module)
            if location is None:
                continue
            if location not in trees:
                trees[location] = "\n".join(_tree_stamp(location))
        except (OSError, ImportError, ValueError):
            continue
        result[ep.name] = xxhash.xxh3_128_hexdigest(f"{common}\n{ep.name}={ep.value}\n{trees[location]}".encode())
    return result


def _path(name: str) -> Path:
    if not _NAME.fullmatch(name):
        raise ValueError(f"entry point {name!r}: not a name a record is kept for")
    return state_dir() / FOLDER / f"{name}.json"


def _performance(pair: Any) -> PerformanceInfo:
    exec_time, power = pair
    return PerformanceInfo(float(exec_time), float(power))


def _capabilities(data: dict) -> Capabilities:
    return Capabilities(
        relaxed_float32_to_float16_performance_scalar=_performance(data["relaxed_scalar"]),
        relaxed_float32_to_float16_performance_tensor=_performance(data["relaxed_tensor"]),
        operand_performance=tuple(OperandPerformance(OperandType(int(t)), _performance((e, p)))
                                  for t, e, p in data["operands"]),
        if_performance=_performance(data["if"]), while_performance=_performance(data["while"]))


def recall(ep: EntryPoint, stamp: str) -> Report | None:
    """The record of `ep` when it carries `stamp`; None when there is none, it is stale or damaged."""
    try:
        with open(_path(ep.name), encoding="utf-8") as f:
            data = json.load(f)
        if data.get("stamp") != stamp or data.get("entry") != ep.value:
            return None
        d = data["device"]
        model, cache_data = d["cache_files"]
        report = Report(str(d["name"]), str(d["version"]), DeviceType[d["type"]], int(d["feature_level"]),
                        _capabilities(d["capabilities"]), (int(model), int(cache_data)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return report if report.name and all(n >= 0 for n in report.cache_files) else None


def _pair(info: PerformanceInfo) -> list[float]:
    return [info.exec_time, info.power_usage]


def remember(ep: EntryPoint, stamp: str, report: Report) -> None:
    """Write `report` as the record of `ep` (nothing when the state directory cannot be written)."""
    caps = report.capabilities
    data = {"stamp": stamp, "entry": ep.value, "device": {
        "name": report.name, "version": report.version, "type": report.type.name,
        "feature_level": report.feature_level, "cache_files": list(report.cache_files),
        "capabilities": {"relaxed_scalar": _pair(caps.relaxed_float32_to_float16_performance_scalar),
                         "relaxed_tensor": _pair(caps.relaxed_float32_to_float16_performance_tensor),
                         "operands": [[int(p.type), p.info.exec_time, p.info.power_usage]
                                      for p in caps.operand_performance],
                         "if": _pair(caps.if_performance), "while": _pair(caps.while_performance)}}}
    import tempfile
    try:
        target = _path(ep.name)
        folder = target.parent
        folder.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{ep.name}-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        pass


def forget(name: str | None = None) -> int:
    """Drop the record of entry point `name`, or every record: how many were dropped."""
    try:
        folder = state_dir() / FOLDER
        names = [_path(name).name] if name is not None else [n for n in os.listdir(folder) if n.endswith(".json")]
    except (OSError, ValueError):
        return 0
    dropped = 0
    for n in names:
        try:
            os.unlink(folder / n)
            dropped += 1
        except OSError:
            pass
    return dropped


__all__ = ["FOLDER", "Report", "forget", "recall", "remember", "stamps"]
