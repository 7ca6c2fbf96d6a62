"""`Execution`: bind the inputs and outputs of one run of a compilation, and its state; its plan runs it.

Numpy arguments are handed to in-process drivers in place (pointer pools, no copy); `Memory`
arguments are referenced in place: shared memory as pools (region of the app's choosing; a
non-BLOB hardware buffer whole), memory from a `MemoryDesc` as the driver-managed buffer's token
(or its fallback pool), only in its declared roles. Unknown output sizes come back in
`OutputShape`s; a too-small output buffer gives OUTPUT_INSUFFICIENT_SIZE and `get_output_shape`
tells the size needed. Sync, async, burst and fenced runs all go through the compilation's
`ExecutionPlan` (`runtime.plan`), each with its step executor.

States, as NNAPI's: preparation (arguments and settings may be set) -> computation (one in flight) ->
completed. A plain execution computes once. A reusable one (`set_reusable(True)`, NNAPI feature level
5) computes again from the completed state, as often as the app likes: its arguments are checked and
bound at the first computation (`ExecutionPlan.bind`: the requests of every static step built once)
and cannot be set again (BAD_STATE); each later computation only runs the bound requests, reading the
contents of the bound arrays and memory as they are then.
"""
from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from .. import hal
from ..hal import (ErrorStatus, LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, NnError, OutputShape,
                   ResultCode, Timing, numpy_dtype)
from ..memory import max_tensor_bytes
from ..qos import threads
from .burst import Burst
from .deadlines import deadline_after, timeout_ns
from .events import Event, FencedExecutor, wait_fences
from .memory import Memory
from .plan import MAX_RETRIES, PREPARED, Arg, Arguments, BoundPlan, Compiled, ExecutionPlan, Io, StepExecutor
from .values import exact_array


class Execution:
    """One run of a compilation (or, reusable, many: `set_reusable`). Arguments are set once."""

    def __init__(self, compilation: Compiled) -> None:
        plan = getattr(compilation, "plan", None)
        if not isinstance(plan, ExecutionPlan):
            raise NnError(ResultCode.BAD_STATE, "Execution: the compilation must be finished")
        self.compilation = compilation
        self._plan = plan
        self._in_facts, self._out_facts = plan.inputs, plan.outputs
        self._inputs: list[Arg | None] = [None] * len(plan.inputs)
        self._outputs: list[Arg | None] = [None] * len(plan.outputs)
        self._measure = False
        self._timeout_ns: int | None = None
        self._loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        self._started = False
        self._state = "preparation"  # -> "computing" -> "completed" (-> "computing" again when reusable)
        self._reusable = False
        self._bound: BoundPlan | None = None  # a reusable execution's arguments bound, at its first computation
        #: The inputs in memory from a MemoryDesc, checked again at every computation: (index, from the memory's
        #: dimensions, not the app's).
        self._desc_inputs: list[tuple[int, bool]] = []
        self._desc_outputs: list[int] = []  # the outputs in memory from a MemoryDesc
        self._state_lock: threading.Lock | None = None  # a reusable execution's: one computation at a time
        self._output_shapes: list[OutputShape] | None = None
        self._result: NnError | None = None
        self._timing = Timing()

    # --- binding --------------------------------------------------------------------------------
    def _check_settable(self, what: str) -> None:
        """BAD_STATE outside the preparation state (a reusable execution's too: its arguments and settings are
        fixed at its first computation)."""
        if self._started:
            raise NnError(ResultCode.BAD_STATE, f"Execution.{what}: the execution has already started" + (
                " (a reusable execution's arguments and settings are fixed at its first computation)"
                if self._reusable else ""))

    def _io(self, io: str, index: int) -> Io:
        facts = self._in_facts if io == "input" else self._out_facts
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < len(facts):
            raise NnError(ResultCode.BAD_DATA, f"Execution: {io} index {index} out of range ({len(facts)} {io}s)")
        return facts[index]

    def _operand(self, io: str, index: int) -> hal.Operand:
        return self._io(io, index).operand

    def _bind(self, io: str, index: int, arg: Arg) -> None:
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
            self._inputs[index] = Arg(array=value, dims=io.dims, length=io.nbytes)  # the common case, checked
            return
        operand = io.operand
        if value is None:
            self._bind("input", index, Arg(omitted=True))
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
        self._bind("input", index, Arg(array=arr, dims=dims, length=need))

    def set_output(self, index: int, buffer: np.ndarray, dimensions: Sequence[int] | None = None) -> None:
        """Bind output `index` to a writable, contiguous numpy array of the operand's dtype."""
        self._check_settable("set_output")
        io = self._io("output", index)
        if (type(buffer) is np.ndarray and dimensions is None and io.nbytes is not None and buffer.dtype == io.dtype
                and buffer.nbytes == io.nbytes and buffer.flags.c_contiguous and buffer.flags.writeable
                and self._outputs[index] is None):
            self._outputs[index] = Arg(array=buffer, dims=io.dims, length=io.nbytes)  # the common case, checked
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
        self._bind("output", index, Arg(array=buffer, dims=dims if all(dims) else (), length=buffer.nbytes))

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
        validator = memory.validator
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
            self._bind(io, index, Arg(memory=memory, offset=0, length=memory.size,
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
        self._bind(io, index, Arg(memory=memory, offset=offset, length=length, dims=dims if all(dims) else ()))

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

    def set_reusable(self, reusable: bool) -> None:
        """Whether the execution may compute again once a computation is complete
        (ANeuralNetworksExecution_setReusable; default False). Only in the preparation state, before the first
        computation (BAD_STATE after). A reusable execution checks and binds its arguments at the first
        computation; later ones run them as bound, with the current contents of the bound arrays and memory
        (the arguments themselves cannot be set again). Its computations run one at a time: another while
        one is in flight is BAD_STATE."""
        if self._state != "preparation":
            raise NnError(ResultCode.BAD_STATE, f"Execution.set_reusable: the execution is not in the preparation "
                                                f"state (it is {self._state})")
        if not isinstance(reusable, (bool, np.bool_)):
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_reusable: expected True or False, got {reusable!r}")
        self._reusable = bool(reusable)
        if self._reusable and self._state_lock is None:
            self._state_lock = threading.Lock()

    @property
    def reusable(self) -> bool:
        return self._reusable

    def set_loop_timeout(self, seconds: float) -> None:
        """Timeout of each WHILE loop; default 2 s, values above 15 s are clamped to 15 s."""
        self._check_settable("set_loop_timeout")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise NnError(ResultCode.BAD_DATA, f"Execution.set_loop_timeout: invalid timeout {seconds!r}")
        self._loop_timeout_ns = LOOP_TIMEOUT_MAXIMUM_NS if seconds >= LOOP_TIMEOUT_MAXIMUM_NS / 1e9 else int(
            seconds * 1e9)

    # --- running ----------------------------------------------------------------------------------
    def compute(self, timeout: float | None = None) -> None:
        """Run synchronously; raises NnError on failure. `timeout` (seconds) is `set_timeout` for this run
        (for a reusable execution: this computation's only)."""
        run_timeout = self._timeout_ns if timeout is None else self._run_timeout(timeout, "compute")
        self._start("compute")
        self._finish(self._guarded_run(PREPARED, run_timeout))
        if self._result is not None:
            raise self._result

    def start_compute(self, timeout: float | None = None) -> Event:
        """Run asynchronously; the returned Event's `wait` reports the outcome (`timeout` as in `compute`)."""
        run_timeout = self._run_timeout(timeout, "start_compute")
        self._start("start_compute")
        event = Event()

        def work() -> None:
            self._finish(self._guarded_run(PREPARED, run_timeout))
            event.finish(self._result)

        # An app that exits with the execution in flight waits for it (`qos.threads`): a thread inside a
        # driver's native call at interpreter shutdown aborts the process ("terminate called ... FATAL").
        threads.submit(work, name="nnapi-execution")
        return event

    def _run_timeout(self, timeout: float | None, what: str) -> int | None:
        """The timeout (ns) of the computation about to start: `timeout` (seconds) when given (`set_timeout`
        for a plain execution, as before; a reusable one's settings are fixed, so it is that computation's
        only), else the one set."""
        if timeout is None:
            return self._timeout_ns
        if not self._reusable:
            self.set_timeout(timeout)
            return self._timeout_ns
        return timeout_ns(timeout, f"Execution.{what}")

    def _start(self, what: str) -> None:
        """Into the computation state: the first computation checks every argument; a reusable execution's later
        ones (from the completed state) only its inputs in memory from a MemoryDesc, whose content may have
        changed. BAD_STATE for a plain execution that started already, or with a computation in flight."""
        if not self._reusable:
            if self._started:
                raise NnError(ResultCode.BAD_STATE, f"Execution.{what}: the execution has already started")
            self._check_arguments(what)
            self._started = True
            self._state = "computing"
            return
        with self._state_lock:
            if self._state == "computing":
                raise NnError(ResultCode.BAD_STATE, f"Execution.{what}: a computation of this reusable execution "
                                                    "is in flight (one at a time)")
            if not self._started:
                self._check_arguments(what)
            elif self._desc_inputs:
                self._check_desc_inputs(what)
            self._started = True
            self._state = "computing"
            self._output_shapes = None

    def _check_arguments(self, what: str) -> None:
        """Every argument set; inputs in memory from a MemoryDesc initialized (`_check_desc_inputs`)."""
        for io, slots in (("input", self._inputs), ("output", self._outputs)):
            for k, arg in enumerate(slots):
                if arg is None:
                    raise NnError(ResultCode.BAD_DATA, f"Execution.{what}: {io} {k} is not set")
        if any(arg.memory is not None for arg in (*self._inputs, *self._outputs)):
            self._desc_inputs = [(k, not arg.dims and not self._in_facts[k].operand.is_fully_specified)
                                 for k, arg in enumerate(self._inputs)
                                 if arg.memory is not None and arg.memory.validator is not None]
            self._desc_outputs = [k for k, arg in enumerate(self._outputs)
                                  if arg.memory is not None and arg.memory.validator is not None]
            self._check_desc_inputs(what)

    def _check_desc_inputs(self, what: str) -> None:
        """Memory from a MemoryDesc as an input: initialized, with the dimensions last written (which an input of
        unknown dimensions takes: a reusable execution binds again when they changed)."""
        for k, from_memory in self._desc_inputs:
            arg = self._inputs[k]
            validator = arg.memory.validator
            operand = self._in_facts[k].operand
            dims = () if from_memory else arg.dims or (operand.dimensions if operand.is_fully_specified else ())
            problem = validator.check_input(dims)
            if problem:
                raise NnError(ResultCode.OP_FAILED, f"Execution.{what}: input {k}: {problem}")
            if from_memory and (not self._started or arg.dims != tuple(validator.updated_dims)):
                arg.dims = tuple(validator.updated_dims)
                if not arg.memory.is_device:
                    arg.length = operand.byte_size(arg.dims)
                self._bound = None

    def _finish(self, error: NnError | None) -> None:
        self._result = error
        # Memory from a MemoryDesc written as an output: initialized with the new dimensions on
        # success, uninitialized after a failure.
        for k in self._desc_outputs:
            validator = self._outputs[k].memory.validator
            if error is None:
                shape = self._output_shapes[k] if self._output_shapes else None
                validator.written(None if shape is None else shape.dimensions)
            else:
                validator.set_initialized(False)
        self._state = "completed"

    def _guarded_run(self, executor: StepExecutor, run_timeout_ns: int | None) -> NnError | None:
        """Run the plan through `executor` with this execution's arguments (a reusable execution: its bound
        plan, bound at the first computation) against `run_timeout_ns`; the error, or None."""
        deadline = deadline_after(run_timeout_ns)  # the same absolute deadline for every step
        try:
            if self._reusable:
                bound = self._bound
                if bound is None:
                    bound = self._bound = self._plan.bind(Arguments(self._inputs, self._outputs, self._measure,
                                                                    None, self._loop_timeout_ns), reusable=True)
                outcome = bound.run(executor, deadline)
            else:
                outcome = self._plan.run(Arguments(self._inputs, self._outputs, self._measure, deadline,
                                                   self._loop_timeout_ns), executor)
        except NnError as e:
            if e.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and e.output_shapes:
                self._output_shapes = e.output_shapes
            return e
        except Exception as e:  # never let a runtime or driver bug escape as anything but NnError
            return NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}")
        self._output_shapes, self._timing = outcome.output_shapes, outcome.timing
        return None

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
        for attempt in range(MAX_RETRIES):
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
        run_timeout = self._run_timeout(timeout, "burst_compute")
        if self._started and not self._reusable:
            raise NnError(ResultCode.BAD_STATE, "Execution.burst_compute: the execution has already started")
        burst.acquire()
        try:
            self._start("burst_compute")
            self._finish(self._guarded_run(burst, run_timeout))
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
            failed = next((k for k, d in enumerate(dependencies) if d.is_done() and d.error is not None), None)
            if failed is not None:
                error = NnError(ResultCode.OP_FAILED, f"dependency {failed} failed: {dependencies[failed].error}")
            self._finish(error)
            event.finish(self._result)

        threads.submit(work, name="nnapi-fenced-execution")  # (its driver's code ends before the process)
        return event

    def _run_fenced(self, fences: list[int], after_ns: int | None) -> NnError | None:
        """The first step runs fenced on its driver when its outputs are fully specified (what fenced
        execution needs); otherwise the runtime waits on the fences itself, then runs the plan."""
        if self._plan.fenceable:
            return self._guarded_run(FencedExecutor(fences, after_ns), self._timeout_ns)
        try:
            wait_fences(fences, deadline_after(self._timeout_ns))
        except NnError as e:
            return e
        return self._guarded_run(PREPARED, self._timeout_ns)


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
