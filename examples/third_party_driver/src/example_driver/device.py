"""The example driver's HAL: one `IDevice` and its `IPreparedModel`, written against `nnapi.hal` only, with
the toolkits every driver may use (`nnapi.validation`, `nnapi.memory`, `nnapi.qos.fences`).

What it claims, and so what `nnapi vts` checks of it: the operations of `kernels.py` on float32
tensors; no compilation caching (0 cache files: retrieval is GENERAL_FAILURE); no memory domains
(allocate is GENERAL_FAILURE); deadlines honoured (already passed: MISSED_DEADLINE_PERSISTENT; passing
between operations: MISSED_DEADLINE_TRANSIENT); dynamic output shapes and OUTPUT_INSUFFICIENT_SIZE.
Every failure is an `NnError` whose message names what is wrong, never another exception.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Sequence

import numpy as np

from nnapi.hal import (NO_DEADLINE, BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DeviceInfo,
                       DeviceType, ErrorStatus, ExecutionCallback, ExecutionPreference, IBuffer,
                       IFencedExecutionCallback, IDevice, IPreparedModel, MeasureTiming, Model, NnError,
                       OperandLifeTime, OperandPerformance, OperandType, OutputShape, PerformanceInfo, Priority,
                       Request, Timing)
from nnapi.memory import map_pool, mappable_constant_flags
from nnapi.ops import numpy_dtype
from nnapi.qos.fences import wait_fences
from nnapi.validation import ConstantReader, validate_model, validate_preference, validate_priority, validate_request

from . import kernels

NAME = "example"
VERSION = "0.1.0"
_FLOAT = OperandType.TENSOR_FLOAT32


def _passed(deadline: int | None) -> bool:
    return deadline is not None and deadline != NO_DEADLINE and time.monotonic_ns() >= deadline


def _us(ns: int) -> int:
    return max(0, ns) // 1000


class ExampleDevice(IDevice):
    """The device: what it is, what it can run, and preparation."""

    def get_info(self) -> DeviceInfo:
        return DeviceInfo(NAME, VERSION, DeviceType.ACCELERATOR, 30)

    def get_capabilities(self) -> Capabilities:
        slow = PerformanceInfo(2.0, 2.0)   # slower than the reference CPU: the runtime prefers it only when asked
        return Capabilities(slow, slow, (OperandPerformance(OperandType.INT32, slow), OperandPerformance(_FLOAT, slow)),
                            slow, slow)

    def get_supported_operations(self, model: Model) -> list[bool]:
        validate_model(model)   # an invalid model is INVALID_ARGUMENT, whatever the driver supports
        flags = [kernels.supports(op) and self._float_operands(model, op) for op in model.main.operations]
        return [f and ok for f, ok in zip(flags, mappable_constant_flags(model))]

    @staticmethod
    def _float_operands(model: Model, op: Any) -> bool:
        """Tensors are float32; a binary operation's third input is its INT32 activation."""
        operands = model.main.operands
        tensors = op.inputs[:2] if op.type in kernels.BINARY else op.inputs
        if op.type in kernels.BINARY and (len(op.inputs) != 3 or operands[op.inputs[2]].type != OperandType.INT32):
            return False
        return all(operands[i].type == _FLOAT for i in (*tensors, *op.outputs))

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return 0, 0   # no compilation caching

    def prepare_model(self, model: Model, preference: ExecutionPreference, priority: Priority,
                      deadline: int | None, cache: CacheHandles | None, token: bytes | None, *,
                      client: ClientId | None = None) -> "ExamplePreparedModel":
        validate_model(model)
        validate_preference(preference)
        validate_priority(priority)
        unsupported = [f"{k} ({op.type.name})" for k, (op, ok) in
                       enumerate(zip(model.main.operations, self.get_supported_operations(model))) if not ok]
        if unsupported:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"the example driver cannot run operations "
                                                        f"{', '.join(unsupported)}")
        if _passed(deadline):
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "preparation: the deadline had already passed")
        return ExamplePreparedModel(model)

    def prepare_model_from_cache(self, deadline: int | None, cache: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> IPreparedModel:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "the example driver does not cache compilations")

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple[IBuffer, int]:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "the example driver has no memory domains")


class _Finished(IFencedExecutionCallback):
    """The result of a fenced execution that has already finished."""

    def __init__(self, status: ErrorStatus, launched: Timing, fenced: Timing) -> None:
        self._info = (status, launched, fenced)

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self._info


class ExamplePreparedModel(IPreparedModel):
    """A prepared model: its constants read once, executions run operation by operation."""

    def __init__(self, model: Model) -> None:
        self.model = model
        reader = ConstantReader(model)
        self.constants: dict[int, np.ndarray] = {}
        for index, operand in enumerate(model.main.operands):
            if operand.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
                self.constants[index] = np.array(reader.value(operand))   # a copy: the app may reuse its memory

    # --- one execution ---------------------------------------------------------------------------------
    def _compute(self, request: Request, deadline: int | None) -> list[OutputShape]:
        main = self.model.main
        if any(pool.token is not None for pool in request.pools):
            raise NnError(ErrorStatus.INVALID_ARGUMENT, "the example driver has no memory domains: a request pool "
                                                        "holds a buffer token")
        pools = [map_pool(pool) for pool in request.pools]
        values: dict[int, np.ndarray | None] = dict(self.constants)
        for k, index in enumerate(main.input_indexes):
            arg, operand = request.inputs[k], main.operands[index]
            if arg.has_no_value:
                values[index] = None
                continue
            dims = tuple(arg.dimensions) or operand.dimensions
            dtype = numpy_dtype(operand.type)
            count = int(np.prod(dims)) if dims else 1
            loc = arg.location
            if count * dtype.itemsize > self._room(request, pools, arg):
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"input {k} needs {count * dtype.itemsize} bytes, its "
                                                            f"region holds {self._room(request, pools, arg)}")
            values[index] = pools[loc.pool_index].array(loc.offset, count * dtype.itemsize, dtype, dims).copy()
        for n, op in enumerate(main.operations):
            if _passed(deadline):
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"the deadline passed before operation {n}")
            (out,) = op.outputs
            values[out] = kernels.run(op, [values[i] for i in op.inputs])
        results = [np.ascontiguousarray(values[i]) for i in main.output_indexes]
        shapes = [OutputShape(r.shape, r.nbytes <= self._room(request, pools, arg))
                  for r, arg in zip(results, request.outputs)]
        if not all(s.is_sufficient for s in shapes):
            short = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            raise NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"outputs {short} need more room than given",
                          output_shapes=shapes)
        for r, arg in zip(results, request.outputs):
            pools[arg.location.pool_index].write(arg.location.offset, r)   # INVALID_ARGUMENT if read-only
        return shapes

    @staticmethod
    def _room(request: Request, pools: list, arg: Any) -> int:
        """Bytes of an argument's region; a non-BLOB hardware buffer is used whole (offset = length = 0)."""
        loc = arg.location
        handle = request.pools[loc.pool_index].handle
        if loc.length == 0 and handle is not None and handle.name == "hardware_buffer":
            return pools[loc.pool_index].size
        return loc.length

    def _run(self, request: Request, measure: MeasureTiming, deadline: int | None,
             start: int) -> tuple[list[OutputShape], Timing]:
        if _passed(deadline):
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "execution: the deadline had already passed")
        began = time.monotonic_ns()
        try:
            shapes = self._compute(request, deadline)
        except NnError:
            raise
        except Exception as e:   # a bug or an input the checks missed: an error, never a crash
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}") from e
        end = time.monotonic_ns()
        if measure == MeasureTiming.YES:
            return shapes, Timing(_us(end - began), _us(end - start))
        return shapes, Timing()

    # --- IPreparedModel ---------------------------------------------------------------------------------
    def execute_synchronously(self, request: Request, measure: MeasureTiming, deadline: int | None,
                              loop_timeout_ns: int | None, *, client: ClientId | None = None
                              ) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        validate_request(request, self.model)
        return self._run(request, measure, deadline, start)

    def execute(self, request: Request, measure: MeasureTiming, deadline: int | None, loop_timeout_ns: int | None,
                callback: ExecutionCallback, *, client: ClientId | None = None) -> None:
        start = time.monotonic_ns()
        validate_request(request, self.model)   # launch errors are raised; everything else reaches the callback

        def work() -> None:
            try:
                shapes, timing = self._run(request, measure, deadline, start)
            except NnError as e:
                insufficient = e.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
                callback(e.status, list(e.output_shapes or []) if insufficient else [], Timing())
                return
            callback(ErrorStatus.NONE, shapes, timing)

        threading.Thread(target=work, daemon=True, name="example-driver-execution").start()

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: MeasureTiming,
                       deadline: int | None, loop_timeout_ns: int | None, timeout_after_fence_ns: int | None, *,
                       client: ClientId | None = None) -> tuple[int, IFencedExecutionCallback]:
        launched = time.monotonic_ns()
        validate_request(request, self.model, allow_unspecified_output=False)
        for k, index in enumerate(self.model.main.output_indexes):
            dims = tuple(request.outputs[k].dimensions) or self.model.main.operands[index].dimensions
            if not dims or 0 in dims:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"fenced execution: output {k} must be fully specified "
                                                            "and not empty")
        if _passed(deadline):
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "fenced execution: the deadline had already passed")
        wait_fences(wait_for, deadline)   # INVALID_ARGUMENT for a bad fence
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:
            after = fenced + timeout_after_fence_ns
            deadline = after if deadline is None or deadline == NO_DEADLINE else min(deadline, after)
        _, timing = self._run(request, measure, deadline, launched)
        if measure == MeasureTiming.YES:
            return -1, _Finished(ErrorStatus.NONE, timing, Timing(timing.time_on_device,
                                                                  _us(time.monotonic_ns() - fenced)))
        return -1, _Finished(ErrorStatus.NONE, Timing(), Timing())
