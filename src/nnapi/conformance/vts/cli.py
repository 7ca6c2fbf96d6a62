"""The `nnapi vts` command: certify one driver found through `nnapi.devices()`.

    nnapi vts --device NAME [--suite SUITE,...] [--json FILE] [-k TEXT] [--quick]
              [--vectors PATH] [--timeout SECONDS]

A progress bar on a terminal, plain progress lines otherwise; every failure names the check, the
behaviour of VTS-BEHAVIOURS.md it mirrors and what the driver did instead; the last line is
`N passed, M failed, K skipped`; the exit status is 1 when anything failed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .core import SUITES


def add_parser(sub: Any) -> None:
    """Register `vts` on the `nnapi` command's subparsers."""
    p = sub.add_parser("vts", help="certify one driver (VTS-style HAL suites plus runtime checks)",
                       description="Run the certification kit on one device: " + ", ".join(SUITES) + ".")
    p.add_argument("--device", required=True, help="the device to certify (a name from `nnapi devices`)")
    p.add_argument("--suite", help=f"comma-separated suites (default all: {','.join(SUITES)})")
    p.add_argument("--json", help="write every check's result to this file")
    p.add_argument("-k", help="only checks whose id contains this text")
    p.add_argument("--quick", action="store_true",
                   help="a stratified sample of the vector corpus and fewer repetitions (minutes, not a quarter hour)")
    p.add_argument("--vectors", help="the test-vector corpus folder (default: $NNAPI_CTS_DIR or ../shared/cts)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds any single driver call or awaited callback may take before it fails (default 60)")
    p.add_argument("--show-failures", type=int, default=50, help="failures to print in full (default 50)")
    p.add_argument("--show-skips", action="store_true", help="also print every skipped check and its reason")
    p.set_defaults(func=main, check=_check)


def _check(args: argparse.Namespace) -> None:
    """Before any work: the --json file can be written (as `nnapi cts` checks it; a `CommandError`,
    one line and exit status 2)."""
    from ...cli.checks import output_file  # the command's own check
    output_file(args.json, "--json")


def _suites(text: str | None) -> list[str]:
    if not text:
        return list(SUITES)
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SUITES]
    if unknown:
        raise SystemExit(f"nnapi vts: unknown suite {', '.join(unknown)} (suites: {', '.join(SUITES)})")
    return wanted


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
    from rich.text import Text

    from ...cli.console import stdout_console
    from ...hal import NnError
    from ...runtime import find_device
    from . import collect
    from .core import Kit, Options, per_suite, run_checks, summarize
    from .corpus import find_corpus

    suites = _suites(args.suite)
    try:
        device = find_device(args.device)
    except NnError as e:
        print(f"nnapi vts: {e.message}", file=sys.stderr)
        return 2
    try:
        vectors = find_corpus(args.vectors)
    except FileNotFoundError as e:
        print(f"nnapi vts: {e}", file=sys.stderr)
        return 2
    kit = Kit(device, Options(quick=args.quick, timeout=args.timeout, vectors=vectors))
    err = Console(stderr=True, highlight=False, markup=False)
    out = stdout_console(highlight=False, markup=False)
    start = time.perf_counter()
    failures: list = []
    try:
        checks = collect(kit, suites, args.k)
        where = getattr(device, "where", "in-process")
        err.print(f"nnapi vts: {len(checks)} checks on {device.name} {device.version} ({where}) "
                  f"({'quick' if args.quick else 'full'}; suites {','.join(suites)}; "
                  f"vectors {vectors if vectors else 'not found'})")
        interactive = err.is_terminal
        counts = {"failed": 0, "skipped": 0}
        last_line = [time.perf_counter(), ""]

        with Progress(TextColumn("vts {task.fields[suite]}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("{task.description}"), console=err, transient=True,
                      disable=not interactive) as progress:
            task = progress.add_task("", total=len(checks), suite="")

            def step(result, done: int, total: int) -> None:
                if result.status == "failed":
                    failures.append(result)
                    counts["failed"] += 1
                    if len(failures) <= args.show_failures:
                        err.print(Text.assemble(("FAILED", "red"), f" {result.id}: {result.message}"))
                elif result.status == "skipped":
                    counts["skipped"] += 1
                progress.update(task, advance=1, suite=result.suite,
                                description=f"{counts['failed']} failed, {counts['skipped']} skipped")
                if not interactive:
                    now = time.perf_counter()
                    suite_done = done == total or checks[done].suite != result.suite
                    if suite_done or now - last_line[0] >= 10:
                        last_line[0] = now
                        err.print(f"vts: {done}/{total} checks ({result.suite}), {counts['failed']} failed, "
                                  f"{counts['skipped']} skipped, {now - start:.0f} s")

            results = run_checks(kit, checks, step)
    finally:
        kit.close()
    elapsed = time.perf_counter() - start
    summary = summarize(results)
    for r in failures[:args.show_failures]:
        out.print(r.describe())
    if len(failures) > args.show_failures:
        out.print(f"... and {len(failures) - args.show_failures} more failures (see --json)")
    if args.show_skips:
        for r in results:
            if r.status == "skipped":
                out.print(r.describe())
    table = Table(title=f"nnapi vts on {device.name} ({'quick' if args.quick else 'full'}, {elapsed:.0f} s)")
    for col in ("suite", "passed", "failed", "skipped"):
        table.add_column(col, justify="left" if col == "suite" else "right")
    for suite, c in per_suite(results).items():
        table.add_row(suite, str(c["passed"]), str(c["failed"]), str(c["skipped"]))
    out.print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary | {"device": device.name, "version": device.version,
                                             "where": getattr(device, "where", "in-process"), "quick": args.quick,
                                             "suites": suites, "seconds": round(elapsed, 2),
                                             "per_suite": per_suite(results)},
                       "results": [{"id": r.id, "suite": r.suite, "behaviour": r.behaviour, "status": r.status,
                                    "message": r.message, "seconds": r.seconds,
                                    **({"detail": r.detail} if r.detail else {})} for r in results]}, f, indent=1)
    print(f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped")
    return 1 if summary["failed"] else 0
