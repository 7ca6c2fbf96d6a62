"""Benchmark: where a cached start's time goes, step by step, against LiteRT's (issue 32, item 1).

A new process per start, as an app's: nnapi imports itself, loads a `.tflite` from a warm compilation
cache and runs it once; LiteRT imports itself, makes its interpreter and runs once; the floor imports
numpy and the backends nnapi's plan uses. The three take turns for `--rounds` rounds (medians). nnapi's
start is split into its steps from inside the process: `import numpy`, `import nnapi`, reading the
`.tflite` (the "import" slice of a trace), partitioning, each partition's preparation from the cache
(their sum: the first one also imports its backend), the first run, and what is left (the interpreter's
start and exit).

Goals (issue 32): the cached start at most 0.1 s over the floor; `import nnapi` + `devices()` at most
0.15 s.

    python benchmarks/start.py [MODEL.tflite ...] [--rounds 7]

Prints a table per model and, as its last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "..", "shared", "models")
DEFAULT = [os.path.join(MODELS, "keras", f"{n}.tflite") for n in ("mobilenet_v2_f32", "resnet_mini_int8")]

NNAPI = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import nnapi
t2 = time.perf_counter()
with nnapi.trace() as rec:
    m = nnapi.load(sys.argv[1], cache_dir=sys.argv[2])
    t3 = time.perf_counter()
    m.run({t.name: np.zeros([1 if s is None else s for s in t.shape], t.dtype) for t in m.inputs})
    t4 = time.perf_counter()
steps = {"import numpy": t1 - t0, "import nnapi": t2 - t1, "load": t3 - t2, "first run": t4 - t3}
for e in rec.events:
    if e.get("ph") == "X" and e.get("name") in ("import", "partition", "prepare", "cache lookup"):
        name = {"import": "read .tflite", "partition": "partition"}.get(e["name"], "prepare from cache")
        steps[name] = steps.get(name, 0.0) + e["dur"] / 1e6
print(json.dumps({"steps": steps, "outcomes": [(c.device, c.outcome) for c in m.cache_outcomes],
                  "backends": sorted(b for b in ("openvino", "jax") if b in sys.modules)}))
"""
DEVICES = """
import time, json
t0 = time.perf_counter()
import nnapi
nnapi.devices()
print(json.dumps({"s": time.perf_counter() - t0}))
"""
LITERT = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
from ai_edge_litert.interpreter import Interpreter
t2 = time.perf_counter()
it = Interpreter(model_path=sys.argv[1], num_threads=2); it.allocate_tensors()
t3 = time.perf_counter()
for d in it.get_input_details(): it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
it.invoke(); [it.get_tensor(d["index"]) for d in it.get_output_details()]
t4 = time.perf_counter()
print(json.dumps({"steps": {"import numpy": t1 - t0, "import litert": t2 - t1, "interpreter": t3 - t2,
                            "first run": t4 - t3}}))
"""
OPENVINO_EXPORT = """
import sys, openvino as ov
core = ov.Core()
compiled = core.compile_model(core.read_model(sys.argv[1]), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
blob = compiled.export_model()
open(sys.argv[2], "wb").write(blob if isinstance(blob, bytes) else blob.getvalue())
"""
# OpenVINO's own cached start of the same model (its TFLite reader's graph, exported once): what the backend
# itself needs to start from a compiled artifact, next to which the rest of nnapi's start is ours.
OPENVINO_START = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import openvino as ov
t2 = time.perf_counter()
core = ov.Core()
compiled = core.import_model(open(sys.argv[1], "rb").read(), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
t3 = time.perf_counter()
request = compiled.create_infer_request()
request.infer({k: np.zeros([max(1, d.get_length()) if d.is_static else 1 for d in i.get_partial_shape()],
                           i.get_element_type().to_dtype()) for k, i in enumerate(compiled.inputs)})
t4 = time.perf_counter()
print(json.dumps({"steps": {"import numpy": t1 - t0, "import openvino": t2 - t1, "import_model": t3 - t2,
                            "first run": t4 - t3}}))
"""


def once(code: str, *argv: str) -> tuple[float, dict]:
    """(wall seconds of a new process running `code`, the JSON it printed last)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"a start failed: {done.stderr[-1500:]}")
    lines = done.stdout.strip().splitlines()
    return wall, json.loads(lines[-1]) if lines else {}


def med(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    figures: dict = {}
    devices_s, numpy_s = [], []
    for _ in range(args.rounds):
        devices_s.append(once(DEVICES)[0])
        numpy_s.append(once("import numpy")[0])
    for path in args.models:
        cache = tempfile.mkdtemp(prefix="nnapi-start-")
        once(NNAPI, path, cache)  # fills the cache (a cold compile; a fresh state directory also calibrates)
        _, warm = once(NNAPI, path, cache)  # a cached start: the backends its plan imports make the floor
        floor_code = "import numpy" + "".join(f", {b}" for b in warm["backends"])
        rows: dict[str, list] = {"nnapi": [], "litert": [], "floor": [], "backend": []}
        blob = os.path.join(cache, "openvino-own.blob") if warm["backends"] == ["openvino"] else None
        backend_refused = None
        if blob is not None:
            try:
                once(OPENVINO_EXPORT, path, blob)
            except SystemExit as e:  # (OpenVINO's own TFLite reader refuses some models that nnapi imports)
                backend_refused = str(e).strip().splitlines()[-1][:200]
                blob = None
        for _ in range(args.rounds):
            rows["nnapi"].append(once(NNAPI, path, cache))
            try:
                rows["litert"].append(once(LITERT, path))
            except SystemExit:
                pass
            rows["floor"].append(once(floor_code)[0])
            if blob is not None:
                rows["backend"].append(once(OPENVINO_START, blob))
        nn_wall = med([w for w, _ in rows["nnapi"]])
        order = list(rows["nnapi"][0][1]["steps"])
        steps = sorted({k for _, r in rows["nnapi"] for k in r["steps"]},
                       key=lambda k: order.index(k) if k in order else len(order))
        nn_steps = {k: med([r["steps"].get(k, 0.0) for _, r in rows["nnapi"]]) for k in steps}
        lt_wall = med([w for w, _ in rows["litert"]]) if rows["litert"] else None
        lt_steps = ({k: med([r["steps"][k] for _, r in rows["litert"]]) for k in rows["litert"][0][1]["steps"]}
                    if rows["litert"] else {})
        floor = med(rows["floor"])
        backend = med([w for w, _ in rows["backend"]]) if rows["backend"] else None
        name = os.path.basename(path)
        figures[name] = {"nnapi_s": nn_wall, "nnapi_steps": nn_steps, "litert_s": lt_wall, "litert_steps": lt_steps,
                         "floor_s": floor, "floor": floor_code, "over_floor_s": round(nn_wall - floor, 3),
                         "outcomes": rows["nnapi"][-1][1]["outcomes"], "backend_start_s": backend,
                         "ours_s": None if backend is None else round(nn_wall - backend, 3),
                         "backend_refused": backend_refused}
        print(f"{name}: a new process's cached start and run, medians of {args.rounds}")
        outcomes = ", ".join(f"{d} {o}" for d, o in figures[name]["outcomes"])
        print(f"  nnapi {nn_wall} s ({outcomes}); "
              f"LiteRT {lt_wall} s; floor ({floor_code}) {floor} s; nnapi over the floor "
              f"{figures[name]['over_floor_s']} s "
              "(goal <= 0.1)")
        inside = sum(nn_steps[k] for k in ("import numpy", "import nnapi", "load", "first run"))
        print("  nnapi steps: " + ", ".join(f"{k} {v}" for k, v in nn_steps.items())
              + f" (read, partition and prepare are inside load); the interpreter's start and exit "
              f"{round(nn_wall - inside, 3)}")
        if lt_steps:
            print("  LiteRT steps: " + ", ".join(f"{k} {v}" for k, v in lt_steps.items()))
        if backend is not None:
            b_steps = {k: med([r["steps"][k] for _, r in rows["backend"]]) for k in rows["backend"][0][1]["steps"]}
            print(f"  OpenVINO's own cached start (its exported model imported and run once): {backend} s, "
                  f"{round(backend - floor, 3)} s over the floor: " + ", ".join(f"{k} {v}" for k, v in b_steps.items()))
            print(f"  ours (nnapi's start minus OpenVINO's own): {figures[name]['ours_s']} s")
        elif backend_refused:
            print(f"  OpenVINO's own cached start: none, its TFLite reader refuses the model ({backend_refused})")
    print(f"import nnapi + devices() in a new process: {med(devices_s)} s (goal <= 0.15; the interpreter's start "
          f"included); a process that only imports numpy: {med(numpy_s)} s, so ours is "
          f"{round(med(devices_s) - med(numpy_s), 3)} s")
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "rounds": args.rounds,
                      "import_and_devices_s": med(devices_s),
                      "import_numpy_s": med(numpy_s), "models": figures}))


if __name__ == "__main__":
    main()
