"""What is installed: entry points and package releases, read from the distributions' metadata folders
on `sys.path` as `importlib.metadata` finds them, without importing it (its import, email parser and
zip support included, costs 50-70 ms: most of what a cached start may spend above its backend's floor).

The rules are `importlib.metadata`'s: `*.dist-info` and `*.egg-info` folders of each `sys.path` folder,
in path order; a distribution (its normalized name) counts once, where it is first found. Where
`sys.path` holds something other than folders (a zip archive), this falls back to `importlib.metadata`.
"""
from __future__ import annotations

import functools
import importlib
import os
import re
import stat
import sys
from dataclasses import dataclass
from typing import Any

_SUFFIXES = (".dist-info", ".egg-info")


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: `value` is "module:attribute" (`load` imports the module and returns it)."""

    name: str
    value: str
    group: str

    def load(self) -> Any:
        module, _, attribute = self.value.partition(":")
        target: Any = importlib.import_module(module.strip())
        for part in attribute.split("[")[0].strip().split(".") if attribute else ():
            target = getattr(target, part)
        return target


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def distributions() -> list[str] | None:
    """The metadata folders of the installed distributions, one per distribution (first on the path
    wins); None when `sys.path` holds an archive, which only `importlib.metadata` reads."""
    stamp = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
        except OSError:
            continue  # (a path hook's name, or a folder that is gone)
        stamp.append((entry, st.st_mtime_ns, st.st_mode))
    return _listed(tuple(stamp))


@functools.lru_cache(maxsize=4)
def _listed(stamp: tuple) -> list[str] | None:
    """`distributions` of one state of the path's folders (a folder's mtime moves when a distribution
    is installed into it or removed)."""
    seen: set[str] = set()
    found: list[str] = []
    for entry, _, mode in stamp:
        folder = entry or "."
        if not stat.S_ISDIR(mode):
            return None  # (a zip archive on the path)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            stem, ext = os.path.splitext(name)
            if ext.lower() not in _SUFFIXES:
                continue
            path = os.path.join(folder, name)
            if not os.path.isdir(path):
                continue
            key = _normalized(stem.partition("-")[0])
            if key not in seen:
                seen.add(key)
                found.append(path)
    return found


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of `group` of every installed distribution."""
    folders = distributions()
    if folders is None:
        import importlib.metadata
        return [EntryPoint(ep.name, ep.value, group) for ep in importlib.metadata.entry_points(group=group)]
    found: list[EntryPoint] = []
    for folder in folders:
        try:
            with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        current = None
        for line in text.splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1].strip()
            elif current == group and "=" in line:
                name, _, value = line.partition("=")
                found.append(EntryPoint(name.strip(), value.strip(), group))
    return found


def release(name: str) -> str | None:
    """The installed version of distribution `name` ("2026.4.1-22982-..."), None when it is not installed."""
    folders = distributions()
    if folders is None:
        import importlib.metadata
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    wanted = _normalized(name)
    for folder in folders:
        if _normalized(os.path.splitext(os.path.basename(folder))[0].partition("-")[0]) != wanted:
            continue
        for meta in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(folder, meta), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # (the headers end at the first blank line)
            except OSError:
                continue
        return None
    return None


__all__ = ["EntryPoint", "distributions", "entry_points", "release"]
