"""The reference driver's prepared model: request mapping, the interpreter run, output write-back."""
from __future__ import annotations

import contextvars
import threading
import time
from typing import Callable

import numpy as np

from ...hal import (ClientId, ErrorStatus, ExecutionPreference, IPreparedModel,
                    MeasureTiming, Model, NnError, OutputShape, Priority, Request, Timing)
from ...hal.constants import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS
from ...memory import MappedImage, MappedPool, map_pool
from ...ops import numpy_dtype
from ...memory.domains import RequestBuffers, current_client
from ...qos import DurationStats, Scheduler, Ticket, normalize_deadline
from ...validation import validate_request
from ...qos.fences import FencedCallback, wait_fences
from . import buffers
from .interpreter import ModelExecutor, SubgraphPlan


def _us(ns: int) -> int:
    return ns // 1000


def client_uid(client: ClientId | int | None) -> int:
    """The app a call is for: the `client` keyword, else the calling client (a service sets it with
    `memory.domains.calling_client`), else this process's uid."""
    if client is None:
        return current_client()[0]
    return int(client.uid if isinstance(client, ClientId) else client)


_shared_lock = threading.Lock()
_shared: Scheduler | None = None


def shared_scheduler() -> Scheduler:
    """The scheduler of prepared models made without a device (tests, tools)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Scheduler()
        return _shared


def _refuse_if_passed(deadline: int | None, what: str) -> None:
    now = time.monotonic_ns()
    if deadline is not None and now >= deadline:
        raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                      f"{what}: the deadline had passed {(now - deadline) / 1e6:.3f} ms before the call")


def _length(pool: MappedPool, length: int) -> int:
    """A region's length; a non-BLOB hardware buffer is used whole (length 0 = its packed content)."""
    return pool.size if length == 0 and isinstance(pool, MappedImage) else length


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
        device_buffers = buffers.resolve(request, self)  # tokens, roles, initialized (memory domains)
        try:
            return self._run_mapped(request, deadline, loop_timeout_ns, device_buffers)
        except BaseException:
            device_buffers.fail_outputs()  # a failed execution leaves its buffer outputs uninitialized
            raise

    def _run_mapped(self, request: Request, deadline: int | None, loop_timeout_ns: int | None,
                    device_buffers: RequestBuffers) -> list[OutputShape]:
        if deadline is not None and time.monotonic_ns() > deadline:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline had passed when the execution started")
        # Shared memory is mapped (GENERAL_FAILURE for a handle this driver cannot map, M5); token
        # pools are driver-managed buffers.
        pools: list[MappedPool | None] = [None if p.token is not None else map_pool(p) for p in request.pools]
        main = self.model.main
        values: dict[int, np.ndarray | None] = {}
        for k, (arg, index) in enumerate(zip(request.inputs, main.input_indexes)):
            operand = main.operands[index]
            if arg.has_no_value:
                values[index] = None
                continue
            dims = () if operand.type.is_scalar else (arg.dimensions or operand.dimensions)
            loc = arg.location
            dtype = numpy_dtype(operand.type)
            if k in device_buffers.inputs:
                values[index] = device_buffers.input_value(k, dtype, tuple(dims) or None)
                continue
            pool = pools[loc.pool_index]
            length = _length(pool, loc.length)
            need = operand.byte_size(tuple(dims))
            if length != need:
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request input {k}: length {length} does not match {need} bytes of shape {dims}")
            values[index] = pool.array(loc.offset, need, dtype, tuple(dims))
        loop_timeout = LOOP_TIMEOUT_DEFAULT_NS if loop_timeout_ns is None else min(loop_timeout_ns,
                                                                                    LOOP_TIMEOUT_MAXIMUM_NS)
        self._plan()
        self.main.run(values, deadline, ModelExecutor(self.referenced, deadline, loop_timeout))
        shapes = []
        for k, (arg, index) in enumerate(zip(request.outputs, main.output_indexes)):
            v = values[index]
            if k in device_buffers.outputs:
                device_buffers.check_output(k, v.shape)  # GENERAL_FAILURE when it does not fit
                shapes.append(OutputShape(tuple(v.shape), True))
            else:
                shapes.append(OutputShape(tuple(v.shape), v.nbytes <= _length(pools[arg.location.pool_index],
                                                                              arg.location.length)))
        if not all(s.is_sufficient for s in shapes):
            bad = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            raise NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
                          f"output buffers too small for outputs {bad}", output_shapes=shapes)
        for k, (arg, index) in enumerate(zip(request.outputs, main.output_indexes)):
            if k in device_buffers.outputs:
                continue
            pool = pools[arg.location.pool_index]
            if not pool.writable:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request output {k}: pool is read-only")
            pool.write(arg.location.offset, values[index])
        device_buffers.store_outputs({k: values[index] for k, index in enumerate(main.output_indexes)
                                      if k in device_buffers.outputs})
        return shapes

    # --- quality of service ---------------------------------------------------------------------
    #: Set by the device at preparation (`bind_qos`); a model made without one uses `shared_scheduler()`.
    scheduler: Scheduler | None = None
    client_uid: int | None = None
    stats: DurationStats | None = None

    def bind_qos(self, scheduler: Scheduler, client_uid: int, stats: DurationStats) -> None:
        """Run this model's executions on `scheduler`, for app `client_uid` unless a call names
        another, with `stats` (the cost-model estimate, then past runs) predicting their duration."""
        self.scheduler, self.client_uid, self.stats = scheduler, client_uid, stats

    def _submit(self, deadline: int | None, client: ClientId | int | None, label: str) -> Ticket:
        """Admission (Q6/Q7): refuses at once with MISSED_DEADLINE_* or RESOURCE_EXHAUSTED_TRANSIENT."""
        if self.stats is None:
            self.stats = DurationStats()
        uid = client_uid(client) if client is not None or self.client_uid is None else self.client_uid
        return (self.scheduler or shared_scheduler()).submit(
            client=uid, priority=self.priority, deadline=deadline, stats=self.stats, label=label)

    def _run_ticket(self, ticket: Ticket, request: Request, measure: MeasureTiming, start: int,
                    allow_unspecified_output: bool = True, loop_timeout_ns: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
        """Run admitted work; the ticket's checkpoints (between operations) carry the deadline."""
        shapes = ticket.run(lambda: self._run(request, None, allow_unspecified_output, loop_timeout_ns))
        if measure == MeasureTiming.YES:  # on the device: running time; in the driver: from the call
            return shapes, Timing(_us(ticket.run_ns), _us(time.monotonic_ns() - start))
        return shapes, Timing()

    def _timed(self, request: Request, measure: MeasureTiming, deadline: int | None,
               allow_unspecified_output: bool = True, loop_timeout_ns: int | None = None, *,
               client: ClientId | None = None, start: int | None = None, label: str = "execution"
               ) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns() if start is None else start
        ticket = self._submit(normalize_deadline(deadline), client, label)
        return self._run_ticket(ticket, request, measure, start, allow_unspecified_output, loop_timeout_ns)

    # --- IPreparedModel -----------------------------------------------------------------------
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns, *, client=None):
        start = time.monotonic_ns()
        validate_request(request, self.model)  # an invalid request is INVALID_ARGUMENT, whatever the deadline
        return self._timed(request, measure, deadline, loop_timeout_ns=loop_timeout_ns, client=client,
                           start=start)

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, *, client=None):
        start = time.monotonic_ns()
        validate_request(request, self.model)
        try:  # admission: a refusal (even a deadline already passed) goes through the callback (4.2)
            ticket = self._submit(normalize_deadline(deadline), client, "execution")
        except NnError as e:
            callback(e.status, [], Timing())
            return

        def work() -> None:
            try:
                shapes, timing = self._run_ticket(ticket, request, measure, start, loop_timeout_ns=loop_timeout_ns)
                callback(ErrorStatus.NONE, shapes, timing)
            except NnError as e:
                callback(e.status, e.output_shapes or [], Timing())
            except Exception:  # never lose a callback
                callback(ErrorStatus.GENERAL_FAILURE, [], Timing())

        context = contextvars.copy_context()  # the caller's identity (memory-domain tokens) goes along
        try:
            threading.Thread(target=context.run, args=(work,), daemon=True, name="nnapi-reference-exec").start()
        except BaseException:
            ticket.cancel()
            raise

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns, *,
                       client=None):
        validate_request(request, self.model, allow_unspecified_output=False)
        for k, index in enumerate(self.model.main.output_indexes):
            operand = self.model.main.operands[index]
            dims = request.outputs[k].dimensions or operand.dimensions
            if not operand.type.is_scalar and (not dims or 0 in dims):
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request output {k}: fenced execution needs fully specified, non-empty outputs")
        launched = time.monotonic_ns()
        deadline = normalize_deadline(deadline)
        _refuse_if_passed(deadline, "fenced execution")
        wait_fences(wait_for, deadline)
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:  # aborted at whichever comes first (4.3)
            after = fenced + timeout_after_fence_ns
            deadline = after if deadline is None else min(deadline, after)
        self._timed(request, MeasureTiming.NO, deadline, False, loop_timeout_ns, client=client,
                    label="fenced execution")
        end = time.monotonic_ns()
        if measure == MeasureTiming.YES:
            return -1, FencedCallback(ErrorStatus.NONE, Timing(_us(end - fenced), _us(end - launched)),
                                       Timing(_us(end - fenced), _us(end - fenced)))
        return -1, FencedCallback(ErrorStatus.NONE, Timing(), Timing())
