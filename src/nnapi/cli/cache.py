"""`nnapi cache ls|verify|prune [DIR] [--engine DRIVER] [--max-size BYTES] [--dry-run] [--json]`: app
cache directories and drivers' caching engines (`nnapi.runtime.cache_admin`)."""
from __future__ import annotations

import argparse
import json
import time

from .checks import CommandError
from .console import stdout_console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi cache`."""
    parser.add_argument("action", choices=("ls", "verify", "prune"))
    parser.add_argument("dir", nargs="?", help="an app cache directory or a caching-engine directory")
    parser.add_argument("--engine", metavar="DRIVER", help="the caching engine of this driver")
    parser.add_argument("--max-size", type=int, help="prune: evict least recently used entries down to BYTES")
    parser.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """List, verify or prune; exit status 1 when `verify` finds a bad entry."""
    from rich.table import Table

    from ..importers.tflite import remembered  # noqa: F401  (registers the import memo's check)
    from ..runtime.cache_admin import list_cache, prune_cache, verify_cache
    try:
        if args.action == "ls":
            result = list_cache(args.dir, engine=args.engine)
        elif args.action == "verify":
            result = verify_cache(args.dir, engine=args.engine)
        else:
            result = prune_cache(args.dir, engine=args.engine, max_size=args.max_size, dry_run=args.dry_run)
    except (ValueError, FileNotFoundError, NotADirectoryError) as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    elif args.action == "prune":
        for entry in result["removed"]:
            print(f"{'would remove' if args.dry_run else 'removed'} {entry.get('name')}: {entry.get('reason')}")
        print(f"{result['size_before']} -> {result['size_after']} bytes, {result['kept']} entries kept")
        for reg in result["registry"]:
            if "error" in reg:
                print(f"{reg['driver']} integrity registry: unusable ({reg['error']})")
            else:
                print(f"{reg['driver']} integrity registry: {reg['rows']} rows kept, {reg['other_versions']} of "
                      f"older driver versions and {reg['unused']} unused rows removed")
    else:
        table = Table(title=f"nnapi cache {args.action} {args.dir or args.engine}")
        columns = ["model (token)", "kind", "device", "cache files", "size", "last used", "state"] + (
            ["ok", "stage", "reason"] if args.action == "verify" else [])
        for col in columns:
            table.add_column(col, justify="right" if col == "size" else "left")
        for entry in result:
            table.add_row(*cache_row(entry, args.action == "verify"))
        stdout_console().print(table)
    if args.action == "verify" and any(not e.get("ok") for e in result):
        return 1
    return 0


def cache_row(entry: dict, verified: bool) -> list[str]:
    """One `nnapi cache ls|verify` table row: the entry's name (which encodes its token), kind, device,
    model / data cache files, size, last use (local time) and state; verify adds ok, stage, reason."""
    files = (f"{entry['model_files']} model, {entry['data_files']} data" if entry["model_files"] is not None
             else "1 import memo" if entry["kind"] == "import" else "1 engine entry")
    row = [entry["name"], entry["kind"], entry.get("device") or "-", files, size_text(entry["size"]),
           time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["last_used"])), entry["state"]]
    if verified:
        row += [str(entry["ok"]), entry.get("stage") or "-", entry.get("reason") or ""]
    return row


def size_text(size: int) -> str:
    """Bytes as `512 B`, `14.0 KiB`, `13.7 MiB`, ..."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
