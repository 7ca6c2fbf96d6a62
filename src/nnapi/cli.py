"""The `nnapi` command: devices, cts (conformance vectors), run and bench (`.tflite` models)."""
from __future__ import annotations

import argparse
import json
import os
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


# --- run and bench: a `.tflite` model end to end -----------------------------------------------------
_PRIORITIES = {"low": 90, "medium": 100, "high": 110}
_PREFERENCE_HELP = ("fast-single-answer (default), sustained-speed (xla: compile the optimised executable at "
                    "once) or low-power")


def _preference_name(preference: int) -> str:
    """The command-line name of an ExecutionPreference: its name in lower case with dashes."""
    from .hal import ExecutionPreference
    return ExecutionPreference(preference).name.lower().replace("_", "-")


def _preference_arg(text: str) -> int:
    from .hal import ExecutionPreference
    names = {_preference_name(p): int(p) for p in ExecutionPreference}
    value = text.strip().lower().replace("_", "-")
    if value not in names:
        raise argparse.ArgumentTypeError(f"preference must be one of {', '.join(names)}, got {text!r}")
    return names[value]


def _priority_arg(text: str) -> int:
    value = text.strip().lower()
    if value in _PRIORITIES:
        return _PRIORITIES[value]
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}") from None
    if number not in _PRIORITIES.values():
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}")
    return number


def random_inputs(infos, seed: int = 0) -> list:
    """Random data for each input: floats in [-1, 1), integers in [0, 10) (valid token ids for
    embedding models), quantized values over their whole range."""
    import numpy as np
    rng = np.random.default_rng(seed)
    arrays = []
    for info in infos:
        dt = np.dtype(info.dtype)
        if dt.kind == "f":
            arrays.append(rng.uniform(-1, 1, info.shape).astype(dt))
        elif dt == np.bool_:
            arrays.append(rng.integers(0, 2, info.shape).astype(dt))
        elif info.scale:
            limits = np.iinfo(dt)
            arrays.append(rng.integers(limits.min, int(limits.max) + 1, info.shape).astype(dt))
        else:
            arrays.append(rng.integers(0, 10, info.shape).astype(dt))
    return arrays


def load_inputs(path: str | None, infos) -> tuple[list, list[str]]:
    """Inputs from an .npz (keys: input names or input_0, input_1, ...), random where absent.
    Returns the arrays and, per input, where it came from."""
    import numpy as np
    from .hal import NnError, ResultCode
    arrays = random_inputs(infos)
    sources = ["random"] * len(infos)
    if path is None:
        return arrays, sources
    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise NnError(ResultCode.BAD_DATA, f"cannot read inputs from {path}: {e}") from None
    for k, info in enumerate(infos):
        key = info.name if info.name in data.files else f"input_{k}" if f"input_{k}" in data.files else None
        if key is None:
            continue
        value = data[key]
        if int(np.prod(value.shape)) != int(np.prod(info.shape)):
            raise NnError(ResultCode.BAD_DATA, f"{path}: {key} has shape {list(value.shape)}, input {k} "
                                               f"({info.name}) needs {list(info.shape)}")
        arrays[k] = np.ascontiguousarray(value, dtype=info.dtype).reshape(info.shape)
        sources[k] = f"{path}:{key}"
    return arrays, sources


def _partitions(compilation) -> list[dict]:
    """Where each partition ran: device, operation count and kinds, cache outcome."""
    from collections import Counter
    rows = []
    for k, step in enumerate(compilation.steps):
        ops = Counter(step.model.main.operations[i].type.name for i in range(len(step.model.main.operations)))
        cache = step.cache
        rows.append({"partition": k, "device": step.device.name, "operations": len(step.operations),
                     "kinds": dict(ops.most_common()),
                     "cache": getattr(cache, "outcome", None), "reason": getattr(cache, "reason", "")})
    return rows


def _compile(imported, devices, cache_dir, priority=100, timeout=None, preference=1):
    from .runtime import Compilation
    start = time.perf_counter()
    compilation = Compilation(imported.model, devices=devices, priority=priority, preference=preference,
                              cache_dir=cache_dir, token=imported.token() if cache_dir else None,
                              timeout=timeout).finish()
    return compilation, time.perf_counter() - start


def _summary(array, info, top: int = 5) -> str:
    import numpy as np
    flat = np.asarray(array).reshape(-1)
    real = flat.astype(np.float64)
    if info.scale:
        real = (real - info.zero_point) * info.scale
    order = np.argsort(-real, kind="stable")[:top]
    tops = ", ".join(f"[{int(i)}] {real[i]:.4g}" for i in order)
    return (f"{info.name} {np.asarray(array).dtype}{list(np.shape(array))}: min {real.min():.4g} max {real.max():.4g} "
            f"mean {real.mean():.4g}; top {min(top, flat.size)}: {tops}")


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np
    from .hal import NnError
    from .importers import load_tflite
    from .runtime import devices as all_devices
    try:
        start = time.perf_counter()
        imported = load_tflite(args.model)
        import_s = time.perf_counter() - start
        print(f"model {args.model}: {len(imported.inputs)} inputs, {len(imported.outputs)} outputs, "
              f"{sum(imported.operators.values())} TFLite operators -> {sum(imported.operations.values())} NNAPI "
              f"operations; weights: {imported.referenced_bytes} bytes referenced in the file, "
              f"{imported.copied_bytes} bytes computed at import; import {import_s * 1000:.1f} ms")
        inputs, sources = load_inputs(args.inputs, imported.inputs)
        for info, source in zip(imported.inputs, sources):
            print(f"  input  {info}  <- {source}")
        start = time.perf_counter()
        found = all_devices()  # driver discovery happens once per process: not part of the prepare time
        print(f"devices: {', '.join(d.name for d in found)} (discovered in {(time.perf_counter() - start) * 1000:.1f} ms)")
        devices = [args.device] if args.device else None
        timeout = args.timeout_ms / 1000 if args.timeout_ms else None
        if args.cache_dir:
            os.makedirs(args.cache_dir, exist_ok=True)
        compilation, prepare_s = _compile(imported, devices, args.cache_dir, args.priority,
                                          preference=args.preference)
        print(f"prepare {prepare_s * 1000:.1f} ms")
        for row in _partitions(compilation):
            kinds = ", ".join(f"{k}x{n}" for k, n in row["kinds"].items())
            cache = f"cache {row['cache']}" + (f" ({row['reason']})" if row["reason"] else "")
            print(f"  partition {row['partition']} on {row['device']}: {row['operations']} operations ({kinds}); "
                  f"{cache}")
        start = time.perf_counter()
        outputs = compilation.execute(inputs, timeout=timeout)
        execute_s = time.perf_counter() - start
        print(f"execute {execute_s * 1000:.1f} ms")
        for info, value in zip(imported.outputs, outputs):
            print(f"  output {_summary(value, info)}")
        if args.save_outputs:
            np.savez(args.save_outputs, **{f"output_{k}": v for k, v in enumerate(outputs)})
            print(f"outputs saved to {args.save_outputs}")
    except NnError as e:
        print(f"nnapi run: {e.code.name}: {e.message}", file=sys.stderr)
        return 1
    return 0


def _percentile(values: list[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(values), q))


def warm_up_devices(names: list[str] | None = None) -> None:
    """Compile and run a one-operation model (ADD of two float32 [2]) on each device (all when
    `names` is None), so a process's one-time costs are paid before anything is timed."""
    import numpy as np
    from .hal import OperandType as T, OperationType as Op
    from .runtime import Compilation, Model, devices as all_devices
    for device in (names or [d.name for d in all_devices()]):
        m = Model()
        a, b = m.add_operand(T.TENSOR_FLOAT32, (2,)), m.add_operand(T.TENSOR_FLOAT32, (2,))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        out = m.add_operand(T.TENSOR_FLOAT32, (2,))
        m.add_operation(Op.ADD, [a, b, act], [out])
        m.identify_inputs_and_outputs([a, b], [out])
        m.finish()
        Compilation(m, devices=[device]).finish().execute([np.ones(2, np.float32)] * 2)


def bench_model(path: str, device: str | None = None, cache_dir: str | None = None, runs: int = 50,
                warmup: int = 5, priority=100, timeout_ms: float | None = None, preference: int = 1) -> dict:
    """Import, prepare cold (empty cache) and cached, run first / warm-up / `runs` timed executions.
    Returns the figures `nnapi bench` prints (times in seconds or milliseconds as named)."""
    import shutil
    import tempfile

    from .hal import NnError, ResultCode
    from .importers import load_tflite
    from .importers.tflite import _graph_class
    from .runtime import Execution
    # Driver discovery, module imports and a compiler's own start-up happen once per process: not
    # part of the figures.
    warm_up_devices([device] if device else None)
    _graph_class()
    start = time.perf_counter()
    imported = load_tflite(path)
    import_s = time.perf_counter() - start
    inputs = random_inputs(imported.inputs)
    devices = [device] if device else None
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="nnapi-bench-", dir=cache_dir)
    try:
        cold, cold_s = _compile(imported, devices, scratch, priority, preference=preference)
        cached, cached_s = _compile(imported, devices, scratch, priority, preference=preference)
        start = time.perf_counter()
        Execution(cached).run(inputs)
        first_ms = (time.perf_counter() - start) * 1000
        for _ in range(warmup):
            Execution(cached).run(inputs)
        times = []
        missed = {"transient": 0, "persistent": 0}
        timeout = None if timeout_ms is None else timeout_ms / 1000
        for _ in range(max(runs, 1)):
            start = time.perf_counter()
            try:
                Execution(cached).run(inputs, timeout=timeout)
            except NnError as e:
                if e.code == ResultCode.MISSED_DEADLINE_TRANSIENT:
                    missed["transient"] += 1
                    continue
                if e.code == ResultCode.MISSED_DEADLINE_PERSISTENT:
                    missed["persistent"] += 1
                    continue
                raise
            times.append((time.perf_counter() - start) * 1000)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    partitions = _partitions(cached)
    return {
        "model": os.path.basename(path),
        "device": "+".join(dict.fromkeys(row["device"] for row in partitions)),
        "import_s": round(import_s, 6),
        "prepare_cold_s": round(cold_s, 6),
        "prepare_cached_s": round(cached_s, 6),
        "first_execute_ms": round(first_ms, 4),
        "execute_p50_ms": round(_percentile(times, 50), 4) if times else None,
        "execute_p90_ms": round(_percentile(times, 90), 4) if times else None,
        "runs": len(times),
        "priority": priority,
        "preference": _preference_name(preference),
        "timeout_ms": timeout_ms,
        "deadline_miss_rate": round((missed["transient"] + missed["persistent"]) / max(runs, 1), 4),
        "missed_transient": missed["transient"],
        "missed_persistent": missed["persistent"],
        "cache": {"cold": [row["cache"] for row in _partitions(cold)], "cached": [row["cache"] for row in partitions]},
        "partitions": [{"device": row["device"], "operations": row["operations"]} for row in partitions],
    }


def _cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .hal import NnError
    try:
        result = bench_model(args.model, args.device, args.cache_dir, args.runs, priority=args.priority,
                             timeout_ms=args.timeout_ms, preference=args.preference)
    except NnError as e:
        print(f"nnapi bench: {e.code.name}: {e.message}", file=sys.stderr)
        return 1
    table = Table(title=f"nnapi bench {result['model']} on {result['device']} ({result['runs']} runs)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("import (load)", f"{result['import_s'] * 1000:.2f} ms"),
            ("prepare, cold cache", f"{result['prepare_cold_s'] * 1000:.2f} ms ({', '.join(result['cache']['cold'])})"),
            ("prepare, cached", f"{result['prepare_cached_s'] * 1000:.2f} ms ({', '.join(result['cache']['cached'])})"),
            ("first execute", f"{result['first_execute_ms']:.3f} ms"),
            ("execute p50", f"{result['execute_p50_ms']} ms"),
            ("execute p90", f"{result['execute_p90_ms']} ms"),
            ("deadline misses", f"{result['deadline_miss_rate']:.1%}" + (
                f" (timeout {result['timeout_ms']} ms)" if result["timeout_ms"] else " (no timeout)"))]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    """`nnapi cache ls|verify|prune`: app cache directories and drivers' caching engines."""
    from rich.console import Console
    from rich.table import Table

    from .runtime.cache_admin import list_cache, prune_cache, verify_cache
    try:
        if args.action == "ls":
            result = list_cache(args.dir, engine=args.engine)
        elif args.action == "verify":
            result = verify_cache(args.dir, engine=args.engine)
        else:
            result = prune_cache(args.dir, engine=args.engine, max_size=args.max_size, dry_run=args.dry_run)
    except (ValueError, FileNotFoundError) as e:
        print(f"nnapi cache: {e}", file=sys.stderr)
        return 2
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
        columns = ["name", "kind", "size", "state"] + (["ok", "device", "reason"] if args.action == "verify" else [])
        for col in columns:
            table.add_column(col)
        for entry in result:
            table.add_row(*(str(entry.get(c, "")) for c in columns))
        Console().print(table)
    if args.action == "verify" and any(not e.get("ok") for e in result):
        return 1
    return 0


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
    p = sub.add_parser("run", help="import a .tflite model, compile and run it once")
    p.add_argument("model", help="a .tflite file")
    p.add_argument("--device", help="run on this device only (default: all devices, partitioned)")
    p.add_argument("--cache-dir", help="compilation cache directory (a second run hits the cache)")
    p.add_argument("--priority", type=_priority_arg, default=100, help="low, medium (default) or high")
    p.add_argument("--timeout-ms", type=float, help="execution deadline in milliseconds")
    p.add_argument("--preference", type=_preference_arg, default=1, help=_PREFERENCE_HELP)
    p.add_argument("--inputs", help=".npz with the inputs (keys: input names or input_0, input_1, ...); "
                                    "random data where absent")
    p.add_argument("--save-outputs", help="write the outputs to this .npz (output_0, output_1, ...)")
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("bench", help="time a .tflite model: import, cold and cached prepare, executions")
    p.add_argument("model", help="a .tflite file")
    p.add_argument("--device", help="run on this device only (default: all devices, partitioned)")
    p.add_argument("--cache-dir", help="where the cold / cached prepare writes its cache (a fresh subfolder)")
    p.add_argument("--runs", type=int, default=50, help="timed executions after 5 warm-ups (default 50)")
    p.add_argument("--priority", type=_priority_arg, default=100, help="low, medium (default) or high")
    p.add_argument("--timeout-ms", type=float, help="deadline of each timed execution; misses are counted")
    p.add_argument("--preference", type=_preference_arg, default=1, help=_PREFERENCE_HELP)
    p.add_argument("--json", help="write the figures to this file")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("cache", help="list, verify or prune compilation caches")
    p.add_argument("action", choices=("ls", "verify", "prune"))
    p.add_argument("dir", nargs="?", help="an app cache directory or a caching-engine directory")
    p.add_argument("--engine", metavar="DRIVER", help="the caching engine of this driver")
    p.add_argument("--max-size", type=int, help="prune: evict least recently used entries down to BYTES")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_cache)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
