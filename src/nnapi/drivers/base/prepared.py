"""The prepared-model half of the driver base: the three execute calls and bursts around a driver's `run`.

A driver subclasses `DriverPreparedModel` and writes `run(binding) -> outputs`; the base does the
rest the same way for every driver: request validation, admission through the device's `qos`
scheduler (deadline refusal, per-app queues, priorities), the run on a scheduler slot with
checkpoints, timing, OUTPUT_INSUFFICIENT_SIZE, writing outputs back, memory-domain buffers,
asynchronous execution on a thread that keeps the caller's context (its identity), fenced
execution after sync fences, and bursts that keep request pools mapped by their slot token.
"""
from __future__ import annotations

import contextvars
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from ... import tracing as trace
from ...hal import (ClientId, ErrorStatus, ExecutionPreference, IBurst, IExecution, IPreparedModel, MeasureTiming,
                    Model, NnError, OutputShape, Priority, Request, Timing, check_burst_tokens)
from ...memory import MappedPool, map_pool, map_pool_kept
from ...memory.domains import NO_BUFFERS, DriverDomain, current_client
from ...qos import DurationStats, Scheduler, Ticket, normalize_deadline, threads
from ...qos.fences import FencedCallback, wait_fences
from ...validation import RequestChecker
from .binding import Binding, ModelIo

if TYPE_CHECKING:
    from .device import DriverDevice


def client_uid(client: ClientId | int | None) -> int:
    """The app a call is for: the `client` keyword, else the calling client (a service sets it with
    `memory.domains.calling_client`), else this process's uid."""
    if client is None:
        return current_client()[0]
    return int(client.uid if isinstance(client, ClientId) else client)


#: What an execution reports when it was not asked to measure (frozen: one for all).
_NO_TIMING = Timing()


def _us(ns: int) -> int:
    return max(0, ns) // 1000


_shared_lock = threading.Lock()
_shared: Scheduler | None = None


def shared_scheduler() -> Scheduler:
    """The scheduler of prepared models made without a device (tests, tools)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Scheduler()
        return _shared


class DriverPreparedModel(IPreparedModel):
    """A model prepared by a driver on the base. Subclasses write `run`; see the module doc."""

    #: Output shapes known before running (a compiled program): lets the base answer
    #: OUTPUT_INSUFFICIENT_SIZE without running. None: known only from `run`'s results.
    static_output_shapes: list[tuple[int, ...]] | None = None
    #: Where a preparation from outside the app's cache came from ("fleet: signed by ..."), or why the
    #: fleet was not used ("fleet entry refused: ..."): the runtime reports it in `cache_outcomes`.
    cache_source: str | None = None

    def __init__(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                 priority: Priority = Priority.MEDIUM) -> None:
        self.model = model
        self.preference = ExecutionPreference(preference)
        self.priority = Priority(priority)
        #: Set by the device at preparation (`bind`): where executions queue and for which app.
        self.scheduler: Scheduler | None = None
        self.client_uid: int | None = None
        self.stats: DurationStats | None = None
        self.domain: DriverDomain | None = None
        self.memory_limit_bytes: int | None = None
        self.device_name = type(self).__name__
        self._model_facts: tuple[RequestChecker, ModelIo] | None = None

    # --- what a driver fills in ----------------------------------------------------------------------
    def run(self, binding: Binding) -> Sequence[object]:
        """Compute one execution: one value per model output (numpy arrays, or device arrays for
        memory-domain outputs), or the `binding.output_view` arrays written in place."""
        raise NotImplementedError

    def estimate_run_ns(self) -> int:
        """A lower bound of one execution's running time before any has run (admission, Q6)."""
        return 0

    # --- set by the device ---------------------------------------------------------------------------
    def bind(self, device: "DriverDevice", uid: int) -> None:
        """Run executions on `device`'s scheduler for app `uid` (unless a call names another), check
        memory-domain tokens in its domain, predict durations from the cost model, then past runs."""
        self.scheduler, self.client_uid = device.scheduler, uid
        self.device_name = device.NAME
        self.domain = device.domain
        self.memory_limit_bytes = device.tensor_limit_bytes()
        self.stats = DurationStats(device.estimate_run_ns(self))

    # --- one run -------------------------------------------------------------------------------------
    def validate(self, request: Request, *, allow_unspecified_output: bool = True) -> None:
        """INVALID_ARGUMENT naming the argument or pool at fault (`validation.RequestChecker`)."""
        self._facts()[0](request, allow_unspecified_output=allow_unspecified_output)

    def _facts(self) -> tuple[RequestChecker, ModelIo]:
        """What checking and binding this model's requests needs, worked out once per model."""
        facts = self._model_facts
        if facts is None or facts[1].model is not self.model:
            facts = self._model_facts = (RequestChecker(self.model), ModelIo(self.model))
        return facts

    def _uid(self, client: ClientId | int | None) -> int:
        if client is not None or self.client_uid is None:
            return client_uid(client)
        return self.client_uid

    def _submit(self, deadline: int | None, client: ClientId | int | None, label: str) -> Ticket:
        """Admission (Q6/Q7): refuses at once with MISSED_DEADLINE_* or RESOURCE_EXHAUSTED_TRANSIENT."""
        if self.stats is None:
            self.stats = DurationStats(self.estimate_run_ns())
        return (self.scheduler or shared_scheduler()).submit(
            client=self._uid(client), priority=self.priority, deadline=deadline, stats=self.stats, label=label)

    def _compute(self, request: Request, deadline: int | None, loop_timeout_ns: int | None,
                 pools: list[MappedPool | None] | None = None, reuse: "DriverExecution | None" = None
                 ) -> list[OutputShape]:
        """Map the request, run the driver's `run` and write the outputs back (on a scheduler slot); for a
        reusable execution (`reuse`), its binding of the last computation again."""
        if reuse is not None and reuse.token_free:
            buffers = NO_BUFFERS  # (a reusable execution's request names no driver-managed memory)
        else:
            buffers = (self.domain or _orphan_domain(self)).resolve(request, self)  # tokens, roles, initialized
        try:
            if pools is None:  # (an app's memory that comes again is mapped once: `map_pool_kept`)
                pools = [None if p.token is not None else map_pool_kept(p) for p in request.pools]
            if reuse is not None and reuse.binding is not None:
                binding = reuse.binding.again(buffers, deadline)
            else:
                binding = Binding(self.model, request, pools, buffers, deadline, loop_timeout_ns,
                                  self.memory_limit_bytes, self._facts()[1])
                if reuse is not None:
                    reuse.binding = binding.again(buffers, deadline)
            if self.static_output_shapes is not None:
                binding.check_static_outputs(self.static_output_shapes)
            try:
                values = self.run(binding)
            except (NnError, MemoryError):
                raise
            except Exception as e:  # a driver bug or an input the checks missed: never crash the caller
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"{type(self).__name__}: execution failed: {type(e).__name__}: {e}") from e
            return binding.finish(values)
        except MemoryError:
            buffers.fail_outputs()
            raise NnError(ErrorStatus.GENERAL_FAILURE, "execution ran out of memory") from None
        except BaseException:
            buffers.fail_outputs()  # a failed execution leaves its buffer outputs uninitialized
            raise

    def _timed(self, request: Request, measure: MeasureTiming, deadline: int | None,
               loop_timeout_ns: int | None, client: ClientId | int | None, start: int, label: str,
               pools: list[MappedPool | None] | None = None, reuse: "DriverExecution | None" = None
               ) -> tuple[list[OutputShape], Timing]:
        ticket = self._submit(normalize_deadline(deadline), client, label)
        return self._run_ticket(ticket, request, measure, loop_timeout_ns, start, pools, reuse)

    def _run_ticket(self, ticket: Ticket, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None,
                    start: int, pools: list[MappedPool | None] | None = None,
                    reuse: "DriverExecution | None" = None) -> tuple[list[OutputShape], Timing]:
        """Run admitted work; the ticket's checkpoints carry the deadline and preemption."""
        if trace.active():
            with trace.span(ticket.label, "driver", device=self.device_name, app=ticket.uid,
                            priority=self.priority.name) as args:
                shapes = ticket.run(self._compute, request, ticket.deadline, loop_timeout_ns, pools, reuse)
                args.update(run_us=ticket.run_ns // 1000, waited_us=ticket.wait_ns // 1000,
                            preemptions=ticket.preemptions)
        else:
            shapes = ticket.run(self._compute, request, ticket.deadline, loop_timeout_ns, pools, reuse)
        if measure == MeasureTiming.YES:  # on the device: running time; in the driver: from the call
            return shapes, Timing(_us(ticket.run_ns), _us(time.monotonic_ns() - start))
        return shapes, _NO_TIMING

    # --- IPreparedModel --------------------------------------------------------------------------------
    def execute_synchronously(self, request: Request, measure: MeasureTiming, deadline: int | None,
                              loop_timeout_ns: int | None, *, client: ClientId | None = None
                              ) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        self.validate(request)  # an invalid request is INVALID_ARGUMENT, whatever the deadline
        return self._timed(request, measure, deadline, loop_timeout_ns, client, start, "execution")

    def execute(self, request: Request, measure: MeasureTiming, deadline: int | None, loop_timeout_ns: int | None,
                callback: Callable[[ErrorStatus, list[OutputShape], Timing], None], *,
                client: ClientId | None = None) -> None:
        start = time.monotonic_ns()
        self.validate(request)  # launch errors are raised: an invalid request,
        if any(p.token is not None for p in request.pools):  # a foreign token or a wrong role
            try:
                (self.domain or _orphan_domain(self)).resolve(request, self)
            except NnError as e:
                if e.status == ErrorStatus.INVALID_ARGUMENT:
                    raise
        try:  # admission: a refusal (even a deadline already passed) goes through the callback (4.2)
            ticket = self._submit(normalize_deadline(deadline), client, "execution")
        except NnError as e:
            callback(e.status, [], Timing())
            return

        def work() -> None:
            try:
                shapes, timing = self._run_ticket(ticket, request, measure, loop_timeout_ns, start)
                callback(ErrorStatus.NONE, shapes, timing)
            except NnError as e:
                callback(e.status, e.output_shapes or [], Timing())
            except Exception:  # never lose a callback
                callback(ErrorStatus.GENERAL_FAILURE, [], Timing())

        context = contextvars.copy_context()  # the caller's identity (memory-domain tokens) goes along
        try:
            # (the process waits for it at exit instead of stopping it inside native code: `qos.threads`)
            threads.submit(context.run, work, name=f"nnapi-{type(self).__name__}-exec")
        except BaseException:
            ticket.cancel()
            raise

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: MeasureTiming,
                       deadline: int | None, loop_timeout_ns: int | None, timeout_after_fence_ns: int | None, *,
                       client: ClientId | None = None) -> tuple[int, FencedCallback]:
        self.validate(request, allow_unspecified_output=False)
        for k, index in enumerate(self.model.main.output_indexes):
            operand = self.model.main.operands[index]
            dims = request.outputs[k].dimensions or operand.dimensions
            if not operand.type.is_scalar and (not dims or 0 in dims):
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request output {k}: fenced execution needs fully specified, non-empty outputs")
        launched = time.monotonic_ns()
        deadline = normalize_deadline(deadline)
        if deadline is not None and launched >= deadline:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                          f"fenced execution: the deadline had passed {(launched - deadline) / 1e6:.3f} ms "
                          "before the call")
        wait_fences(wait_for, deadline)
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:  # aborted at whichever comes first (4.3)
            after = fenced + int(timeout_after_fence_ns)
            deadline = after if deadline is None else min(deadline, after)
        self._timed(request, MeasureTiming.NO, deadline, loop_timeout_ns, client, fenced, "fenced execution")
        end = time.monotonic_ns()
        if measure == MeasureTiming.YES:
            return -1, FencedCallback(ErrorStatus.NONE, Timing(_us(end - fenced), _us(end - launched)),
                                       Timing(_us(end - fenced), _us(end - fenced)))
        return -1, FencedCallback(ErrorStatus.NONE, Timing(), Timing())

    def configure_execution_burst(self) -> "DriverBurst":
        return DriverBurst(self)

    def create_reusable_execution(self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None,
                                  *, client: ClientId | None = None) -> "DriverExecution":
        return DriverExecution(self, request, measure, loop_timeout_ns, client)


class DriverBurst(IBurst):
    """A burst of one prepared model: request pools named by a memory identifier token stay mapped
    under it until released (no mapping per execution)."""

    def __init__(self, prepared: DriverPreparedModel) -> None:
        self.prepared = prepared
        self._mapped: dict[int, MappedPool] = {}
        self._lock = threading.Lock()

    def _pools(self, request: Request, tokens: Sequence[int]) -> list[MappedPool | None]:
        pools: list[MappedPool | None] = []
        for pool, token in zip(request.pools, tokens):
            if pool.token is not None:
                pools.append(None)
                continue
            if token < 0:
                pools.append(map_pool(pool))
                continue
            with self._lock:
                mapped = self._mapped.get(token)
            if mapped is None or mapped.size != pool.size:
                mapped = map_pool(pool)
                with self._lock:
                    self._mapped[token] = mapped
            pools.append(mapped)
        return pools

    def execute_synchronously(self, request: Request, memory_identifier_tokens: Sequence[int],
                              measure: MeasureTiming, deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        check_burst_tokens(request, memory_identifier_tokens)
        prepared = self.prepared
        prepared.validate(request)
        pools = self._pools(request, memory_identifier_tokens)
        return prepared._timed(request, measure, deadline, loop_timeout_ns, client, start, "burst execution", pools)

    def release_memory_resource(self, token: int) -> None:
        with self._lock:
            self._mapped.pop(token, None)


class DriverExecution(IExecution):
    """A reusable execution of one prepared model: its request is checked and its memory mapped once, at
    creation (INVALID_ARGUMENT then), and bound at its first computation; each later one only resolves
    its memory-domain buffers (their state may have changed), is admitted and runs, on the same binding
    (the same input arrays: views of the request's memory, read as it is then). One computation at a
    time."""

    def __init__(self, prepared: DriverPreparedModel, request: Request, measure: MeasureTiming,
                 loop_timeout_ns: int | None, client: ClientId | None = None) -> None:
        prepared.validate(request)
        self.prepared, self.request, self.measure = prepared, request, MeasureTiming(measure)
        self.loop_timeout_ns, self.client = loop_timeout_ns, client
        self._pools = [None if p.token is not None else map_pool_kept(p) for p in request.pools]
        #: Its request names no driver-managed memory: no buffers to resolve at each computation.
        self.token_free = all(p.token is None for p in request.pools)
        #: The binding of the last computation (None before the first).
        self.binding: Binding | None = None

    def compute(self, deadline: int | None = None) -> tuple[list[OutputShape], Timing]:
        return self.prepared._timed(self.request, self.measure, deadline, self.loop_timeout_ns, self.client,
                                    time.monotonic_ns(), "reusable execution", self._pools, self)


_orphans: dict[type, DriverDomain] = {}


def _orphan_domain(prepared: DriverPreparedModel) -> DriverDomain:
    """The memory domain of a prepared model made without a device (it has no buffers of its own)."""
    cls = type(prepared)
    if cls not in _orphans:
        _orphans[cls] = DriverDomain(lambda: cls)
    return _orphans[cls]
