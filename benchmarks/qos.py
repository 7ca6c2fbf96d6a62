"""Benchmark: quality of service on every driver, in-process and served (issues 8 and 36, Q1-Q7).

Per device (`--device`: reference, xla or openvino), a HIGH-priority model of a few ms and a LOW-priority
model of tens of ms on that device (`MODELS`: on the compiling drivers a LOW model of many operations, so
a HIGH execution that had to wait for a whole LOW run would wait tens of ms: it waits at most for one of
its checkpoints, an operation of the reference interpreter, a sub-model of XLA, a node of OpenVINO).
Four figures:

1. High-priority latency. The HIGH model is executed `--runs` times with `--think-ms` between runs,
   measuring each call's latency (the configurations take turns in 6 rounds, so the machine's busy
   spells hit them alike):
   - alone, on an idle device;
   - under load: two threads of the same app run the LOW model back to back, saturating a device with
     2 workers; with the QoS scheduler (priorities, preemption at checkpoints, stopped native calls);
   - under the same load with plain first-in-first-out scheduling (`policy="fifo"`, 2 workers): the
     baseline (in-process only: a service's driver schedules as it is made).
   Goal: p99 under load <= 1.5x p99 alone, and far better than FIFO.
2. Low-priority throughput. Two threads run the LOW model back to back, alone and beside 2 threads
   running the HIGH model back to back (saturating HIGH load), in 3 rounds each: LOW runs per second
   under that load over LOW runs per second alone. Goal >= 0.2 (the scheduler keeps LOW a quarter of
   the running time while HIGH work is continuous: `qos.shares`).
3. Time to refuse a predicted miss (reference driver, in-process): the HIGH model has a history; each
   call gets a deadline shorter than its fastest run, so the driver answers MISSED_DEADLINE_PERSISTENT
   before starting (validation included). Goal < 1 ms.
4. Abort lag (reference driver, in-process): a WHILE model whose iteration count is an input runs once
   with 1 iteration (its history says "fast"), then with 10^9 iterations and a 100 ms deadline; the lag
   is from the deadline to the moment the call returns MISSED_DEADLINE_TRANSIENT. Goal < 10 ms.
Every output of every run under load is checked against the output of a run alone (bit-identical).

Everything goes through the HAL (`execute_synchronously`): of devices made here, or with `--served` of
the proxy of an `nnapi serve --driver D` the benchmark starts and stops (2 workers, the same for the
app's HIGH and LOW models), so the figures are the scheduler's, not the runtime's. usage: python
benchmarks/qos.py [--device D] [--served] [--repeat N] [--runs N] [--think-ms T] [--seconds S]
[--plot FILE.png]. `--repeat N` measures figures 1 and 2 N times and reports the min / median / max of
their ratios. The last line printed is one JSON object holding every figure. `--plot` draws every
execution's latency over time per priority (HIGH, and the LOW background load) in each configuration,
the HIGH latency distributions side by side, and the deadline misses of sections 3 and 4 (needs
matplotlib: pip install 'nnapi[plot]').
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from typing import Iterator, NamedTuple

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
#: The start of the run: execution timelines count from here.
ORIGIN = time.perf_counter()


class Spec(NamedTuple):
    """A benchmark model: `kind` "chain" (n operations alternating ADD and MUL on `size` floats) or "mlp"
    (n FULLY_CONNECTED layers with RELU6, `batch` rows of `size` features)."""

    kind: str
    n: int
    size: int
    batch: int = 1

    def build(self, seed: int) -> nnapi.Model:
        return chain(self.n, self.size, seed) if self.kind == "chain" else mlp(self.n, self.batch, self.size, seed)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.size,) if self.kind == "chain" else (self.batch, self.size)

    def describe(self) -> str:
        if self.kind == "chain":
            return f"{self.n} ADD/MUL on {self.size} floats"
        return f"{self.n} FULLY_CONNECTED {self.size}x{self.size} on {self.batch} rows"


#: (HIGH, LOW) per device: a few ms and tens of ms there. The compiling drivers fuse a chain of
#: elementwise operations into one kernel (one OpenVINO node of ~2 ms, however long), so their LOW model is
#: a stack of layers: 32 OpenVINO nodes of about 1 ms, 3 XLA sub-models.
MODELS = {
    "reference": (Spec("chain", 40, 4096), Spec("chain", 400, 16384)),
    "xla": (Spec("mlp", 8, 512, 16), Spec("mlp", 32, 512, 64)),
    "openvino": (Spec("mlp", 8, 512, 16), Spec("mlp", 32, 512, 64)),
}


def chain(n: int, size: int, seed: int) -> nnapi.Model:
    """x -> n operations alternating ADD and MUL (constants near 1, so long chains stay finite)."""
    return alternating_chain(n, size, seed=seed, spread=0.1)


def mlp(n: int, batch: int, width: int, seed: int) -> nnapi.Model:
    """x [batch, width] -> n FULLY_CONNECTED layers (weights scaled by 1/sqrt(width)) with RELU6."""
    rng = np.random.default_rng(seed)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (batch, width))
    relu6 = m.add_operand(T.INT32)
    m.set_operand_value(relu6, 3)
    cur = x
    for _ in range(n):
        w = m.add_operand(T.TENSOR_FLOAT32, (width, width))
        m.set_operand_value(w, (rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32))
        b = m.add_operand(T.TENSOR_FLOAT32, (width,))
        m.set_operand_value(b, (rng.normal(size=width) * 0.1).astype(np.float32))
        y = m.add_operand(T.TENSOR_FLOAT32, (batch, width))
        m.add_operation(Op.FULLY_CONNECTED, [cur, w, b, relu6], [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


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
    """A HAL request over the arrays in place (their shapes as the arguments' dimensions)."""
    arrays = [np.ascontiguousarray(x) for x in inputs] + list(outs)
    args = [RequestArgument(False, DataLocation(k, 0, a.nbytes), tuple(a.shape)) for k, a in enumerate(arrays)]
    return Request(args[:len(inputs)], args[len(inputs):], [MemoryPool(pointer=a.reshape(-1)) for a in arrays])


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


class Workload:
    """One model prepared at one priority, with what a thread needs to run it and check its output."""

    def __init__(self, device, spec: Spec, seed: int, priority: Priority) -> None:
        self.spec = spec
        self.model = spec.build(seed)  # (the HAL model points into it: kept alive)
        self.prepared = device.prepare_model(self.model.to_hal(), FAST, priority, None, None, None)
        self.x = np.random.default_rng(seed).normal(size=spec.shape).astype(np.float32)
        req, out = self.request()
        started = time.perf_counter()
        for _ in range(3):  # warm up; the output of a run alone
            self.run(req)
        self.alone_ms = (time.perf_counter() - started) * 1000 / 3
        self.expected = out.copy()

    def request(self) -> tuple[Request, np.ndarray]:
        """A request of its own (one per thread) and its output array."""
        out = np.zeros(self.spec.shape, np.float32)
        return request([self.x], out), out

    def run(self, req: Request) -> None:
        self.prepared.execute_synchronously(req, MeasureTiming.NO, None, None)


class Setup:
    """One device with the HIGH and LOW models prepared; `measure` times HIGH executions, `throughput`
    counts LOW executions."""

    def __init__(self, device, high: Spec, low: Spec) -> None:
        self.device = device
        self.high = Workload(device, high, 1, Priority.HIGH)
        self.low = Workload(device, low, 2, Priority.LOW)
        self.latencies: list[float] = []
        #: Every execution while measuring: (priority, start in seconds since ORIGIN, milliseconds).
        self.timeline: list[tuple[str, float, float]] = []
        self.low_runs = 0
        self.loaded_s = 0.0
        #: The scheduler's preemptions and turns while measuring HIGH latency (in-process only).
        self.counts = {"preemptions": 0, "turns": 0}
        #: LOW runs per second per `throughput` round: alone, under saturating HIGH load.
        self.low_rates: dict[bool, list[float]] = {False: [], True: []}

    def _stream(self, work: Workload, stop: threading.Event, runs: list, name: str) -> threading.Thread:
        """A thread running `work` back to back until `stop`, appending (start, end) per run to `runs`
        and checking every output."""
        def loop() -> None:
            req, out = work.request()
            while not stop.is_set():
                begin = time.perf_counter()
                work.run(req)
                end = time.perf_counter()
                assert np.array_equal(out, work.expected), f"{name} outputs changed under load"
                runs.append((begin, end))
                self.timeline.append((name, begin - ORIGIN, (end - begin) * 1000))

        thread = threading.Thread(target=loop, daemon=True, name=f"qos-bench-{name}")
        thread.start()
        return thread

    def measure(self, loaded: bool, runs: int, think_s: float) -> None:
        """`runs` HIGH executions `think_s` apart, with or without two LOW streams on the device."""
        stop = threading.Event()
        low_runs: list = []
        before = self._counters()
        start_all = time.perf_counter()
        streams = [self._stream(self.low, stop, low_runs, "LOW") for _ in range(2)] if loaded else []
        if loaded:
            time.sleep(0.1)  # both streams running
        req, out = self.high.request()
        for _ in range(runs):
            start = time.perf_counter()
            self.high.run(req)
            self.latencies.append((time.perf_counter() - start) * 1000)
            self.timeline.append(("HIGH", start - ORIGIN, self.latencies[-1]))
            time.sleep(think_s)
        stop.set()
        for t in streams:
            t.join()
        if loaded:  # (LOW runs per second from the streams' start to their end)
            self.loaded_s += time.perf_counter() - start_all
        self.low_runs += len(low_runs)
        for key, value in self._counters().items():
            self.counts[key] += value - before[key]
        assert np.array_equal(out, self.high.expected), "HIGH outputs changed under load"

    def throughput(self, loaded: bool, seconds: float) -> float:
        """LOW runs per second of two LOW streams for `seconds`, alone or beside WORKERS streams of HIGH
        work back to back (which go on until the LOW streams have ended their last runs)."""
        stop_low, stop_high = threading.Event(), threading.Event()
        per_stream: list[list] = [[], []]
        high_runs: list = []
        highs = [self._stream(self.high, stop_high, high_runs, "HIGH") for _ in range(WORKERS)] if loaded else []
        if loaded:
            time.sleep(0.05)
        start = time.perf_counter()
        lows = [self._stream(self.low, stop_low, per_stream[k], "LOW") for k in range(2)]
        time.sleep(seconds)
        stop_low.set()
        for t in lows:
            t.join()
        stop_high.set()
        for t in highs:
            t.join()
        rate = sum(len(runs) / (runs[-1][1] - start) for runs in per_stream if runs)
        self.low_rates[loaded].append(rate)
        return rate

    def _counters(self) -> dict[str, int]:
        scheduler = getattr(self.device, "scheduler", None)  # (None: a service's proxy)
        snapshot = scheduler.snapshot() if scheduler is not None else {}
        return {key: snapshot.get(key, 0) for key in self.counts}

    def summary(self) -> dict:
        lat = self.latencies
        return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "mean_ms": statistics.fmean(lat),
                "max_ms": max(lat), "low_runs_per_s": self.low_runs / self.loaded_s if self.loaded_s else 0.0,
                **self.counts}


def make_device(name: str, *, policy: str = "priority"):
    """A fresh in-process device of driver `name` with WORKERS slots (FIFO: the baseline policy), its
    scheduler handing slots over as the driver's own does (`HANDOFF_NS`)."""
    if name == "reference":
        cls, options = ReferenceDevice, {}
    elif name == "xla":
        from nnapi.drivers.xla import XlaDevice
        cls, options = XlaDevice, {"optimize_after": 0}
    elif name == "openvino":
        from nnapi.drivers.openvino.device import OpenVinoDevice
        cls, options = OpenVinoDevice, {}
    else:
        raise SystemExit(f"qos.py: unknown device {name!r} (reference, xla or openvino)")
    scheduler = Scheduler(WORKERS, policy=policy, name=name, handoff_ns=cls.HANDOFF_NS)
    return cls(scheduler=scheduler, **options)


@contextlib.contextmanager
def served_device(name: str) -> Iterator[object]:
    """`nnapi serve --driver name` with WORKERS slots (xla: its optimised executables at once), started
    for the benchmark in a temporary folder, and the proxy of its device; stopped on the way out."""
    from nnapi.service import connect, default_socket
    from nnapi.service.cli import start
    directory = tempfile.mkdtemp(prefix="nnapi-qos-bench-")
    env = {**os.environ, f"NNAPI_{name.upper()}_WORKERS": str(WORKERS), "NNAPI_XLA_OPTIMIZE_AFTER": "0"}
    try:
        service = start(name, default_socket(name, directory), os.path.join(directory, "state"), env=env)
    except RuntimeError as e:
        raise SystemExit(f"qos.py: {e}") from None
    device = None
    try:
        device = connect(service.socket)
        yield device
    finally:
        if device is not None:
            device.close()
        service.stop()
        shutil.rmtree(directory, ignore_errors=True)


def checkpoints(setup: Setup) -> int | None:
    """The LOW model's checkpoints per run in-process: operations (reference), sub-models (xla), nodes of
    the compiled graph (openvino); None for a served driver."""
    prepared = setup.low.prepared
    if hasattr(prepared, "segments"):
        return len(prepared.segments)
    if hasattr(prepared, "compiled"):
        return sum(1 for op in prepared.compiled.get_runtime_model().get_ordered_ops()
                   if op.get_type_name() not in ("Parameter", "Result", "Constant"))
    if hasattr(prepared, "model") and setup.device.__class__ is ReferenceDevice:
        return len(prepared.model.main.operations)
    return None


def one_run(setups: dict[str, Setup], runs: int, think: float, seconds: float) -> dict:
    """HIGH latency alone, under LOW load with the QoS scheduler (and with FIFO), interleaved in rounds;
    then LOW throughput alone and under saturating HIGH load, interleaved in rounds. The figures of this
    run only (the setups keep every run's executions)."""
    for setup in setups.values():
        setup.latencies.clear()
        setup.low_runs, setup.loaded_s = 0, 0.0
        setup.counts = dict.fromkeys(setup.counts, 0)
        setup.low_rates = {False: [], True: []}
    rounds = 6
    for r in range(rounds):
        per_round = runs // rounds + (1 if r < runs % rounds else 0)
        for name, setup in setups.items():
            setup.measure(name != "alone", per_round, think)
    qos = setups["qos"]
    for _ in range(3):
        qos.throughput(False, seconds / 3)
        qos.throughput(True, seconds / 3)
    alone_rate, loaded_rate = (statistics.fmean(qos.low_rates[k]) for k in (False, True))
    summaries = {k: s.summary() for k, s in setups.items()}
    return {**summaries, "low_alone_runs_per_s": alone_rate, "low_loaded_runs_per_s": loaded_rate,
            "low_throughput_ratio": loaded_rate / alone_rate,
            "p99_ratio": summaries["qos"]["p99_ms"] / summaries["alone"]["p99_ms"]}


def spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def refusal_time(high_model, calls: int, record: list[float] | None = None, size: int = 4096) -> dict:
    device = ReferenceDevice(workers=WORKERS)
    high = device.prepare_model(high_model.to_hal(), FAST, Priority.HIGH, None, None, None)
    x = np.zeros(size, np.float32)
    req = request([x], np.zeros(size, np.float32))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="reference", choices=sorted(MODELS), help="the driver measured")
    parser.add_argument("--served", action="store_true", help="through an `nnapi serve` of the driver that the "
                                                               "benchmark starts and stops")
    parser.add_argument("--repeat", type=int, default=1, help="measure figures 1 and 2 N times and report the "
                                                               "spread of their ratios")
    parser.add_argument("--runs", type=int, default=300, help="high-priority executions per configuration")
    parser.add_argument("--think-ms", type=float, default=2.0, help="pause between high-priority executions")
    parser.add_argument("--seconds", type=float, default=6.0, help="LOW throughput: seconds per configuration")
    parser.add_argument("--plot", metavar="FILE.png", help="draw latency over time per priority and the deadline "
                                                          "misses to this file (needs matplotlib)")
    args = parser.parse_args()
    if args.plot:
        check_plot_file(parser, args.plot)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    high_spec, low_spec = MODELS[args.device]
    think = args.think_ms / 1000
    where = "served" if args.served else "in-process"
    with contextlib.ExitStack() as stack:
        if args.served:
            device = stack.enter_context(served_device(args.device))
            setups = {"alone": Setup(device, high_spec, low_spec), "qos": Setup(device, high_spec, low_spec)}
        else:
            setups = {"alone": Setup(make_device(args.device), high_spec, low_spec),
                      "qos": Setup(make_device(args.device), high_spec, low_spec),
                      "fifo": Setup(make_device(args.device, policy="fifo"), high_spec, low_spec)}
        figures = [one_run(setups, args.runs, think, args.seconds) for _ in range(max(1, args.repeat))]
    last = figures[-1]
    alone, qos, fifo = last["alone"], last["qos"], last.get("fifo")
    ratios = [f["p99_ratio"] for f in figures]
    throughput = [f["low_throughput_ratio"] for f in figures]
    refusals: list[float] = []
    lags: list[float] = []
    refuse = refusal_time(chain(40, 4096, 1), 2000, refusals)
    lag = abort_lag(10, record=lags)
    qos_setup = setups["qos"]
    steps = None if args.served else checkpoints(qos_setup)
    low_ms = qos_setup.low.alone_ms

    print(f"QoS on the {args.device} driver, {where} ({WORKERS} workers, {os.cpu_count()} CPUs, "
          f"{cpu_model()}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after)")
    print(f"HIGH model: {high_spec.describe()} ({setups['alone'].high.alone_ms:.1f} ms alone); LOW model: "
          f"{low_spec.describe()} ({low_ms:.1f} ms alone"
          + (f", {steps} checkpoints: {low_ms / steps:.2f} ms each)" if steps else ")"))
    print(f"{'high-priority latency':<34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99/alone':>10} "
          f"{'low runs/s':>11} {'preemptions':>12} {'turns':>6}")
    rows = [("alone", alone), ("under load, QoS scheduler", qos)] + (
        [("under load, FIFO baseline", fifo)] if fifo is not None else [])
    for name, r in rows:
        print(f"{name:<34} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} "
              f"{r['p99_ms'] / alone['p99_ms']:10.2f} {r['low_runs_per_s']:11.1f} {r['preemptions']:12d} "
              f"{r['turns']:6d}")
    print(f"{'low-priority throughput':<34} {'runs/s':>8}")
    print(f"{'alone (2 LOW streams)':<34} {last['low_alone_runs_per_s']:8.2f}")
    print(f"{'under saturating HIGH load':<34} {last['low_loaded_runs_per_s']:8.2f}   ratio "
          f"{last['low_throughput_ratio']:.2f} (goal >= 0.2)")
    if len(figures) > 1:
        for label, values, goal in (("p99 under load / p99 alone", ratios, "<= 1.5"),
                                    ("LOW throughput loaded / alone", throughput, ">= 0.2")):
            s = spread(values)
            print(f"{label:<34} over {len(values)} runs: min {s['min']:.2f}, median {s['median']:.2f}, "
                  f"max {s['max']:.2f}   (goal {goal})")
    print(f"{'refusing a predicted miss':<34} {refuse['p50_ms']:8.3f} {refuse['p99_ms']:8.3f} "
          f"{refuse['max_ms']:8.3f}   (goal < 1 ms; reference, in-process)")
    print(f"{'abort lag after the deadline':<34} {lag['p50_ms']:8.3f} {'':>8} {lag['max_ms']:8.3f}   "
          "(goal < 10 ms; reference, in-process)")

    p99_spread, throughput_spread = spread(ratios), spread(throughput)
    result = {
        "benchmark": "qos",
        "device": args.device,
        "served": args.served,
        "p99_ratio_qos_runs": ratios,
        "p99_ratio_qos_spread": p99_spread,
        "low_throughput_ratio_runs": throughput,
        "low_throughput_ratio_spread": throughput_spread,
        "workers": WORKERS,
        "runs": args.runs,
        "think_ms": args.think_ms,
        "repeat": len(figures),
        "high_model": {"kind": high_spec.kind, "operations": high_spec.n, "size": high_spec.size,
                       "batch": high_spec.batch, "alone_ms": setups["alone"].high.alone_ms},
        "low_model": {"kind": low_spec.kind, "operations": low_spec.n, "size": low_spec.size,
                      "batch": low_spec.batch, "alone_ms": low_ms, "checkpoints": steps},
        "alone": alone,
        "loaded_qos": qos,
        "loaded_fifo": fifo,
        "p99_ratio_qos": qos["p99_ms"] / alone["p99_ms"],
        "p99_ratio_fifo": fifo["p99_ms"] / alone["p99_ms"] if fifo else None,
        "p50_ratio_qos": qos["p50_ms"] / alone["p50_ms"],
        "p50_ratio_fifo": fifo["p50_ms"] / alone["p50_ms"] if fifo else None,
        "fifo_over_qos_p99": fifo["p99_ms"] / qos["p99_ms"] if fifo else None,
        "low_alone_runs_per_s": last["low_alone_runs_per_s"],
        "low_loaded_runs_per_s": last["low_loaded_runs_per_s"],
        "low_throughput_ratio": last["low_throughput_ratio"],
        "refusal": refuse,
        "abort_lag": lag,
        "goals_met": {"p99_under_load_le_1_5x_alone": p99_spread["median"] <= 1.5,
                      "low_throughput_ge_0_2": throughput_spread["median"] >= 0.2,
                      "refusal_lt_1ms": refuse["p99_ms"] < 1.0, "abort_lag_lt_10ms": lag["max_ms"] < 10.0},
        "seconds": time.perf_counter() - t0,
        "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
        "cpu": cpu_model(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.plot:
        plot(setups, alone, refusals, lags, lag["deadline_ms"], args.plot, title=f"{args.device} driver, {where}")
        print(f"plot written to {args.plot}")
    print(json.dumps(result))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or "unknown CPU"


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
         path: str, title: str = "reference driver, in-process") -> None:
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
    fig.suptitle(f"QoS on the {title} ({WORKERS} workers, {os.cpu_count()} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
