"""Benchmark: quality of service on the reference driver (issue 8, Q1-Q7).

Three figures, one run, side by side:

1. High-priority latency. A HIGH-priority model (a chain of ADD/MUL on 4096 floats, a few ms) is
   executed `--runs` times with `--think-ms` between runs, measuring each call's latency (the three
   configurations take turns in 6 rounds, so the machine's busy spells hit them alike):
   - alone, on an idle device;
   - under load: two threads of the same app run a LOW-priority model (a long chain on 16384
     floats, tens of ms) back to back, saturating a device with 2 workers; with the QoS scheduler
     (priorities, preemption at the interpreter's checkpoints);
   - under the same load with plain first-in-first-out scheduling (`policy="fifo"`, 2 workers):
     the baseline.
   Goal: p99 under load <= 1.5x p99 alone, and far better than FIFO.
2. Time to refuse a predicted miss: the HIGH model has a history; each call gets a deadline shorter
   than its fastest run, so the driver answers MISSED_DEADLINE_PERSISTENT before starting
   (validation included). Goal < 1 ms.
3. Abort lag: a WHILE model whose iteration count is an input runs once with 1 iteration (its
   history says "fast"), then with 10^9 iterations and a 100 ms deadline; the lag is from the
   deadline to the moment the call returns MISSED_DEADLINE_TRANSIENT. Goal < 10 ms.

Everything goes through the HAL (`execute_synchronously`) of `ReferenceDevice`s made here, so the
figures are the scheduler's, not the runtime's. usage: python benchmarks/qos.py [--runs N]
[--think-ms T] [--plot FILE.png]. The last line printed is one JSON object holding every figure.
`--plot` draws every execution's latency over time per priority (HIGH, and the LOW background load)
in each configuration, the HIGH latency distributions side by side, and the deadline misses of
sections 2 and 3 (needs matplotlib: pip install 'nnapi[plot]').
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time

import numpy as np

import nnapi
from nnapi.conformance.vts.models import alternating_chain
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError,
                       Priority, Request, RequestArgument)
from nnapi.qos import Scheduler

FAST = ExecutionPreference.FAST_SINGLE_ANSWER
WORKERS = 2
HIGH_OPS, HIGH_SIZE = 40, 4096
LOW_OPS, LOW_SIZE = 400, 16384
#: The start of the run: execution timelines count from here.
ORIGIN = time.perf_counter()


def chain(n: int, size: int, seed: int) -> nnapi.Model:
    """x -> n operations alternating ADD and MUL (constants near 1, so long chains stay finite)."""
    return alternating_chain(n, size, seed=seed, spread=0.1)


def while_model(size: int = 16384) -> nnapi.Model:
    """(i, v, n) -> while i < n: i += 1, v = v * 1 + 0 (two operations on `size` floats per
    iteration); outputs (i, v)."""
    def graph(body: bool) -> nnapi.Model:
        m = nnapi.Model()
        i = m.add_operand(T.TENSOR_INT32, (1,))
        v = m.add_operand(T.TENSOR_FLOAT32, (size,))
        n = m.add_operand(T.TENSOR_INT32, (1,))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        if not body:
            out = m.add_operand(T.TENSOR_BOOL8, (1,))
            m.add_operation(Op.LESS, [i, n], [out])
            m.identify_inputs_and_outputs([i, v, n], [out])
        else:
            one = m.add_operand(T.TENSOR_INT32, (1,))
            m.set_operand_value(one, np.array([1], np.int32))
            i2 = m.add_operand(T.TENSOR_INT32, (1,))
            m.add_operation(Op.ADD, [i, one, act], [i2])
            unit = m.add_operand(T.TENSOR_FLOAT32, (1,))
            m.set_operand_value(unit, np.array([1], np.float32))
            v1 = m.add_operand(T.TENSOR_FLOAT32, (size,))
            m.add_operation(Op.MUL, [v, unit, act], [v1])
            zero = m.add_operand(T.TENSOR_FLOAT32, (1,))
            m.set_operand_value(zero, np.array([0], np.float32))
            v2 = m.add_operand(T.TENSOR_FLOAT32, (size,))
            m.add_operation(Op.ADD, [v1, zero, act], [v2])
            m.identify_inputs_and_outputs([i, v, n], [i2, v2])
        m.finish()
        return m

    cond, body = graph(False), graph(True)
    m = nnapi.Model()
    c = m.add_operand(T.SUBGRAPH)
    b = m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, cond)
    m.set_operand_value_from_model(b, body)
    i = m.add_operand(T.TENSOR_INT32, (1,))
    v = m.add_operand(T.TENSOR_FLOAT32, (size,))
    n = m.add_operand(T.TENSOR_INT32, (1,))
    i_out = m.add_operand(T.TENSOR_INT32, (1,))
    v_out = m.add_operand(T.TENSOR_FLOAT32, (size,))
    m.add_operation(Op.WHILE, [c, b, i, v, n], [i_out, v_out])
    m.identify_inputs_and_outputs([i, v, n], [i_out, v_out])
    m.finish()
    m._keep = (cond, body)  # the referenced models' constants live as long as the main model
    return m


def request(inputs: list[np.ndarray], *outs: np.ndarray) -> Request:
    arrays = [np.ascontiguousarray(x).reshape(-1) for x in inputs] + list(outs)
    args = [RequestArgument(False, DataLocation(k, 0, a.nbytes), tuple(a.shape)) for k, a in enumerate(arrays)]
    return Request(args[:len(inputs)], args[len(inputs):], [MemoryPool(pointer=a) for a in arrays])


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


class Setup:
    """One device with the HIGH and LOW models prepared; `measure` times HIGH executions."""

    def __init__(self, device: ReferenceDevice, high_model, low_model) -> None:
        self.device = device
        self.high = device.prepare_model(high_model.to_hal(), FAST, Priority.HIGH, None, None, None)
        self.low = device.prepare_model(low_model.to_hal(), FAST, Priority.LOW, None, None, None)
        x = np.random.default_rng(0).normal(size=HIGH_SIZE).astype(np.float32)
        self.out = np.zeros(HIGH_SIZE, np.float32)
        self.req = request([x], self.out)
        for _ in range(5):  # warm up
            self.high.execute_synchronously(self.req, MeasureTiming.NO, None, None)
        self.expected = self.out.copy()
        self.latencies: list[float] = []
        #: Every execution while measuring: (priority, start in seconds since ORIGIN, milliseconds).
        self.timeline: list[tuple[str, float, float]] = []
        self.low_runs = 0
        self.loaded_s = 0.0

    def measure(self, loaded: bool, runs: int, think_s: float) -> None:
        """`runs` HIGH executions `think_s` apart, with or without two LOW streams on the device."""
        stop = threading.Event()
        counts = [0, 0]

        def low_stream(k: int) -> None:
            lx = np.random.default_rng(k).normal(size=LOW_SIZE).astype(np.float32)
            lreq = request([lx], np.zeros(LOW_SIZE, np.float32))
            while not stop.is_set():
                begin = time.perf_counter()
                self.low.execute_synchronously(lreq, MeasureTiming.NO, None, None)
                self.timeline.append(("LOW", begin - ORIGIN, (time.perf_counter() - begin) * 1000))
                counts[k] += 1

        streams = [threading.Thread(target=low_stream, args=(k,), daemon=True) for k in range(2)] if loaded else []
        for t in streams:
            t.start()
        if loaded:
            time.sleep(0.1)  # both streams running
        start_all = time.perf_counter()
        for _ in range(runs):
            start = time.perf_counter()
            self.high.execute_synchronously(self.req, MeasureTiming.NO, None, None)
            self.latencies.append((time.perf_counter() - start) * 1000)
            self.timeline.append(("HIGH", start - ORIGIN, self.latencies[-1]))
            time.sleep(think_s)
        if loaded:
            self.loaded_s += time.perf_counter() - start_all
        stop.set()
        for t in streams:
            t.join()
        self.low_runs += sum(counts)
        assert np.array_equal(self.out, self.expected), "outputs changed under load"

    def summary(self) -> dict:
        lat = self.latencies
        return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "mean_ms": statistics.fmean(lat),
                "max_ms": max(lat), "low_runs_per_s": self.low_runs / self.loaded_s if self.loaded_s else 0.0,
                "preemptions": self.device.scheduler.snapshot()["preemptions"]}


def refusal_time(high_model, calls: int, record: list[float] | None = None) -> dict:
    device = ReferenceDevice(workers=WORKERS)
    high = device.prepare_model(high_model.to_hal(), FAST, Priority.HIGH, None, None, None)
    x = np.zeros(HIGH_SIZE, np.float32)
    req = request([x], np.zeros(HIGH_SIZE, np.float32))
    for _ in range(5):
        high.execute_synchronously(req, MeasureTiming.NO, None, None)
    budget = high.stats.lower_ns() // 4
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        try:
            high.execute_synchronously(req, MeasureTiming.NO, time.monotonic_ns() + budget, None)
            raise AssertionError("a predicted miss was not refused")
        except NnError as e:
            assert e.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT, e
        times.append((time.perf_counter_ns() - start) / 1e6)
    if record is not None:
        record.extend(times)
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99), "max_ms": max(times),
            "budget_ms": budget / 1e6, "fastest_run_ms": high.stats.lower_ns() / 1e6}


def abort_lag(repeats: int, deadline_ms: float = 100.0, record: list[float] | None = None) -> dict:
    device = ReferenceDevice(workers=WORKERS)
    model = while_model()
    prepared = device.prepare_model(model.to_hal(), FAST, Priority.MEDIUM, None, None, None)
    v = np.ones(16384, np.float32)
    outs = (np.zeros(1, np.int32), np.zeros(16384, np.float32))
    quick = request([np.array([0], np.int32), v, np.array([1], np.int32)], *outs)
    for _ in range(3):
        prepared.execute_synchronously(quick, MeasureTiming.NO, None, None)
    endless = request([np.array([0], np.int32), v, np.array([10**9], np.int32)], *outs)
    lags = []
    for _ in range(repeats):
        deadline = time.monotonic_ns() + int(deadline_ms * 1e6)
        try:
            prepared.execute_synchronously(endless, MeasureTiming.NO, deadline, 15_000_000_000)
            raise AssertionError("the endless loop finished")
        except NnError as e:
            assert e.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT, e
        lags.append((time.monotonic_ns() - deadline) / 1e6)
    if record is not None:
        record.extend(lags)
    return {"p50_ms": percentile(lags, 50), "max_ms": max(lags), "deadline_ms": deadline_ms,
            "quick_run_ms": prepared.stats.lower_ns() / 1e6}


def make_device(name: str, *, policy: str = "priority"):
    """A fresh device of driver `name` with WORKERS slots (FIFO: the baseline policy), its scheduler
    handing slots over as the driver's own does (`HANDOFF_NS`)."""
    if name == "reference":
        cls, options = ReferenceDevice, {}
    elif name == "xla":
        from nnapi.drivers.xla import XlaDevice
        cls, options = XlaDevice, {"optimize_after": 0}
    elif name == "openvino":
        from nnapi.drivers.openvino.device import OpenVinoDevice
        cls, options = OpenVinoDevice, {}
    else:
        cls = None
    if cls is not None:
        scheduler = Scheduler(WORKERS, policy=policy, name=name, handoff_ns=cls.HANDOFF_NS)
        return cls(scheduler=scheduler, **options)
    raise SystemExit(f"qos.py: unknown device {name!r} (reference, xla or openvino)")


def one_run(device: str, runs: int, think: float, high_model, low_model) -> tuple[dict, dict]:
    """HIGH latency alone, under LOW load with the QoS scheduler and with FIFO, interleaved in rounds."""
    setups = {"alone": Setup(make_device(device), high_model, low_model),
              "qos": Setup(make_device(device), high_model, low_model),
              "fifo": Setup(make_device(device, policy="fifo"), high_model, low_model)}
    rounds = 6
    for r in range(rounds):
        per_round = runs // rounds + (1 if r < runs % rounds else 0)
        for name, setup in setups.items():
            setup.measure(name != "alone", per_round, think)
    return setups, {k: setups[k].summary() for k in ("alone", "qos", "fifo")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="reference", help="the driver measured: reference, xla or openvino")
    parser.add_argument("--repeat", type=int, default=1, help="repeat the latency measurement N times and report "
                                                               "the spread of the p99 ratio")
    parser.add_argument("--runs", type=int, default=300, help="high-priority executions per configuration")
    parser.add_argument("--think-ms", type=float, default=2.0, help="pause between high-priority executions")
    parser.add_argument("--plot", metavar="FILE.png", help="draw latency over time per priority and the deadline "
                                                          "misses to this file (needs matplotlib)")
    args = parser.parse_args()
    if args.plot:
        check_plot_file(parser, args.plot)
    t0 = time.perf_counter()
    global LOW_SIZE
    if args.device != "reference":  # compiled drivers fuse the chain: a larger LOW model keeps them busy
        LOW_SIZE = 1 << 20
    high_model, low_model = chain(HIGH_OPS, HIGH_SIZE, 1), chain(LOW_OPS, LOW_SIZE, 2)
    think = args.think_ms / 1000

    # The three configurations take turns in rounds, so a busy spell of the machine hits them alike.
    ratios = []
    for _ in range(max(1, args.repeat)):
        setups, summaries = one_run(args.device, args.runs, think, high_model, low_model)
        alone, qos, fifo = summaries["alone"], summaries["qos"], summaries["fifo"]
        ratios.append(qos["p99_ms"] / alone["p99_ms"])
    refusals: list[float] = []
    lags: list[float] = []
    refuse = refusal_time(high_model, 2000, refusals)
    lag = abort_lag(10, record=lags)

    low_alone = make_device(args.device).prepare_model(low_model.to_hal(), FAST, Priority.LOW, None, None, None)
    lx = np.zeros(LOW_SIZE, np.float32)
    lreq = request([lx], np.zeros(LOW_SIZE, np.float32))
    low_ms = []
    for _ in range(5):
        start = time.perf_counter()
        low_alone.execute_synchronously(lreq, MeasureTiming.NO, None, None)
        low_ms.append((time.perf_counter() - start) * 1000)

    print(f"QoS on the {args.device} driver ({WORKERS} workers, {os.cpu_count()} CPUs): HIGH model {HIGH_OPS} ops on "
          f"{HIGH_SIZE} floats, LOW model {LOW_OPS} ops on {LOW_SIZE} floats ({min(low_ms):.1f} ms alone)")
    print(f"{'high-priority latency':<34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99/alone':>10} "
          f"{'low runs/s':>11} {'preemptions':>12}")
    for name, r in (("alone", alone), ("under load, QoS scheduler", qos), ("under load, FIFO baseline", fifo)):
        print(f"{name:<34} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} "
              f"{r['p99_ms'] / alone['p99_ms']:10.2f} {r['low_runs_per_s']:11.1f} {r['preemptions']:12d}")
    if len(ratios) > 1:
        print(f"{'p99 under load / p99 alone':<34} over {len(ratios)} runs: min {min(ratios):.2f}, median "
              f"{statistics.median(ratios):.2f}, max {max(ratios):.2f}   (goal <= 1.5)")
    print(f"{'refusing a predicted miss':<34} {refuse['p50_ms']:8.3f} {refuse['p99_ms']:8.3f} "
          f"{refuse['max_ms']:8.3f}   (goal < 1 ms)")
    print(f"{'abort lag after the deadline':<34} {lag['p50_ms']:8.3f} {'':>8} {lag['max_ms']:8.3f}   (goal < 10 ms)")

    result = {
        "benchmark": "qos",
        "device": args.device,
        "p99_ratio_qos_runs": ratios,
        "workers": WORKERS,
        "runs": args.runs,
        "think_ms": args.think_ms,
        "high_model": {"operations": HIGH_OPS, "size": HIGH_SIZE},
        "low_model": {"operations": LOW_OPS, "size": LOW_SIZE, "alone_ms": min(low_ms)},
        "alone": alone,
        "loaded_qos": qos,
        "loaded_fifo": fifo,
        "p99_ratio_qos": qos["p99_ms"] / alone["p99_ms"],
        "p99_ratio_fifo": fifo["p99_ms"] / alone["p99_ms"],
        "p50_ratio_qos": qos["p50_ms"] / alone["p50_ms"],
        "p50_ratio_fifo": fifo["p50_ms"] / alone["p50_ms"],
        "fifo_over_qos_p99": fifo["p99_ms"] / qos["p99_ms"],
        "refusal": refuse,
        "abort_lag": lag,
        "goals_met": {"p99_under_load_le_1_5x_alone": qos["p99_ms"] <= 1.5 * alone["p99_ms"],
                      "refusal_lt_1ms": refuse["p99_ms"] < 1.0, "abort_lag_lt_10ms": lag["max_ms"] < 10.0},
        "seconds": time.perf_counter() - t0,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.plot:
        plot(setups, alone, refusals, lags, lag["deadline_ms"], args.plot)
        print(f"plot written to {args.plot}")
    print(json.dumps(result))


def check_plot_file(parser: argparse.ArgumentParser, path: str) -> None:
    """--plot: a .png/.svg/.pdf in a writable folder, and matplotlib installed (before any work)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.splitext(path)[1].lower() not in (".png", ".svg", ".pdf"):
        parser.error(f"--plot {path}: the file must end in .png, .svg or .pdf")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        parser.error(f"--plot {path}: folder {folder} does not exist or is not writable")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        parser.error("--plot needs matplotlib: pip install 'nnapi[plot]'")


def plot(setups: dict, alone: dict, refusals: list[float], lags: list[float], deadline_ms: float,
         path: str) -> None:
    """Latency over time per priority in each configuration (the LOW background load and the HIGH runs,
    the QoS goal line), the HIGH latency distributions, and the deadline misses: predicted misses
    refused before starting, and runs aborted after their deadline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    goal = 1.5 * alone["p99_ms"]
    titles = {"alone": "HIGH alone (idle device)", "qos": "under load, QoS scheduler",
              "fifo": "under load, FIFO baseline"}
    colours = {"HIGH": "tab:blue", "LOW": "tab:orange"}
    top = max((ms for setup in setups.values() for _, _, ms in setup.timeline), default=1.0)
    for ax, (name, setup) in zip(axes[0], setups.items()):
        for priority in ("LOW", "HIGH"):
            points = [(t, ms) for p, t, ms in setup.timeline if p == priority]
            if points:
                ax.plot([t for t, _ in points], [ms for _, ms in points], "o", ms=2.5, alpha=0.6,
                        color=colours[priority], label=f"{priority} ({len(points)} runs)")
        over = [(t, ms) for p, t, ms in setup.timeline if p == "HIGH" and ms > goal]
        if over:
            ax.plot([t for t, _ in over], [ms for _, ms in over], "x", color="red", ms=6,
                    label=f"HIGH over the goal ({len(over)})")
        ax.axhline(goal, color="red", ls="--", lw=1, label=f"goal: 1.5x p99 alone ({goal:.2f} ms)")
        ax.set_yscale("log")
        ax.set_ylim(top=top * 2)
        ax.set_title(titles.get(name, name))
        ax.set_xlabel("seconds since the benchmark started")
        ax.set_ylabel("latency (ms, log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    ax = axes[1][0]
    for name, setup in setups.items():
        values = sorted(ms for p, _, ms in setup.timeline if p == "HIGH")
        if values:
            ax.plot(values, [(k + 1) / len(values) for k in range(len(values))], label=titles.get(name, name))
    ax.axvline(goal, color="red", ls="--", lw=1, label="goal")
    ax.set_xscale("log")
    ax.set_xlabel("HIGH latency (ms, log scale)")
    ax.set_ylabel("fraction of runs at or below")
    ax.set_title("HIGH-priority latency, cumulative")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1][1]
    if refusals:
        low, high = max(min(refusals), 1e-4), max(max(refusals), 1.5)
        ax.hist(refusals, bins=np.geomspace(low, high, 40), color="tab:purple", alpha=0.8)
        ax.axvline(1.0, color="red", ls="--", lw=1, label="goal < 1 ms")
        ax.set_xscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("time to refuse (ms, log scale)")
    ax.set_ylabel("calls")
    ax.set_title(f"deadline misses predicted and refused ({len(refusals)}, MISSED_DEADLINE_PERSISTENT)", fontsize=10)
    ax = axes[1][2]
    runs = list(range(1, len(lags) + 1))
    ax.barh(runs, [deadline_ms] * len(lags), color="tab:green", alpha=0.5, label="ran until the deadline")
    ax.barh(runs, lags, left=deadline_ms, color="tab:red", label="after the deadline (abort lag)")
    ax.plot([deadline_ms + lag for lag in lags], runs, "x", color="black", label="returned MISSED_DEADLINE_TRANSIENT")
    ax.axvline(deadline_ms, color="black", lw=1)
    ax.set_xlim(0, deadline_ms + max(max(lags, default=0.0), 10.0) * 2)
    ax.set_xlabel("ms since the call")
    ax.set_ylabel("run")
    ax.set_title(f"deadline misses aborted while running (deadline {deadline_ms:g} ms)", fontsize=10)
    ax.legend(fontsize=7, loc="center left")
    fig.suptitle(f"QoS on the reference driver ({WORKERS} workers, {os.cpu_count()} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
