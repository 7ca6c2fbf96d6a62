"""The reference driver's prepared model: request mapping, the interpreter run, output write-back."""
from __future__ import annotations

import os
import select
import threading
import time
from typing import Callable, Sequence

import numpy as np

from ...hal import (ErrorStatus, ExecutionPreference, IFencedExecutionCallback, IPreparedModel,
                    MeasureTiming, Model, NnError, OutputShape, Priority, Request, Timing)
from ...hal.constants import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, NO_DEADLINE
from ...memory import MappedPool, map_pool
from ...ops import numpy_dtype
from ...validation import validate_request
from .interpreter import ModelExecutor, SubgraphPlan


def _deadline(deadline: int | None) -> int | None:
    return None if deadline is None or deadline >= NO_DEADLINE else deadline


def _us(ns: int) -> int:
    return ns // 1000


class _FencedCallback(IFencedExecutionCallback):
    def __init__(self, status: ErrorStatus, launched: Timing, fenced: Timing) -> None:
        self._info = (status, launched, fenced)

    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        return self._info


def wait_fences(fences: Sequence[int], deadline: int | None) -> None:
    """Block until every sync fence fd is readable (signalled); INVALID_ARGUMENT for a bad fd."""
    for fd in fences:
        if not isinstance(fd, int) or fd < 0:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"wait_for holds an invalid sync fence {fd!r}")
        timeout = None if deadline is None else max(0.0, (deadline - time.monotonic_ns()) / 1e9)
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except (OSError, ValueError) as e:
            raise NnError(ErrorStatus.INVALID_ARGUMENT, f"sync fence {fd} cannot be waited on: {e}") from None
        if not ready:
            raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "deadline passed while waiting for fences")


class ReferencePreparedModel(IPreparedModel):
    """A validated model with its constants mapped and its main subgraph planned."""

    def __init__(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                 priority: Priority = Priority.MEDIUM, *, lazy: bool = False,
                 on_planned: Callable[["ReferencePreparedModel"], None] | None = None) -> None:
        self.model = model
        self.preference = preference
        self.priority = priority
        self._plan_lock = threading.Lock()
        self._on_planned = on_planned
        self._planned = False
        if not lazy:
            self._plan()

    def _plan(self) -> None:
        """Map the constants and plan every subgraph (at preparation, or at the first run in JIT mode)."""
        with self._plan_lock:
            if self._planned:
                return
            self._pools: list[MappedPool] = [map_pool(p) for p in self.model.pools]
            self.main = SubgraphPlan(self.model, self.model.main, self._pools)
            self.referenced = [SubgraphPlan(self.model, sub, self._pools) for sub in self.model.referenced]
            self._planned = True
        if self._on_planned is not None:
            callback, self._on_planned = self._on_planned, None
            callback(self)

    @property
    def planned(self) -> bool:
        return self._planned

    # --- one run ----------------------------------------------------------------------------
    def _run(self, request: Request, deadline: int | None, allow_unspecified_output: bool = True,
             loop_timeout_ns: int | None = None) -> list[OutputShape]:
        validate_request(request, self.model, allow_unspecified_output=allow_unspecified_output)
        if deadline is not None and time.monotonic_ns() > deadline:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline had passed when the execution started")
        pools = [map_pool(p) for p in request.pools]
        main = self.model.main
        values: dict[int, np.ndarray | None] = {}
        for k, (arg, index) in enumerate(zip(request.inputs, main.input_indexes)):
            operand = main.operands[index]
            if arg.has_no_value:
                values[index] = None
                continue
            dims = () if operand.type.is_scalar else (arg.dimensions or operand.dimensions)
            loc = arg.location
            need = operand.byte_size(tuple(dims))
            if loc.length != need:
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request input {k}: length {loc.length} does not match {need} bytes of shape {dims}")
            values[index] = pools[loc.pool_index].array(loc.offset, need, numpy_dtype(operand.type), tuple(dims))
        loop_timeout = LOOP_TIMEOUT_DEFAULT_NS if loop_timeout_ns is None else min(loop_timeout_ns,
                                                                                    LOOP_TIMEOUT_MAXIMUM_NS)
        self._plan()
        self.main.run(values, deadline, ModelExecutor(self.referenced, deadline, loop_timeout))
        shapes = []
        for arg, index in zip(request.outputs, main.output_indexes):
            v = values[index]
            shapes.append(OutputShape(tuple(v.shape), v.nbytes <= arg.location.length))
        if not all(s.is_sufficient for s in shapes):
            bad = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            raise NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
                          f"output buffers too small for outputs {bad}", output_shapes=shapes)
        for k, (arg, index) in enumerate(zip(request.outputs, main.output_indexes)):
            v = values[index]
            pool = pools[arg.location.pool_index]
            if not pool.writable:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request output {k}: pool is read-only")
            dst = pool.array(arg.location.offset, v.nbytes, v.dtype, v.shape)
            np.copyto(dst, v)
        return shapes

    def _timed(self, request: Request, measure: MeasureTiming, deadline: int | None,
               allow_unspecified_output: bool = True, loop_timeout_ns: int | None = None
               ) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        shapes = self._run(request, _deadline(deadline), allow_unspecified_output, loop_timeout_ns)
        if measure == MeasureTiming.YES:
            us = _us(time.monotonic_ns() - start)
            return shapes, Timing(us, us)
        return shapes, Timing()

    # --- IPreparedModel -----------------------------------------------------------------------
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        return self._timed(request, measure, deadline, loop_timeout_ns=loop_timeout_ns)

    def execute(self, request, measure, deadline, loop_timeout_ns, callback):
        validate_request(request, self.model)

        def work() -> None:
            try:
                shapes, timing = self._timed(request, measure, deadline, loop_timeout_ns=loop_timeout_ns)
                callback(ErrorStatus.NONE, shapes, timing)
            except NnError as e:
                callback(e.status, e.output_shapes or [], Timing())
            except Exception as e:  # never lose a callback
                callback(ErrorStatus.GENERAL_FAILURE, [], Timing())

        threading.Thread(target=work, daemon=True, name="nnapi-reference-exec").start()

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns):
        validate_request(request, self.model, allow_unspecified_output=False)
        for k, index in enumerate(self.model.main.output_indexes):
            operand = self.model.main.operands[index]
            dims = request.outputs[k].dimensions or operand.dimensions
            if not operand.type.is_scalar and (not dims or 0 in dims):
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request output {k}: fenced execution needs fully specified, non-empty outputs")
        launched = time.monotonic_ns()
        deadline = _deadline(deadline)
        wait_fences(wait_for, deadline)
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:
            after = fenced + timeout_after_fence_ns
            deadline = after if deadline is None else min(deadline, after)
        self._timed(request, MeasureTiming.NO, deadline, False, loop_timeout_ns)
        end = time.monotonic_ns()
        if measure == MeasureTiming.YES:
            return -1, _FencedCallback(ErrorStatus.NONE, Timing(_us(end - fenced), _us(end - launched)),
                                       Timing(_us(end - fenced), _us(end - fenced)))
        return -1, _FencedCallback(ErrorStatus.NONE, Timing(), Timing())
