"""Benchmark: does the default devices' placement hold (issue 32, item 2)?

For each of `--dirs` fresh state directories, a new process imports nnapi (its first `devices()`
calibrates every driver, as a new user's first start does) and loads each model of the shared set with the
default devices, and again on each of `--devices` alone; then it runs them all round-robin, in blocks (each
session one untimed run, then 4 timed ones, in an order drawn anew each round, `--runs` timed runs each),
so the placement is set against every single device measured in the same run, under the same noise, and
no timed run directly follows another session's (XLA's threads, still spinning after its run, slowed the
next one by up to 2x). The reference driver (a numpy interpreter, 10-100x slower on these
models, never the fastest) is timed alone only when `--devices` names it.

Goals (issue 32): in every directory, every model's placement within 1.1x of the fastest single device's
p50; the same placement in every directory. Also counted: the directories where every model went whole to
the device that was fastest alone, the same plan as that device's, where a ratio off 1 is the machine's noise.

    python benchmarks/placement.py [--dirs 10] [--runs 20] [--models mobilenet_v2_f32,...] [--devices xla,openvino]

Prints a line per model, one per directory that misses, and as its last line one JSON object with every
figure.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "models")
#: The bound on a placement's p50 over the fastest single device's, measured in the same process.
GOAL = 1.1

#: What one process runs: each model with the default devices and on each device alone, timed round-robin.
CHILD = textwrap.dedent("""
    import json, os, random, sys, time, statistics
    import numpy as np
    import nnapi
    catalogue = json.load(open(os.path.join(sys.argv[1], "models.json")))
    runs, devices, names = int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4].split(",")
    BLOCK = 4  # timed runs of a session in a row, after one that is not timed
    nnapi.devices()  # (a fresh state directory: every driver calibrates here)
    out = {}
    for name in names:
        entry = catalogue[name]
        path = os.path.join(sys.argv[1], entry["file"])
        sessions, errors = {}, {}
        for target in ["default", *devices]:
            try:
                sessions[target] = nnapi.load(path, devices=None if target == "default" else [target])
            except Exception as e:
                errors[target] = f"{type(e).__name__}: {e}"[:200]
        if "default" not in sessions:
            out[name] = {"error": errors["default"]}
            continue
        if entry.get("reference_npz"):
            ref = np.load(os.path.join(sys.argv[1], entry["reference_npz"]))
            feed = [ref[k] for k in sorted(k for k in ref.files if k.startswith("input_"))]
        else:
            rng = np.random.default_rng(0)
            feed = [(rng.random([1 if d is None else d for d in t.shape]) * (255 if np.dtype(t.dtype).kind in "iu" else 1)
                     ).astype(t.dtype) for t in sessions["default"].inputs]
        for s in sessions.values():
            s.run(feed)
        order = list(sessions.items())
        times = {k: [] for k in sessions}
        shuffle = random.Random(0).shuffle
        for r in range(-(-runs // BLOCK)):
            shuffle(order)  # (an order drawn anew each round: each follows every other about as often)
            for k, s in order:
                s.run(feed)  # (not timed: the run after another session's pays for its threads still spinning)
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    s.run(feed)
                    times[k].append(time.perf_counter() - t)
        p50 = {k: round(1e3 * statistics.median(v), 4) for k, v in times.items()}
        out[name] = {"devices": sessions["default"].devices, "p50_ms": p50.pop("default"), "alone_p50_ms": p50,
                     "errors": errors}
    print(json.dumps(out))
""")


def child(state: str, runs: int, devices: list[str], models: list[str]) -> dict:
    """One new process with state directory `state`: its figures per model."""
    env = dict(os.environ, NNAPI_STATE_DIR=state)
    done = subprocess.run([sys.executable, "-c", CHILD, SHARED, str(runs), ",".join(devices), ",".join(models)],
                          env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"a child failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=10, help="fresh state directories (default 10)")
    parser.add_argument("--runs", type=int, default=20, help="timed rounds per model (default 20)")
    catalogue = json.load(open(os.path.join(SHARED, "models.json")))
    parser.add_argument("--models", default=",".join(catalogue))
    parser.add_argument("--devices", default="xla,openvino", help="the devices timed alone, beside the placement")
    args = parser.parse_args()
    models, devices = args.models.split(","), args.devices.split(",")
    work = tempfile.mkdtemp(prefix="nnapi-placement-")
    dirs = []
    for k in range(args.dirs):
        dirs.append(child(os.path.join(work, f"state{k}"), args.runs, devices, models))
        print(f"... directory {k + 1} of {args.dirs} done", file=sys.stderr, flush=True)
    figures, met, chose = {}, [], []
    for k, got in enumerate(dirs):
        misses, other_plan = {}, {}
        for name in models:
            f = got[name]
            alone = f.get("alone_p50_ms", {})
            fastest = min(alone, key=alone.get, default=None)
            f["over_fastest"] = round(f["p50_ms"] / alone[fastest], 3) if fastest and "p50_ms" in f else None
            # (the whole model on the device fastest alone: the same plan, so any ratio off 1 is noise)
            f["fastest_plan"] = fastest is not None and f.get("devices") == [fastest]
            if f["over_fastest"] is None or f["over_fastest"] > GOAL:
                misses[name] = f["over_fastest"]
            if not f["fastest_plan"]:
                other_plan[name] = f.get("devices")
        met.append(not misses)
        chose.append(not other_plan)
        if misses:
            print(f"directory {k}: over {GOAL}x the fastest single device: {misses}"
                  + (f"; not its plan: {other_plan}" if other_plan else "; each the fastest device's own plan"))
    for name in models:
        seen = collections.Counter("+".join(d[name].get("devices") or ["error"]) for d in dirs)
        ratios = [d[name]["over_fastest"] for d in dirs if d[name].get("over_fastest") is not None]
        figures[name] = {"placements": dict(seen), "stable": len(seen) == 1,
                         "over_fastest": ratios, "over_fastest_median": statistics.median(ratios) if ratios else None,
                         "within_goal": sum(1 for r in ratios if r <= GOAL)}
        print(f"{name}: placed {dict(seen)}; placement p50 / fastest alone, median {figures[name]['over_fastest_median']}"
              f" (max {max(ratios, default=None)}); within {GOAL}x in {figures[name]['within_goal']} of {len(dirs)}")
    stable = sum(f["stable"] for f in figures.values())
    print(f"directories where every model is within {GOAL}x of the fastest single device: {sum(met)} of {len(dirs)} "
          f"(goal: all); where every model is the fastest device's own plan: {sum(chose)} of {len(dirs)}; models "
          f"placed the same in every directory: {stable} of {len(models)}")
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "dirs": args.dirs, "runs": args.runs,
                      "devices": devices, "goal": GOAL, "directories_met": sum(met),
                      "directories_fastest_plan": sum(chose), "models": figures,
                      "stable": stable, "per_directory": dirs}))


if __name__ == "__main__":
    main()
