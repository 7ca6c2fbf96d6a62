"""Benchmark: the openvino driver's recurrences compact or unrolled (`lowering.LOOPS`), side by side.

For each recurrent shared model (lstm_text_int8, lstm_text_f32, gru_text_f32), in one process: the
same HAL model built both ways (`graph.build(loops=...)`: compact, the default of FAST_SINGLE_ANSWER
and LOW_POWER, loops over blocks of steps; unrolled, SUSTAINED_SPEED's, every step nodes of the
graph), each compiled with the driver's configuration, then:

- nodes: the graph's node count;
- import: `Core.import_model` of its export, what a cached start pays (median of `--imports`);
- run: an infer request's p50, blocks of `--runs` runs of each graph in turn, `--rounds` rounds (the
  graphs' runs do not interleave one by one: each keeps its caches warm as an app's loop would);
- the ratios unrolled / compact.

usage: python benchmarks/loops.py [--models lstm_text_int8,...] [--runs 60] [--rounds 6] [--imports 5]
The last line printed is one JSON object holding every figure.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import time

import numpy as np

from nnapi.drivers.openvino import backend, graph
from nnapi.drivers.openvino.device import native_int8
from nnapi.hal import ExecutionPreference
from nnapi.importers import load_tflite

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "models")
MODELS = ("lstm_text_int8", "lstm_text_f32", "gru_text_f32")


def measure(name: str, runs: int, rounds: int, imports: int) -> dict:
    imported = load_tflite(os.path.join(SHARED, "keras", f"{name}.tflite"))
    x = np.load(os.path.join(SHARED, "reference", f"{name}.npz"))["input_0"]
    hal = imported.model.to_hal()
    core = backend.ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 2}
    rounding = "fq" if native_int8() else "plain"
    sides, keep = {}, []
    for loops in ("compact", "unrolled"):
        try:
            built = graph.build(hal, rounding=rounding, loops=loops)
            compiled = core.compile_model(built.model, "CPU", config)
        except RuntimeError:  # (the driver's fallback: plain rounding)
            built = graph.build(hal, rounding="plain", loops=loops)
            compiled = core.compile_model(built.model, "CPU", config)
        keep.append(built)  # (its constants point into the model's memory)
        blob = io.BytesIO()
        compiled.export_model(blob)
        loads = []
        for _ in range(imports):
            start = time.perf_counter()
            core.import_model(io.BytesIO(blob.getvalue()), "CPU", config)
            loads.append(time.perf_counter() - start)
        request = compiled.create_infer_request()
        feed = {0: x}
        if built.has_budget:  # (the iteration budget: as large as a run needs)
            feed[len(built.model.inputs) - 1] = np.array(1 << 30, np.int64)
        sides[loops] = {"request": request, "feed": feed, "times": [],
                        "nodes": len(built.model.get_ordered_ops()), "import_ms": 1e3 * statistics.median(loads)}
    for _ in range(rounds):
        for side in sides.values():
            for _ in range(10):
                side["request"].infer(side["feed"])
            for _ in range(runs):
                start = time.perf_counter()
                side["request"].infer(side["feed"])
                side["times"].append(time.perf_counter() - start)
    outputs = [side["request"].get_output_tensor(0).data.astype(np.float64) for side in sides.values()]
    row = {"model": name, "outputs_max_diff": float(np.abs(outputs[0] - outputs[1]).max())}
    for loops, side in sides.items():
        row[loops] = {"nodes": side["nodes"], "import_ms": round(side["import_ms"], 1),
                      "run_p50_us": round(1e6 * statistics.median(side["times"]), 1)}
    row["import_unrolled_over_compact"] = round(row["unrolled"]["import_ms"] / row["compact"]["import_ms"], 2)
    row["run_compact_over_unrolled"] = round(row["compact"]["run_p50_us"] / row["unrolled"]["run_p50_us"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--imports", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(name, args.runs, args.rounds, args.imports) for name in args.models.split(",")]
    print(f"openvino recurrences, compact (default: {ExecutionPreference.FAST_SINGLE_ANSWER.name}) against unrolled "
          f"({ExecutionPreference.SUSTAINED_SPEED.name}), {platform.processor() or platform.machine()}")
    print(f"{'model':16} {'nodes c/u':>11} {'import ms c/u':>15} {'u/c':>5} {'run us c/u':>15} {'c/u':>5}")
    for r in rows:
        c, u = r["compact"], r["unrolled"]
        print(f"{r['model']:16} {c['nodes']:>5}/{u['nodes']:<5} {c['import_ms']:>7}/{u['import_ms']:<7} "
              f"{r['import_unrolled_over_compact']:>5} {c['run_p50_us']:>7}/{u['run_p50_us']:<7} "
              f"{r['run_compact_over_unrolled']:>5}")
    print(json.dumps({"machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, "models": rows}))


if __name__ == "__main__":
    main()
