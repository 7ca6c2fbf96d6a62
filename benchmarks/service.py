"""Benchmark: the driver service (issue 14): what crossing the process boundary costs.

One run, side by side, medians:

1. Per-execution overhead on a tiny model (one ADD of 4 floats, numpy arguments), through the public
   API: the reference driver in-process, served by `nnapi serve` (plain `compute`), and served
   through a burst (`Burst.compute`). Goals: burst <= in-process + 100 us, plain <= in-process + 250 us.
   Also a reusable execution (`set_reusable(True)`, arguments bound once) in-process and served (the
   service keeps the request: each computation is one small call), next to the floor of any served call
   measured in the same rounds: a 16-byte message to a forked process and back over a blocking socket.
2. Overhead against tensor size, 4 KB to 64 MB, inputs and outputs in shared memory (`Memory.ashmem`,
   so the app's own copy is excluded): the overhead of a call is its latency minus the time the driver
   reports it spent (`time_in_driver`), so the computation itself drops out. Goal: flat (64 MB <= 2x
   4 KB). A large kernel leaves the caches cold, and every step of the path runs slower after it: the
   64 MB calls are also compared with 4 KB calls made right after each of them (the same state), which
   isolates what the size itself adds. For comparison, the same tensor copied over a Unix socket
   (msgpack bytes to another process and back, as a protocol without descriptor passing would): goal
   >= 10x slower at 64 MB.
3. mobilenet_v2_f32 on the XLA driver (SUSTAINED_SPEED on both sides, so both run the optimised
   executable), 100 rounds, each side first every other round: service p50 / in-process p50
   (goal <= 1.05), with the sides alternating at every call (each service call then finds the
   service's threads asleep after the other side's run) and in blocks of 20 calls (an app's steady
   stream of executions).
4. Two apps of two uids on one service (forked children that drop to uids 1000 and 1001): app A's
   200 HIGH executions alone, then while app B saturates the service with LOW ones (goal: A's p99 <=
   1.5x its unloaded p99; with 60 executions, p99 was the single slowest one); then both saturate it
   equally (goal: running times within 20%).
   For comparison, the same two apps on an in-process reference driver (the scheduler alone), and
   on a served openvino driver (native kernels: little of the driver's own Python competes with the
   service's threads for the interpreter lock).
5. Client death: N connect / prepare / execute / disconnect cycles; the service's open descriptors
   and resident memory before and after.

usage: python benchmarks/service.py [--runs N] [--cycles N] [--skip mobilenet,qos,...]
The last line printed is one JSON object holding every figure. Taken on a shared, noisy machine, the
figures are indicative.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import tempfile
import threading
import time
from typing import Callable

import msgpack
import numpy as np

import nnapi
from nnapi.conformance.vts.models import alternating_chain
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import (ClientId, DataLocation, ExecutionPreference, MeasureTiming, MemoryPool, Priority, Request,
                       RequestArgument)
from nnapi.runtime import find_device, register_device
from nnapi.service import ENV, connect, default_socket
from nnapi.service.cli import installed_drivers, start

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
MOBILENET = os.path.join(SHARED, "models", "keras", "mobilenet_v2_f32.tflite")
FAST = ExecutionPreference.FAST_SINGLE_ANSWER


def add_model(n: int) -> nnapi.Model:
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def chain(n: int, size: int, seed: int) -> nnapi.Model:
    """x -> n operations alternating ADD and MUL (constants near 1, so long chains stay finite)."""
    return alternating_chain(n, size, seed=seed, spread=0.1)


def median_us(values_ns: list[int]) -> float:
    return statistics.median(values_ns) / 1000


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# --- 1. tiny model ---------------------------------------------------------------------------------------
def tiny(local, served, runs: int) -> dict:
    model = add_model(4)
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    comps = {"in_process": nnapi.Compilation(model, devices=[local]).finish(),
             "service": nnapi.Compilation(model, devices=[served]).finish()}
    burst = comps["service"].create_burst()
    times: dict[str, list[int]] = {"in_process": [], "service": [], "service_burst": [],
                                   "in_process_reusable": [], "service_reusable": []}
    reusable = {}  # a reusable execution per side, its arguments bound once (the service keeps its request)
    for side in ("in_process", "service"):
        e = nnapi.Execution(comps[side])
        e.set_reusable(True)
        e.set_input(0, x)
        e.set_input(1, y)
        e.set_output(0, np.empty(4, np.float32))
        reusable[f"{side}_reusable"] = e

    def one(kind: str) -> int:
        if kind in reusable:
            start = time.perf_counter_ns()
            reusable[kind].compute()
            return time.perf_counter_ns() - start
        c = comps["service" if kind == "service_burst" else kind]
        out = np.empty(4, np.float32)
        start = time.perf_counter_ns()
        e = nnapi.Execution(c)
        e.set_input(0, x)
        e.set_input(1, y)
        e.set_output(0, out)
        if kind == "service_burst":
            burst.compute(e)
        else:
            e.compute()
        return time.perf_counter_ns() - start

    echo = Echo()  # the floor: a small message to another process and back over a blocking Unix socket
    times["socket_round_trip"] = []
    try:
        for kind in times:  # warm-up
            for _ in range(50):
                echo.round_trip() if kind == "socket_round_trip" else one(kind)
        rounds = 10
        for _ in range(rounds):  # interleaved rounds: the machine's busy spells hit every configuration alike
            for kind in times:
                times[kind].extend(echo.round_trip() if kind == "socket_round_trip" else one(kind)
                                   for _ in range(max(1, runs // rounds)))
    finally:
        echo.close()
        burst.close()
    med = {k: median_us(v) for k, v in times.items()}
    return {"median_us": med,
            "service_overhead_us": med["service"] - med["in_process"],
            "burst_overhead_us": med["service_burst"] - med["in_process"],
            "reusable_overhead_us": med["service_reusable"] - med["in_process_reusable"],
            "reusable_over_socket_us": med["service_reusable"] - med["socket_round_trip"]}


class Echo:
    """A forked process that sends back each small message it gets over a socket pair: what one blocking
    round trip between two processes costs on this machine, the floor of any served call."""

    def __init__(self) -> None:
        self.parent, child = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            self.parent.close()
            try:
                while True:
                    data = child.recv(64)
                    if not data:
                        break
                    child.sendall(data)
            finally:
                os._exit(0)
        child.close()

    def round_trip(self) -> int:
        start = time.perf_counter_ns()
        self.parent.sendall(b"0123456789abcdef")
        got = 0
        while got < 16:
            got += len(self.parent.recv(64))
        return time.perf_counter_ns() - start

    def close(self) -> None:
        self.parent.close()
        os.waitpid(self.pid, 0)


# --- 2. tensor size ------------------------------------------------------------------------------------------
def _sized_runner(nbytes: int, device) -> Callable[[], tuple[int, float]]:
    """One ADD execution of `nbytes` tensors in shared memory on `device`: (latency, overhead) in ns."""
    n = nbytes // 4
    c = nnapi.Compilation(add_model(n), devices=[device]).finish()
    a, b, out = nnapi.Memory.ashmem(nbytes), nnapi.Memory.ashmem(nbytes), nnapi.Memory.ashmem(nbytes)
    a.array(np.float32, (n,))[:] = 1
    b.array(np.float32, (n,))[:] = 2

    def one() -> tuple[int, float]:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, a, 0, nbytes)
        e.set_input_from_memory(1, b, 0, nbytes)
        e.set_output_from_memory(0, out, 0, nbytes)
        e.set_measure_timing(True)
        start = time.perf_counter_ns()
        e.compute()
        elapsed = time.perf_counter_ns() - start
        assert float(out.array(np.float32, (n,))[-1]) == 3.0
        return elapsed, elapsed - e.get_duration().time_in_driver * 1000

    return one


def overhead_by_size(local, served, sizes: list[int], runs: int) -> dict:
    rows = []
    runners = {}
    for nbytes in sizes:
        row = {"bytes": nbytes}
        reps = max(5, min(runs, int(runs * 65536 / max(nbytes, 65536))))
        for kind, device in (("in_process", local), ("service", served)):
            one = runners[kind, nbytes] = _sized_runner(nbytes, device)
            measured = [one() for _ in range(reps + 2)][2:]
            row[f"{kind}_latency_us"] = median_us([m[0] for m in measured])
            row[f"{kind}_overhead_us"] = median_us([m[1] for m in measured])
        row["socket_copy_us"] = socket_copy_us(nbytes, max(3, reps // 2))
        rows.append(row)
    # The same path in the same state: a 4 KB execution right after each largest one. A large kernel
    # leaves the caches cold and every step of the path (all Python) runs slower after it; what the
    # size itself adds is the largest call's overhead against the small call's made just after it.
    small, large = runners["service", sizes[0]], runners["service", sizes[-1]]
    after, big = [], []
    for _ in range(max(5, runs // 4)):
        big.append(large()[1])
        after.append(small()[1])
    first, last = rows[0], rows[-1]
    matched = {"small_after_large_overhead_us": median_us(after), "large_overhead_us": median_us(big)}
    matched["ratio"] = matched["large_overhead_us"] / matched["small_after_large_overhead_us"]
    return {"rows": rows,
            "flatness_64mb_over_4kb": last["service_overhead_us"] / first["service_overhead_us"],
            "matched_state": matched,
            "socket_copy_over_shared_memory_at_max": last["socket_copy_us"] / last["service_overhead_us"]}


def socket_copy_us(nbytes: int, reps: int) -> float:
    """A tensor and a result of `nbytes` each sent over a Unix socket to another process and back,
    as msgpack bytes (what the call would cost without shared memory), median in us."""
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent.close()
        try:
            unpacker = msgpack.Unpacker(max_buffer_size=2 * nbytes + 1024)
            while True:
                data = child.recv(1 << 20)
                if not data:
                    break
                unpacker.feed(data)
                for value in unpacker:
                    child.sendall(msgpack.packb(bytes(value)))  # the "output": as many bytes back
        finally:
            os._exit(0)
    child.close()
    tensor = np.ones(nbytes // 4, np.float32)
    times = []
    try:
        for _ in range(reps + 1):
            start = time.perf_counter_ns()
            parent.sendall(msgpack.packb(tensor.tobytes()))
            unpacker = msgpack.Unpacker(max_buffer_size=2 * nbytes + 1024)
            result = None
            while result is None:
                unpacker.feed(parent.recv(1 << 20))
                for value in unpacker:
                    result = np.frombuffer(value, np.float32)
            times.append(time.perf_counter_ns() - start)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    return median_us(times[1:])


# --- 3. mobilenet on xla --------------------------------------------------------------------------------------
#: Executions per side per round in the steady-stream measurement of mobilenet.
BLOCK = 20


def mobilenet(local_xla, served_xla, runs: int) -> dict:
    from nnapi.bench import random_inputs
    from nnapi.importers import load_tflite
    imported = load_tflite(MOBILENET)
    inputs = random_inputs(imported.inputs)
    # SUSTAINED_SPEED: each side compiles the optimised executable at once, so both run the same code
    # (the default preference swaps it in later, at different moments in the two processes).
    sustained = ExecutionPreference.SUSTAINED_SPEED
    comps = {"in_process": nnapi.Compilation(imported.model, devices=[local_xla], preference=sustained).finish(),
             "service": nnapi.Compilation(imported.model, devices=[served_xla], preference=sustained).finish()}
    outs = {k: c.execute(inputs)[0] for k, c in comps.items()}
    assert np.allclose(outs["in_process"], outs["service"], atol=1e-5)
    for k, c in comps.items():
        for _ in range(3):
            c.execute(inputs)

    def side_by_side(block: int, rounds: int) -> dict:
        """p50 per side, `block` executions per side in each round, each side first every other round."""
        times: dict[str, list[int]] = {k: [] for k in comps}
        order = list(comps.items())
        for r in range(rounds):
            for k, c in (order if r % 2 == 0 else order[::-1]):
                for _ in range(block):
                    start = time.perf_counter_ns()
                    c.execute(inputs)
                    times[k].append(time.perf_counter_ns() - start)
        p50 = {k: statistics.median(v) / 1e6 for k, v in times.items()}
        return {"p50_ms": p50, "service_over_in_process": p50["service"] / p50["in_process"]}

    # Every call alternating: each service call follows the other side's 6 ms run, so it finds the
    # service's threads (its reader and XLA's workers) asleep. In blocks of 20: an app's steady stream of
    # executions, as an app that runs its model again and again meets the service.
    alternating, blocks = side_by_side(1, runs), side_by_side(BLOCK, max(4, 2 * runs // BLOCK))
    return {**alternating, "blocks": {"block": BLOCK, **blocks}}


# --- 4. two apps, two uids ----------------------------------------------------------------------------------
HIGH_OPS, HIGH_SIZE = 40, 4096
LOW_OPS, LOW_SIZE = 400, 16384


def _child(uid: int, fn) -> tuple[int, int]:
    """Fork; the child drops to `uid`, runs fn() and writes its JSON result to a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = fn()
        except BaseException as e:
            result = {"error": f"{type(e).__name__}: {e}"}
        with os.fdopen(w, "w") as f:
            json.dump(result, f)
        os._exit(0)
    os.close(w)
    return pid, r


def _collect(children: list[tuple[int, int]]) -> list[dict]:
    results = []
    for pid, r in children:
        with os.fdopen(r) as f:
            results.append(json.loads(f.read() or '{"error": "no result"}'))
        os.waitpid(pid, 0)
    for res in results:
        if "error" in res:
            raise RuntimeError(res["error"])
    return results


def _hal_request(size: int):
    x = np.random.default_rng(0).normal(size=size).astype(np.float32)
    out = np.empty(size, np.float32)
    return Request([RequestArgument(False, DataLocation(0, 0, x.nbytes))],
                   [RequestArgument(False, DataLocation(1, 0, out.nbytes))],
                   [MemoryPool(pointer=x), MemoryPool(pointer=out)])


def two_apps(socket_path: str, runs: int, think_ms: float) -> dict:
    high_model, low_model = chain(HIGH_OPS, HIGH_SIZE, 1), chain(LOW_OPS, LOW_SIZE, 2)

    def high_app(start_at: float) -> dict:
        device = connect(socket_path)
        prepared = device.prepare_model(high_model.to_hal(), FAST, Priority.HIGH, None, None, None)
        request = _hal_request(HIGH_SIZE)
        for _ in range(5):
            prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
        while time.monotonic() < start_at:
            time.sleep(0.005)
        latencies = []
        for _ in range(runs):
            t = time.perf_counter_ns()
            prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
            latencies.append((time.perf_counter_ns() - t) / 1e6)
            time.sleep(think_ms / 1000)
        return {"latencies_ms": latencies, "uid": device.status()["uid"]}

    def saturating_app(model, priority: Priority, size: int, until: float, threads: int = 2) -> dict:
        device = connect(socket_path)
        prepared = device.prepare_model(model.to_hal(), FAST, priority, None, None, None)
        running = [0] * threads
        counts = [0] * threads

        def loop(k: int) -> None:
            request = _hal_request(size)
            while time.monotonic() < until:
                _, timing = prepared.execute_synchronously(request, MeasureTiming.YES, None, None)
                running[k] += timing.time_on_device
                counts[k] += 1

        workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return {"running_s": sum(running) / 1e6, "executions": sum(counts), "uid": device.status()["uid"]}

    now = time.monotonic()
    (alone,) = _collect([_child(1000, lambda: high_app(now + 1.0))])
    now = time.monotonic()
    duration = 2.0 + runs * (think_ms + 15) / 1000
    loaded, low = _collect([_child(1000, lambda: high_app(now + 1.5)),
                            _child(1001, lambda: saturating_app(low_model, Priority.LOW, LOW_SIZE,
                                                                now + duration))])
    now = time.monotonic()
    a, b = _collect([_child(1000, lambda: saturating_app(low_model, Priority.MEDIUM, LOW_SIZE, now + 4.0)),
                     _child(1001, lambda: saturating_app(low_model, Priority.MEDIUM, LOW_SIZE, now + 4.0))])
    p99_alone, p99_loaded = pct(alone["latencies_ms"], 99), pct(loaded["latencies_ms"], 99)
    return {"uids": [alone["uid"], low["uid"]],
            "high_p50_alone_ms": pct(alone["latencies_ms"], 50), "high_p99_alone_ms": p99_alone,
            "high_p50_loaded_ms": pct(loaded["latencies_ms"], 50), "high_p99_loaded_ms": p99_loaded,
            "p99_loaded_over_alone": p99_loaded / p99_alone, "low_executions_meanwhile": low["executions"],
            "fair_running_s": [a["running_s"], b["running_s"]],
            "fair_ratio": min(a["running_s"], b["running_s"]) / max(a["running_s"], b["running_s"])}


def two_apps_in_process(runs: int, think_ms: float) -> dict:
    """The same two apps on one in-process reference driver (their uids given as the scheduler's
    clients): what the scheduler gives without the service's threads and sockets in the way."""
    from nnapi.drivers.reference import ReferenceDevice
    device = ReferenceDevice()
    high_model, low_model = chain(HIGH_OPS, HIGH_SIZE, 1), chain(LOW_OPS, LOW_SIZE, 2)
    high = device.prepare_model(high_model.to_hal(), FAST, Priority.HIGH, None, None, None)
    low = device.prepare_model(low_model.to_hal(), FAST, Priority.LOW, None, None, None)

    def a_runs(n: int) -> list[float]:
        request, latencies = _hal_request(HIGH_SIZE), []
        for _ in range(n):
            t = time.perf_counter_ns()
            high.execute_synchronously(request, MeasureTiming.NO, None, None, client=ClientId(1000))
            latencies.append((time.perf_counter_ns() - t) / 1e6)
            time.sleep(think_ms / 1000)
        return latencies

    a_runs(5)
    alone = a_runs(runs)
    stop = threading.Event()

    def b_loop() -> None:
        request = _hal_request(LOW_SIZE)
        while not stop.is_set():
            low.execute_synchronously(request, MeasureTiming.NO, None, None, client=ClientId(1001))

    workers = [threading.Thread(target=b_loop, daemon=True) for _ in range(2)]
    for t in workers:
        t.start()
    time.sleep(0.3)
    loaded = a_runs(runs)
    stop.set()
    for t in workers:
        t.join()
    return {"high_p99_alone_ms": pct(alone, 99), "high_p99_loaded_ms": pct(loaded, 99),
            "p99_loaded_over_alone": pct(loaded, 99) / pct(alone, 99)}


# --- 5. client death -----------------------------------------------------------------------------------------
def cycles(socket_path: str, n: int) -> dict:
    model = add_model(64)
    hal_model = model.to_hal()
    x, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 256)), RequestArgument(False, DataLocation(0, 0, 256))],
                      [RequestArgument(False, DataLocation(1, 0, 256))], [MemoryPool(pointer=x), MemoryPool(pointer=out)])

    def one() -> None:
        device = connect(socket_path)
        prepared = device.prepare_model(hal_model, FAST, Priority.MEDIUM, None, None, None)
        prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
        device.close()

    def figures() -> tuple[int, int]:
        device = connect(socket_path)
        status = device.status()
        device.close()
        return status["fds"], status["rss_bytes"]

    for _ in range(20):
        one()
    fds0, rss0 = figures()
    start = time.perf_counter()
    for _ in range(n):
        one()
    elapsed = time.perf_counter() - start
    fds1, rss1 = figures()
    return {"cycles": n, "cycle_ms": elapsed / n * 1000, "fds_before": fds0, "fds_after": fds1,
            "rss_before_mb": rss0 / 2**20, "rss_after_mb": rss1 / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="tiny-model executions per configuration")
    parser.add_argument("--cycles", type=int, default=1000, help="client connect/disconnect cycles")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: tiny,size,mobilenet,qos,cycles")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    directory = tempfile.mkdtemp(prefix="nnapi-bench-service-")
    os.chmod(directory, 0o755)
    state = os.path.join(directory, "state")
    figures: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                 "note": "shared, noisy machine: indicative figures"}}
    local = register_device(__import__("nnapi.drivers.reference", fromlist=["x"]).ReferenceDevice())
    services = {"reference": start("reference", default_socket("reference", directory), state)}
    try:
        os.environ[ENV] = directory
        served = find_device("reference")
        assert served.location == "service"
        if "tiny" not in skip:
            figures["tiny"] = tiny(local, served, args.runs)
            t = figures["tiny"]
            print(f"1. tiny ADD, median per execution: in-process {t['median_us']['in_process']:.0f} us, "
                  f"service {t['median_us']['service']:.0f} us (+{t['service_overhead_us']:.0f}), "
                  f"service burst {t['median_us']['service_burst']:.0f} us (+{t['burst_overhead_us']:.0f}); "
                  f"a reusable execution: in-process {t['median_us']['in_process_reusable']:.0f} us, service "
                  f"{t['median_us']['service_reusable']:.0f} us (+{t['reusable_overhead_us']:.0f}); a blocking socket "
                  f"round trip to another process {t['median_us']['socket_round_trip']:.0f} us (the served reusable "
                  f"execution: +{t['reusable_over_socket_us']:.0f} over it)")
        if "size" not in skip:
            figures["size"] = overhead_by_size(local, served, [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20], 40)
            print("2. overhead against tensor size (latency minus time in driver), median us")
            print(f"   {'bytes':>10} {'in-process':>11} {'service':>9} {'socket copy':>12}")
            for row in figures["size"]["rows"]:
                print(f"   {row['bytes']:>10} {row['in_process_overhead_us']:>11.0f} {row['service_overhead_us']:>9.0f} "
                      f"{row['socket_copy_us']:>12.0f}")
            matched = figures["size"]["matched_state"]
            print(f"   64 MB / 4 KB service overhead: {figures['size']['flatness_64mb_over_4kb']:.2f}; socket copy / "
                  f"shared memory at 64 MB: {figures['size']['socket_copy_over_shared_memory_at_max']:.1f}x")
            print(f"   in the same state (a 4 KB call right after each 64 MB one): 64 MB {matched['large_overhead_us']:.0f} "
                  f"us, 4 KB {matched['small_after_large_overhead_us']:.0f} us, ratio {matched['ratio']:.2f}")
        if "qos" not in skip and os.geteuid() == 0:
            figures["two_apps"] = q = two_apps(services["reference"].socket, 200, 5.0)
            print(f"4. two apps (uids {q['uids']}): A HIGH p99 alone {q['high_p99_alone_ms']:.2f} ms, with B saturating "
                  f"LOW {q['high_p99_loaded_ms']:.2f} ms ({q['p99_loaded_over_alone']:.2f}x); equal load: running "
                  f"{q['fair_running_s'][0]:.2f} s vs {q['fair_running_s'][1]:.2f} s (ratio {q['fair_ratio']:.2f})")
        if "qos" not in skip:
            figures["two_apps_in_process"] = q = two_apps_in_process(300, 5.0)
            print(f"   the same two apps in-process (the scheduler alone): A HIGH p99 alone {q['high_p99_alone_ms']:.2f} "
                  f"ms, with B {q['high_p99_loaded_ms']:.2f} ms ({q['p99_loaded_over_alone']:.2f}x)")
        if "qos" not in skip and os.geteuid() == 0 and "openvino" in installed_drivers():
            services["openvino"] = start("openvino", default_socket("openvino", directory), state, timeout=600)
            figures["two_apps_openvino"] = q = two_apps(services["openvino"].socket, 200, 5.0)
            print(f"   the same two apps on a served openvino driver (native kernels): "
                  f"A HIGH p99 alone {q['high_p99_alone_ms']:.2f} ms, with B {q['high_p99_loaded_ms']:.2f} ms "
                  f"({q['p99_loaded_over_alone']:.2f}x)")
        if "cycles" not in skip:
            figures["cycles"] = cy = cycles(services["reference"].socket, args.cycles)
            print(f"5. {cy['cycles']} client cycles ({cy['cycle_ms']:.1f} ms each): service fds {cy['fds_before']} -> "
                  f"{cy['fds_after']}, RSS {cy['rss_before_mb']:.1f} -> {cy['rss_after_mb']:.1f} MB")
        if "mobilenet" not in skip and os.path.exists(MOBILENET):
            os.environ.pop(ENV)
            local_xla = find_device("xla")
            services["xla"] = start("xla", default_socket("xla", directory), state, timeout=600)
            os.environ[ENV] = directory
            served_xla = find_device("xla")
            figures["mobilenet"] = mb = mobilenet(local_xla, served_xla, 100)
            bl = mb["blocks"]
            print(f"3. mobilenet_v2_f32 on xla, every call alternating: p50 in-process {mb['p50_ms']['in_process']:.2f} "
                  f"ms, service {mb['p50_ms']['service']:.2f} ms, ratio {mb['service_over_in_process']:.3f}; in blocks "
                  f"of {bl['block']} calls: in-process {bl['p50_ms']['in_process']:.2f} ms, service "
                  f"{bl['p50_ms']['service']:.2f} ms, ratio {bl['service_over_in_process']:.3f}")
    finally:
        os.environ.pop(ENV, None)
        for s in services.values():
            s.stop()
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
