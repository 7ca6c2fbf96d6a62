"""Benchmark: throughput for streams (issue 36, item 3): images/s at a thread budget, side by side in one run.

For each model (default mobilenet_v2_f32 and mobilenet_v2_int8), `--images` inputs (the reference input
plus noise) through:
- LiteRT: a plain `invoke` loop on one interpreter with `--threads` threads (XNNPACK);
- nnapi latency: `model.run` one input at a time, FAST_SINGLE_ANSWER (the latency path);
- nnapi throughput: the same model loaded with SUSTAINED_SPEED (openvino: the THROUGHPUT hint, streams),
  fed through `model.run_batch(feeds, in_flight=N)` (several executions in flight);
- with `--device openvino`, OpenVINO's own TFLite reader with the THROUGHPUT hint and an AsyncInferQueue of
  N requests: the backend's ceiling at the same budget (what is the backend's and what is ours).
The three take turns in `--rounds` rounds (median of each), so the machine's busy spells hit them alike.
The throughput outputs are compared with the latency path's (identical, or the largest difference).

Goal: throughput at least 1.3x the LiteRT loop, outputs identical to the latency path's.

    python benchmarks/throughput.py [--models mobilenet_v2_f32,mobilenet_v2_int8] [--images 64] [--rounds 5]
                                    [--threads 2] [--in-flight 2] [--device openvino]

Prints one line per model and, as its last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "..", "shared", "models")


def _inputs(name: str, n: int) -> list[np.ndarray]:
    """`n` inputs: the model's reference input plus small noise (the same values for every runtime)."""
    ref = np.load(os.path.join(MODELS, "reference", f"{name}.npz"))["input_0"]
    rng = np.random.default_rng(0)
    if np.issubdtype(ref.dtype, np.integer):
        info = np.iinfo(ref.dtype)
        return [np.clip(ref.astype(np.int32) + rng.integers(-2, 3, ref.shape), info.min, info.max).astype(ref.dtype)
                for _ in range(n)]
    return [(ref + rng.normal(0, 0.01, ref.shape)).astype(ref.dtype) for _ in range(n)]


def _litert(path: str, threads: int):
    """A function that runs every input through one LiteRT interpreter (None without ai-edge-litert)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    it = Interpreter(model_path=path, num_threads=threads)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run(xs: list[np.ndarray]) -> list[np.ndarray]:
        outs = []
        for x in xs:
            it.set_tensor(inp, x)
            it.invoke()
            outs.append(it.get_tensor(out).copy())
        return outs
    return run


def _openvino_own(path: str, threads: int, in_flight: int):
    """OpenVINO's own TFLite reader, compiled with the THROUGHPUT hint and fed through an AsyncInferQueue of
    `in_flight` requests: the backend's ceiling at this budget, with none of nnapi in the way."""
    from nnapi.drivers.openvino.backend import ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {
        "PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
        "NUM_STREAMS": in_flight})
    queue = ov.AsyncInferQueue(compiled, in_flight)

    def run(xs: list[np.ndarray]) -> list[np.ndarray]:
        outs: list = [None] * len(xs)
        queue.set_callback(lambda request, k: outs.__setitem__(k, request.get_output_tensor(0).data.copy()))
        for k, x in enumerate(xs):
            queue.start_async({0: x}, k)
        queue.wait_all()
        return outs
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2_f32,mobilenet_v2_int8")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--device", default="openvino")
    args = parser.parse_args()
    os.environ["NNAPI_OPENVINO_THREADS"] = str(args.threads)
    import nnapi
    figures = {}
    for name in args.models.split(","):
        path = os.path.join(MODELS, "keras", f"{name}.tflite")
        xs = _inputs(name, args.images)
        cache = tempfile.mkdtemp(prefix="nnapi-throughput-")
        latency = nnapi.load(path, devices=[args.device], cache_dir=cache)
        stream = nnapi.load(path, devices=[args.device], cache_dir=cache, preference="sustained-speed")
        litert = _litert(path, args.threads)
        key = latency.output_names[0]

        def run_latency() -> list[np.ndarray]:
            return [np.asarray(latency.run([x])[key]) for x in xs]

        def run_stream() -> list[np.ndarray]:
            return [np.asarray(o[key]) for o in stream.run_batch([[x] for x in xs], in_flight=args.in_flight)]

        own = _openvino_own(path, args.threads, args.in_flight) if args.device == "openvino" else None
        runners = {"litert": (lambda: litert(xs)) if litert else None,
                   "openvino_own": (lambda: own(xs)) if own else None, "latency": run_latency, "throughput": run_stream}
        runners = {k: v for k, v in runners.items() if v is not None}
        for fn in runners.values():  # warm-ups
            fn()
        times: dict[str, list[float]] = {k: [] for k in runners}
        outs: dict[str, list[np.ndarray]] = {}
        for _ in range(args.rounds):
            for label, fn in runners.items():
                start = time.perf_counter()
                outs[label] = fn()
                times[label].append(time.perf_counter() - start)
        rate = {k: round(args.images / statistics.median(v), 1) for k, v in times.items()}
        diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                   for a, b in zip(outs["latency"], outs["throughput"]))
        figures[name] = {"images_s": rate, "throughput_over_litert": round(rate["throughput"] / rate["litert"], 2)
                         if "litert" in rate else None, "identical": diff == 0.0, "max_abs_diff": diff}
        print(f"{name} ({args.threads} threads, {args.images} images, median of {args.rounds}): "
              + ", ".join(f"{k} {v} images/s" for k, v in rate.items())
              + (f"; throughput / LiteRT {figures[name]['throughput_over_litert']}x (goal >= 1.3)"
                 if "litert" in rate else "")
              + f"; outputs {'identical' if diff == 0 else f'differ by up to {diff:g}'} to the latency path's")
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                      "in_flight": args.in_flight, "device": args.device, "models": figures}))


if __name__ == "__main__":
    sys.exit(main())
