"""nnapi vs LiteRT on the shared `.tflite` models (../shared/models), side by side in one process.

For each thread count and model: LiteRT 2.3.0 (`ai-edge-litert`, XNNPACK, the same thread count) and
nnapi on each target (`openvino` alone, `default` = all devices, partitioned, or any device name; a
`:relaxed` suffix, e.g. `openvino:relaxed`, loads the model with relax_computation_float32_to_float16 set,
and its row says the precision OpenVINO computes it in):
- preparation: cold (empty cache directory, so it includes the NNAPI -> device graph build and the
  compile) and cached (the same cache directory again), side by side, with the ratio of their medians
  over `--prepare-runs` pairs (each cold one in a directory of its own); the cached preparation also
  once in a new process (as after an app restart: nothing of the compilation in memory);
- execution: each nnapi target through its session's `run` (what `nnapi.load(...).run` gives an app: a
  feed of the shapes it ran before reuses its prepared request); after warm-ups, the targets run round-robin
  (every runtime once per round, `--runs` rounds, in an order drawn anew each round), so machine noise
  hits every runtime alike and each runtime runs after every other about equally often (a rotation would
  have the first nnapi target follow LiteRT, whose threads still spin, 3 rounds in 4); p50 / p90 per
  target and the ratio of
  p50s to LiteRT's (> 1: slower);
- outputs: nnapi's outputs on the model's reference input are checked against LiteRT's
  (../shared/models/reference/<name>.npz) with LiteRT's tolerances (float: 1e-3 of the largest value;
  int8: 99% within +-2 LSB, or the share LiteRT's own kernel sets agree on, and the same top-1); a relaxed
  target's float outputs within the CTS's relaxed tolerance (5 * 2^-10) of the largest value.
The openvino driver reads its thread count (NNAPI_OPENVINO_THREADS) at each preparation, so both thread
counts run in this one process. Without `ai-edge-litert` installed the LiteRT columns are empty.

    python benchmarks/vs_litert.py [--models NAME,...] [--targets openvino,default,openvino:relaxed]
                                     [--threads 1,2] [--runs 50]

Prints a table per thread count and, as the last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("NNAPI_SHARED_MODELS", ROOT.parent / "shared" / "models"))


def _limit_threads(n: int) -> None:
    """Before numpy / jax load: cap BLAS and XLA CPU threads at `n`."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))


#: A relaxed target's float outputs: the CTS's tolerance for relaxed float32, of the largest value.
RELAXED_TOLERANCE = 5 * 2**-10


def check_outputs(got: list, ref, float_tolerance: float = 1e-3) -> tuple[bool, str]:
    """nnapi's outputs against LiteRT's reference outputs, with LiteRT's tolerances (tests/test_models.py)."""
    import numpy as np
    notes, ok = [], True
    for k, g in enumerate(got):
        want = ref[f"output_{k}"]
        g = np.asarray(g).reshape(want.shape)
        if want.dtype.kind == "f":
            err = float(np.abs(g.astype(np.float64) - want).max()) / (float(np.abs(want).max()) or 1.0)
            ok &= err <= float_tolerance
            notes.append(f"{err:.1e}")
            continue
        other = ref[f"output_{k}_refkernels"] if f"output_{k}_refkernels" in ref.files else want

        def share(a, b):
            return float(np.mean(np.abs(a.astype(np.int64) - b.astype(np.int64)) <= 2))
        best = max(share(g, want), share(g, other))
        required = min(0.99, share(want, other))
        top1 = not (want.ndim == 2 and want.shape[1] > 1) or int(np.argmax(g)) == int(np.argmax(want))
        ok &= best >= required and top1
        notes.append(f"{best:.3f}/{required:.3f}{'' if top1 else ' top-1 differs'}")
    return ok, ",".join(notes)


def _litert(path: pathlib.Path, threads: int, inputs: list):
    from ai_edge_litert.interpreter import Interpreter
    start = time.perf_counter()
    interp = Interpreter(model_path=str(path), num_threads=threads)
    interp.allocate_tensors()
    load_ms = (time.perf_counter() - start) * 1000
    for d, x in zip(interp.get_input_details(), inputs):
        interp.set_tensor(d["index"], x)
    return interp, load_ms


def _target(target: str) -> tuple[list[str] | None, bool]:
    """A target's devices (None: the default devices) and whether it is relaxed (`DEVICE:relaxed`)."""
    device, _, mode = target.partition(":")
    if mode not in ("", "relaxed"):
        raise SystemExit(f"--targets: {target!r}: the only suffix is ':relaxed'")
    return (None if device == "default" else [device]), mode == "relaxed"


def _precision(compilation) -> str:
    """The float precision each step's compiled program computes in, where its driver says (OpenVINO)."""
    names = []
    for step in compilation.steps:
        compiled = getattr(step.prepared, "compiled", None)
        try:
            names.append(str(compiled.get_property("INFERENCE_PRECISION_HINT")).split("'")[1])
        except Exception:  # not an OpenVINO program
            names.append("-")
    return "+".join(dict.fromkeys(names))


def _compile(imported, target: str, cache_dir: str):
    from nnapi.runtime import Compilation
    devices = _target(target)[0]
    start = time.perf_counter()
    c = Compilation(imported.model, devices=devices, cache_dir=cache_dir, token=imported.token()).finish()
    return c, time.perf_counter() - start


_NEW_PROCESS = """
import os, sys, time
os.environ["NNAPI_OPENVINO_THREADS"] = {threads!r}
import nnapi
from nnapi.bench import warm_up_devices
from nnapi.importers import load_tflite
warm_up_devices({warm!r})
imported = load_tflite({path!r}, relaxed={relaxed!r})
start = time.perf_counter()
c = nnapi.Compilation(imported.model, devices={devices!r}, cache_dir={cache!r}, token=imported.token()).finish()
print((time.perf_counter() - start) * 1000, ",".join(o.outcome for o in c.cache_outcomes))
"""


def cached_in_new_process(path: pathlib.Path, target: str, cache_dir: str, threads: int) -> tuple[float, str]:
    """(ms, cache outcomes) of the cached preparation in a fresh process (after its own warm-up)."""
    import subprocess
    devices, relaxed = _target(target)
    code = _NEW_PROCESS.format(threads=str(threads), warm=devices, path=str(path), relaxed=relaxed, devices=devices,
                               cache=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    ms, outcomes = out.stdout.split()[-2:]
    return float(ms), outcomes


def bench_model(name: str, entry: dict, threads: int, targets: list[str], runs: int, warmup: int,
                litert_ok: bool, prepare_runs: int = 3) -> dict:
    import numpy as np

    import nnapi
    from nnapi.importers import UnsupportedOperatorsError, load_tflite
    from nnapi.session import CompiledModel
    os.environ["NNAPI_OPENVINO_THREADS"] = str(threads)
    path = SHARED / entry["file"]
    row: dict = {"model": name, "threads": threads, "litert": None, "nnapi": {}}
    try:
        start = time.perf_counter()
        imported = load_tflite(path)
        row["import_ms"] = round((time.perf_counter() - start) * 1000, 3)
    except UnsupportedOperatorsError as e:
        row["error"] = "unsupported: " + ", ".join(sorted({p.operator for p in e.problems}))
        return row
    ref = np.load(SHARED / entry["reference_npz"]) if entry.get("reference_npz") else None
    if ref is not None:
        inputs = [ref[f"input_{k}"] for k in range(len(imported.inputs))]
    else:
        from nnapi.bench import random_inputs
        inputs = random_inputs(imported.inputs)
    runners = {}
    if litert_ok:
        try:
            interp, load_ms = _litert(path, threads, inputs)
            row["litert"] = {"load_ms": round(load_ms, 3)}
            runners["litert"] = interp.invoke
        except Exception as e:  # e.g. a custom operator stock LiteRT cannot run
            row["litert"] = {"error": str(e).splitlines()[0][:200]}
    scratch = tempfile.mkdtemp(prefix="nnapi-vs-litert-")
    try:
        relaxed_import = None
        for target in targets:
            figures: dict = {}
            row["nnapi"][target] = figures
            colds, cacheds = [], []
            relaxed = _target(target)[1]
            if relaxed and relaxed_import is None:
                relaxed_import = load_tflite(path, relaxed=True)
            model = relaxed_import if relaxed else imported
            try:
                for k in range(prepare_runs):  # each cold preparation in an empty cache directory of its own
                    cache_dir = os.path.join(scratch, f"{target}-{k}")
                    os.makedirs(cache_dir)
                    colds.append(_compile(model, target, cache_dir)[1])
                    compilation, cached_s = _compile(model, target, cache_dir)
                    cacheds.append(cached_s)
            except nnapi.NnError as e:
                figures["error"] = f"{e.code.name}: {e.message.splitlines()[0][:200]}"
                continue
            cold_s, cached_s = statistics.median(colds), statistics.median(cacheds)
            figures["prepare_runs"] = prepare_runs
            figures["prepare_cold_ms"] = round(cold_s * 1000, 2)
            figures["prepare_cached_ms"] = round(cached_s * 1000, 2)
            figures["prepare_ratio"] = round(cold_s / cached_s, 1)
            figures["prepare_cold_all_ms"] = [round(v * 1000, 2) for v in colds]
            figures["prepare_cached_all_ms"] = [round(v * 1000, 2) for v in cacheds]
            figures["cache"] = [o.outcome for o in compilation.cache_outcomes]
            try:
                fresh_ms, outcomes = cached_in_new_process(path, target, cache_dir, threads)
                figures["prepare_cached_new_process_ms"] = round(fresh_ms, 2)
                figures["prepare_ratio_new_process"] = round(cold_s * 1000 / fresh_ms, 1)
                figures["cache_new_process"] = outcomes.split(",")
            except Exception as e:  # the in-process figures stand
                figures["prepare_cached_new_process_error"] = str(e).splitlines()[-1][:200] if str(e) else repr(e)
            figures["partitions"] = [s.device.name for s in compilation.steps]
            figures["precision"] = _precision(compilation)
            outputs = compilation.execute(inputs)
            if ref is not None:
                ok, note = check_outputs(outputs, ref, RELAXED_TOLERANCE if relaxed else 1e-3)
                figures["outputs_ok"], figures["outputs"] = ok, note
            session = CompiledModel(model.model, compilation, model)
            runners[target] = (lambda s=session: s.run(inputs))
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(warmup):
            for fn in runners.values():
                fn()
        order = list(runners.items())
        shuffle = random.Random(0).shuffle
        for r in range(runs):
            # Every runtime once per round, in an order drawn anew each round: noise hits every runtime
            # alike, and each follows every other about equally often (a runtime's threads still spinning
            # from its last run slow whichever runs next; a rotation would have the same one follow
            # LiteRT in 3 rounds of 4).
            shuffle(order)
            for key, fn in order:
                start = time.perf_counter()
                fn()
                times[key].append((time.perf_counter() - start) * 1000)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def stats(ts: list[float]) -> dict:
        q = statistics.quantiles(ts, n=10)
        return {"p50_ms": round(statistics.median(ts), 4), "p90_ms": round(q[-1], 4)}
    if "litert" in times and times["litert"]:
        row["litert"].update(stats(times["litert"]))
    for target in targets:
        if target in times and times[target]:
            figures = row["nnapi"][target]
            figures.update(stats(times[target]))
            lite = row["litert"]
            if lite and "p50_ms" in lite:
                figures["ratio_p50"] = round(figures["p50_ms"] / lite["p50_ms"], 3)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated model names (default: all in models.json)")
    parser.add_argument("--targets", default="openvino,default",
                        help="comma-separated nnapi devices; 'default' = all devices, partitioned")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--prepare-runs", type=int, default=3,
                        help="cold and cached preparations per target (medians; the machine is noisy)")
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    _limit_threads(max(thread_counts))

    import nnapi  # noqa: F401
    from nnapi.bench import warm_up_devices
    try:
        import ai_edge_litert  # noqa: F401
        litert_ok = True
    except ImportError:
        litert_ok = False
    catalog = json.loads((SHARED / "models.json").read_text())
    names = args.models.split(",") if args.models else list(catalog)
    targets = args.targets.split(",")
    named = [d for t in targets for d in (_target(t)[0] or [])]
    warm_up_devices(list(dict.fromkeys(named)) if len(named) == len(targets) else None)
    results = []
    for threads in thread_counts:
        for name in names:
            results.append(bench_model(name, catalog[name], threads, targets, args.runs, args.warmup, litert_ok,
                                           max(1, args.prepare_runs)))
            print(f"... {name}, {threads} thread(s) done", file=sys.stderr, flush=True)

    from rich.console import Console
    from rich.table import Table
    console = Console(width=200)
    for threads in thread_counts:
        table = Table(title=f"nnapi vs LiteRT {'2.3.0 XNNPACK' if litert_ok else '(not installed)'}, {threads} "
                            f"thread(s), {args.runs} interleaved runs (ms; ratio = nnapi / LiteRT p50)")
        for col in ("model", "runtime", "p50", "p90", "ratio p50", "prepare cold", "prepare cached",
                    "cold/cached", "cached new proc.", "cold/new", "partitions", "precision", "outputs"):
            table.add_column(col, justify="left" if col in ("model", "runtime", "partitions", "outputs") else "right")
        for row in (r for r in results if r["threads"] == threads):
            if "error" in row:
                table.add_row(row["model"], "-", row["error"][:60], *[""] * 10)
                continue
            lite = row["litert"] or {}
            table.add_row(row["model"], "LiteRT", f"{lite.get('p50_ms', float('nan')):.3f}",
                          f"{lite.get('p90_ms', float('nan')):.3f}", "", "", "", "", "", "", "", "",
                          lite.get("error", "")[:40])
            for target, f in row["nnapi"].items():
                if "error" in f:
                    table.add_row("", target, f["error"][:60], *[""] * 10)
                    continue
                table.add_row("", target, f"{f['p50_ms']:.3f}", f"{f['p90_ms']:.3f}",
                              f"{f.get('ratio_p50', float('nan')):.2f}", f"{f['prepare_cold_ms']:.1f}",
                              f"{f['prepare_cached_ms']:.1f}", f"{f['prepare_ratio']:.1f}",
                              f"{f.get('prepare_cached_new_process_ms', float('nan')):.1f}",
                              f"{f.get('prepare_ratio_new_process', float('nan')):.1f}",
                              "+".join(dict.fromkeys(f["partitions"])) + f" ({len(f['partitions'])})",
                              f.get("precision", ""),
                              {True: "ok ", False: "OFF "}.get(f.get("outputs_ok"), "no reference")
                              + f.get("outputs", ""))
        console.print(table)
    print(json.dumps({"litert_installed": litert_ok, "threads": thread_counts, "runs": args.runs,
                      "targets": targets, "machine_cpus": os.cpu_count(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
