"""Benchmark: does the default devices' placement hold (issue 32, item 2)?

For each of `--dirs` fresh state directories, a new process imports nnapi (its first `devices()`
calibrates every driver, as a new user's first start does), loads each float model of the shared set
with the default devices, and reports where each partition went and the p50 of `--runs` runs of it.
Then, in one more process, each model runs whole on each device alone, so every placement is set
against the fastest device in the same run.

Goals: each model placed the same way in every directory; its p50 within 1.25x of the fastest single
device's (the placement is worth keeping).

    python benchmarks/placement.py [--dirs 10] [--runs 20] [--models mobilenet_v2_f32,...]

Prints a table per model and, as its last line, one JSON object with every figure.
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
#: The float models of the shared set (the int8 ones can go only where int8 kernels are).
FLOAT_MODELS = ("mobilenet_v2_f32", "resnet_mini_f32", "tiny_transformer_f32", "gru_text_f32", "lstm_text_f32",
                "face_detection_short_range", "hand_landmark_lite", "pose_detection")

#: What one process runs: load each model (default devices, or `DEVICE` alone), time it, print JSON.
CHILD = textwrap.dedent("""
    import json, os, sys, time, statistics
    import numpy as np
    import nnapi
    catalogue = json.load(open(os.path.join(sys.argv[1], "models.json")))
    runs, device, names = int(sys.argv[2]), sys.argv[3] or None, sys.argv[4].split(",")
    nnapi.devices()  # (a fresh state directory: every driver calibrates here)
    out = {}
    for name in names:
        entry = catalogue[name]
        ref = np.load(os.path.join(sys.argv[1], entry["reference_npz"]))
        try:
            session = nnapi.load(os.path.join(sys.argv[1], entry["file"]), devices=[device] if device else None)
            feed = [ref[k] for k in sorted(k for k in ref.files if k.startswith("input_"))]
            session.run(feed)
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                session.run(feed)
                times.append(time.perf_counter() - t)
            out[name] = {"devices": session.devices, "p50_ms": round(1e3 * statistics.median(times), 3)}
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    print(json.dumps(out))
""")


def child(state: str, runs: int, device: str | None, models: list[str]) -> dict:
    """One new process with state directory `state`: its figures per model."""
    env = dict(os.environ, NNAPI_STATE_DIR=state)
    done = subprocess.run([sys.executable, "-c", CHILD, SHARED, str(runs), device or "", ",".join(models)], env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"a child failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=10, help="fresh state directories (default 10)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per model (default 20)")
    parser.add_argument("--models", default=",".join(FLOAT_MODELS))
    parser.add_argument("--devices", default="reference,xla,openvino", help="the devices timed alone")
    args = parser.parse_args()
    models = args.models.split(",")
    work = tempfile.mkdtemp(prefix="nnapi-placement-")
    placements = [child(os.path.join(work, f"state{k}"), args.runs, None, models) for k in range(args.dirs)]
    alone = {d: child(os.path.join(work, f"alone-{d}"), args.runs, d, models) for d in args.devices.split(",")}
    figures = {}
    for name in models:
        seen = collections.Counter("+".join(p[name].get("devices") or ["error"]) for p in placements)
        p50s = [p[name]["p50_ms"] for p in placements if "p50_ms" in p[name]]
        single = {d: a[name].get("p50_ms") for d, a in alone.items()}
        fastest = min((v for v in single.values() if v), default=None)
        placed = statistics.median(p50s) if p50s else None
        figures[name] = {"placements": dict(seen), "stable": len(seen) == 1, "p50_ms": placed, "alone_p50_ms": single,
                         "over_fastest": round(placed / fastest, 2) if placed and fastest else None}
        print(f"{name}: placed {dict(seen)} in {args.dirs} fresh state directories; p50 {placed} ms; alone "
              + ", ".join(f"{d} {v} ms" for d, v in single.items())
              + (f"; {figures[name]['over_fastest']}x the fastest" if figures[name]["over_fastest"] else ""))
    stable = sum(f["stable"] for f in figures.values())
    near = sum(1 for f in figures.values() if f["over_fastest"] is not None and f["over_fastest"] <= 1.25)
    print(f"stable in every directory: {stable} of {len(models)}; within 1.25x of the fastest device: {near} of "
          f"{len(models)} (goal: all)")
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "dirs": args.dirs, "runs": args.runs,
                      "models": figures, "stable": stable, "near_fastest": near}))


if __name__ == "__main__":
    main()
