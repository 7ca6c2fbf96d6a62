"""`nnapi cts PATH... [--device D] [--json FILE] [-k TEXT] [--service] [--ray-address ADDR]`: run the
conformance test vectors; the last line is `N passed, M failed, K skipped` (exit status 1 on failures).

With `--service` the device's driver runs behind an `nnapi serve` started for the run (`run_served`);
with `--ray-address` the vectors are sharded across Ray tasks.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

from .checks import CommandError, device_names, distinct_outputs, non_negative_int, output_file
from .console import Progress, log, stdout_console, tracing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi cts`."""
    parser.add_argument("paths", nargs="+", help="vector files or folders (e.g. ../shared/cts)")
    parser.add_argument("--device", help="run on this device only, or partitioned over a comma-separated list of "
                                         "them (default: all devices, partitioned)")
    parser.add_argument("--json", help="write per-vector results to this file")
    parser.add_argument("-k", help="only vectors whose name contains this text")
    parser.add_argument("--show-failures", type=non_negative_int, default=50, help="failures to print (default 50)")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="write a Chrome / Perfetto trace of the run to this file")
    parser.add_argument("--service", action="store_true",
                        help="run --device's driver behind `nnapi serve` (started in a temporary NNAPI_SERVICE_DIR, "
                             "stopped at the end)")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="shard the vectors across Ray tasks on this cluster ('local': a Ray started for the "
                             "run); same JSON and last line")


def check(args: argparse.Namespace) -> None:
    """`nnapi cts` arguments, before any work."""
    for path in args.paths:
        if not os.path.exists(path):
            raise CommandError(f"{path}: no such file or folder")
        if not os.access(path, os.R_OK):
            raise CommandError(f"{path}: not readable")
    output_file(args.json, "--json")
    output_file(args.trace, "--trace")
    distinct_outputs({"--json": args.json, "--trace": args.trace})
    if not getattr(args, "service", False):  # a served device is checked where the service starts
        device_names([args.device])


def run_served(device: str | None, work: Callable[[], int]) -> int:
    """`nnapi cts --service`: serve `device`'s driver, check the runtime finds it there, run `work`, stop it."""
    from ..runtime import devices
    from ..service.cli import served
    if not device:
        print("nnapi cts --service: name the driver to serve with --device", file=sys.stderr)
        return 2
    try:
        with served([device], log_level="WARNING") as services:
            s = services[device]
            found = next((d for d in devices() if d.name == device), None)
            if found is None or found.pid != s.pid:
                print(f"nnapi cts --service: the runtime does not see {device} served by pid {s.pid}",
                      file=sys.stderr)
                return 1
            print(f"{device}: served by nnapi serve (pid {s.pid}) on {s.socket}", file=sys.stderr)
            status = work()
            if s.process.poll() is not None:
                print(f"nnapi cts --service: the service exited with status {s.process.returncode} during the "
                      "run", file=sys.stderr)
                return 1
            return status
    except RuntimeError as e:
        print(f"nnapi cts --service: {e}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    """Run the vectors, print the failures, the per-operation table and the summary line."""
    sharded = getattr(args, "ray_address", None)
    if getattr(args, "service", False) and not sharded:  # (sharded: one service per task)
        return run_served(args.device, lambda: run(argparse.Namespace(**{**vars(args), "service": False})))
    from rich.table import Table

    from ..conformance.runner import run_vectors, summarize
    from ..conformance.vectors import load_vectors

    try:
        tests = list(load_vectors(args.paths, args.k))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CommandError(f"cannot read the test vectors: {type(e).__name__}: {e}") from None
    log.info("%d test vectors from %s", len(tests), ", ".join(args.paths))
    start = time.perf_counter()
    failures = []
    tally = {"failed": 0, "skipped": 0}
    with tracing(args.trace), Progress("cts", total=len(tests)) as progress:
        def step(r: Any) -> None:
            if r.status == "failed":
                failures.append(r)
            if r.status in tally:
                tally[r.status] += 1
            progress.update(1, f"{tally['failed']} failed, {tally['skipped']} skipped")

        if sharded:
            from ..conformance.sharded import run_sharded
            results = run_sharded(args.paths, args.k, args.device, args.ray_address,
                                  served=run_served if args.service else None,
                                  progress=lambda shard: [step(r) for r in shard])
        else:
            results = run_vectors(tests, args.device, step)
    elapsed = time.perf_counter() - start
    summary = summarize(results)
    out = stdout_console()
    for r in failures[:args.show_failures]:
        out.print(f"[red]FAILED[/red] {r.name} ({r.source}): {r.reason}", markup=True, highlight=False)
    if len(failures) > args.show_failures:
        out.print(f"... and {len(failures) - args.show_failures} more failures")
    table = Table(title=f"per operation ({args.device or 'all devices'})")
    for col in ("operation", "passed", "failed", "skipped"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    for op, counts in summary["operations"].items():
        table.add_row(op, str(counts.get("passed", 0)), str(counts.get("failed", 0)), str(counts.get("skipped", 0)))
    out.print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": {k: summary[k] for k in ("passed", "failed", "skipped", "total")}
                       | {"device": args.device, "seconds": round(elapsed, 2)},
                       "results": [{"name": r.name, "source": r.source, "status": r.status, "reason": r.reason,
                                    "operations": r.operations} for r in results]}, f, indent=1)
    print(f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped")
    return 1 if summary["failed"] else 0
