"""`Execution` and `Event`: bind inputs and outputs, run the compiled plan step by step.

Numpy arguments are handed to in-process drivers in place (pointer pools, no copy); `Memory`
arguments are referenced in place: shared memory as pools (region of the app's choosing; a
non-BLOB hardware buffer whole), memory from a `MemoryDesc` as the driver-managed buffer's token
(or its fallback pool), only in its declared roles. Temporaries between steps are numpy arrays
passed the same way. Unknown output sizes come back in `OutputShape`s; a too-small output buffer
gives OUTPUT_INSUFFICIENT_SIZE and `get_output_shape` tells the size needed.
"""
from __future__ import annotations

import dataclasses
import math
import os
import select
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import hal
from .. import tracing as trace
from ..hal import (DataLocation, ErrorStatus, LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, MeasureTiming,
                   MemoryPool, NnError, OutputShape, Request, RequestArgument, ResultCode, Timing)
from ..memory import max_tensor_bytes
from ..ops import numpy_dtype
from ..qos import threads
from .burst import Burst
from .compilation import Compilation, deadline_after, timeout_ns
from .memory import Memory
from .partitioner import Step
from .values import exact_array

_MAX_RETRIES = 4


@dataclass
class _Arg:
    """One bound input or output: a numpy array, a Memory region, or omitted (None)."""

    array: np.ndarray | None = None
    memory: Memory | None = None
    offset: int = 0
    length: int = 0
    dims: tuple[int, ...] = ()
    omitted: bool = False


@dataclass
class _Temporary:
    """A value passed from one partition to the next: its place in shared memory and, once
    written, its dimensions."""

    memory: Memory
    offset: int
    capacity: int
    dims: tuple[int, ...] = ()


class _SharedTemporaries:
    """The values one execution passes between partitions, in shared memory (ashmem) as Android's
    runtime passes them, so every driver maps them as it maps any request memory: one region for
    every value whose size the model declares (each 64-byte aligned), a region of its own for a
    value whose size is known only when a driver reports it."""

    ALIGN = 64

    def __init__(self, operands, boundary: Sequence[int]) -> None:
        self._operands = operands
        self._offsets: dict[int, tuple[int, int]] = {}
        total = 0
        for o in boundary:
            operand = operands[o]
            if operand.is_fully_specified:
                total += -total % self.ALIGN
                size = max(operand.byte_size(), 1)
                self._offsets[o] = (total, size)
                total += size
        self._region = Memory.ashmem(total) if total else None

    def place(self, o: int, nbytes: int | None = None) -> _Temporary:
        """Where value `o` is written: its place in the shared region, or (at least `nbytes`) a region
        of its own."""
        if nbytes is None and o in self._offsets:
            offset, size = self._offsets[o]
            return _Temporary(self._region, offset, size)
        size = max(int(nbytes or 1), 1)
        return _Temporary(Memory.ashmem(size), 0, size)

    def input_arg(self, t: _Temporary, o: int) -> _Arg:
        operand = self._operands[o]
        return _Arg(memory=t.memory, offset=t.offset, length=operand.byte_size(t.dims), dims=t.dims)


class Event:
    """Completion of an asynchronous execution; `wait` returns or raises the execution's NnError."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._error: NnError | None = None

    def _finish(self, error: NnError | None) -> None:
        self._error = error
        self._done.set()

    def is_done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.wait(timeout):
            raise TimeoutError("execution still running")
        if self._error is not None:
            raise self._error

    # --- sync fences (fenced execution) -----------------------------------------------------------------
    def get_sync_fence_fd(self) -> int:
        """A sync fence (an eventfd, readable once signalled) signalled when the execution ends, for
        `Execution.start_compute_with_dependencies` and drivers (ANeuralNetworksEvent_getSyncFenceFd).
        The event owns it: dup it to keep it longer than the event."""
        with _FENCE_LOCK:
            fd = getattr(self, "_fence_fd", None)
            if fd is None:
                fd = self._fence_fd = os.eventfd(0, os.EFD_CLOEXEC)
                threading.Thread(target=_signal_when_done, args=(self,), daemon=True,
                                 name="nnapi-event-fence").start()
        return fd

    @staticmethod
    def create_from_sync_fence_fd(fd: int) -> "Event":
        """An event that completes when sync fence `fd` is signalled (ANeuralNetworksEvent_createFromSyncFenceFd);
        the fd is duplicated."""
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            raise NnError(ResultCode.BAD_DATA, f"Event.create_from_sync_fence_fd: invalid fd {fd!r}")
        try:
            return _SyncFenceEvent(os.dup(fd))
        except OSError as e:
            raise NnError(ResultCode.BAD_DATA, f"Event.create_from_sync_fence_fd: fd {fd}: {e.strerror}") from None

    def __del__(self) -> None:
        fd = getattr(self, "_fence_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass(frozen=True)
class _Io:
    """What binding one input or output checks, worked out once per compilation."""

    operand: hal.Operand
    dtype: np.dtype
    scalar: bool
    #: The operand's dimensions and byte size when fully specified, else None.
    dims: tuple[int, ...] | None
    nbytes: int | None


_IO_FACTS: "weakref.WeakKeyDictionary[Compilation, tuple[list[_Io], list[_Io]]]" = weakref.WeakKeyDictionary()
_DIRECT: "weakref.WeakKeyDictionary[Compilation, _Direct]" = weakref.WeakKeyDictionary()


def _io_facts(compilation: Compilation, main: hal.Subgraph) -> tuple[list[_Io], list[_Io]]:
    facts = _IO_FACTS.get(compilation)
    if facts is None:
        def fact(index: int) -> _Io:
            operand = main.operands[index]
            full = operand.is_fully_specified
            return _Io(operand, numpy_dtype(operand.type), operand.type.is_scalar,
                       tuple(operand.dimensions) if full else None, operand.byte_size() if full else None)
        facts = ([fact(i) for i in main.input_indexes], [fact(i) for i in main.output_indexes])
        _IO_FACTS[compilation] = facts
    return facts


class _Direct:
    """The request of a one-step compilation whose arguments are distinct numpy arrays of the operands'
    full sizes: argument k in pool k, made once per compilation; only the pools change per execution.
    `Compilation.execute` runs through it when every output's size is known (`run`)."""

    def __init__(self, compilation: Compilation) -> None:
        main = compilation.model.to_hal().main
        self.ins, self.outs = _io_facts(compilation, main)
        ios = [*self.ins, *self.outs]
        made = [RequestArgument(False, DataLocation(k, 0, io.nbytes or 0), io.dims) for k, io in enumerate(ios)]
        self.inputs, self.outputs = made[:len(self.ins)], made[len(self.ins):]
        steps = compilation.steps
        self.step: Step | None = steps[0] if (
            len(steps) == 1 and steps[0].inputs == list(main.input_indexes)
            and steps[0].outputs == list(main.output_indexes)) else None
        #: Whether `run` applies: one step, every size known, no output empty or beyond the tensor limit.
        self.runnable = self.step is not None and all(io.nbytes is not None for io in self.ins) and all(
            io.nbytes and io.nbytes <= max_tensor_bytes() for io in self.outs)

    def run(self, inputs: Sequence[np.ndarray | None], timeout: float | None) -> list[np.ndarray] | None:
        """`Execution.run` for the common case (numpy inputs of the operands' dtype and size, outputs
        of known size) without an Execution object: None when it does not apply."""
        if len(inputs) != len(self.ins):
            return None
        pools = []
        for x, io in zip(inputs, self.ins):
            if type(x) is not np.ndarray or x.dtype != io.dtype or x.nbytes != io.nbytes or not x.flags.c_contiguous:
                return None
            pools.append(MemoryPool(pointer=x))
        outs = [np.zeros(io.dims, io.dtype) for io in self.outs]
        for out in outs:
            pools.append(MemoryPool(pointer=out))
        deadline = deadline_after(timeout_ns(timeout, "Execution.set_timeout")) if timeout else None
        request = Request(self.inputs, self.outputs, pools)
        step = self.step
        observer = step.observer
        start = time.perf_counter_ns() if observer is not None else 0
        try:
            if trace.active():
                with trace.span("execute", "execute", device=step.device.name, operations=len(step.operations)):
                    step.prepared.execute_synchronously(request, MeasureTiming.NO, deadline, LOOP_TIMEOUT_DEFAULT_NS)
            else:
                step.prepared.execute_synchronously(request, MeasureTiming.NO, deadline, LOOP_TIMEOUT_DEFAULT_NS)
        except NnError:
            raise
        except Exception as e:  # never let a driver bug escape as anything but NnError
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}") from None
        if observer is not None:
            _observed(step, observer, time.perf_counter_ns() - start)
        return outs


def _observed(step: Step, observer, ns: int) -> None:
    """One execution's time for the latency record (`latency.Observer`); the step stops timing once
    the record has what it needs."""
    observer.observe(ns)
    if observer.done:
        step.observer = None


def _direct(compilation: Compilation) -> _Direct:
    direct = _DIRECT.get(compilation)
    if direct is None:
        direct = _DIRECT[compilation] = _Direct(compilation)
    return direct


def execute_direct(compilation: Compilation, inputs: Sequence[np.ndarray | None],
                   timeout: float | None) -> list[np.ndarray] | None:
    """`Compilation.execute` without an Execution where `_Direct.run` applies; None where it does not."""
    direct = _direct(compilation)
    return direct.run(inputs, timeout) if direct.runnable else None


_ROUTES: "weakref.WeakKeyDictionary[Compilation, tuple[dict[int, int], dict[int, int], list[int]]]" = (
    weakref.WeakKeyDictionary())


def _routes(compilation: Compilation, main: hal.Subgraph) -> tuple[dict[int, int], dict[int, int], list[int]]:
    """Main-model operand -> input index, -> output index, and the values passed between steps."""
    routes = _ROUTES.get(compilation)
    if routes is None:
        main_in = {o: k for k, o in enumerate(main.input_indexes)}
        main_out = {o: k for k, o in enumerate(main.output_indexes)}
        steps = compilation.steps
        boundary = [o for step in steps for o in step.outputs if o not in main_out] if len(steps) > 1 else []
        routes = _ROUTES[compilation] = (main_in, main_out, boundary)
    return routes


class Execution:
    """One run of a compilation. Arguments are set once; an execution runs once."""

    def __init__(self, compilation: Compilation) -> None:
        if not isinstance(compilation, Compilation) or not compilation.finished:
            raise NnError(ResultCode.BAD_STATE, "Execution: the compilation must be finished")
        self.compilation = compilation
        main = compilation.model.to_hal().main
        self._main = main
        self._in_facts, self._out_facts = _io_facts(compilation, main)
        self._inputs: list[_Arg | None] = [None] * len(main.input_indexes)
        self._outputs: list[_Arg | None] = [None] * len(main.output_indexes)
        self._measure = False
        self._timeout_ns: int | None = None
        self._loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        self._started = False
        self._state = "preparation"  # -> "computing" -> "completed"
        self._output_shapes: list[OutputShape] | None = None
        self._result: NnError | None = None
        self._timing = Timing()

    # --- binding --------------------------------------------------------------------------------
    def _check_settable(self, what: str) -> None:
        if self._started:
            raise NnError(ResultCode.BAD_STATE, f"Execution.{what}: the execution has already started")

    def _io(self, io: str, index: int) -> _Io:
        facts = self._in_facts if io == "input" else self._out_facts
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < len(facts):
            raise NnError(ResultCode.BAD_DATA, f"Execution: {io} index {index} out of range ({len(facts)} {io}s)")
        return facts[index]

    def _operand(self, io: str, index: int) -> hal.Operand:
        return self._io(io, index).operand

    def _bind(self, io: str, index: int, arg: _Arg) -> None:
        slots = self._inputs if io == "input" else self._outputs
        if slots[index] is not None:
            raise NnError(ResultCode.BAD_STATE, f"Execution: {io} {index} is already set")
        slots[index] = arg

    def _dims(self, io: str, index: int, operand: hal.Operand, dims: Sequence[int] | None,
              fallback: tuple[int, ...]) -> tuple[int, ...]:
        """Dimensions of an argument: refine only the operand's unknown dimensions (BAD_DATA otherwise)."""
        if operand.type.is_scalar:
            return ()
        if dims is None:
            if operand.is_fully_specified:
                return operand.dimensions
            dims = fallback
        if not isinstance(dims, (tuple, list, np.ndarray)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < 2**32 for d in dims):
            raise NnError(ResultCode.BAD_DATA, f"Execution: {io} {index} dimensions must be non-negative integers, "
                                               f"got {dims!r}")
        dims = tuple(int(d) for d in dims)
        if operand.dimensions and (len(dims) != len(operand.dimensions) or any(
                o and d != o for d, o in zip(dims, operand.dimensions))):
            raise NnError(ResultCode.BAD_DATA, f"Execution: {io} {index} dimensions {dims} do not match the "
                                               f"operand's {operand.dimensions}")
        return dims

    def set_input(self, index: int, value: np.ndarray | None, dimensions: Sequence[int] | None = None) -> None:
        """Bind input `index` to a numpy array (used in place when its dtype matches), or None for no value."""
        self._check_settable("set_input")
        io = self._io("input", index)
        if (type(value) is np.ndarray and dimensions is None and io.nbytes is not None and value.dtype == io.dtype
                and value.nbytes == io.nbytes and value.flags.c_contiguous and self._inputs[index] is None):
            self._inputs[index] = _Arg(array=value, dims=io.dims, length=io.nbytes)  # the common case, checked
            return
        operand = io.operand
        if value is None:
            self._bind("input", index, _Arg(omitted=True))
            return
        try:
            arr = np.ascontiguousarray(exact_array(value, io.dtype))
        except (TypeError, ValueError, OverflowError) as e:
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_input: input {index} ({operand.type.name}): {e}") \
                from None
        dims = self._dims("input", index, operand, dimensions, tuple(arr.shape))
        need = operand.byte_size(dims)
        if arr.nbytes != need:
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_input: input {index} has {arr.nbytes} bytes, the "
                                               f"operand needs {need} for shape {dims}")
        self._bind("input", index, _Arg(array=arr, dims=dims, length=need))

    def set_output(self, index: int, buffer: np.ndarray, dimensions: Sequence[int] | None = None) -> None:
        """Bind output `index` to a writable, contiguous numpy array of the operand's dtype."""
        self._check_settable("set_output")
        io = self._io("output", index)
        if (type(buffer) is np.ndarray and dimensions is None and io.nbytes is not None and buffer.dtype == io.dtype
                and buffer.nbytes == io.nbytes and buffer.flags.c_contiguous and buffer.flags.writeable
                and self._outputs[index] is None):
            self._outputs[index] = _Arg(array=buffer, dims=io.dims, length=io.nbytes)  # the common case, checked
            return
        operand = io.operand
        if buffer is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, f"Execution.set_output: output {index} buffer is None")
        if not isinstance(buffer, np.ndarray) or not buffer.flags.c_contiguous or not buffer.flags.writeable:
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_output: output {index} needs a writable contiguous "
                                               "numpy array")
        if buffer.dtype != numpy_dtype(operand.type):
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_output: output {index} has dtype {buffer.dtype}, "
                                               f"the operand is {operand.type.name}")
        dims = self._dims("output", index, operand, dimensions, operand.dimensions)
        if operand.is_fully_specified and buffer.nbytes != operand.byte_size():
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_output: output {index} has {buffer.nbytes} bytes, "
                                               f"the operand needs {operand.byte_size()}")
        self._bind("output", index, _Arg(array=buffer, dims=dims if all(dims) else (), length=buffer.nbytes))

    def _set_from_memory(self, io: str, index: int, memory: Memory, offset: int, length: int,
                         dimensions: Sequence[int] | None) -> None:
        what = f"Execution.set_{io}_from_memory {io} {index}"
        self._check_settable(f"set_{io}_from_memory")
        operand = self._operand(io, index)
        if memory is None:
            raise NnError(ResultCode.UNEXPECTED_NULL, f"{what}: memory is None")
        if not isinstance(memory, Memory):
            raise NnError(ResultCode.BAD_DATA, f"{what}: expected a Memory, got {type(memory).__name__}")
        slots = self._inputs if io == "input" else self._outputs
        if slots[index] is not None:
            raise NnError(ResultCode.BAD_STATE, f"Execution: {io} {index} is already set")
        validator = memory._validator
        if validator is not None or memory.is_image:
            # Memory from a MemoryDesc and non-BLOB hardware buffers are used whole.
            if offset != 0 or length != 0:
                kind = "memory from a MemoryDesc" if validator is not None else "a non-BLOB hardware buffer"
                raise NnError(ResultCode.BAD_DATA, f"{what}: offset and length must both be 0 for {kind} "
                                                   f"(got {offset}, {length})")
            dims = self._dims(io, index, operand, dimensions, operand.dimensions)
            if validator is None and io == "input" and not operand.type.is_scalar and not (dims and all(dims)):
                raise NnError(ResultCode.BAD_DATA, f"{what}: the operand's dimensions {list(operand.dimensions)} "
                                                   "are not fully specified, so the input needs its dimensions")
            if validator is not None:
                if not validator.has_role(self.compilation, io, index):
                    raise NnError(ResultCode.BAD_DATA, f"{what}: the memory has no role as {io} {index} of this "
                                                       "compilation")
                if not validator.compatible(dims):
                    raise NnError(ResultCode.BAD_DATA, f"{what}: dimensions {list(dims)} are incompatible with the "
                                                       f"memory's {list(validator.initial_dims)}")
            self._bind(io, index, _Arg(memory=memory, offset=0, length=memory.size,
                                       dims=dims if dims and all(dims) else ()))
            return
        memory.check_sized_region(offset, length, what)
        dims = self._dims(io, index, operand, dimensions, operand.dimensions)
        if io == "input" and not operand.type.is_scalar and not (dims and all(dims)):
            raise NnError(ResultCode.BAD_DATA, f"{what}: the operand's dimensions {list(operand.dimensions)} are "
                                               "not fully specified, so the input needs its dimensions")
        if (io == "input" or operand.is_fully_specified) and all(dims) and length != operand.byte_size(dims):
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_{io}_from_memory: {io} {index} length {length} "
                                               f"does not match {operand.byte_size(dims)} bytes")
        self._bind(io, index, _Arg(memory=memory, offset=offset, length=length, dims=dims if all(dims) else ()))

    def set_input_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                              dimensions: Sequence[int] | None = None) -> None:
        self._set_from_memory("input", index, memory, offset, length, dimensions)

    def set_output_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                               dimensions: Sequence[int] | None = None) -> None:
        self._set_from_memory("output", index, memory, offset, length, dimensions)

    def set_measure_timing(self, measure: bool) -> None:
        self._check_settable("set_measure_timing")
        self._measure = bool(measure)

    def set_timeout(self, seconds: float | None) -> None:
        """Execution timeout in seconds (None, 0 or infinity: none). It becomes one absolute deadline
        when the computation starts, sent to every step (partitioned compilations too). A driver
        refuses or aborts work that misses it: MISSED_DEADLINE_PERSISTENT / _TRANSIENT."""
        self._check_settable("set_timeout")
        self._timeout_ns = timeout_ns(seconds, "Execution.set_timeout")

    def set_loop_timeout(self, seconds: float) -> None:
        """Timeout of each WHILE loop; default 2 s, values above 15 s are clamped to 15 s."""
        self._check_settable("set_loop_timeout")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_loop_timeout: invalid timeout {seconds!r}")
        self._loop_timeout_ns = LOOP_TIMEOUT_MAXIMUM_NS if seconds >= LOOP_TIMEOUT_MAXIMUM_NS / 1e9 else int(
            seconds * 1e9)

    # --- running ----------------------------------------------------------------------------------
    def compute(self, timeout: float | None = None) -> None:
        """Run synchronously; raises NnError on failure. `timeout` (seconds) is `set_timeout` for this run."""
        if timeout is not None:
            self.set_timeout(timeout)
        self._start("compute")
        self._finish(self._guarded_run())
        if self._result is not None:
            raise self._result

    def start_compute(self, timeout: float | None = None) -> Event:
        """Run asynchronously; the returned Event's `wait` reports the outcome (`timeout` as in `compute`)."""
        if timeout is not None:
            self.set_timeout(timeout)
        self._start("start_compute")
        event = Event()

        def work() -> None:
            self._finish(self._guarded_run())
            event._finish(self._result)

        # An app that exits with the execution in flight waits for it (`qos.threads`): a thread inside a
        # driver's native call at interpreter shutdown aborts the process ("terminate called ... FATAL").
        threads.start(work, name="nnapi-execution")
        return event

    def _start(self, what: str) -> None:
        if self._started:
            raise NnError(ResultCode.BAD_STATE, f"Execution.{what}: the execution has already started")
        for io, slots in (("input", self._inputs), ("output", self._outputs)):
            for k, arg in enumerate(slots):
                if arg is None:
                    raise NnError(ResultCode.BAD_DATA, f"Execution.{what}: {io} {k} is not set")
        # Memory from a MemoryDesc as an input: initialized, with the dimensions last written.
        for k, arg in enumerate(self._inputs):
            validator = None if arg.memory is None else arg.memory._validator
            if validator is None:
                continue
            operand = self._operand("input", k)
            dims = arg.dims or (operand.dimensions if operand.is_fully_specified else ())
            problem = validator.check_input(dims)
            if problem:
                raise NnError(ResultCode.OP_FAILED, f"Execution.{what}: input {k}: {problem}")
            if not arg.dims and not operand.is_fully_specified:
                arg.dims = validator.updated_dims
                if not arg.memory.is_device:
                    arg.length = operand.byte_size(arg.dims)
        self._started = True
        self._state = "computing"

    def _finish(self, error: NnError | None) -> None:
        self._result = error
        # Memory from a MemoryDesc written as an output: initialized with the new dimensions on
        # success, uninitialized after a failure.
        for k, arg in enumerate(self._outputs):
            validator = None if arg.memory is None else arg.memory._validator
            if validator is None:
                continue
            if error is None:
                shape = self._output_shapes[k] if self._output_shapes else None
                validator.written(None if shape is None else shape.dimensions)
            else:
                validator.set_initialized(False)
        self._state = "completed"

    def _guarded_run(self) -> NnError | None:
        try:
            self._run_plan()
            return None
        except NnError as e:
            return e
        except Exception as e:  # never let a driver bug escape as anything but NnError
            return NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}")

    def _run_plan(self) -> None:
        deadline = deadline_after(self._timeout_ns)  # the same absolute deadline for every step
        steps = self.compilation.steps
        main_in, main_out, boundary = _routes(self.compilation, self._main)
        temps: dict[int, _Temporary] = {}
        shapes: list[OutputShape | None] = [None] * len(self._outputs)
        shared = _SharedTemporaries(self._main.operands, boundary) if boundary else None
        for step in steps:
            self._run_step(step, main_in, main_out, temps, shared, shapes, deadline)
        self._output_shapes = [s if s is not None else OutputShape(()) for s in shapes]

    def _step_request(self, step: Step, main_in, main_out, temps, shared, shapes) -> Request:
        """The request of one step, argument by argument (memory, temporaries between steps, omitted)."""
        operands = self._main.operands
        pools: list[MemoryPool] = []
        pool_of: dict[int, int] = {}

        def pool_index(key: object, pool: MemoryPool) -> int:
            if id(key) not in pool_of:
                pool_of[id(key)] = len(pools)
                pools.append(pool)
            return pool_of[id(key)]

        def argument(arg: _Arg) -> RequestArgument:
            array = arg.array
            if array is not None:  # an in-process buffer, used in place
                key = id(array)
                p = pool_of.get(key)
                if p is None:
                    p = pool_of[key] = len(pools)
                    pools.append(MemoryPool(pointer=array))
                return RequestArgument(False, DataLocation(p, 0, arg.length), arg.dims)
            if arg.omitted:
                return RequestArgument(has_no_value=True)
            if arg.memory is not None:
                memory = arg.memory
                p = pool_index(memory, memory.pool)
                if memory.is_device or memory.is_image:  # used whole: offset = length = 0
                    return RequestArgument(False, DataLocation(p, 0, 0), arg.dims)
                return RequestArgument(False, DataLocation(p, arg.offset, arg.length), arg.dims)
            raise NnError(ErrorStatus.GENERAL_FAILURE, "an execution argument with neither memory nor a buffer")

        req_inputs = []
        for o in step.inputs:
            if o in main_in:
                req_inputs.append(argument(self._inputs[main_in[o]]))
            elif o in main_out:
                arg = self._outputs[main_out[o]]
                shape = shapes[main_out[o]].dimensions
                req_inputs.append(argument(_Arg(arg.array, arg.memory, arg.offset,
                                                operands[o].byte_size(shape), shape)))
            else:
                req_inputs.append(argument(shared.input_arg(temps[o], o)))
        req_outputs = []
        for o in step.outputs:
            if o in main_out:
                req_outputs.append(argument(self._outputs[main_out[o]]))
            else:
                if o not in temps:
                    temps[o] = shared.place(o)
                t = temps[o]
                req_outputs.append(argument(_Arg(memory=t.memory, offset=t.offset, length=t.capacity)))
        return Request(req_inputs, req_outputs, pools)

    def _direct_request(self, step: Step) -> Request | None:
        """The request of a step that is the whole model with every argument a distinct numpy array of the
        operand's full size: its arguments are the same every time (argument k in pool k), made once per
        compilation; only the pools change. None: build it argument by argument."""
        args = [*self._inputs, *self._outputs]
        ios = [*self._in_facts, *self._out_facts]
        for arg, io in zip(args, ios):
            if arg.array is None or io.nbytes is None or arg.length != io.nbytes or arg.dims != io.dims:
                return None
        direct = _direct(self.compilation)
        if direct.step is not step or len({id(a.array) for a in args}) != len(args):
            return None
        return Request(direct.inputs, direct.outputs, [MemoryPool(pointer=a.array) for a in args])

    def _run_step(self, step: Step, main_in, main_out, temps, shared, shapes, deadline) -> None:
        operands = self._main.operands
        direct = self._direct_request(step) if len(self.compilation.steps) == 1 else None
        for attempt in range(_MAX_RETRIES):
            if direct is not None and attempt == 0:
                request = direct
            else:
                request = self._step_request(step, main_in, main_out, temps, shared, shapes)
            measure = MeasureTiming.YES if self._measure else MeasureTiming.NO
            observer = step.observer
            start = time.perf_counter_ns() if observer is not None else 0
            try:
                if trace.active():
                    with trace.span("execute", "execute", device=step.device.name, operations=len(step.operations)):
                        out_shapes, timing = step.prepared.execute_synchronously(request, measure, deadline,
                                                                                 self._loop_timeout_ns)
                else:
                    out_shapes, timing = step.prepared.execute_synchronously(request, measure, deadline,
                                                                             self._loop_timeout_ns)
            except NnError as e:
                if e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE or not e.output_shapes:
                    raise
                grow = False
                for o, s in zip(step.outputs, e.output_shapes):
                    if o in main_out:
                        shapes[main_out[o]] = s
                    elif not s.is_sufficient:
                        temps[o] = shared.place(o, operands[o].byte_size(tuple(s.dimensions)))
                        grow = True
                if any(o in main_out and not s.is_sufficient for o, s in zip(step.outputs, e.output_shapes)):
                    self._output_shapes = [s if s is not None else OutputShape(()) for s in shapes]
                    raise
                if not grow:
                    raise
                continue
            self._timing = timing
            if observer is not None:
                _observed(step, observer, time.perf_counter_ns() - start)
            for k, o in enumerate(step.outputs):
                if o in main_out and out_shapes and out_shapes[k].is_sufficient:
                    shapes[main_out[o]] = out_shapes[k]
                    continue
                dims = out_shapes[k].dimensions if out_shapes else operands[o].dimensions
                if o in main_out:
                    shapes[main_out[o]] = OutputShape(tuple(dims), True)
                else:
                    temps[o].dims = () if operands[o].type.is_scalar else tuple(dims)
            return
        raise NnError(ErrorStatus.GENERAL_FAILURE, "step outputs kept growing; giving up")

    # --- results ------------------------------------------------------------------------------------
    def get_output_shape(self, index: int) -> tuple[int, ...]:
        """Dimensions of output `index` after a run (also after OUTPUT_INSUFFICIENT_SIZE)."""
        self._operand("output", index)
        if self._state != "completed" or self._output_shapes is None or (
                self._result is not None and self._result.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
            raise NnError(ResultCode.BAD_STATE, "Execution.get_output_shape: no successful run to report on")
        return tuple(self._output_shapes[index].dimensions)

    @property
    def output_shapes(self) -> list[OutputShape] | None:
        return self._output_shapes

    def get_duration(self) -> Timing:
        """Timing of the last step in microseconds (NO_TIMING when not measured)."""
        if not self._measure or self._state != "completed":
            raise NnError(ResultCode.BAD_STATE, "Execution.get_duration: timing was not measured")
        return self._timing

    # --- convenience ----------------------------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray | None], timeout: float | None = None) -> list[np.ndarray]:
        """Bind `inputs`, allocate outputs (growing unknown ones as the driver reports), compute, return outputs."""
        if len(inputs) != len(self._inputs):
            raise NnError(ResultCode.BAD_DATA, f"Execution.run: {len(inputs)} inputs given, the model has "
                                               f"{len(self._inputs)}")
        sizes = [io.dims for io in self._out_facts]
        fresh = not self._started and all(a is None for a in (*self._inputs, *self._outputs))
        for attempt in range(_MAX_RETRIES):
            ex = self if attempt == 0 and fresh else Execution(self.compilation)
            if timeout:
                ex.set_timeout(timeout)
            for k, x in enumerate(inputs):
                ex.set_input(k, x)
            outs = []
            for k, io in enumerate(self._out_facts):
                shape = () if io.scalar else (sizes[k] if sizes[k] is not None else (1,))
                buf = _output_buffer(k, shape, io.dtype)
                outs.append(buf)
                ex.set_output(k, buf)
            try:
                ex.compute()
            except NnError as e:
                if e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE or ex._output_shapes is None:
                    raise
                sizes = [s.dimensions for s in ex._output_shapes]
                continue
            result = []
            for buf, shape in zip(outs, ex._output_shapes):
                dims = tuple(shape.dimensions)
                result.append(buf.reshape(dims) if buf.size == math.prod(dims) else
                              (buf[:math.prod(dims)].reshape(dims) if dims else buf[:1].reshape(())))
            return result
        raise NnError(ErrorStatus.GENERAL_FAILURE, "Execution.run: output sizes kept growing")

    # --- burst and fenced execution -------------------------------------------------------------------
    def burst_compute(self, burst, timeout: float | None = None) -> None:
        """Run synchronously through `burst` (a `Burst` of this execution's compilation,
        ANeuralNetworksExecution_burstCompute): its driver bursts keep this execution's shared memory
        under memory identifier tokens. BAD_STATE while another execution uses the burst."""
        if not isinstance(burst, Burst):
            raise NnError(ResultCode.BAD_DATA, f"Execution.burst_compute: expected a Burst, got {type(burst).__name__}")
        if burst.compilation is not self.compilation:
            raise NnError(ResultCode.BAD_DATA, "Execution.burst_compute: the burst belongs to another compilation")
        if timeout is not None:
            self.set_timeout(timeout)
        self._check_settable("burst_compute")
        burst.acquire()
        try:
            self._start("burst_compute")
            self._finish(self._run_on(burst.plan()))
        finally:
            burst.release()
        if self._result is not None:
            raise self._result

    def start_compute_with_dependencies(self, dependencies: Sequence[Event], timeout: float | None = None) -> Event:
        """Start once every event in `dependencies` is signalled (ANeuralNetworksExecution_startComputeWithDependencies).

        Their sync fences go to the driver (`IPreparedModel.execute_fenced`; across a process boundary as
        descriptors), which waits on them and runs; `timeout` (seconds; None or 0: none) bounds the run after
        they are signalled. A dependency that failed fails this execution (OP_FAILED). Returns an Event with
        a sync fence of its own, so executions chain."""
        if not isinstance(dependencies, (list, tuple)) or not all(isinstance(d, Event) for d in dependencies):
            raise NnError(ResultCode.BAD_DATA, "Execution.start_compute_with_dependencies: dependencies must be a "
                                               "list of Event")
        after_ns = timeout_ns(timeout, "Execution.start_compute_with_dependencies")
        fences = [d.get_sync_fence_fd() for d in dependencies]
        self._start("start_compute_with_dependencies")
        event = Event()

        def work() -> None:
            error = self._run_fenced(fences, after_ns)
            failed = next((k for k, d in enumerate(dependencies) if d.is_done() and d._error is not None), None)
            if failed is not None:
                error = NnError(ResultCode.OP_FAILED, f"dependency {failed} failed: {dependencies[failed]._error}")
            self._finish(error)
            event._finish(self._result)

        threads.start(work, name="nnapi-fenced-execution")  # (its driver's code ends before the process)
        return event

    def _run_fenced(self, fences: list[int], after_ns: int | None) -> NnError | None:
        """The first step runs fenced on its driver when its outputs are fully specified (what fenced
        execution needs); otherwise the runtime waits on the fences itself, then runs the plan."""
        first = self.compilation.steps[0]
        main = first.model.main
        if all(main.operands[o].is_fully_specified for o in main.output_indexes):
            return self._run_through(lambda k, step: _FencedStep(step.prepared, fences, after_ns) if k == 0
                                     else step.prepared)
        try:
            _wait_fences(fences, deadline_after(self._timeout_ns))
        except NnError as e:
            return e
        return self._guarded_run()

    def _run_through(self, executor) -> NnError | None:
        """Run the plan with step k's executions going through `executor(k, step)` (a burst, a fenced step)
        instead of its prepared model."""
        return self._run_on(plan_through(self.compilation, executor))

    def _run_on(self, plan: "_PlanView") -> NnError | None:
        """Run `plan` (this execution's compilation with other executors for its steps)."""
        compilation = self.compilation
        self.compilation = plan
        try:
            return self._guarded_run()
        finally:
            self.compilation = compilation


def _output_buffer(k: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zeroed buffer for output `k` of `shape`: RESOURCE_EXHAUSTED_PERSISTENT before allocating a tensor
    larger than `memory.max_tensor_bytes()`, GENERAL_FAILURE when the allocation itself fails."""
    count = max(math.prod(shape), 1) if shape else 1
    nbytes = count * np.dtype(dtype).itemsize
    if nbytes > max_tensor_bytes():
        raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                      f"output {k} of shape {list(shape)} needs {nbytes} bytes, more than the largest tensor "
                      f"this machine allows ({max_tensor_bytes()} bytes)")
    try:
        return np.zeros(count, dtype)
    except MemoryError:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"output {k} of shape {list(shape)}: cannot allocate "
                                                   f"{nbytes} bytes") from None


# --- burst and fenced execution helpers ---------------------------------------------------------------

_FENCE_LOCK = threading.Lock()


def _signal_when_done(event: Event) -> None:
    event._done.wait()
    os.eventfd_write(event._fence_fd, 1)


class _SyncFenceEvent(Event):
    """An event that is a sync fence (from `Event.create_from_sync_fence_fd`)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fence_fd = fd

    def get_sync_fence_fd(self) -> int:
        return self._fence_fd

    def is_done(self) -> bool:
        return self._done.is_set() or _fence_signalled(self._fence_fd, 0)

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.is_set():
            if not _fence_signalled(self._fence_fd, None if timeout is None else int(timeout * 1000)):
                raise TimeoutError("sync fence not signalled yet")
            self._done.set()


def _fence_signalled(fd: int, timeout_ms: int | None) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_ms))


def _wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Wait until every sync fence is signalled; MISSED_DEADLINE_TRANSIENT when the deadline passes first,
    GENERAL_FAILURE when the process exits meanwhile (`qos.threads`: the wait ends, nothing runs)."""
    for fd in fences:
        while True:
            left = None if deadline is None else max(0, (deadline - time.monotonic_ns()) // 1_000_000)
            if _fence_signalled(fd, 200 if left is None else min(left, 200)):
                break
            if threads.exiting():
                raise NnError(ErrorStatus.GENERAL_FAILURE, "the process exited while waiting for dependencies")
            if left is not None and left <= 200:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              "the deadline passed while waiting for dependencies")


def plan_through(compilation: Compilation, executor) -> "_PlanView":
    """`compilation` with step k executing through `executor(k, step)` instead of its prepared model."""
    return _PlanView(compilation, [dataclasses.replace(step, prepared=executor(k, step))
                                   for k, step in enumerate(compilation.steps)])


class _PlanView:
    """A compilation seen by one execution whose steps run through other executors (burst, fenced)."""

    def __init__(self, compilation: Compilation, steps: list[Step]) -> None:
        self._compilation = compilation
        self.steps = steps

    def __getattr__(self, name: str):
        return getattr(self._compilation, name)


class _FencedStep:
    """Stands for a step's prepared model: runs it with `execute_fenced` after the sync fences."""

    def __init__(self, prepared: hal.IPreparedModel, fences: list[int], after_ns: int | None) -> None:
        self._prepared = prepared
        self._fences = fences
        self._after_ns = after_ns

    def execute_synchronously(self, request: Request, measure: MeasureTiming, deadline: int | None,
                              loop_timeout_ns: int | None) -> tuple[list[OutputShape], Timing]:
        fence, callback = self._prepared.execute_fenced(request, self._fences, measure, deadline, loop_timeout_ns,
                                                        self._after_ns)
        if fence is not None and fence >= 0:
            try:
                _fence_signalled(fence, None)
            finally:
                os.close(fence)
        status, launched, _ = callback.get_execution_info()
        if status != ErrorStatus.NONE:
            raise NnError(status, "fenced execution failed")
        return [], launched
