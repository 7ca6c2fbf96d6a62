"""Maintenance of compilation caches, behind `nnapi cache ls|verify|prune DIR [--max-size BYTES] [--engine DRIVER]`.

Two kinds of directory:

- An app cache directory (the `cache_dir` of compilations). Its cache files are named
  `<64 letters A-P><1 model | 2 data><slot index>`; the files sharing a 64-letter base name are one
  entry, and the base name encodes the per-device token (`cache_files.token_from_name`). Other
  files are left alone, except the importer's memos (`<32 hex digits>.tflite-import`, one entry each,
  `kind` "import": `importers.tflite.remembered`), which are checked and pruned with the rest.
- A driver's caching engine (C12): `<state dir>/engine/<driver>-<version>`, recognised by its
  `index.sqlite3`; `engine=DRIVER` finds it from the installed driver's name and version. A folder
  holding engine directories (`<state dir>/engine`) stands for all of them.

`verify` asks every device that caches to prepare from each app entry (the driver checks integrity
against its registry, so this needs the same `NNAPI_STATE_DIR` as the app) and reports each entry that
would be rejected and why; engine entries are checked against their recorded SHA-256 and against the
installed driver version. `prune` removes rejected entries and, with `max_size`, the least recently
used ones until the total is at most `max_size` bytes. The runtime marks the files of every cache hit
as used (their access time), so "least recently used" holds whatever the file system's atime policy.

Every function returns plain data (lists and dicts of str, int, float, bool and None) that the CLI
prints as a table or as JSON.
"""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Sequence

from ..hal import CacheHandles
from .cache_files import FILE_CHECKS, IMPORT_MEMO_SUFFIX, close_cache_files, token_from_name
from .devices import Device, devices as all_devices

ENGINE_INDEX = "index.sqlite3"
#: Engine files outside the index (an interrupted write) younger than this may belong to a write in progress.
STALE_SECONDS = 600.0
_CACHE_FILE = re.compile(r"^([A-P]{64})([12])(0|[1-9][0-9]*)$")

__all__ = ["list_cache", "verify_cache", "prune_cache", "engine_directory", "is_engine_directory"]


# --- public API -----------------------------------------------------------------------------------------
def list_cache(directory: str | os.PathLike | None = None, *, engine: str | None = None,
               devices: Sequence[Device] | None = None) -> list[dict]:
    """Every cache entry of `directory` (app cache or engine) and/or of driver `engine`'s caching engine.

    Each entry: `kind` ("app" | "engine" | "import"), `directory`, `name` (64-letter base name | engine key),
    `token` (hex of the per-device token; None for the engine), `files` (names), `model_files`,
    `data_files` (counts; None for the engine), `size` (bytes), `last_used` (seconds since the epoch),
    `complete` (every slot from 0 present), `state` ("cached" | "orphan" | "temporary"), `device` (the
    device that wrote it: an app entry's by the integrity registry that records its token, None when
    no installed driver does; the engine's driver), and for the engine `driver` and `version`.
    """
    return [e for _, e in _collect(directory, engine, devices)]


def verify_cache(directory: str | os.PathLike | None = None, *, engine: str | None = None,
                 devices: Sequence[Device] | None = None) -> list[dict]:
    """`list_cache` entries with `ok` (bool), `device` (the device that accepts an app entry, else None),
    `stage` (the accepting driver's compile stage of the cached executable, e.g. xla's "quick" or
    "optimized"; None for single-stage drivers) and `reason` (why it would be rejected, None when ok)."""
    return [_verified(source, entry, devices) for source, entry in _collect(directory, engine, devices)]


def prune_cache(directory: str | os.PathLike | None = None, *, engine: str | None = None,
                max_size: int | None = None, devices: Sequence[Device] | None = None,
                dry_run: bool = False) -> dict:
    """Remove rejected entries, then (with `max_size`) least recently used ones until at most `max_size` bytes.

    Returns `removed` (entries, each with the `reason` it went), `kept` (count), `size_before`,
    `size_after`, `max_size`, `removed_directories` (engine directories of driver versions no longer
    installed, left empty) and `dry_run`. Engine files outside the index younger than STALE_SECONDS are
    kept: they may belong to a write in progress.
    """
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 0):
        raise ValueError(f"max_size must be a number of bytes >= 0, got {max_size!r}")
    checked = [(source, _verified(source, entry, devices)) for source, entry in _collect(directory, engine, devices)]
    size_before = sum(e["size"] for _, e in checked)
    removed: list[dict] = []
    kept: list[tuple[_Source, dict]] = []
    now = time.time()
    for source, entry in checked:
        if entry["ok"]:
            kept.append((source, entry))
        elif entry["state"] != "cached" and now - entry["last_used"] < STALE_SECONDS:
            kept.append((source, entry))       # maybe a write in progress: not yet
        else:
            removed.append(_removed(source, entry, entry["reason"], dry_run))
    if max_size is not None:
        total = sum(e["size"] for _, e in kept)
        evictable = sorted((item for item in kept if item[1]["state"] == "cached"), key=lambda i: i[1]["last_used"])
        for source, entry in evictable:
            if total <= max_size:
                break
            removed.append(_removed(source, entry, f"least recently used (over the {max_size}-byte limit)", dry_run))
            kept.remove((source, entry))
            total -= entry["size"]
    removed_dirs = [] if dry_run else _remove_stale_engine_dirs({s for s, _ in checked}, kept)
    return {"removed": removed, "kept": len(kept), "size_before": size_before,
            "size_after": sum(e["size"] for _, e in kept), "max_size": max_size,
            "removed_directories": removed_dirs, "registry": _prune_registries(devices, dry_run),
            "dry_run": dry_run}


#: Integrity-registry rows unused this long are dropped by `prune` (their caches are surely gone or stale).
REGISTRY_MAX_AGE_S = 90 * 24 * 3600


def _prune_registries(devices: Sequence[Device] | None, dry_run: bool) -> list[dict]:
    """Each in-process driver's integrity registry: rows of other driver versions and rows unused for
    REGISTRY_MAX_AGE_S go (a served driver's registry is its service's, out of the app's reach)."""
    reports = []
    for d in (all_devices() if devices is None else devices):
        registry = getattr(d.driver, "registry", None)
        if registry is None or not hasattr(registry, "prune"):
            continue
        try:
            if dry_run:
                reports.append({"driver": d.name, "rows": registry.rows(), "other_versions": 0, "unused": 0})
                continue
            report = registry.prune(REGISTRY_MAX_AGE_S)
        except (OSError, sqlite3.Error) as e:
            reports.append({"driver": d.name, "error": str(e)})
            continue
        reports.append({"driver": d.name, "rows": report.kept, "other_versions": report.other_versions,
                        "unused": report.unused})
    return reports


def is_engine_directory(path: str | os.PathLike) -> bool:
    """True when `path` is one driver version's caching-engine directory."""
    return (Path(path) / ENGINE_INDEX).is_file()


def engine_directory(driver: str, devices: Sequence[Device] | None = None) -> str:
    """The caching-engine directory of the installed driver named `driver` (ValueError if none)."""
    for d in (all_devices() if devices is None else devices):
        if d.name == driver:
            engine = getattr(d.driver, "engine", None)
            root = getattr(engine, "root", None)  # (a CachingEngine's own folder)
            if root is not None:
                return str(root)
            from ..caching import state_dir
            return str(state_dir() / "engine" / f"{d.name}-{d.version}")
    names = ", ".join(d.name for d in (all_devices() if devices is None else devices))
    raise ValueError(f"no installed driver named {driver!r} (devices: {names})")


# --- collecting entries ------------------------------------------------------------------------------------
class _Source:
    """Where entries come from: an app cache directory, or one engine directory (with its identity)."""

    def __init__(self, kind: str, path: Path, driver: str | None = None, version: str | None = None,
                 installed: str | None = None) -> None:
        self.kind, self.path = kind, path
        self.driver, self.version, self.installed = driver, version, installed
        self._engine = None
        #: The engine's verdict per entry name, asked once (`_verify_engine`).
        self.checks: dict | None = None

    @property
    def engine(self):
        if self._engine is None:
            from ..caching import CachingEngine
            self._engine = CachingEngine(self.driver or self.path.name, self.version or "", root=self.path)
        return self._engine


def _collect(directory, engine: str | None, devices) -> list[tuple[_Source, dict]]:
    if directory is None and engine is None:
        raise ValueError("give a cache directory, an engine driver, or both")
    devs = None if devices is None else list(devices)

    def get_devs() -> list[Device]:
        nonlocal devs
        if devs is None:
            devs = all_devices()
        return devs

    out: list[tuple[_Source, dict]] = []
    roots: list[Path] = []
    if directory is not None:
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(f"not a folder: {path} (give the cache directory, not a file)")
        if not path.is_dir():
            raise FileNotFoundError(f"no such cache directory: {path}")
        if is_engine_directory(path):
            roots.append(path)
        else:
            app = _app_entries(path)
            for _, entry in app:
                entry["device"] = _writer(bytes.fromhex(entry["token"]), get_devs())
            out.extend(app)
            out.extend(_import_entries(path))
            roots.extend(sorted(p for p in path.iterdir() if p.is_dir() and is_engine_directory(p)))
    if engine is not None:
        path = Path(engine_directory(engine, get_devs()))
        if path.is_dir() and is_engine_directory(path) and path.resolve() not in {r.resolve() for r in roots}:
            roots.append(path)
    for root in roots:
        out.extend(_engine_entries(root, get_devs()))
    return out


def _app_entries(path: Path) -> list[tuple[_Source, dict]]:
    source = _Source("app", path)
    groups: dict[str, dict[str, list[tuple[int, os.stat_result, str]]]] = {}
    with os.scandir(path) as it:
        for f in it:
            m = _CACHE_FILE.match(f.name)
            if m is None or not f.is_file(follow_symlinks=False):
                continue
            kind = "model" if m.group(2) == "1" else "data"
            groups.setdefault(m.group(1), {"model": [], "data": []})[kind].append(
                (int(m.group(3)), f.stat(follow_symlinks=False), f.name))
    entries = []
    for base, files in sorted(groups.items()):
        model, data = sorted(files["model"]), sorted(files["data"])
        every = model + data
        complete = [i for i, _, _ in model] == list(range(len(model))) and \
            [i for i, _, _ in data] == list(range(len(data)))
        entries.append((source, {
            "kind": "app", "directory": str(path), "name": base, "token": token_from_name(base).hex(),
            "files": [name for _, _, name in every], "model_files": len(model), "data_files": len(data),
            "size": sum(st.st_size for _, st, _ in every),
            "last_used": max(max(st.st_atime, st.st_mtime) for _, st, _ in every),
            "complete": complete, "state": "cached"}))
    return entries


def _import_entries(path: Path) -> list[tuple[_Source, dict]]:
    """The import memos of an app cache directory (`importers.tflite.remembered`), one entry per file,
    and the temporary files of interrupted memo writes; none until the memo's module has registered its
    check (`FILE_CHECKS`: `nnapi cache` loads it)."""
    if IMPORT_MEMO_SUFFIX not in FILE_CHECKS:
        return []
    source = _Source("import", path)
    entries = []
    with os.scandir(path) as it:
        for f in sorted(it, key=lambda f: f.name):
            memo = f.name.endswith(IMPORT_MEMO_SUFFIX)
            if not (memo or f.name.startswith(".import-")) or not f.is_file(follow_symlinks=False):
                continue
            st = f.stat(follow_symlinks=False)
            entries.append((source, {
                "kind": "import", "directory": str(path), "name": f.name, "token": None, "files": [f.name],
                "model_files": None, "data_files": None, "size": st.st_size,
                "last_used": max(st.st_atime, st.st_mtime), "complete": True,
                "state": "cached" if memo else "temporary", "device": None}))
    return entries


def _writer(token: bytes, devs: Sequence[Device]) -> str | None:
    """The installed device whose integrity registry records `token`: the one that wrote the entry (None:
    no in-process driver of this version did, or its registry cannot be read)."""
    for d in devs:
        registry = getattr(d.driver, "registry", None)
        if registry is None or not hasattr(registry, "lookup"):
            continue
        try:
            if registry.lookup(token):
                return d.name
        except (OSError, sqlite3.Error):
            continue
    return None


def _engine_identity(name: str, devs: Sequence[Device]) -> tuple[str | None, str | None, str | None]:
    """(driver, version written, version installed) of an engine directory named `<driver>-<version>`."""
    for d in devs:
        if name == f"{d.name}-{d.version}":
            return d.name, d.version, d.version
    for d in devs:
        if name.startswith(d.name + "-"):
            return d.name, name[len(d.name) + 1:], d.version
    driver, sep, version = name.rpartition("-")
    return (driver, version, None) if sep else (name, None, None)


def _engine_entries(root: Path, devs: Sequence[Device]) -> list[tuple[_Source, dict]]:
    source = _Source("engine", root, *_engine_identity(root.name, devs))
    indexed = {e.key: e for e in source.engine.entries()}
    entries = []

    def entry(name: str, files: list[str], size: int, last_used: float, state: str) -> None:
        entries.append((source, {
            "kind": "engine", "directory": str(root), "name": name, "token": None, "files": files,
            "model_files": None, "data_files": None, "size": size, "last_used": last_used, "complete": True,
            "state": state, "driver": source.driver, "version": source.version, "device": source.driver}))

    for key, e in sorted(indexed.items()):
        entry(key, [f"{key}.entry"], e.size, e.last_used, "cached")
    with os.scandir(root) as it:
        for f in sorted(it, key=lambda f: f.name):
            if not f.is_file(follow_symlinks=False):
                continue
            stem, dot, suffix = f.name.partition(".")
            st = f.stat(follow_symlinks=False)
            if suffix == "entry" and stem not in indexed:
                entry(stem, [f.name], st.st_size, st.st_mtime, "orphan")
            elif suffix.startswith("tmp"):
                entry(stem, [f.name], st.st_size, st.st_mtime, "temporary")
    return entries


# --- verifying -------------------------------------------------------------------------------------------------
def _verified(source: _Source, entry: dict, devices) -> dict:
    entry = dict(entry)
    stage = None
    if source.kind == "app":
        ok, device, reason, stage = _verify_app(source.path, entry, all_devices() if devices is None else devices)
    elif source.kind == "import":
        reason = "temporary file of an interrupted write" if entry["state"] == "temporary" else \
            FILE_CHECKS[IMPORT_MEMO_SUFFIX](str(source.path / entry["name"]))
        ok, device = reason is None, None
    else:
        ok, device, reason = _verify_engine(source, entry)
    entry.update(ok=ok, device=device, stage=stage, reason=reason)
    return entry


def _verify_app(path: Path, entry: dict,
                devs: Sequence[Device]) -> tuple[bool, str | None, str | None, str | None]:
    """(ok, accepting device, why rejected, compile stage) of an app entry: each device that caches this
    layout of files prepares from it, as a compilation would."""
    if not entry["complete"]:
        return False, None, "incomplete: the files of some cache slots are missing", None
    counts = (entry["model_files"], entry["data_files"])
    caching = [d for d in devs if d.supports_caching]
    candidates = [d for d in caching if tuple(d.cache_files) == counts]
    if not candidates:
        partial = [d for d in caching if counts[0] <= d.cache_files[0] and counts[1] <= d.cache_files[1]]
        if partial:
            d = partial[0]
            return False, None, (f"incomplete: {counts[0]} of {d.cache_files[0]} model and {counts[1]} of "
                                 f"{d.cache_files[1]} data files for {d.name}"), None
        return False, None, (f"no installed device caches {counts[0]} model and {counts[1]} data files "
                             "(a driver that is gone, or one that changed its cache layout)"), None
    files = [path / name for name in entry["files"]]
    times = []
    for f in files:
        try:
            st = f.lstat()
            times.append((f, st.st_atime_ns, st.st_mtime_ns))
        except OSError:
            pass
    fds: list[int] = []
    try:
        for f in files:   # read-write, as the runtime opens them (C8); never created
            fds.append(os.open(f, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW))
    except OSError as e:
        for fd in fds:
            os.close(fd)
        return False, None, f"cannot be opened for reading and writing: {e.strerror}", None
    handles = CacheHandles(tuple(fds[:counts[0]]), tuple(fds[counts[0]:]))
    token = bytes.fromhex(entry["token"])
    reasons = []
    try:
        for d in candidates:
            try:
                prepared = d.driver.prepare_model_from_cache(None, handles, token)
                return True, d.name, None, getattr(prepared, "stage", None)
            except Exception as e:  # any failure of a driver is a rejection with its message
                reasons.append(f"{d.name}: {getattr(e, 'message', None) or f'{type(e).__name__}: {e}'}")
        return False, None, "; ".join(reasons), None
    finally:
        close_cache_files(handles)
        for f, atime, mtime in times:   # checking is not using: keep the LRU order
            try:
                os.utime(f, ns=(atime, mtime))
            except OSError:
                pass


def _verify_engine(source: _Source, entry: dict) -> tuple[bool, str | None, str | None]:
    if entry["state"] == "orphan":
        return False, None, "not in the engine's index (left by an interrupted write)"
    if entry["state"] == "temporary":
        return False, None, "temporary file of an interrupted write"
    if source.installed is not None and source.version != source.installed:
        return False, None, (f"written by {source.driver} {source.version}; the installed driver is "
                             f"{source.installed} and never reads it")
    if source.checks is None:
        source.checks = source.engine.verify()
    reason = source.checks.get(entry["name"], "no longer in the engine's index")
    return reason is None, source.driver if reason is None else None, reason


# --- removing ------------------------------------------------------------------------------------------------------
def _removed(source: _Source, entry: dict, reason: str | None, dry_run: bool) -> dict:
    out = {k: entry[k] for k in ("kind", "directory", "name", "token", "files", "size", "last_used", "state")}
    out["reason"] = reason
    if dry_run:
        return out
    if source.kind == "engine" and entry["state"] == "cached":
        source.engine.remove(entry["name"])
    else:
        for name in entry["files"]:
            try:
                (source.path / name).unlink()
            except FileNotFoundError:
                pass
    return out


def _remove_stale_engine_dirs(sources: set[_Source], kept: list[tuple[_Source, dict]]) -> list[str]:
    """Engine directories of a driver version no longer installed, once empty, go entirely."""
    still = {s for s, _ in kept}
    removed = []
    for s in sources:
        if s.kind == "engine" and s.installed is not None and s.version != s.installed and s not in still:
            s._engine = None
            shutil.rmtree(s.path, ignore_errors=True)
            removed.append(str(s.path))
    return sorted(removed)
