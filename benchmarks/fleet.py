"""The fleet tier and batch inference, measured on a local Ray (needs `nnapi[fleet,ray]` and Debian's
redis-server, which this starts on a free port and stops).

1. Compiles across a fleet: `--actors` Ray actors (sharing this machine's CPUs), each a "host" with its own
   state directory and an empty cache folder, and one shared Redis store, load each model. One actor
   compiles and publishes first; the others prepare in parallel. Goal: exactly one compile per model and
   device, every other first preparation a fleet hit, and a fleet hit within 2x a local hit (a new
   process of a host that already has the model in its cache folder).
2. Batch inference: `--rows` inputs (the reference input plus noise) through `nnapi batch` on the local
   Ray, against a plain single-process `model.run` loop and a LiteRT loop on the same thread budget.
   Goals: Ray's cost within 15% of the plain loop, outputs identical to it. The table splits `nnapi
   batch`'s time (its `--timings`): Python start, ray.init, the actors' start and model loads (Ray's fixed
   costs) against the stream (reading, inference, writing: ours), and gives the steady rows/s once the
   actors are up, beside `model.run_batch` in process.

    python benchmarks/fleet.py [--actors 8] [--rows 10000] [--models mobilenet_v2_f32,resnet_mini_int8]
                               [--batch-actors 2] [--only fleet|batch]

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
    """`nnapi batch` over `--rows` files against in-process loops (plain `model.run`, `run_batch`, LiteRT),
    with the subprocess's own breakdown (`--timings`): Python start and imports, ray.init, the actors'
    start and model loads, the batches, steady rows/s once the actors are up."""
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
    start = time.perf_counter()
    read = [np.load(os.path.join(folder, f)) for f in sorted(os.listdir(folder))]
    read_s = time.perf_counter() - start
    del read
    model = nnapi.load(path)
    model.run([rows[0]])
    start = time.perf_counter()
    plain = [np.asarray(list(model.run([row]).values())[0]) for row in rows]
    plain_s = time.perf_counter() - start
    start = time.perf_counter()
    batched = [np.asarray(list(o.values())[0]) for o in model.run_batch([[row] for row in rows])]
    run_batch_s = time.perf_counter() - start
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
    timings_file = os.path.join(work, "timings.json")
    launched = time.time()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nnapi.cli", "batch", path, folder, "--output", out, "--actors",
                           str(args.batch_actors), "--batch-size", "64", "--timings", timings_file],
                          capture_output=True, text=True)
    ray_s = time.perf_counter() - start
    if done.returncode:
        sys.exit(done.stderr[-2000:])
    import pyarrow.parquet as pq
    table = pq.read_table(out).to_pydict()
    same = all(np.array_equal(np.asarray(v).reshape(-1), plain[int(str(rid)[3:8])].reshape(-1))
               for rid, v in zip(table["id"], table["output_0"]))
    t = json.load(open(timings_file))
    steady = t.get("steady_rows_s")
    breakdown = {  # (seconds; Ray's fixed costs first, then ours)
        "python_start_s": round(t["process_started"] - launched, 3), "ray_init_s": round(t["ray_init_s"], 3),
        "actors_started_s": t["actors_started_s"], "actor_load_s": t["actor_load_s"], "actors_up_s": t["actors_up_s"],
        "first_batch_done_s": t["first_batch_done_s"], "last_batch_done_s": t["last_batch_done_s"],
        "infer_busy_s": t["infer_busy_s"], "run_s": t["run_s"],
        "after_run_s": round(ray_s - (t["process_started"] - launched) - t["ray_init_s"] - t["run_s"], 3),
        "read_files_in_process_s": round(read_s, 3)}
    return {"rows": args.rows, "actors": args.batch_actors, "plain_rows_s": round(args.rows / plain_s, 1),
            "run_batch_rows_s": round(args.rows / run_batch_s, 1), "litert_rows_s": round(args.rows / litert_s, 1),
            "ray_rows_s": round(args.rows / ray_s, 1), "ray_over_plain": round(ray_s / plain_s, 3),
            "ray_run_rows_s": round(args.rows / t["run_s"], 1), "ray_run_over_plain": round(t["run_s"] / plain_s, 3),
            "ray_steady_rows_s": steady, "ray_steady_over_plain": round(args.rows / plain_s / steady, 3) if steady else None,
            "breakdown": breakdown,
            "run_batch_identical": all(np.array_equal(a, b) for a, b in zip(plain, batched)),
            "outputs_identical": same and len(table["id"]) == args.rows, "summary": done.stdout.strip().splitlines()[-1]}


def _batch_table(batch: dict) -> None:
    """The batch rows: rows/s of each way, then where `nnapi batch`'s time went."""
    print(f"batch inference, mobilenet_v2_int8, {batch['rows']} rows, {batch['actors']} actors (rows/s):")
    for label, key in (("plain model.run loop", "plain_rows_s"), ("model.run_batch", "run_batch_rows_s"),
                       ("LiteRT loop", "litert_rows_s"), ("nnapi batch, whole command", "ray_rows_s"),
                       ("nnapi batch, after ray.init", "ray_run_rows_s"),
                       ("nnapi batch, steady (actors up)", "ray_steady_rows_s")):
        print(f"  {label:<34}{str(batch[key]):>10}")
    print(f"  Ray over plain: whole {batch['ray_over_plain']}x, after ray.init {batch['ray_run_over_plain']}x, "
          f"steady {batch['ray_steady_over_plain']}x; outputs identical: {batch['outputs_identical']} "
          f"(run_batch: {batch['run_batch_identical']})")
    print("  where nnapi batch's time went (s; the stream's times from the start of the run, after ray.init):")
    for key, value in batch["breakdown"].items():
        print(f"    {key:<30}{str(value):>12}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--models", default="mobilenet_v2_f32,resnet_mini_int8")
    parser.add_argument("--batch-actors", type=int, default=2, help="nnapi batch's --actors (default 2)")
    parser.add_argument("--only", choices=("fleet", "batch"), help="run one part only")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nnapi-fleet-bench-")
    compiles: dict = {}
    batch: dict = {}
    try:
        if args.only != "batch":
            import ray
            server, url = _redis(work)
            try:
                ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
                compiles = fleet_compiles(args, url, work)
                ray.shutdown()
            finally:
                server.terminate()
        if args.only != "fleet":
            batch = batch_inference(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'model':<22}{'compiles':>9}{'fleet hits':>11}{'compile s':>10}{'fleet hit s':>12}{'local hit s':>12}"
          f"{'fleet/local':>12}")
    for name, f in compiles.items():
        print(f"{name:<22}{f['compiles']:>9}{f['fleet_hits']:>11}{f['first_compile_s']:>10}{str(f['fleet_hit_s']):>12}"
              f"{str(f['local_hit_s']):>12}{str(f.get('fleet_over_local')):>12}")
    if batch:
        _batch_table(batch)
    print(json.dumps({"actors": args.actors, "compiles": compiles, "batch": batch}))


if __name__ == "__main__":
    main()
