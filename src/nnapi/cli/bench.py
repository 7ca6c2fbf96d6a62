"""`nnapi bench MODEL [--device D] [--runs N] [--warmup N] [--json FILE] [--plot FILE.png] ...`: time a
`.tflite` model with the benchmark library (`nnapi.bench`): import, cold and cached prepare, first,
warm-up and timed executions; a table, then the figures as one JSON line."""
from __future__ import annotations

import argparse
import json

from .checks import milliseconds, non_negative_int, positive_int
from .console import Progress, stdout_console, tracing
from .inputs import add_model_arguments
from .inputs import check_model_args as check  # noqa: F401  (the table runs it before `run`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi bench`."""
    add_model_arguments(parser)
    parser.add_argument("--cache-dir", help="where the cold / cached prepare writes its cache (a fresh subfolder)")
    parser.add_argument("--runs", type=positive_int, default=50, help="timed executions (default 50)")
    parser.add_argument("--warmup", type=non_negative_int, default=5, help="untimed executions first (default 5)")
    parser.add_argument("--no-wait-optimized", action="store_true",
                        help="time the executable as prepared (xla: the quick one) instead of waiting for the "
                             "optimised one")
    parser.add_argument("--timeout-ms", type=milliseconds, help="deadline of each timed execution in "
                                                                "milliseconds; misses are counted (0: no timeout, "
                                                                "the default)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plot", metavar="FILE.png", help="draw every run's latency over time, its histogram and "
                                                           "cold vs cached preparation (needs matplotlib: "
                                                           "nnapi[plot])")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="write a Chrome / Perfetto trace of the benchmark to this file")


def run(args: argparse.Namespace) -> int:
    """Benchmark the model; print the table and the figures (and write --json / --plot)."""
    from rich.table import Table

    from ..bench import bench_model, plot_bench
    timeline: list[dict] = []
    with tracing(args.trace), Progress("bench", total=1 + args.warmup + args.runs) as progress:
        result = bench_model(args.model, args.device, args.cache_dir, args.runs, warmup=args.warmup,
                             priority=args.priority, timeout_ms=args.timeout_ms, preference=args.preference,
                             wait_optimized=not args.no_wait_optimized, timeline=timeline,
                             progress=lambda advance, note: progress.update(advance, note), relaxed=args.relaxed)
    stages = ", ".join(f"{s['device']} {s['stage'] or 'single-stage'}" for s in result["stages"])
    table = Table(title=f"nnapi bench {result['model']} on {result['device']} ({result['runs']} runs)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    first = "deadline missed" if result["first_execute_ms"] is None else f"{result['first_execute_ms']:.3f} ms"
    rows = [("import (load)", f"{result['import_s'] * 1000:.2f} ms"),
            ("prepare, cold cache", f"{result['prepare_cold_s'] * 1000:.2f} ms ({', '.join(result['cache']['cold'])})"),
            ("prepare, cached", f"{result['prepare_cached_s'] * 1000:.2f} ms ({', '.join(result['cache']['cached'])})"),
            ("first execute", first),
            ("warm-up runs", str(result["warmup"])),
            ("executable timed", stages + (" (changed during the runs)" if result["stage_changed"] else "")
             + (f"; waited {result['optimize_wait_s']:.2f} s for it" if result["optimize_wait_s"] else "")),
            ("execute p50", f"{result['execute_p50_ms']} ms"),
            ("execute p90", f"{result['execute_p90_ms']} ms"),
            ("deadline misses", f"{result['deadline_miss_rate']:.1%}" + (
                f" (timeout {result['timeout_ms']} ms)" if result["timeout_ms"] else " (no timeout)"))]
    for name, value in rows:
        table.add_row(name, value)
    stdout_console().print(table)
    if args.plot:
        plot_bench(result, timeline, args.plot)
        print(f"plot written to {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0
