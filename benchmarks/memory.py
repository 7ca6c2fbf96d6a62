"""Benchmark: what memory costs per execution on the reference device.

1. Per-execution overhead of one input of 1 KB, 1 MB and 64 MB given three ways:
   - "array":  a numpy array (`set_input`; in process it reaches the driver in place, no copy);
   - "memory": the same bytes already in shared memory (`Memory.ashmem` + `set_input_from_memory`);
   - "staged": the array copied into shared memory before every execution, which is what passing an
     array costs when the driver needs shared memory (a driver in another process).
   The model reads 16 floats of the input (SLICE), so the time is overhead: binding, validation,
   mapping, the request. The "memory" overhead must stay flat with size: `memory_flatness` =
   memory_us(64 MB) / memory_us(1 KB).
2. A state-tensor loop: a recurrent cell s' = s * decay + x over a 4 MB state for `--steps`
   executions, with the state
   - "domain": in two driver-managed buffers (`MemoryDesc` + `Memory.from_desc`, ping-pong), read
     back once at the end with `Memory.copy`;
   - "copy": in the app, copied into shared memory before each step and out of it after;
   - "arrays": in numpy arrays passed in place (in process only).
   `state_copy_over_domain` = copy / domain time per step.

usage: python benchmarks/memory.py [--runs N] [--steps N] [--state-floats N]
The last line printed is one JSON object holding every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import nnapi
from nnapi import Memory, MemoryDesc, OperandType as T, OperationType as Op

SIZES = {"1KB": 1024, "1MB": 1024 * 1024, "64MB": 64 * 1024 * 1024}


def slice_model(n: int) -> nnapi.Model:
    """y = SLICE(x, [0], [16]) for x of n floats: the work does not grow with n."""
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (n,))
    begin = m.add_operand(T.TENSOR_INT32, (1,))
    size = m.add_operand(T.TENSOR_INT32, (1,))
    m.set_operand_value(begin, np.array([0], np.int32))
    m.set_operand_value(size, np.array([16], np.int32))
    y = m.add_operand(T.TENSOR_FLOAT32, (16,))
    m.add_operation(Op.SLICE, [x, begin, size], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def state_model(n: int) -> nnapi.Model:
    """s' = s * decay + x: one recurrent step over a state of n floats."""
    m = nnapi.Model()
    s = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    x = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    decay = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    m.set_operand_value(decay, np.linspace(0.5, 0.99, n, dtype=np.float32).reshape(1, n))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    kept = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    out = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    m.add_operation(Op.MUL, [s, decay, act], [kept])
    m.add_operation(Op.ADD, [kept, x, act], [out])
    m.identify_inputs_and_outputs([s, x], [out])
    m.finish()
    return m


def overhead(runs: int) -> dict:
    """Median microseconds per execution; the sizes and kinds are interleaved round by round so
    that load from elsewhere on the machine hits them all alike."""
    cases = {}
    for label, nbytes in SIZES.items():
        n = nbytes // 4
        c = nnapi.Compilation(slice_model(n), devices=["reference"]).finish()
        x = np.arange(n, dtype=np.float32)
        memory = Memory.ashmem(nbytes)
        memory.array(np.float32, (n,))[:] = x
        staging = Memory.ashmem(nbytes)
        staging_view = staging.array(np.float32, (n,))
        y = np.zeros(16, np.float32)

        def with_array(c=c, x=x, y=y):
            e = nnapi.Execution(c)
            e.set_input(0, x)
            e.set_output(0, y)
            e.compute()

        def with_memory(c=c, memory=memory, nbytes=nbytes, y=y):
            e = nnapi.Execution(c)
            e.set_input_from_memory(0, memory, 0, nbytes)
            e.set_output(0, y)
            e.compute()

        def staged(c=c, x=x, staging=staging, view=staging_view, nbytes=nbytes, y=y):
            view[:] = x
            e = nnapi.Execution(c)
            e.set_input_from_memory(0, staging, 0, nbytes)
            e.set_output(0, y)
            e.compute()

        for kind, fn in (("array", with_array), ("memory", with_memory), ("staged", staged)):
            y[:] = 0
            fn()
            fn()
            np.testing.assert_array_equal(y, x[:16])
            cases[(label, kind)] = (fn, [])
    for _ in range(runs):
        for fn, times in cases.values():
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e6)
    figures: dict = {label: {} for label in SIZES}
    for (label, kind), (_, times) in cases.items():
        figures[label][f"{kind}_us"] = statistics.median(times)
    return figures


def state_loop(steps: int, n: int) -> dict:
    c = nnapi.Compilation(state_model(n), devices=["reference"]).finish()
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(1, n)).astype(np.float32) for _ in range(4)]
    s0 = rng.normal(size=(1, n)).astype(np.float32)

    def arrays() -> np.ndarray:
        s, out = s0.copy(), np.zeros((1, n), np.float32)
        for k in range(steps):
            e = nnapi.Execution(c)
            e.set_input(0, s)
            e.set_input(1, xs[k % 4])
            e.set_output(0, out)
            e.compute()
            s, out = out, s
        return s

    def copy_in_out() -> np.ndarray:
        s = s0.copy()
        mem_in, mem_out = Memory.ashmem(4 * n), Memory.ashmem(4 * n)
        view_in, view_out = mem_in.array(np.float32, (1, n)), mem_out.array(np.float32, (1, n))
        for k in range(steps):
            view_in[...] = s                                   # state in
            e = nnapi.Execution(c)
            e.set_input_from_memory(0, mem_in, 0, 4 * n)
            e.set_input(1, xs[k % 4])
            e.set_output_from_memory(0, mem_out, 0, 4 * n)
            e.compute()
            s = view_out.copy()                                # state out
        return s

    def domain() -> np.ndarray:
        desc = MemoryDesc()
        desc.add_input_role(c, 0)
        desc.add_output_role(c, 0)
        desc.finish()
        a, b = Memory.from_desc(desc), Memory.from_desc(desc)
        assert a.kind == "device"
        init = Memory.ashmem(4 * n)
        init.array(np.float32, (1, n))[...] = s0
        Memory.copy(init, a)
        for k in range(steps):
            e = nnapi.Execution(c)
            e.set_input_from_memory(0, a, 0, 0)
            e.set_input(1, xs[k % 4])
            e.set_output_from_memory(0, b, 0, 0)
            e.compute()
            a, b = b, a
        Memory.copy(a, init)                                   # read back once
        return init.array(np.float32, (1, n)).copy()

    results = {}
    reference = None
    for name, fn in (("arrays", arrays), ("copy", copy_in_out), ("domain", domain)):
        fn()  # warm-up
        start = time.perf_counter()
        final = fn()
        results[f"{name}_us_per_step"] = (time.perf_counter() - start) * 1e6 / steps
        if reference is None:
            reference = final
        else:
            np.testing.assert_allclose(final, reference, rtol=1e-6)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed executions per size and kind (median)")
    parser.add_argument("--steps", type=int, default=100, help="steps of the state-tensor loop")
    parser.add_argument("--state-floats", type=int, default=1024 * 1024, help="state size in floats")
    args = parser.parse_args()
    start = time.perf_counter()
    over = overhead(args.runs)
    state = state_loop(args.steps, args.state_floats)

    print("Per-execution overhead of one input (median us; the model reads 16 floats of it)")
    print(f"{'input':>6} {'array':>10} {'Memory':>10} {'staged':>10} {'staged/Memory':>14} {'array/Memory':>13}")
    for label, f in over.items():
        print(f"{label:>6} {f['array_us']:10.1f} {f['memory_us']:10.1f} {f['staged_us']:10.1f} "
              f"{f['staged_us'] / f['memory_us']:14.2f} {f['array_us'] / f['memory_us']:13.2f}")
    flat = over["64MB"]["memory_us"] / over["1KB"]["memory_us"]
    array_flat = over["64MB"]["array_us"] / over["1KB"]["array_us"]
    staged_growth = over["64MB"]["staged_us"] / over["1KB"]["staged_us"]
    print(f"Memory 64MB/1KB: {flat:.2f}   array 64MB/1KB: {array_flat:.2f}   staged 64MB/1KB: {staged_growth:.1f}")
    print()
    mb = args.state_floats * 4 / 2**20
    print(f"State-tensor loop: {args.steps} steps, state of {mb:.0f} MB (us per step)")
    for name in ("domain", "copy", "arrays"):
        print(f"{name:>8} {state[f'{name}_us_per_step']:10.1f}")
    ratio = state["copy_us_per_step"] / state["domain_us_per_step"]
    print(f"copy / domain: {ratio:.2f}   arrays / domain: "
          f"{state['arrays_us_per_step'] / state['domain_us_per_step']:.2f}")

    result = {"benchmark": "memory", "device": "reference", "runs": args.runs}
    for label, f in over.items():
        for key, value in f.items():
            result[f"input_{label}_{key}"] = value
        result[f"input_{label}_staged_over_memory"] = f["staged_us"] / f["memory_us"]
        result[f"input_{label}_array_over_memory"] = f["array_us"] / f["memory_us"]
    result.update({
        "memory_flatness_64MB_over_1KB": flat,
        "array_flatness_64MB_over_1KB": array_flat,
        "staged_growth_64MB_over_1KB": staged_growth,
        "state_steps": args.steps,
        "state_bytes": args.state_floats * 4,
        "state_domain_us_per_step": state["domain_us_per_step"],
        "state_copy_us_per_step": state["copy_us_per_step"],
        "state_arrays_us_per_step": state["arrays_us_per_step"],
        "state_copy_over_domain": ratio,
        "state_arrays_over_domain": state["arrays_us_per_step"] / state["domain_us_per_step"],
        "total_s": time.perf_counter() - start,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    })
    print(json.dumps(result))


if __name__ == "__main__":
    main()
