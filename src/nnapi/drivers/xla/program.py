"""A partition as one XLA program: the traced function, ahead-of-time compilation at two
optimisation levels, and the (de)serialisation of the compiled executable.

The program's arguments are the model inputs, in order, then its constant tensors
(CONSTANT_REFERENCE operands, laid out 64-byte aligned in one data blob that becomes the data
cache); small CONSTANT_COPY values are baked into the program. A program with WHILE loops takes
an iteration budget last and returns, last, whether a loop ran out of it (`control_flow`). Every
operation is lowered through `lowering.run_op`; operand dtypes follow the NNAPI operand types.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import struct
import threading
import time
from typing import Callable
from dataclasses import dataclass, field

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import serialize_executable

from ...hal import (ErrorStatus, MemoryPool, Model, NnError, OperandLifeTime, OperandType)
from ...ops import numpy_dtype
from ...caching.constants import relocate_constants
from ...caching.files import aligned_buffer
from ...qos.estimate import operation_work
from ...qos import threads
from ..base import env_flag
from ..base.lowering import with_dims
from .analysis import analyze
from .control_flow import LoopBudget, has_loops
from .lowering import LoweredOp, run_op, tracing_program

#: Executions run on the calling thread (JAX's CPU asynchronous dispatch off). With it on, XLA's client
#: runs executions on a pool of one thread per CPU: while lower-priority work fills it, higher-priority
#: work waits for a whole sub-model to end, whatever the scheduler decides (measured on 2 CPUs: a small
#: program took 2.5 s behind two long ones, 2-10 ms with it off, and 1.2 ms instead of 2.2 ms alone).
#: NNAPI_XLA_ASYNC_DISPATCH=1 keeps JAX's default (it is a setting of the whole process).
if not env_flag("NNAPI_XLA_ASYNC_DISPATCH"):
    jax.config.update("jax_cpu_enable_async_dispatch", False)

ALIGN = 64
#: Compiler options of the quick first stage (C11 multi-stage compilation).
QUICK_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


class Counters:
    """Process-wide counts of the driver's expensive steps (tests check a cache hit does neither)."""

    lock = threading.Lock()
    traces = 0
    compiles = 0

    @classmethod
    def bump(cls, name: str) -> None:
        with cls.lock:
            setattr(cls, name, getattr(cls, name) + 1)


@dataclass(frozen=True)
class TensorSpec:
    """An argument or result of the program: operand index, NNAPI type, shape; constants also
    their place in the data blob."""

    index: int
    type: int
    dims: tuple[int, ...]
    offset: int = 0

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(OperandType(self.type))

    @property
    def nbytes(self) -> int:
        return math.prod(self.dims) * self.dtype.itemsize

    def shape(self) -> tuple[int, ...]:
        return () if OperandType(self.type).is_scalar else self.dims

    def to_json(self) -> list:
        return [self.index, self.type, list(self.dims), self.offset]

    @classmethod
    def from_json(cls, v: list) -> "TensorSpec":
        index, type_, dims, offset = v
        return cls(int(index), int(type_), tuple(int(d) for d in dims), int(offset))


@dataclass
class Signature:
    """The program's interface: inputs, outputs (with their inferred shapes) and constant
    arguments; `loops`: it also takes an iteration budget and returns a ran-out flag."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    constants: list[TensorSpec]
    loops: bool = False
    #: The messages of the program's run-time checks (`lowering.runtime_check`), known once it is
    #: traced: it returns, last, one boolean per check (True: the execution fails with that message).
    checks: list[str] = field(default_factory=list)

    @property
    def n_args(self) -> int:
        return len(self.inputs) + len(self.constants) + int(self.loops)

    @property
    def n_results(self) -> int:
        return len(self.outputs) + int(self.loops) + int(bool(self.checks))

    def to_json(self) -> dict:
        d: dict = {k: [s.to_json() for s in getattr(self, k)] for k in ("inputs", "outputs", "constants")}
        d["loops"] = self.loops
        d["checks"] = list(self.checks)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Signature":
        checks = d.get("checks", [])
        if not isinstance(checks, list) or not all(isinstance(m, str) for m in checks):
            raise ValueError("checks must be a list of messages")
        return cls(*([TensorSpec.from_json(v) for v in d[k]] for k in ("inputs", "outputs", "constants")),
                   loops=bool(d.get("loops", False)), checks=list(checks))


def relocate(model: Model) -> tuple[Model, memoryview]:
    """The model with every CONSTANT_REFERENCE value moved into one data blob (pool 0, an in-place
    buffer) where each value starts 64-byte aligned in memory, and that blob."""
    structure, data = relocate_constants(model, ALIGN)
    blob = aligned_buffer(len(data))
    blob[:] = data
    return dataclasses.replace(structure, pools=[MemoryPool(pointer=blob)] if len(blob) else []), blob


def signature(model: Model, dims: list[tuple[int, ...]], ops: list[LoweredOp]) -> Signature:
    """The interface of a relocated model's program."""
    main = model.main
    used = {i for lop in ops for i in lop.inputs}

    def spec(i: int, offset: int = 0) -> TensorSpec:
        o = main.operands[i]
        return TensorSpec(i, int(o.type), tuple(dims[i]), offset)

    constants = [spec(i, main.operands[i].location.offset) for i in sorted(used)
                 if main.operands[i].lifetime == OperandLifeTime.CONSTANT_REFERENCE
                 and OperandType(main.operands[i].type).is_tensor]
    return Signature([spec(i) for i in main.input_indexes], [spec(i) for i in main.output_indexes], constants,
                     loops=has_loops(ops))


#: Work (multiply-accumulates plus elements touched, `qos.estimate.operation_work`) per sub-model,
#: about 5 ms on two CPU cores: a partition with more is split, so QoS checkpoints come every few
#: milliseconds, and its executables compile and load side by side (a cache hit is mostly loading).
WORK_PER_SEGMENT = 200_000_000
MAX_SEGMENTS = 4


def segment_bounds(work: list[int], requested: int | None = None) -> list[int]:
    """Cut points of the operations into contiguous sub-models of about equal work: one per
    WORK_PER_SEGMENT (at most MAX_SEGMENTS), or `requested`; every sub-model has an operation."""
    n = len(work)
    total = sum(work)
    count = requested if requested is not None else -(-total // WORK_PER_SEGMENT)
    count = max(1, min(int(count), MAX_SEGMENTS if requested is None else n, n))
    bounds, running, k = [0], 0, 1
    for i, w in enumerate(work):
        running += w
        while k < count and running >= total * k / count:
            # After operation i, but past the previous cut and leaving one operation per later sub-model.
            bounds.append(min(max(i + 1, bounds[-1] + 1), n - (count - k)))
            k += 1
    return bounds + [n]


def split(model: Model, dims: list[tuple[int, ...]], ops: list[LoweredOp], sig: Signature,
          requested: int | None = None) -> list[tuple[list[LoweredOp], Signature]]:
    """Contiguous runs of operations of about equal work as sub-models (`segment_bounds`). A
    sub-model's inputs are the values it reads that earlier sub-models (or the request) produce;
    its outputs are what later sub-models or the request read. One sub-model is the whole program
    with the request's own signature."""
    sized = with_dims(model, None, {i: d for i, d in enumerate(dims) if d}).main  # the inferred shapes
    bounds = segment_bounds([max(1, operation_work(sized, sized.operations[lop.index])) for lop in ops], requested)
    if len(bounds) <= 2:
        return [(ops, sig)]
    main = model.main
    chunks = [ops[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1) if bounds[k + 1] > bounds[k]]
    wanted_later: list[set[int]] = []
    later = {s.index for s in sig.outputs}
    for chunk in reversed(chunks):
        wanted_later.append(set(later))
        later |= {i for lop in chunk for i in lop.inputs}
    wanted_later.reverse()
    const_specs = {s.index: s for s in sig.constants}
    segments = []
    for chunk, wanted in zip(chunks, wanted_later):
        produced: set[int] = set()
        inputs, constants, outputs = [], [], []
        for lop in chunk:
            for i in lop.inputs:
                operand = main.operands[i]
                if i in const_specs:
                    if all(c.index != i for c in constants):
                        constants.append(const_specs[i])
                elif (i not in produced and operand.lifetime not in _BAKED
                      and all(s.index != i for s in inputs)):
                    inputs.append(TensorSpec(i, int(operand.type), tuple(dims[i])))
            produced.update(lop.outputs)
        for lop in chunk:
            for i in lop.outputs:
                if i in wanted:
                    outputs.append(TensorSpec(i, int(main.operands[i].type), tuple(dims[i])))
        segments.append((chunk, Signature(inputs, outputs, constants, loops=has_loops(chunk))))
    return segments


_BAKED = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE, OperandLifeTime.NO_VALUE,
          OperandLifeTime.SUBGRAPH)


class Constants(dict):
    """Operand index -> device array of a prepared model's constant arguments; `structure`: the model
    they belong to, without its pools (what a cache's structure decodes to); `data`: the data blob
    they are read from (on the CPU backend, aliased)."""

    structure: Model
    data: memoryview


try:  # the call jax.make_array_from_callback makes underneath, without the Python around it
    from jax._src.core import ShapedArray as _ShapedArray
    from jax._src.lib import xla_client as _xla_client
    _batched_device_put = _xla_client.batched_device_put
except (ImportError, AttributeError):  # (another jaxlib: the public call)
    _batched_device_put = None


@functools.lru_cache(maxsize=4096)
def _aval(shape: tuple[int, ...], dtype: np.dtype):
    """jax's abstract value of an array (immutable, so shared: making one costs more than placing it)."""
    return _ShapedArray(shape, dtype)


def place_on_device(host: list[np.ndarray]) -> list[jax.Array]:
    """Device arrays of `host` arrays, aliasing them on the CPU backend (64-byte aligned memory is not
    copied). One jaxlib call per array, the one `jax.make_array_from_callback` makes after its checks:
    a fifth of its time (97 constants: 0.19 against 0.79 ms), a third of `jax.device_put`'s per array."""
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    if _batched_device_put is not None:
        try:
            return [_batched_device_put(_aval(h.shape, h.dtype), sharding, [h], [device]) for h in host]
        except (TypeError, ValueError):  # (a jaxlib whose call takes other arguments: the public call)
            pass
    return [jax.make_array_from_callback(h.shape, sharding, lambda _, h=h: h) for h in host]


def device_constants(data, sigs: list[Signature], model: Model) -> Constants:
    """The constant arguments of the sub-models `sigs` of `model`, read in place from the data blob
    (on the CPU backend an aligned blob is aliased, not copied)."""
    view = memoryview(data if data is not None else b"")
    specs = {c.index: c for sig in sigs for c in sig.constants}
    host = [np.frombuffer(view, c.dtype, math.prod(c.dims), c.offset).reshape(c.shape()) for c in specs.values()]
    constants = Constants(zip(specs, place_on_device(host)))
    constants.structure = dataclasses.replace(model, pools=[]) if model.pools else model
    constants.data = view
    return constants


def make_function(model: Model, ops: list[LoweredOp], sig: Signature):
    """The Python function XLA traces: (inputs..., constants...[, budget]) -> (outputs...[, ran_out]
    [, checks]); tracing it sets `sig.checks`."""
    n_in, n_const = len(sig.inputs), len(sig.constants)
    outputs = [s.index for s in sig.outputs]
    out_dtypes = {s.index: s.dtype for s in sig.outputs}
    operand_dtypes = {i: numpy_dtype(OperandType(o.type)) for i, o in enumerate(model.main.operands)
                      if o.type != OperandType.SUBGRAPH}

    def program(*args):
        values = {s.index: a for s, a in zip(sig.inputs, args[:n_in])}
        consts = {s.index: a for s, a in zip(sig.constants, args[n_in:n_in + n_const])}
        env = LoopBudget(args[n_in + n_const] if sig.loops else None)
        with tracing_program(env):
            for lop in ops:
                for i, out in zip(lop.outputs, run_op(lop, values, consts, env)):
                    values[i] = out.astype(operand_dtypes[i])
        results = tuple(values[i].astype(out_dtypes[i]) for i in outputs)
        if sig.loops:
            results += (env.finish(),)
        flags, sig.checks = env.finish_checks()
        return results + (jnp.stack(flags),) if flags else results

    return program


def arg_specs(sig: Signature) -> list[jax.ShapeDtypeStruct]:
    specs = [jax.ShapeDtypeStruct(s.shape(), s.dtype) for s in (*sig.inputs, *sig.constants)]
    return specs + [jax.ShapeDtypeStruct((), np.int32)] if sig.loops else specs


def lower_program(model: Model, ops: list[LoweredOp], sig: Signature):
    """Trace and lower for the signature's shapes (Python work); returns a `jax.stages.Lowered`.
    Matrix products run at full float32 precision on every backend (no TF32 on GPUs)."""
    fn = make_function(model, ops, sig)
    Counters.bump("traces")
    with jax.default_matmul_precision("highest"):
        return jax.jit(fn).lower(*arg_specs(sig))


def compile_lowered(lowered, optimized: bool):
    """XLA's ahead-of-time compile (native work, GIL released); returns a `jax.stages.Compiled`."""
    Counters.bump("compiles")
    if optimized:
        return lowered.compile()
    try:
        return lowered.compile(QUICK_OPTIONS)
    except Exception:  # a backend without these options: its default compile
        return lowered.compile()


def compile_segments(model: Model, parts: list[tuple[list[LoweredOp], Signature]], optimized: bool,
                     checkpoint: Callable[[str], None] | None = None) -> list:
    """[(signature, executable)] of sub-models: traced one after the other, compiled side by side;
    `checkpoint` runs between the steps (a preparation's deadline)."""
    lowered = []
    for k, (ops, sig) in enumerate(parts):
        if checkpoint is not None and k:
            checkpoint(f"tracing sub-model {k}")
        lowered.append(lower_program(model, ops, sig))
    if checkpoint is not None:
        checkpoint("compiling")
    executables = threads.run_all([lambda lw=lw: compile_lowered(lw, optimized) for lw in lowered],
                                  name="nnapi-xla-compile").results()
    return [(sig, exe) for (_, sig), exe in zip(parts, executables)]


def analyze_supported(model: Model, analysis: tuple | None = None) -> tuple[list[tuple[int, ...]], list[LoweredOp]]:
    """Shapes and lowered operations of a model whose every operation must be lowered (`analysis`:
    a result of `analyze` for the same model, reused)."""
    dims, lowered = analysis if analysis is not None else analyze(model)
    missing = [f"{k} ({model.main.operations[k].type.name})" for k, lop in enumerate(lowered) if lop is None]
    if missing:
        raise NnError(ErrorStatus.INVALID_ARGUMENT,
                      f"the xla driver cannot lower operations {', '.join(missing)}")
    return dims, lowered


# --- serialization ---------------------------------------------------------------------------------
_HEADER = struct.Struct("<8sIII")  # magic, format, json length, model length
_MAGIC = b"NNXLAEX1"
FORMAT = 1


def serialize(compiled) -> bytes:
    payload, _, _ = serialize_executable.serialize(compiled)
    return payload


_LEN = struct.Struct("<Q")


def join_payloads(payloads: list[bytes]) -> bytes:
    return struct.pack("<I", len(payloads)) + b"".join(_LEN.pack(len(p)) + p for p in payloads)


def split_payloads(blob: memoryview) -> list[memoryview]:
    if len(blob) < 4:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "xla model cache holds no executable")
    (n,) = struct.unpack_from("<I", blob)
    pos, out = 4, []
    for _ in range(n):
        if pos + _LEN.size > len(blob):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "xla model cache is truncated")
        (length,) = _LEN.unpack_from(blob, pos)
        pos += _LEN.size
        if pos + length > len(blob):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "xla model cache is truncated")
        out.append(blob[pos:pos + length])
        pos += length
    return out


def deserialize(payload: bytes | memoryview, n_args: int, n_out: int):
    """Load a verified executable (never called on bytes the integrity registry did not vouch for)."""
    in_tree = jax.tree_util.tree_structure((tuple(range(n_args)), {}))
    out_tree = jax.tree_util.tree_structure(tuple(range(n_out)))
    return serialize_executable.deserialize_and_load(bytes(payload), in_tree, out_tree)


def pack_model_cache(meta: dict, model_bytes: bytes, executable: bytes) -> bytes:
    text = json.dumps(meta, sort_keys=True).encode()
    return _HEADER.pack(_MAGIC, FORMAT, len(text), len(model_bytes)) + text + model_bytes + executable


def unpack_model_cache(blob: memoryview) -> tuple[dict, memoryview, memoryview]:
    if len(blob) < _HEADER.size:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "xla model cache is too short")
    magic, fmt, n_text, n_model = _HEADER.unpack_from(blob)
    if magic != _MAGIC or fmt != FORMAT or _HEADER.size + n_text + n_model > len(blob):
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache has format {magic!r} v{fmt}")
    pos = _HEADER.size
    try:
        meta = json.loads(bytes(blob[pos:pos + n_text]))
    except ValueError as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache header cannot be decoded: {e}") from None
    pos += n_text
    return meta, blob[pos:pos + n_model], blob[pos + n_model:]


def now_us(start_ns: int) -> int:
    return (time.monotonic_ns() - start_ns) // 1000
