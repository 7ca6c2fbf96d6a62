"""The `nnapi` command: devices, cts (conformance vectors)."""
from __future__ import annotations

import argparse
import json
import sys
import time


def _cmd_devices(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .runtime import devices
    devs = devices()
    if args.json:
        print(json.dumps([{"name": d.name, "version": d.version, "type": d.type.name,
                           "feature_level": d.feature_level, "cache_files": list(d.cache_files),
                           "performance": {p.type.name: {"exec_time": p.info.exec_time,
                                                         "power_usage": p.info.power_usage}
                                           for p in d.capabilities.operand_performance}} for d in devs], indent=2))
        return 0
    table = Table(title="nnapi devices")
    for col in ("name", "version", "type", "feature level", "cache files (model, data)", "float32 exec time"):
        table.add_column(col)
    from .hal import OperandType
    for d in devs:
        table.add_row(d.name, d.version, d.type.name, str(d.feature_level), str(d.cache_files),
                      f"{d.capabilities.performance(OperandType.TENSOR_FLOAT32).exec_time:g}")
    Console().print(table)
    return 0


def _cmd_cts(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from .conformance.runner import run_vectors, summarize
    from .conformance.vectors import load_vectors

    console = Console(stderr=True)
    tests = list(load_vectors(args.paths, args.k))
    start = time.perf_counter()
    failures = []
    with Progress(TextColumn("cts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("", total=len(tests))

        def step(r) -> None:
            if r.status == "failed":
                failures.append(r)
            progress.update(task, advance=1, description=f"{len(failures)} failed")

        results = run_vectors(tests, args.device, step)
    elapsed = time.perf_counter() - start
    summary = summarize(results)
    out = Console()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nnapi", description="Android Neural Networks API stack in Python")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list devices and their capabilities")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("cts", help="run NNAPI conformance test vectors")
    p.add_argument("paths", nargs="+", help="vector files or folders (e.g. ../shared/cts)")
    p.add_argument("--device", help="run on this device only (default: all devices, partitioned)")
    p.add_argument("--json", help="write per-vector results to this file")
    p.add_argument("-k", help="only vectors whose name contains this text")
    p.add_argument("--show-failures", type=int, default=50, help="failures to print (default 50)")
    p.set_defaults(func=_cmd_cts)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
