"""The fleet tier and batch inference, measured on a local Ray (needs `nnapi[fleet,ray]` and Debian's
redis-server, which this starts on a free port and stops).

1. Compiles across a fleet: `--actors` Ray actors (sharing this machine's CPUs), each a "host" with its own
   state directory and an empty cache folder, and one shared Redis store, load each model. One actor
   compiles and publishes first; the others prepare in parallel. Goal: exactly one compile per model and
   device, every other first preparation a fleet hit, and a fleet hit within 2x a local hit (a new
   process of a host that already has the model in its cache folder).
2. Batch inference: `--rows` inputs (the reference input plus noise) through `nnapi batch` on the local
   Ray, against a plain single-process `model.run` loop and a LiteRT loop on the same thread budget.
   Goals: Ray's cost within 15% of the plain loop, outputs identical to it.

    python benchmarks/fleet.py [--actors 8] [--rows 10000] [--models mobilenet_v2_f32,resnet_mini_int8]

Prints a table and, as its last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "..", "shared", "models")


def _redis(folder: str) -> tuple[subprocess.Popen, str]:
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("needs redis-server (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


def _host_actor():
    import ray

    @ray.remote(num_cpus=0.1)  # (all the hosts at once, and the later ones beside them, on 2 CPUs)
    class Host:
        """One host of the fleet: its own state directory and cache folder; prepares a model once."""

        def __init__(self, env: dict) -> None:
            os.environ.update(env)

        def warm(self) -> None:
            """What a host pays once, whatever it caches: importing nnapi, calibrating its drivers."""
            import nnapi
            nnapi.devices()

        def prepare(self, model: str, cache: str) -> dict:
            import nnapi
            start = time.perf_counter()
            session = nnapi.load(model, cache_dir=cache)
            seconds = time.perf_counter() - start
            return {"s": seconds, "outcomes": [(c.device, c.outcome) for c in session.cache_outcomes]}

    return Host


def fleet_compiles(args, store_url: str, work: str) -> dict:
    import ray
    from nnapi.caching.fleet import keygen
    key = os.path.join(work, "host.key")
    keygen(key)
    Host = _host_actor()
    figures = {}
    for name in args.models.split(","):
        model = os.path.join(MODELS, "keras", f"{name}.tflite")
        hosts = []
        for k in range(args.actors):
            env = {"NNAPI_STATE_DIR": os.path.join(work, name, f"state{k}"), "NNAPI_FLEET": store_url,
                   "NNAPI_FLEET_TRUST": f"{key}.pub", "NNAPI_FLEET_KEY": key}
            hosts.append((Host.remote(env), os.path.join(work, name, f"cache{k}"), env))
        ray.get([h.warm.remote() for h, _, _ in hosts])
        first = ray.get(hosts[0][0].prepare.remote(model, hosts[0][1]))
        time.sleep(1.0)  # (publishing runs in the background)
        rest = ray.get([h.prepare.remote(model, cache) for h, cache, _ in hosts[1:]])  # (all at once)
        # one at a time, for the times: a fleet hit on a host of its own, then a local hit there (a new
        # process of a host whose cache folder holds the model now)
        timed = []
        for k in range(3):
            env = dict(hosts[0][2], NNAPI_STATE_DIR=os.path.join(work, name, f"timed-state{k}"))
            cache = os.path.join(work, name, f"timed-cache{k}")
            host = Host.remote(env)
            ray.get(host.warm.remote())
            fleet_hit = ray.get(host.prepare.remote(model, cache))
            again = Host.remote(env)
            ray.get(again.warm.remote())
            timed.append((fleet_hit, ray.get(again.prepare.remote(model, cache))))
            ray.kill(host)
            ray.kill(again)
        outcomes = [o for r in [first, *rest] for _, o in r["outcomes"]]
        fleet_s = [f["s"] for f, _ in timed if all(o == "fleet" for _, o in f["outcomes"])]
        local_s = [h["s"] for _, h in timed if all(o == "hit" for _, o in h["outcomes"])]
        figures[name] = {"compiles": outcomes.count("miss"), "fleet_hits": outcomes.count("fleet"),
                         "first_compile_s": round(first["s"], 3),
                         "fleet_hit_s": round(statistics.median(fleet_s), 3) if fleet_s else None,
                         "local_hit_s": round(statistics.median(local_s), 3) if local_s else None}
        if fleet_s and local_s:
            figures[name]["fleet_over_local"] = round(statistics.median(fleet_s) / statistics.median(local_s), 2)
    return figures


def batch_inference(args, work: str) -> dict:
    import nnapi
    path = os.path.join(MODELS, "keras", "mobilenet_v2_int8.tflite")
    x = np.load(os.path.join(MODELS, "reference", "mobilenet_v2_int8.npz"))["input_0"]
    rng = np.random.default_rng(1)
    folder = os.path.join(work, "inputs")
    os.makedirs(folder)
    rows = []
    for k in range(args.rows):
        row = np.clip(x.astype(np.int16) + rng.integers(-3, 4, x.shape), -128, 127).astype(np.int8)
        rows.append(row)
        np.save(os.path.join(folder, f"img{k:05d}.npy"), row)
    model = nnapi.load(path)
    start = time.perf_counter()
    plain = [np.asarray(list(model.run([row]).values())[0]) for row in rows]
    plain_s = time.perf_counter() - start
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=path, num_threads=2)
    it.allocate_tensors()
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    start = time.perf_counter()
    for row in rows:
        it.set_tensor(i, row)
        it.invoke()
        it.get_tensor(o)
    litert_s = time.perf_counter() - start
    out = os.path.join(work, "out")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nnapi.cli", "batch", path, folder, "--output", out, "--actors", "2",
                           "--batch-size", "64"], capture_output=True, text=True)
    ray_s = time.perf_counter() - start
    if done.returncode:
        sys.exit(done.stderr[-2000:])
    import pyarrow.parquet as pq
    table = pq.read_table(out).to_pydict()
    same = all(np.array_equal(np.asarray(v).reshape(-1), plain[int(str(rid)[3:8])].reshape(-1))
               for rid, v in zip(table["id"], table["output_0"]))
    return {"rows": args.rows, "plain_rows_s": round(args.rows / plain_s, 1), "litert_rows_s": round(args.rows / litert_s, 1),
            "ray_rows_s": round(args.rows / ray_s, 1), "ray_over_plain": round(ray_s / plain_s, 3),
            "outputs_identical": same and len(table["id"]) == args.rows, "summary": done.stdout.strip().splitlines()[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--models", default="mobilenet_v2_f32,resnet_mini_int8")
    args = parser.parse_args()
    import ray
    work = tempfile.mkdtemp(prefix="nnapi-fleet-bench-")
    server, url = _redis(work)
    try:
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
        compiles = fleet_compiles(args, url, work)
        ray.shutdown()
        batch = batch_inference(args, work)
    finally:
        server.terminate()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'model':<22}{'compiles':>9}{'fleet hits':>11}{'compile s':>10}{'fleet hit s':>12}{'local hit s':>12}"
          f"{'fleet/local':>12}")
    for name, f in compiles.items():
        print(f"{name:<22}{f['compiles']:>9}{f['fleet_hits']:>11}{f['first_compile_s']:>10}{str(f['fleet_hit_s']):>12}"
              f"{str(f['local_hit_s']):>12}{str(f.get('fleet_over_local')):>12}")
    print(f"batch inference, mobilenet_v2_int8, {batch['rows']} rows: nnapi batch {batch['ray_rows_s']} rows/s, "
          f"plain loop {batch['plain_rows_s']}, LiteRT loop {batch['litert_rows_s']}; Ray over plain "
          f"{batch['ray_over_plain']}x; outputs identical: {batch['outputs_identical']}")
    print(json.dumps({"actors": args.actors, "compiles": compiles, "batch": batch}))


if __name__ == "__main__":
    main()
