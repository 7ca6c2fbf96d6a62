"""nnapi vs LiteRT on the shared `.tflite` models (../shared/models), in one run on this machine.

For each model: LiteRT 2.3.0 (`ai-edge-litert`, XNNPACK, `--threads` threads) and nnapi on each device
alone: load (LiteRT: interpreter + allocate; nnapi: import), nnapi's cold and cached prepare, first
inference, p50 and p90 of `--runs` runs after 5 warm-ups; ratios are nnapi / LiteRT (> 1: slower).
The thread count also caps numpy's BLAS and XLA's CPU threads. Without `ai-edge-litert` installed
(`pip install -e '.[bench]'`) the LiteRT columns are empty and only nnapi figures are reported.

    python benchmarks/vs_litert.py [--models NAME,...] [--devices reference,xla] [--runs 50] [--threads 1]

Prints a table and, as the last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("NNAPI_SHARED_MODELS", ROOT.parent / "shared" / "models"))


def _limit_threads(n: int) -> None:
    """Before numpy / jax load: cap BLAS and XLA CPU threads at `n`."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    if n == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()


def litert_figures(path: pathlib.Path, threads: int, runs: int, warmup: int = 5) -> dict:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from nnapi.cli import random_inputs
    from nnapi.importers import TensorInfo
    start = time.perf_counter()
    interp = Interpreter(model_path=str(path), num_threads=threads)
    interp.allocate_tensors()
    load_ms = (time.perf_counter() - start) * 1000
    details = interp.get_input_details()
    infos = [TensorInfo(d["name"], tuple(d["shape"]), np.dtype(d["dtype"]), *d["quantization"]) for d in details]
    for d, x in zip(details, random_inputs(infos)):
        interp.set_tensor(d["index"], x)

    def once() -> float:
        t = time.perf_counter()
        interp.invoke()
        return (time.perf_counter() - t) * 1000

    first = once()
    for _ in range(warmup):
        once()
    times = sorted(once() for _ in range(runs))
    return {"load_ms": round(load_ms, 3), "first_ms": round(first, 4),
            "p50_ms": round(float(np.percentile(times, 50)), 4), "p90_ms": round(float(np.percentile(times, 90)), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated model names (default: all in models.json)")
    parser.add_argument("--devices", help="comma-separated nnapi devices (default: every device)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    _limit_threads(args.threads)

    import nnapi
    from nnapi.cli import bench_model
    from nnapi.importers import UnsupportedOperatorsError

    try:
        import ai_edge_litert  # noqa: F401
        litert_ok = True
    except ImportError:
        litert_ok = False
    catalog = json.loads((SHARED / "models.json").read_text())
    names = args.models.split(",") if args.models else list(catalog)
    devices = args.devices.split(",") if args.devices else [d.name for d in nnapi.devices()]
    results = []
    for name in names:
        entry = catalog[name]
        path = SHARED / entry["file"]
        row: dict = {"model": name, "litert": None, "nnapi": {}}
        if litert_ok:
            try:
                row["litert"] = litert_figures(path, args.threads, args.runs)
            except Exception as e:  # e.g. a custom operator stock LiteRT cannot run
                row["litert"] = {"error": str(e).splitlines()[0][:200]}
        for device in devices:
            try:
                figures = bench_model(str(path), device=device, runs=args.runs)
            except UnsupportedOperatorsError as e:
                figures = {"error": "unsupported: " + ", ".join(sorted({p.operator for p in e.problems}))}
            except nnapi.NnError as e:
                figures = {"error": f"{e.code.name}: {e.message.splitlines()[0][:200]}"}
            lite = row["litert"]
            if lite and "error" not in lite and "error" not in figures:
                figures["ratio"] = {
                    "load": round(figures["import_s"] * 1000 / lite["load_ms"], 2),
                    "load_plus_cached_prepare": round((figures["import_s"] + figures["prepare_cached_s"]) * 1000
                                                      / lite["load_ms"], 2),
                    "first": round(figures["first_execute_ms"] / lite["first_ms"], 2),
                    "p50": round(figures["execute_p50_ms"] / lite["p50_ms"], 2),
                    "p90": round(figures["execute_p90_ms"] / lite["p90_ms"], 2)}
            row["nnapi"][device] = figures
            print(f"... {name} on {device} done", file=sys.stderr, flush=True)
        results.append(row)

    from rich.console import Console
    from rich.table import Table
    title = (f"nnapi vs LiteRT {'2.3.0 XNNPACK' if litert_ok else '(not installed: nnapi figures only)'}, "
             f"{args.threads} thread(s), {args.runs} runs (ms; ratio = nnapi / LiteRT)")
    table = Table(title=title)
    for col in ("model", "device", "load", "prepare cold", "prepare cached", "first", "p50", "p90",
                "ratio load", "ratio first", "ratio p50", "ratio p90"):
        table.add_column(col, justify="left" if col in ("model", "device") else "right")
    for row in results:
        lite = row["litert"]
        if lite is not None:
            if "error" in lite:
                table.add_row(row["model"], "LiteRT", lite["error"][:40], "", "", "", "", "", "", "", "", "")
            else:
                table.add_row(row["model"], "LiteRT", f"{lite['load_ms']:.2f}", "", "", f"{lite['first_ms']:.2f}",
                              f"{lite['p50_ms']:.2f}", f"{lite['p90_ms']:.2f}", "", "", "", "")
        for device, f in row["nnapi"].items():
            if "error" in f:
                table.add_row(row["model"] if lite is None else "", device, f["error"][:40], *[""] * 9)
                continue
            r = f.get("ratio", {})
            table.add_row("" if lite is not None else row["model"], device, f"{f['import_s'] * 1000:.2f}",
                          f"{f['prepare_cold_s'] * 1000:.1f}", f"{f['prepare_cached_s'] * 1000:.1f}",
                          f"{f['first_execute_ms']:.2f}", f"{f['execute_p50_ms']:.2f}", f"{f['execute_p90_ms']:.2f}",
                          *(f"{r[k]:.2f}" if k in r else "-" for k in ("load", "first", "p50", "p90")))
    Console(width=200).print(table)
    print(json.dumps({"litert_installed": litert_ok, "threads": args.threads, "runs": args.runs,
                      "machine_cpus": os.cpu_count(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
