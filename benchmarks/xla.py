"""Benchmark: the XLA driver on the largest float model of ../shared/models (mobilenet_v2_f32).

Figures:
- prepare, cold: a `Compilation` for device "xla" with an empty cache directory (the .tflite import
  and the process's one-time costs excluded: JAX is imported and started by compiling a
  one-operation model first; this is the quick first-stage compile, claims analysis included in
  the first of them); the median of `--cold-runs`, each with an empty cache directory of its own
  (the later ones find the claims analysed, so the median is if anything lower); the optimised
  second-stage compile is timed too;
- prepare, cached: the same `Compilation` again, a cache hit (verify and read the cache; no tracing,
  no compilation; the previous compilation released first); goal cold / cached >= 50; next to each,
  the read-and-verify floor: both cache files read into fresh aligned memory as the driver reads
  them, SHA-256 over the model cache, xxh3 over the data cache; goal cached / floor <= 1.5;
- prepare, cached, while the app holds a compilation of it: its constants stay on the device and the
  data cache is not read, so the floor is reading and hashing the model cache;
- the same hit in a new process (as after an app restart; that process's one-time start-up
  excluded the same way), the median of `--new-process-runs` processes (one process's figure moves
  by 2x on this machine), goal >= 30;
- the same in new app processes with the driver served (`nnapi serve`, as on Android, where the
  driver's process outlives an app's): the first compiles (cold) and stays until the service has
  rewritten the cache with the optimised stage; the median of `--new-process-runs` more processes
  is the cached figure (`--no-service` skips it);
- execute p50 / p90 on xla once the optimised executable is in (after warm-ups), on the reference
  driver, and on LiteRT (`ai-edge-litert`, XNNPACK) with the same thread count as XLA's CPU
  backend uses (every core); goal xla / LiteRT <= 1.0;
- the largest difference of the xla outputs to the stored LiteRT reference outputs.

`nnapi bench MODEL --device xla` gives the same cold / cached prepare figures; its execute figures
include the quick first-stage executable and the background optimised compile unless
`--preference sustained-speed` (or NNAPI_XLA_OPTIMIZE_AFTER=0) compiles the optimised executable
at once. The machine is shared, so execute times move by +-30% between runs: compare figures
taken in one run.

usage: python benchmarks/xla.py [--model PATH] [--runs N] [--reference-runs N] [--prepare-runs N]
[--cold-runs N] [--new-process-runs N]
The last line printed is one JSON object holding every figure.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

import numpy as np

import nnapi
from nnapi.bench import warm_up_devices

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "shared", "models")


def _time_runs(fn, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def _spread(seconds: list[float]) -> str:
    """'least-most ms' of a few timings."""
    return f"{min(seconds) * 1000:.1f}-{max(seconds) * 1000:.1f} ms"


def _litert(path: str, inputs: list[np.ndarray], threads: int, runs: int) -> dict:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as e:
        return {"available": False, "reason": f"ai-edge-litert is not installed ({e})"}
    interp = Interpreter(model_path=path, num_threads=threads)
    interp.allocate_tensors()
    details = interp.get_input_details()
    for d, x in zip(details, inputs):
        interp.set_tensor(d["index"], x)
    times = _time_runs(interp.invoke, runs, 5)
    return {"available": True, "threads": threads, "execute_p50_ms": _pct(times, 50),
            "execute_p90_ms": _pct(times, 90)}


_NEW_PROCESS = """
import json, sys, time
import nnapi
from nnapi.bench import warm_up_devices
from nnapi.importers import load_tflite
warm_up_devices(["xla"])
imported = load_tflite(sys.argv[1])
token = imported.token()
t0 = time.perf_counter()
c = nnapi.Compilation(imported.model, devices=["xla"], cache_dir=sys.argv[2], token=token).finish()
print(json.dumps({"prepare_s": time.perf_counter() - t0, "outcome": c.cache_outcomes[0].outcome}))
"""


def _read_and_verify(cache_dir: str, data: bool) -> float:
    """Seconds to read the cache files into fresh aligned memory (as the driver reads them, so the
    model could use them in place) and hash them as they must be verified: SHA-256 over the model
    cache, xxh3-128 over the data cache (`data`: that one too). The floor of a cached prepare."""
    import hashlib

    import xxhash
    from nnapi.caching.files import read_file
    names = sorted(n for n in os.listdir(cache_dir) if len(n) > 64 and (data or n[64] == "1"))
    start = time.perf_counter()
    for name in names:
        fd = os.open(os.path.join(cache_dir, name), os.O_RDONLY)
        try:
            content = read_file(fd, 1 << 32)
        finally:
            os.close(fd)
        if name[64] == "1":
            hashlib.sha256(content).digest()
        else:
            xxhash.xxh3_128_digest(content)
    return time.perf_counter() - start


def _new_process_hit(model: str, cache_dir: str, env: dict | None = None, code: str = _NEW_PROCESS) -> dict:
    """The cache hit as a restarted app sees it: a new process (its one-time start-up excluded, as here)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", code, model, cache_dir], capture_output=True, text=True,
                          timeout=600, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The first app process of the served measurement: a cold compile through the service, then enough
#: executions for the optimised stage, waiting until the service has rewritten the cache with it.
_SERVED_FIRST = """
import json, os, sys, time
import nnapi
from nnapi.bench import random_inputs, warm_up_devices
from nnapi.importers import load_tflite
from nnapi.runtime import find_device
warm_up_devices(["xla"])
assert find_device("xla").location == "service"
imported = load_tflite(sys.argv[1])
t0 = time.perf_counter()
c = nnapi.Compilation(imported.model, devices=["xla"], cache_dir=sys.argv[2], token=imported.token()).finish()
cold = time.perf_counter() - t0
files = lambda: sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(sys.argv[2]))
before, inputs = files(), random_inputs(imported.inputs)
for _ in range(12):
    c.execute(inputs)
until = time.monotonic() + 300
while files() == before and time.monotonic() < until:
    time.sleep(0.05)
print(json.dumps({"prepare_s": cold, "outcome": c.cache_outcomes[0].outcome, "rewritten": files() != before}))
"""


def _served(model: str, runs: int) -> dict:
    """Cold and cached preparation in new app processes with the xla driver served (`nnapi serve`), as
    on Android, where the driver's process outlives the app's: an app restart finds the executables
    its cache names still loaded in the service."""
    from nnapi.service import ENV, default_socket
    from nnapi.service.cli import start
    directory = tempfile.mkdtemp(prefix="nnapi-bench-xla-")
    os.chmod(directory, 0o755)
    service = start("xla", default_socket("xla", directory), os.path.join(directory, "state"), timeout=600)
    try:
        env = dict(os.environ, **{ENV: directory})
        cache_dir = os.path.join(directory, "cache")
        os.mkdir(cache_dir)
        first = _new_process_hit(model, cache_dir, env, _SERVED_FIRST)
        hits = [_new_process_hit(model, cache_dir, env) for _ in range(runs)]
    finally:
        service.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {"prepare_cold_s": first["prepare_s"], "cold_outcome": first["outcome"],
            "optimised_stage_cached": first["rewritten"],
            "prepare_cached_s": statistics.median(h["prepare_s"] for h in hits),
            "cached_runs_s": [h["prepare_s"] for h in hits],
            "cached_outcome": ",".join(sorted({h["outcome"] for h in hits}))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=os.path.join(MODELS, "keras", "mobilenet_v2_f32.tflite"))
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--reference-runs", type=int, default=3)
    parser.add_argument("--prepare-runs", type=int, default=9, help="cached prepares timed (median)")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold prepares timed, each with an empty cache "
                                                                 "directory (median)")
    parser.add_argument("--new-process-runs", type=int, default=5, help="new processes that each time one cached "
                                                                       "prepare (median)")
    parser.add_argument("--no-service", action="store_true", help="skip the served-driver preparations")
    args = parser.parse_args()
    from nnapi.importers import load_tflite

    name = os.path.splitext(os.path.basename(args.model))[0]
    ref_npz = os.path.join(MODELS, "reference", f"{name}.npz")
    stored = np.load(ref_npz) if os.path.exists(ref_npz) else None
    t0 = time.perf_counter()
    imported = load_tflite(args.model)
    import_s = time.perf_counter() - t0
    model = imported.model
    n_in = len(model.to_hal().main.input_indexes)
    rng = np.random.default_rng(42)
    hal_main = model.to_hal().main
    inputs = []
    for k, i in enumerate(hal_main.input_indexes):
        o = hal_main.operands[i]
        if stored is not None and f"input_{k}" in stored:
            inputs.append(np.ascontiguousarray(stored[f"input_{k}"]))
        else:
            inputs.append(rng.uniform(-1, 1, o.dimensions).astype(np.float32))
    assert len(inputs) == n_in
    token = imported.token()

    warm_up_devices(["xla", "reference"])  # JAX's import and start-up are the process's, not the model's
    cold_times = []
    for _ in range(args.cold_runs - 1):  # (each in an empty cache directory of its own)
        with tempfile.TemporaryDirectory() as scratch:
            gc.collect()
            t0 = time.perf_counter()
            cold = nnapi.Compilation(model, devices=["xla"], cache_dir=scratch, token=token).finish()
            cold_times.append(time.perf_counter() - t0)
            assert [o.outcome for o in cold.cache_outcomes] == ["miss"], cold.cache_outcomes
            cold = None
    with tempfile.TemporaryDirectory() as cache_dir:
        gc.collect()
        t0 = time.perf_counter()
        cold = nnapi.Compilation(model, devices=["xla"], cache_dir=cache_dir, token=token).finish()
        cold_times.append(time.perf_counter() - t0)
        prepare_cold_s = statistics.median(cold_times)
        assert [o.outcome for o in cold.cache_outcomes] == ["miss"], cold.cache_outcomes
        prepared = cold.steps[0].prepared
        t0 = time.perf_counter()
        prepared.optimize_now()          # second stage, rewrites the cache
        optimize_s = time.perf_counter() - t0
        cold = prepared = None  # (a hit while it is alive is the "holds one" figure)
        cached_times, floor_times, held_times, held_floor_times = [], [], [], []
        for _ in range(args.prepare_runs):  # (each cached prepare next to its floor, in the same state)
            cached = None
            gc.collect()  # the previous compilation's teardown is not this one's cost
            floor_times.append(_read_and_verify(cache_dir, data=True))
            gc.collect()
            t0 = time.perf_counter()
            cached = nnapi.Compilation(model, devices=["xla"], cache_dir=cache_dir, token=token).finish()
            cached_times.append(time.perf_counter() - t0)
            assert [o.outcome for o in cached.cache_outcomes] == ["hit"], cached.cache_outcomes
            held_floor_times.append(_read_and_verify(cache_dir, data=False))
            t0 = time.perf_counter()
            again = nnapi.Compilation(model, devices=["xla"], cache_dir=cache_dir, token=token).finish()
            held_times.append(time.perf_counter() - t0)
            assert [o.outcome for o in again.cache_outcomes] == ["hit"], again.cache_outcomes
            again = None
        prepare_cached_s = statistics.median(cached_times)
        floor_s, held_s, held_floor_s = (statistics.median(t) for t in (floor_times, held_times, held_floor_times))
        assert cached.steps[0].prepared.stage == "optimized"
        t0 = time.perf_counter()
        outputs = cached.execute(inputs)
        first_execute_ms = (time.perf_counter() - t0) * 1000
        new_processes = [_new_process_hit(args.model, cache_dir) for _ in range(args.new_process_runs)]
        new_process = {"prepare_s": statistics.median(p["prepare_s"] for p in new_processes),
                       "outcome": ",".join(sorted({p["outcome"] for p in new_processes})),
                       "runs_s": [p["prepare_s"] for p in new_processes]}

    served = None if args.no_service else _served(args.model, args.new_process_runs)
    xla_times = _time_runs(lambda: cached.execute(inputs), args.runs, 5)
    ref = nnapi.Compilation(model, devices=["reference"]).finish()
    ref_outputs = ref.execute(inputs)
    ref_times = _time_runs(lambda: ref.execute(inputs), args.reference_runs, 1)
    threads = os.cpu_count() or 1
    litert = _litert(args.model, inputs, threads, args.runs)
    max_diff_ref = max(float(np.max(np.abs(a - b))) for a, b in zip(outputs, ref_outputs))
    max_diff_litert = (max(float(np.max(np.abs(a - stored[f"output_{k}"]))) for k, a in enumerate(outputs))
                       if stored is not None else None)

    result = {
        "model": os.path.relpath(args.model, os.path.join(HERE, "..")), "device": "xla",
        "machine": f"{platform.machine()} {threads} cores", "import_s": import_s,
        "prepare_cold_s": prepare_cold_s, "prepare_cold_runs_s": cold_times, "optimize_s": optimize_s,
        "prepare_cached_s": prepare_cached_s,
        "cold_over_cached": prepare_cold_s / prepare_cached_s,
        "read_and_verify_floor_s": floor_s, "cached_over_floor": prepare_cached_s / floor_s,
        "prepare_cached_held_s": held_s, "read_and_verify_model_cache_s": held_floor_s,
        "cached_held_over_floor": held_s / held_floor_s,
        "prepare_cached_new_process_s": new_process["prepare_s"],
        "prepare_cached_new_process_runs_s": new_process["runs_s"],
        "cold_over_cached_new_process": prepare_cold_s / new_process["prepare_s"],
        "first_execute_ms": first_execute_ms,
        "execute_p50_ms": _pct(xla_times, 50), "execute_p90_ms": _pct(xla_times, 90),
        "reference_execute_p50_ms": _pct(ref_times, 50),
        "reference_over_xla": _pct(ref_times, 50) / _pct(xla_times, 50),
        "litert": litert,
        "xla_over_litert": (_pct(xla_times, 50) / litert["execute_p50_ms"]) if litert.get("available") else None,
        "max_abs_diff_vs_reference_driver": max_diff_ref, "max_abs_diff_vs_litert_stored": max_diff_litert,
        "served": served,
    }
    rows = [("import", f"{import_s * 1000:.1f} ms"),
            ("prepare, cold (quick compile)", f"{prepare_cold_s * 1000:.1f} ms (median of {len(cold_times)}: "
                                              f"{_spread(cold_times)})"),
            ("optimised compile (background stage)", f"{optimize_s * 1000:.1f} ms"),
            ("prepare, cached (hit)", f"{prepare_cached_s * 1000:.2f} ms"),
            ("cold / cached", f"{result['cold_over_cached']:.1f}x (goal >= 50x)"),
            ("read-and-verify floor (both files)", f"{floor_s * 1000:.2f} ms; cached / floor "
                                                   f"{result['cached_over_floor']:.2f} (goal <= 1.5)"),
            ("prepare, cached, while the app holds one", f"{held_s * 1000:.2f} ms; floor (model cache only, the "
                                                         f"data is not read) {held_floor_s * 1000:.2f} ms; "
                                                         f"{result['cached_held_over_floor']:.2f}x it"),
            ("prepare, cached, in a new process", f"{new_process['prepare_s'] * 1000:.2f} ms "
                                                  f"({result['cold_over_cached_new_process']:.1f}x, goal >= 30x, "
                                                  f"{new_process['outcome']}; median of {len(new_processes)}: "
                                                  f"{_spread(new_process['runs_s'])})"),
            ("first execute after the hit", f"{first_execute_ms:.2f} ms")]
    if served is not None:
        ratio = served["prepare_cold_s"] / served["prepare_cached_s"]
        rows += [("served: prepare, cold, new app process", f"{served['prepare_cold_s'] * 1000:.1f} ms "
                                                            f"({served['cold_outcome']})"),
                 ("served: prepare, cached, new app process",
                  f"{served['prepare_cached_s'] * 1000:.2f} ms ({ratio:.1f}x, {served['cached_outcome']}; median of "
                  f"{len(served['cached_runs_s'])}: {_spread(served['cached_runs_s'])}; optimised stage cached: "
                  f"{served['optimised_stage_cached']})")]
    rows += [
            ("xla execute p50 / p90", f"{result['execute_p50_ms']:.2f} / {result['execute_p90_ms']:.2f} ms"),
            ("reference execute p50", f"{result['reference_execute_p50_ms']:.1f} ms "
                                      f"({result['reference_over_xla']:.1f}x xla)")]
    if litert.get("available"):
        rows.append((f"LiteRT XNNPACK {threads} threads p50 / p90",
                     f"{litert['execute_p50_ms']:.2f} / {litert['execute_p90_ms']:.2f} ms"))
        rows.append(("xla / LiteRT", f"{result['xla_over_litert']:.2f} (goal <= 1.0)"))
    else:
        rows.append(("LiteRT", litert["reason"]))
    rows.append(("max |xla - reference driver|", f"{max_diff_ref:.2e}"))
    if max_diff_litert is not None:
        rows.append(("max |xla - stored LiteRT output|", f"{max_diff_litert:.2e}"))
    width = max(len(r[0]) for r in rows)
    print(f"XLA driver on {result['model']} ({result['machine']})")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
