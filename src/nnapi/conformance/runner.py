"""Runs test vectors on a device in every variation and checks results with AOSP's tolerances."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..hal import NnError, OperandType, ResultCode
from ..ops import numpy_dtype
from ..runtime import Compilation, Device, Execution, Memory, MemoryDesc, devices, find_device
from .vectors import BuiltModel, TestModel, build

#: The variations every valid vector runs in. "memory_domain" (AOSP's DeviceMemoryTest) runs only
#: for vectors without zero-sized outputs.
VARIATIONS = ("sync", "async", "shared_memory", "memory_domain")


@dataclass
class VectorResult:
    name: str
    source: str
    status: str          # passed | failed | skipped
    reason: str = ""
    operations: list[str] = field(default_factory=list)


def _tolerance(out_type: OperandType, loose_float: bool) -> tuple[float, float]:
    if out_type == OperandType.TENSOR_FLOAT16 or (out_type == OperandType.TENSOR_FLOAT32 and loose_float):
        return 5 * 2**-10, 5 * 2**-10
    if out_type == OperandType.TENSOR_FLOAT32:
        return float(np.float32(1e-5)), 5 * 2**-23
    return 1.0, 0.0


def compare(test: TestModel, built: BuiltModel, actual: list[np.ndarray]) -> str | None:
    """None when every checked output is within tolerance, else a message naming the first bad output."""
    spec = test.spec
    if spec.get("multinomial_tolerance", 0) > 0:
        return _multinomial(spec, built, actual)
    loose = bool(spec["is_relaxed"]) or test.has_float16
    for k, ((expected, operand), got) in enumerate(zip(built.outputs, actual)):
        if operand["ignored"]:
            continue
        dims = tuple(operand["dimensions"])
        n = math.prod(dims) if dims else 1
        if n == 0:
            continue
        if expected is None:
            return f"output {k}: no expected data"
        got = np.asarray(got).reshape(-1)
        exp = expected.reshape(-1)
        if got.size != exp.size:
            return f"output {k}: {got.size} values, expected {exp.size}"
        out_type = OperandType[operand["type"]]
        if out_type == OperandType.TENSOR_BOOL8:
            bad = np.flatnonzero(got.astype(bool) != exp.astype(bool))
        else:
            atol, rtol = _tolerance(out_type, loose)
            g, e = got.astype(np.float64), exp.astype(np.float64)
            bad = np.flatnonzero(~(np.abs(g - e) <= atol + rtol * np.abs(e)))
        if bad.size:
            i = bad[:3]
            return (f"output {k}: {bad.size}/{exp.size} values off, e.g. at {i.tolist()} got "
                    f"{got[i].tolist()} expected {exp[i].tolist()}")
    return None


def _multinomial(spec: dict, built: BuiltModel, actual: list[np.ndarray]) -> str | None:
    tol = spec["multinomial_tolerance"]
    logits = np.asarray(built.inputs[0], np.float64).reshape(-1)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    samples = np.asarray(actual[0]).reshape(-1)
    counts = np.bincount(samples, minlength=probs.size)[:probs.size] / max(samples.size, 1)
    worst = np.abs(counts - probs).max()
    return None if worst <= tol else f"multinomial distribution off by {worst:.4f} (tolerance {tol})"


def _output_buffers(built: BuiltModel) -> list[np.ndarray]:
    bufs = []
    for expected, operand in built.outputs:
        dims = tuple(operand["dimensions"])
        n = math.prod(dims) if dims else 1
        bufs.append(np.zeros(max(n, 1), numpy_dtype(OperandType[operand["type"]])))
    return bufs


def _results(execution: Execution, built: BuiltModel, bufs: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for k, buf in enumerate(bufs):
        dims = execution.get_output_shape(k)
        expected_dims = tuple(built.outputs[k][1]["dimensions"])
        if not built.outputs[k][1]["ignored"] and expected_dims and dims != expected_dims:
            raise AssertionError(f"output {k} has shape {dims}, expected {expected_dims}")
        out.append(buf[:math.prod(dims)] if dims else buf[:1])
    return out


class DomainUnsupported(Exception):
    """The device allocates no driver-managed memory for this model (memory domains are optional)."""


def _from_desc(desc: MemoryDesc) -> Memory:
    """Device memory for a finished desc; `DomainUnsupported` when no device allocates it (OP_FAILED)."""
    try:
        return Memory.from_desc(desc)
    except NnError as e:
        if e.code == ResultCode.OP_FAILED:
            raise DomainUnsupported(e.message) from None
        raise


def has_zero_sized_output(built: BuiltModel) -> bool:
    return any(0 in tuple(operand["dimensions"]) for _, operand in built.outputs)


def _run_memory_domain(ex: Execution, compilation: Compilation, built: BuiltModel, bufs: list[np.ndarray]) -> None:
    """Like AOSP's DeviceMemoryTest: every input and output in its own `Memory.from_desc` with one
    role; inputs filled by `Memory.copy` from ashmem, outputs read back the same way."""
    keep = []
    for k, x in enumerate(built.inputs):
        if x is None or x.nbytes == 0:
            ex.set_input(k, x)
            continue
        desc = MemoryDesc()
        desc.add_input_role(compilation, k, 1.0)
        if x.ndim:
            desc.set_dimensions(x.shape)
        memory = _from_desc(desc.finish())
        staging = Memory.ashmem(x.nbytes)
        staging.array(x.dtype, x.shape)[...] = x
        Memory.copy(staging, memory)
        keep.append(memory)
        ex.set_input_from_memory(k, memory, 0, 0)
    outputs = []
    for k in range(len(bufs)):
        desc = MemoryDesc()
        desc.add_output_role(compilation, k, 1.0)
        memory = _from_desc(desc.finish())
        outputs.append(memory)
        ex.set_output_from_memory(k, memory, 0, 0)
    ex.compute()
    for k, (buf, memory) in enumerate(zip(bufs, outputs)):
        dims = ex.get_output_shape(k)
        count = math.prod(dims) if dims else 1
        if count > buf.size:
            raise AssertionError(f"output {k} has shape {dims}, expected {tuple(built.outputs[k][1]['dimensions'])}")
        staging = Memory.ashmem(count * buf.itemsize)
        Memory.copy(memory, staging)
        buf[:count] = staging.array(buf.dtype, (count,))


def run_variation(compilation: Compilation, built: BuiltModel, variation: str) -> list[np.ndarray]:
    """One execution in `variation`; returns the outputs."""
    ex = Execution(compilation)
    bufs = _output_buffers(built)
    if variation == "memory_domain":
        _run_memory_domain(ex, compilation, built, bufs)
    elif variation == "shared_memory":
        mems = []
        for k, x in enumerate(built.inputs):
            if x is None or x.nbytes == 0:  # offset = length = 0 would be "size cannot be implied"
                ex.set_input(k, x)
                continue
            mem = Memory.ashmem(max(x.nbytes, 1))
            mem.array(x.dtype, x.shape)[...] = x
            mems.append(mem)
            ex.set_input_from_memory(k, mem, 0, x.nbytes, x.shape if x.ndim else None)
        out_mems = []
        for k, buf in enumerate(bufs):
            mem = Memory.ashmem(buf.nbytes)
            out_mems.append(mem)
            ex.set_output_from_memory(k, mem, 0, buf.nbytes)
        ex.compute()
        for buf, mem in zip(bufs, out_mems):
            buf[...] = mem.array(buf.dtype, buf.shape)
    else:
        for k, x in enumerate(built.inputs):
            ex.set_input(k, x)
        for k, buf in enumerate(bufs):
            ex.set_output(k, buf)
        if variation == "async":
            ex.start_compute().wait()
        else:
            ex.compute()
    return _results(ex, built, bufs)


def run_one(test: TestModel, device_list: list[Device] | None) -> VectorResult:
    """Run one test model in every variation; never raises."""
    result = VectorResult(test.name, test.source, "passed", operations=test.operations)
    try:
        built = build(test)
    except NnError as e:
        if test.expect_failure:
            return result
        result.status, result.reason = "failed", f"model: {e}"
        return result
    targets = device_list if device_list is not None else devices()
    unsupported = _unsupported(test, built, targets)
    if unsupported:
        result.status, result.reason = "skipped", f"unsupported operation {unsupported}"
        return result
    try:
        compilation = Compilation(built.model, devices=device_list).finish()
    except NnError as e:
        if not test.expect_failure:
            result.status, result.reason = "failed", f"compile: {e}"
        return result
    for variation in VARIATIONS:
        if variation == "memory_domain" and has_zero_sized_output(built):
            continue
        try:
            outputs = run_variation(compilation, built, variation)
        except DomainUnsupported:
            continue   # no device memory for this model: the variation does not apply (as AOSP skips it)
        except (NnError, AssertionError) as e:
            if not test.expect_failure:
                result.status, result.reason = "failed", f"{variation}: {e}"
            return result
        if test.expect_failure:
            continue
        problem = compare(test, built, outputs)
        if problem:
            result.status, result.reason = "failed", f"{variation}: {problem}"
            return result
    if test.expect_failure:
        result.status, result.reason = "failed", "expected a failure, but compilation and execution succeeded"
    return result


def _unsupported(test: TestModel, built: BuiltModel, targets: list[Device]) -> str | None:
    """The first operation no target device supports (main graph and referenced graphs)."""
    flags = [False] * len(test.spec["main"]["operations"])
    for d in targets:
        try:
            support = d.supported_operations(built.model)
        except NnError:
            continue
        flags = [a or b for a, b in zip(flags, support)]
    for ok, op in zip(flags, test.spec["main"]["operations"]):
        if not ok:
            return op["type"]
    return None


def run_vectors(tests: Iterable[TestModel], device: str | None = None,
                progress: Callable[[VectorResult], None] | None = None) -> list[VectorResult]:
    device_list = None if not device else [find_device(name.strip()) for name in device.split(",") if name.strip()]
    results = []
    for test in tests:
        r = run_one(test, device_list)
        results.append(r)
        if progress:
            progress(r)
    return results


def summarize(results: list[VectorResult]) -> dict:
    counts = Counter(r.status for r in results)
    per_op: dict[str, Counter] = {}
    for r in results:
        for op in r.operations:
            per_op.setdefault(op, Counter())[r.status] += 1
    return {"passed": counts["passed"], "failed": counts["failed"], "skipped": counts["skipped"],
            "total": len(results), "operations": {k: dict(v) for k, v in sorted(per_op.items())}}
