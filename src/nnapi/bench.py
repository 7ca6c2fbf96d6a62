"""The benchmark library: time a `.tflite` model end to end (import, cold and cached prepare, first,
warm-up and timed executions) and plot the figures. `nnapi bench` and `benchmarks/*.py` share it.

    bench_model(path, device=None, runs=50, ...) -> dict    the figures `nnapi bench` prints
    plot_bench(result, timeline, path)                      the figure of `nnapi bench --plot`
    random_inputs(infos), warm_up_devices(names), device_list(text), import_model(path), ...

Every heavy import (numpy, the runtime, matplotlib) happens when a function runs, so `nnapi`'s other
commands do not pay for it.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Sequence

log = logging.getLogger("nnapi.bench")


def device_list(text: str | None) -> list[str] | None:
    """A `--device` value as device names: one name, or a comma-separated list (None: all devices)."""
    if not text:
        return None
    return [name.strip() for name in text.split(",") if name.strip()] or None


def preference_name(preference: int) -> str:
    """The command-line name of an ExecutionPreference: its name in lower case with dashes."""
    from .hal import ExecutionPreference
    return ExecutionPreference(preference).name.lower().replace("_", "-")


def random_inputs(infos: Sequence[Any], seed: int = 0) -> list:
    """Random data for each input (a TensorInfo-like: dtype, shape, scale): floats in [-1, 1), integers
    in [0, 10) (valid token ids for embedding models), quantized values over their whole range."""
    import numpy as np
    rng = np.random.default_rng(seed)
    arrays = []
    for info in infos:
        dt = np.dtype(info.dtype)
        if dt.kind == "f":
            arrays.append(rng.uniform(-1, 1, info.shape).astype(dt))
        elif dt == np.bool_:
            arrays.append(rng.integers(0, 2, info.shape).astype(dt))
        elif info.scale:
            limits = np.iinfo(dt)
            arrays.append(rng.integers(limits.min, int(limits.max) + 1, info.shape).astype(dt))
        else:
            arrays.append(rng.integers(0, 10, info.shape).astype(dt))
    return arrays


def warm_up_devices(names: Sequence[str] | None = None) -> None:
    """Compile and run a one-operation model (ADD of two float32 [2]) on each device (all when
    `names` is None), so a process's one-time costs are paid before anything is timed."""
    import numpy as np
    from .hal import OperandType as T, OperationType as Op
    from .runtime import Compilation, Model, devices as all_devices
    for device in (names or [d.name for d in all_devices()]):
        m = Model()
        a, b = m.add_operand(T.TENSOR_FLOAT32, (2,)), m.add_operand(T.TENSOR_FLOAT32, (2,))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        out = m.add_operand(T.TENSOR_FLOAT32, (2,))
        m.add_operation(Op.ADD, [a, b, act], [out])
        m.identify_inputs_and_outputs([a, b], [out])
        m.finish()
        Compilation(m, devices=[device]).finish().execute([np.ones(2, np.float32)] * 2)


def import_model(path: str, relaxed: bool = False) -> Any:
    """The `.tflite` file as an ImportedModel (the importer traces it as the "import" slice); `relaxed`:
    float32 may be computed in float16 (`--relaxed`)."""
    from .importers import load_tflite
    return load_tflite(path, relaxed=relaxed)


def compile_model(imported: Any, devices: list[str] | None, cache_dir: str | None, priority: int = 100,
                  timeout: float | None = None, preference: int = 1) -> tuple[Any, float]:
    """The imported model compiled (cached in `cache_dir` under its token, when given) and the seconds
    that took."""
    from .runtime import Compilation
    start = time.perf_counter()
    compilation = Compilation(imported.model, devices=devices, priority=priority, preference=preference,
                              cache_dir=cache_dir, token=imported.token() if cache_dir else None,
                              timeout=timeout).finish()
    return compilation, time.perf_counter() - start


def partitions(compilation: Any) -> list[dict]:
    """Where each partition ran: device, operation count and kinds, cache outcome."""
    from collections import Counter
    rows = []
    for k, step in enumerate(compilation.steps):
        ops = Counter(step.model.main.operations[i].type.name for i in range(len(step.model.main.operations)))
        cache = step.cache
        rows.append({"partition": k, "device": step.device.name, "operations": len(step.operations),
                     "kinds": dict(ops.most_common()),
                     "cache": getattr(cache, "outcome", None), "reason": getattr(cache, "reason", "")})
    return rows


def stages(compilation: Any) -> list[str | None]:
    """Per partition, the stage of its executable ("quick", "optimized" on xla); None for drivers with
    one stage only."""
    return [getattr(step.prepared, "stage", None) for step in compilation.steps]


def stage_text(staged: list[str | None]) -> str:
    """The stages of a compilation in a word: single (one-stage drivers), quick, optimized or mixed."""
    known = [s for s in staged if s is not None]
    return "single" if not known else known[0] if len(set(known)) == 1 else "mixed"


def wait_for_optimized(compilation: Any, timeout_s: float = 600.0) -> float:
    """Bring every partition that has a quick executable to its optimised one (xla: compile it now and
    wait, as `NNAPI_XLA_OPTIMIZE_AFTER` executions would); returns the seconds waited."""
    start = time.perf_counter()
    for step in compilation.steps:
        prepared = step.prepared
        if getattr(prepared, "stage", None) != "quick":
            continue
        if hasattr(prepared, "optimize_now"):
            prepared.optimize_now()
        elif hasattr(prepared, "wait_optimized"):
            prepared.wait_optimized(max(0.0, timeout_s - (time.perf_counter() - start)))
        if getattr(prepared, "stage", None) != "optimized":
            log.warning("partition on %s stays at its quick executable (%s)", step.device.name,
                        getattr(prepared, "optimize_error", None) or "the optimised one did not arrive in time")
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile of `values` (numpy's linear interpolation)."""
    import numpy as np
    return float(np.percentile(np.asarray(values), q))


def bench_model(path: str, device: str | None = None, cache_dir: str | None = None, runs: int = 50,
                warmup: int = 5, priority: int = 100, timeout_ms: float | None = None, preference: int = 1,
                wait_optimized: bool = True, timeline: list[dict] | None = None,
                progress: Callable[[int, str], None] | None = None, relaxed: bool = False) -> dict:
    """Import, prepare cold (empty cache) and cached, run first / `warmup` / `runs` timed executions.
    With `wait_optimized` the timed runs start once every partition runs its optimised executable (xla
    compiles a quick one first). Returns the figures `nnapi bench` prints (times in seconds or
    milliseconds as named); `timeline` receives every execution (phase, start, milliseconds, stage,
    missed), `progress(advance, note)` hears of each step."""
    import shutil
    import tempfile

    from .hal import NnError, ResultCode
    from .importers import tflite  # noqa: F401  (imported, the importer is set up: not part of the import time)
    from .runtime import Execution
    if runs < 1 or warmup < 0:
        raise ValueError(f"bench_model: runs must be >= 1 and warmup >= 0, got {runs} and {warmup}")
    tell = progress or (lambda advance, note: None)
    timeline = timeline if timeline is not None else []
    # Driver discovery, module imports and a compiler's own start-up happen once per process: not
    # part of the figures.
    tell(0, "starting the devices")
    devices = device_list(device)
    warm_up_devices(devices)
    start = time.perf_counter()
    imported = import_model(path, relaxed)
    import_s = time.perf_counter() - start
    inputs = random_inputs(imported.inputs)
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="nnapi-bench-", dir=cache_dir)
    timeout = None if not timeout_ms else timeout_ms / 1000
    missed = {"transient": 0, "persistent": 0}
    origin = time.perf_counter()

    def execute(compilation: Any, phase: str, deadline: float | None = None) -> float | None:
        """One timed execution; None when it missed its deadline."""
        begin = time.perf_counter()
        stage = stage_text(stages(compilation))
        try:
            Execution(compilation).run(inputs, timeout=deadline)
        except NnError as e:
            if e.code not in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT):
                raise
            missed["transient" if e.code == ResultCode.MISSED_DEADLINE_TRANSIENT else "persistent"] += 1
            timeline.append({"phase": phase, "t_s": begin - origin, "ms": (time.perf_counter() - begin) * 1000,
                             "stage": stage, "missed": True})
            return None
        ms = (time.perf_counter() - begin) * 1000
        timeline.append({"phase": phase, "t_s": begin - origin, "ms": ms, "stage": stage, "missed": False})
        return ms

    try:
        tell(0, "cold prepare")
        cold, cold_s = compile_model(imported, devices, scratch, priority, preference=preference)
        tell(0, "cached prepare")
        cached, cached_s = compile_model(imported, devices, scratch, priority, preference=preference)
        origin = time.perf_counter()
        tell(0, "first execution")
        first_ms = execute(cached, "first")
        tell(1, "warm-up")
        for _ in range(warmup):
            execute(cached, "warm-up")
            tell(1, "warm-up")
        waited_s = 0.0
        if wait_optimized and "quick" in stages(cached):
            tell(0, "waiting for the optimised executable")
            begin = time.perf_counter()
            waited_s = wait_for_optimized(cached)
            timeline.append({"phase": "optimizing", "t_s": begin - origin, "duration_s": waited_s})
        timed_stages = stages(cached)
        tell(0, f"timed runs ({stage_text(timed_stages)} executable)")
        times = []
        for _ in range(runs):
            ms = execute(cached, "timed", timeout)
            if ms is not None:
                times.append(ms)
            tell(1, f"timed runs ({stage_text(timed_stages)} executable)")
        stages_after = stages(cached)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = partitions(cached)
    return {
        "model": os.path.basename(path),
        "device": "+".join(dict.fromkeys(row["device"] for row in rows)),
        "import_s": round(import_s, 6),
        "prepare_cold_s": round(cold_s, 6),
        "prepare_cached_s": round(cached_s, 6),
        "first_execute_ms": None if first_ms is None else round(first_ms, 4),
        "execute_p50_ms": round(percentile(times, 50), 4) if times else None,
        "execute_p90_ms": round(percentile(times, 90), 4) if times else None,
        "runs": len(times),
        "warmup": warmup,
        "stage": stage_text(timed_stages),
        "stages": [{"device": row["device"], "stage": stage} for row, stage in zip(rows, timed_stages)],
        "stage_changed": stages_after != timed_stages,
        "optimize_wait_s": round(waited_s, 4),
        "priority": priority,
        "preference": preference_name(preference),
        "timeout_ms": timeout_ms or None,
        "deadline_miss_rate": round((missed["transient"] + missed["persistent"]) / runs, 4),
        "missed_transient": missed["transient"],
        "missed_persistent": missed["persistent"],
        "cache": {"cold": [row["cache"] for row in partitions(cold)], "cached": [row["cache"] for row in rows]},
        "partitions": [{"device": row["device"], "operations": row["operations"]} for row in rows],
    }


def plot_bench(result: dict, timeline: list[dict], path: str) -> None:
    """A PNG (or SVG/PDF) of one `nnapi bench`: every execution's latency over time (phase by colour,
    deadline misses as crosses), the histogram of the timed runs with p50/p90, and cold vs cached
    preparation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, (ax_time, ax_hist, ax_prep) = plt.subplots(1, 3, figsize=(15, 4.6),
                                                    gridspec_kw={"width_ratios": [2.2, 1.4, 1]})
    colours = {"first": "tab:red", "warm-up": "tab:orange", "timed": "tab:blue"}
    for phase, colour in colours.items():
        runs = [e for e in timeline if e["phase"] == phase and not e["missed"]]
        if runs:
            ax_time.plot([e["t_s"] for e in runs], [e["ms"] for e in runs], "o", ms=3.5, color=colour,
                         label=f"{phase} ({len(runs)})", alpha=0.8)
    for e in timeline:
        if e["phase"] == "optimizing":
            ax_time.axvspan(e["t_s"], e["t_s"] + e["duration_s"], color="gold", alpha=0.25,
                            label=f"waiting for the optimised executable ({e['duration_s']:.1f} s)")
    misses = [e for e in timeline if e.get("missed")]
    if misses:
        ax_time.plot([e["t_s"] for e in misses], [e["ms"] for e in misses], "x", color="black", ms=6,
                     label=f"deadline missed ({len(misses)})")
    timed = [e for e in timeline if e["phase"] == "timed"]
    if timed:
        ax_time.axvline(timed[0]["t_s"], color="grey", ls=":", lw=1)
        ax_time.annotate(f" timed runs: {result['stage']} executable", (timed[0]["t_s"], 0.02), rotation=90,
                         xycoords=("data", "axes fraction"), fontsize=8, ha="right", va="bottom", color="dimgrey")
    if result.get("timeout_ms"):
        ax_time.axhline(result["timeout_ms"], color="black", ls="--", lw=1, label=f"timeout {result['timeout_ms']:g} ms")
    ax_time.set_yscale("log")
    from matplotlib.ticker import FuncFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax_time.yaxis.set_major_formatter(plain)
    ax_time.yaxis.set_minor_formatter(plain)
    ax_time.tick_params(axis="y", which="minor", labelsize=7)
    ax_time.set_xlabel("seconds since the first execution")
    ax_time.set_ylabel("latency (ms, log scale)")
    ax_time.set_title("every execution over time")
    ax_time.legend(fontsize=8, loc="best")
    ax_time.grid(True, which="both", alpha=0.3)
    values = np.asarray([e["ms"] for e in timed if not e["missed"]])
    if values.size:
        ax_hist.hist(values, bins=min(40, max(5, values.size // 3)), color="tab:blue", alpha=0.8)
        for q, style in ((50, "-"), (90, "--")):
            v = float(np.percentile(values, q))
            ax_hist.axvline(v, color="black", ls=style, lw=1, label=f"p{q} {v:.3g} ms")
        ax_hist.legend(fontsize=8)
    ax_hist.set_xlabel("latency (ms)")
    ax_hist.set_ylabel("runs")
    ax_hist.set_title(f"timed runs ({values.size} in time of {len(timed)})" if values.size < len(timed)
                      else f"timed runs ({values.size})")
    prep = [result["prepare_cold_s"] * 1000, result["prepare_cached_s"] * 1000]
    bars = ax_prep.bar(["cold", "cached"], prep, color=["tab:red", "tab:green"])
    for bar, value, outcome in zip(bars, prep, (result["cache"]["cold"], result["cache"]["cached"])):
        ax_prep.annotate(f"{value:.1f} ms\n{', '.join(o or '-' for o in outcome)}", (bar.get_x() + bar.get_width() / 2,
                         value), ha="center", va="bottom", fontsize=8)
    ax_prep.set_ylabel("prepare (ms)")
    ax_prep.set_ylim(0, max(prep) * 1.25 or 1)
    ax_prep.set_title("preparation: cold vs cached")
    p50 = result["execute_p50_ms"]
    fig.suptitle(f"nnapi bench {result['model']} on {result['device']} ({result['preference']}, warm-up "
                 f"{result['warmup']}, p50 {'-' if p50 is None else f'{p50:.3g}'} ms)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
