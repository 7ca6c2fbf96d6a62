"""Benchmark: compilation caching on the reference driver for a large model.

Figures (medians of `--runs`, in ms):
- cold prepare:   `Compilation(..., cache_dir, token).finish()` on an empty cache directory (a miss:
                  full compile, then the cache is written);
- uncached:       the same compile without caching information;
- cached prepare: the same call when the files are there (a hit), end to end through the public API;
- driver cached:  the driver's part of it alone, `prepare_model_from_cache` on the cache files (HAL);
- floor:          reading every cache file into memory and hashing every byte with SHA-256, the least a
                  driver that checks its cache cryptographically must do;
- floor (driver's hashes): reading the files and hashing them as the reference driver does (SHA-256 of
                  the model cache, xxh3-128 of the data cache);
- where a cached compile's time goes, measured inside the same runs: the device's
  `get_supported_operations` (which validates the model, as it must for every compile), the content
  fingerprint of the token derivation, the driver's `prepare_model_from_cache`, and the rest.

The model is the largest real `.tflite` model of ../shared/models that imports and runs (through
`nnapi.importers.tflite`), else a synthetic MobileNet-sized float32 model built with the public API.
The cache files stay in the page cache, as for an app compiling a model it used recently.

usage: python benchmarks/caching.py [--runs N] [--model FILE.tflite] [--synthetic]
The last line printed is one JSON object holding every figure.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MODELS_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "models"


def median_ms(fn, runs: int, setup=None) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), times


# --- the model -----------------------------------------------------------------------------------------
def synthetic_mobilenet():
    """MobileNet v1 (224x224, width 1.0) layer shapes with random float32 weights: about 4.2 M parameters."""
    import nnapi
    from nnapi import OperandType as T, OperationType as Op
    rng = np.random.default_rng(0)
    m = nnapi.Model()

    def scalar(v: int) -> int:
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        return i

    def const(a: np.ndarray) -> int:
        i = m.add_operand(T.TENSOR_FLOAT32, a.shape)
        m.set_operand_value(i, a.astype(np.float32))
        return i

    def conv(x, shape, out_c, k, stride):
        n, h, w, c = shape
        out = (n, -(-h // stride), -(-w // stride), out_c)
        y = m.add_operand(T.TENSOR_FLOAT32, out)
        m.add_operation(Op.CONV_2D, [x, const(rng.normal(0, 0.1, (out_c, k, k, c))), const(np.zeros(out_c)),
                                     scalar(1), scalar(stride), scalar(stride), scalar(3)], [y])
        return y, out

    def depthwise(x, shape, stride):
        n, h, w, c = shape
        out = (n, -(-h // stride), -(-w // stride), c)
        y = m.add_operand(T.TENSOR_FLOAT32, out)
        m.add_operation(Op.DEPTHWISE_CONV_2D, [x, const(rng.normal(0, 0.1, (1, 3, 3, c))), const(np.zeros(c)),
                                               scalar(1), scalar(stride), scalar(stride), scalar(1), scalar(3)], [y])
        return y, out

    shape = (1, 224, 224, 3)
    x = m.add_operand(T.TENSOR_FLOAT32, shape)
    h, shape = conv(x, shape, 32, 3, 2)
    for out_c, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
            [(1024, 2), (1024, 1)]:
        h, shape = depthwise(h, shape, stride)
        h, shape = conv(h, shape, out_c, 1, 1)
    pooled = m.add_operand(T.TENSOR_FLOAT32, (1, 1024))
    m.add_operation(Op.MEAN, [h, const_int(m, [1, 2]), scalar(0)], [pooled])
    logits = m.add_operand(T.TENSOR_FLOAT32, (1, 1000))
    m.add_operation(Op.FULLY_CONNECTED, [pooled, const(rng.normal(0, 0.03, (1000, 1024))), const(np.zeros(1000)),
                                         scalar(0)], [logits])
    m.identify_inputs_and_outputs([x], [logits])
    m.finish()
    return m, [np.random.default_rng(1).random((1, 224, 224, 3), np.float32)], "synthetic MobileNet v1 float32"


def const_int(m, values) -> int:
    from nnapi import OperandType as T
    i = m.add_operand(T.TENSOR_INT32, (len(values),))
    m.set_operand_value(i, np.array(values, np.int32))
    return i


def real_model(path: str | None):
    """(model, inputs, name, keep-alive) of the largest `.tflite` file that imports, or None."""
    try:
        from nnapi.importers.tflite import load_tflite
    except ImportError:
        return None
    candidates = [Path(path)] if path else sorted(MODELS_DIR.glob("*/*.tflite"), key=lambda p: -p.stat().st_size)
    for p in candidates:
        try:
            imported = load_tflite(p)
        except Exception as e:   # an operator the importer does not map yet: try the next one
            print(f"(skipping {p.name}: {type(e).__name__}: {str(e).splitlines()[0]})", file=sys.stderr)
            continue
        rng = np.random.default_rng(42)
        inputs = []
        for t in imported.inputs:
            if np.issubdtype(t.dtype, np.floating):
                inputs.append(rng.random(t.shape).astype(t.dtype))
            else:
                info = np.iinfo(t.dtype)
                inputs.append(rng.integers(max(info.min, 0), min(info.max, 100), t.shape).astype(t.dtype))
        return imported.model, inputs, f"{p.parent.name}/{p.name}", imported
    return None


# --- measurements --------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per figure (median reported)")
    parser.add_argument("--model", help="a .tflite file (default: the largest one of ../shared/models that imports)")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic MobileNet-sized model")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nnapi-caching-bench-"))
    os.environ["NNAPI_STATE_DIR"] = str(work / "state")   # a private integrity registry
    import nnapi
    import xxhash
    from nnapi.hal import CacheHandles
    from nnapi.runtime.cache_files import token_from_name

    try:
        picked = None if args.synthetic else real_model(args.model)
        if picked is None:
            model, inputs, name = synthetic_mobilenet()
            keep = None
        else:
            model, inputs, name, keep = picked
        device = next(d for d in nnapi.devices() if d.name == "reference")
        token = nnapi.model_token(model)
        hal_model = model.to_hal()
        cache_dir = work / "cache"

        def compile_cached(directory=cache_dir):
            return nnapi.Compilation(model, devices=[device], cache_dir=directory, token=token).finish()

        def fresh_dir() -> None:
            shutil.rmtree(cache_dir, ignore_errors=True)
            cache_dir.mkdir()

        fresh_dir()
        first = compile_cached()
        assert first.cache_outcomes[0].outcome == "miss", first.cache_outcomes
        second = compile_cached()
        assert second.cache_outcomes[0].outcome == "hit", second.cache_outcomes
        expected = first.execute(inputs)
        got = second.execute(inputs)
        assert all(np.array_equal(a, b) for a, b in zip(expected, got)), "cached model computes other values"

        files = sorted(cache_dir.iterdir())
        model_files = [f for f in files if f.name[64] == "1"]
        data_files = [f for f in files if f.name[64] == "2"]
        cache_bytes = sum(f.stat().st_size for f in files)
        device_token = token_from_name(files[0].name)

        def read(path: Path) -> bytes:
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.pread(fd, os.fstat(fd).st_size, 0)
            finally:
                os.close(fd)

        def floor() -> None:
            h = hashlib.sha256()
            for f in files:
                h.update(read(f))
            h.digest()

        def floor_driver_hashes() -> None:
            h = hashlib.sha256()
            for f in model_files:
                h.update(read(f))
            h.digest()
            for f in data_files:
                xxhash.xxh3_128_digest(read(f))

        def driver_from_cache() -> None:
            fds = [os.open(f, os.O_RDWR) for f in files]
            try:
                handles = CacheHandles(tuple(fds[:len(model_files)]), tuple(fds[len(model_files):]))
                device.driver.prepare_model_from_cache(None, handles, device_token)
            finally:
                for fd in fds:
                    os.close(fd)

        runs = args.runs
        results = {}
        results["uncached_ms"], _ = median_ms(
            lambda: nnapi.Compilation(model, devices=[device]).finish(), runs)
        results["cold_prepare_ms"], _ = median_ms(compile_cached, runs, setup=fresh_dir)
        compile_cached()   # leave a cache behind
        # The hit, with the time of its main parts taken inside the same runs.
        phases = {"supported_operations": [], "content_fingerprint": [], "driver": []}
        cached_times, rest_times = [], []

        def timed(fn, phase):
            def wrapper(*a, **k):
                start = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    phases[phase][-1] += (time.perf_counter() - start) * 1000
            return wrapper

        import nnapi.runtime.compilation as compilation_module
        originals = (device.driver.get_supported_operations, compilation_module.content_fingerprint,
                     device.driver.prepare_model_from_cache)
        device.driver.get_supported_operations = timed(originals[0], "supported_operations")
        compilation_module.content_fingerprint = timed(originals[1], "content_fingerprint")
        device.driver.prepare_model_from_cache = timed(originals[2], "driver")
        try:
            for _ in range(runs):
                for v in phases.values():
                    v.append(0.0)
                start = time.perf_counter()
                compile_cached()
                cached_times.append((time.perf_counter() - start) * 1000)
                rest_times.append(cached_times[-1] - sum(v[-1] for v in phases.values()))
        finally:
            del device.driver.get_supported_operations, device.driver.prepare_model_from_cache
            compilation_module.content_fingerprint = originals[1]
        results["cached_prepare_ms"] = statistics.median(cached_times)
        results["in_hit_supported_operations_ms"] = statistics.median(phases["supported_operations"])
        results["in_hit_content_fingerprint_ms"] = statistics.median(phases["content_fingerprint"])
        results["in_hit_driver_ms"] = statistics.median(phases["driver"])
        results["in_hit_rest_ms"] = statistics.median(rest_times)
        results["driver_cached_prepare_ms"], _ = median_ms(driver_from_cache, runs)
        results["floor_ms"], _ = median_ms(floor, runs)
        results["floor_driver_hashes_ms"], _ = median_ms(floor_driver_hashes, runs)
        results["read_only_ms"], _ = median_ms(lambda: [read(f) for f in files], runs)
        assert compile_cached().cache_outcomes[0].outcome == "hit"
    finally:
        shutil.rmtree(work, ignore_errors=True)

    r = results
    ratios = {
        "cached_over_floor": r["cached_prepare_ms"] / r["floor_ms"],
        "driver_cached_over_floor": r["driver_cached_prepare_ms"] / r["floor_ms"],
        "driver_cached_over_floor_driver_hashes": r["driver_cached_prepare_ms"] / r["floor_driver_hashes_ms"],
        "cold_over_cached": r["cold_prepare_ms"] / r["cached_prepare_ms"],
        "uncached_over_cached": r["uncached_ms"] / r["cached_prepare_ms"],
    }
    print(f"compilation caching on device 'reference': {name}, {len(hal_model.main.operations)} operations, "
          f"cache {cache_bytes / 1e6:.2f} MB in {len(files)} files ({len(model_files)} model, {len(data_files)} data)")
    print(f"{'median of ' + str(runs) + ' runs':<52} {'ms':>9}")
    rows = [("cold prepare (miss: compile + write the cache)", r["cold_prepare_ms"]),
            ("prepare without caching", r["uncached_ms"]),
            ("cached prepare (hit, Compilation.finish)", r["cached_prepare_ms"]),
            ("  in it: get_supported_operations (validation)", r["in_hit_supported_operations_ms"]),
            ("  in it: content fingerprint (token derivation)", r["in_hit_content_fingerprint_ms"]),
            ("  in it: driver prepare_model_from_cache", r["in_hit_driver_ms"]),
            ("  in it: the rest (partitioning, files)", r["in_hit_rest_ms"]),
            ("driver prepare_model_from_cache alone (HAL)", r["driver_cached_prepare_ms"]),
            ("floor: read + SHA-256 of every byte", r["floor_ms"]),
            ("floor with the driver's hashes (SHA-256 + xxh3)", r["floor_driver_hashes_ms"]),
            ("read the files only", r["read_only_ms"])]
    for label, ms in rows:
        print(f"{label:<52} {ms:9.2f}")
    print()
    print(f"{'cached prepare / floor':<52} {ratios['cached_over_floor']:9.2f}")
    print(f"{'driver cached prepare / floor':<52} {ratios['driver_cached_over_floor']:9.2f}")
    print(f"{'driver cached prepare / floor (driver hashes)':<52} "
          f"{ratios['driver_cached_over_floor_driver_hashes']:9.2f}")
    print(f"{'cold prepare / cached prepare':<52} {ratios['cold_over_cached']:9.2f}")
    print(json.dumps({
        "benchmark": "caching", "device": "reference", "model": name,
        "operations": len(hal_model.main.operations), "cache_bytes": cache_bytes,
        "model_cache_files": len(model_files), "data_cache_files": len(data_files), "runs": runs,
        **{k: round(v, 3) for k, v in results.items()},
        "cached_prepare_ms_min": round(min(cached_times), 3), "cached_prepare_ms_max": round(max(cached_times), 3),
        **{k: round(v, 3) for k, v in ratios.items()},
        "goal_driver_cached_within_2x_floor": ratios["driver_cached_over_floor"] <= 2.0,
        "goal_cached_within_2x_floor": ratios["cached_over_floor"] <= 2.0,
        "numpy": np.__version__, "python": platform.python_version(), "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
