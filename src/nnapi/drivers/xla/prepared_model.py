"""The XLA driver's prepared model: a partition compiled as one executable (or, for long partitions,
a few sub-model executables run in order), run from memory pools.

Inputs are read in place from the request's pools (`jax.device_put` aliases 64-byte aligned host
memory on the CPU backend instead of copying it; smaller or unaligned inputs go through the
executable's C++ argument path), constants live on the device from preparation on, and each
output is copied once, from the executable's result buffer straight into its pool region.
Memory-domain buffers (`memory.domains`) hold the device arrays themselves: an output written to
one is read by the next execution with no host copy in between.

Multi-stage compilation (C11): the executable first compiled is the quick one (low XLA
optimisation). After `optimize_after` executions the optimised one is compiled and warmed up on a
background thread and swapped in between two executions; the cache, when the model was prepared with one, is
then rewritten under the exclusive lock through duplicated cache handles.

Quality of service: executions run through the device's `qos.Scheduler` (per-app queues,
priorities, deadlines); between sub-models the run reaches a `qos.checkpoint`, where the scheduler
may preempt it for higher-priority work or abort it at its deadline (Q3, Q6).

WHILE loops: a sub-model with loops runs with an iteration budget (`control_flow`); when a loop
runs out of it, the sub-model runs again with a larger one, until the loops finish or the
execution's loop timeout has passed (MISSED_DEADLINE_TRANSIENT). The budget that sufficed is kept
for the next execution, so steady-state executions run once.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

import numpy as np

import jax

from ...hal import (CacheHandles, ErrorStatus, ExecutionPreference, IPreparedModel, MeasureTiming, Model,
                    NnError, OutputShape, Priority, Request, Timing)
from ...hal.constants import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, NO_DEADLINE
from ...memory import MappedImage, map_pool
from ...memory.domains import current_client
from ...qos import DurationStats, Scheduler, checkpoint
from ...validation import validate_request
from ...qos.fences import FencedCallback, wait_fences
from . import buffers, program as prog

#: Inputs at least this large and 64-byte aligned are aliased rather than copied.
ALIAS_MIN_BYTES = 1 << 16
#: Iterations each WHILE loop may run in the first run of a sub-model; at most int32's largest.
FIRST_LOOP_BUDGET, MAX_LOOP_BUDGET = 1 << 10, (1 << 31) - 1
#: A budget that ran out grows by at most this factor per run.
LOOP_BUDGET_GROWTH = 4.0


_shared_lock = threading.Lock()
_shared: Scheduler | None = None


def _shared_scheduler() -> Scheduler:
    """The scheduler of prepared models made without a device (tools, tests)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Scheduler()
        return _shared


def _uid(client, default: int | None) -> int:
    """The app a call is for: the `client` keyword, else the model's client, else the calling client."""
    if client is not None:
        return int(getattr(client, "uid", client))
    return default if default is not None else current_client()[0]


def _length(pool, length: int) -> int:
    """A region's length; a non-BLOB hardware buffer is used whole (length 0 = its packed content)."""
    return pool.size if length == 0 and isinstance(pool, MappedImage) else length


def _deadline(deadline: int | None) -> int | None:
    return None if deadline is None or deadline >= NO_DEADLINE else deadline


class XlaPreparedModel(IPreparedModel):
    """A compiled partition. `model` is the relocated model (constants in pool 0, read in place);
    requests are validated against its main graph's declared operands; `signature` gives the
    compiled (inferred) shapes of the inputs and outputs."""

    def __init__(self, model: Model, sig: prog.Signature, segments: list, stage: str,
                 preference: ExecutionPreference, priority: Priority, *, optimize_after: int | None,
                 on_optimized: Callable[["XlaPreparedModel"], None] | None = None,
                 scheduler: Scheduler | None = None, client_uid: int | None = None,
                 constants: dict | None = None) -> None:
        self.model = model
        self.signature = sig
        self.preference = preference
        self.priority = priority
        self.stage = stage
        #: [(sub-model signature, compiled executable)], run in order.
        self._segments = list(segments)
        self.scheduler = scheduler
        self.client_uid = client_uid
        self.stats = DurationStats()
        self._on_optimized = on_optimized
        self._optimize_after = optimize_after if stage == "quick" else None
        self._runs = 0
        #: Per sub-model, the loop budget that last sufficed (the next execution starts there).
        self._loop_budgets: dict[int, int] = {}
        self._lock = threading.Lock()
        self._optimizer: threading.Thread | None = None
        self.optimize_error: str | None = None
        if constants is None:
            constants = prog.device_constants(model.pools[0].pointer if model.pools else None,
                                              [seg for seg, _ in self._segments])
        self._constants = constants

    # --- multi-stage compilation ----------------------------------------------------------------------
    def _count_run(self) -> None:
        with self._lock:
            self._runs += 1
            start = (self._optimize_after is not None and self._runs >= self._optimize_after
                     and self._optimizer is None)
            if start:
                self._optimizer = threading.Thread(target=self._optimize, daemon=True, name="nnapi-xla-optimize")
        if start:
            self._optimizer.start()

    def _optimize(self) -> None:
        try:
            dims, lowered = prog.analyze_supported(self.model)
            parts = prog.split(self.model, dims, lowered, self.signature, len(self._segments))
            segments = prog.compile_segments(self.model, parts, optimized=True)
            self._warm_up(segments)
            with self._lock:
                self._segments = segments
                self.stage = "optimized"
            if self._on_optimized is not None:
                callback, self._on_optimized = self._on_optimized, None
                callback(self)
        except Exception as e:  # the quick executable keeps serving
            self.optimize_error = f"{type(e).__name__}: {e}"

    def _warm_up(self, segments: list) -> None:
        """Run each new executable once on zeros (loops: one iteration) before it serves requests:
        XLA's kernel library sets up its kernels and packs the weights on first use (tens of
        milliseconds), which the background thread pays instead of the execution after the swap."""
        for seg, exe in segments:
            args = [*(np.zeros(s.shape(), s.dtype) for s in seg.inputs),
                    *(self._constants[s.index] for s in seg.constants)]
            try:
                jax.block_until_ready(exe(*args, np.int32(1)) if seg.loops else exe(*args))
            except Exception:  # zeros may be bad data for this model: warming is only an optimisation
                pass

    def optimize_now(self) -> None:
        """Start the optimised compile at once (if it has not started) and wait for it."""
        with self._lock:
            if self._optimizer is None and self.stage == "quick":
                self._optimizer = threading.Thread(target=self._optimize, daemon=True,
                                                   name="nnapi-xla-optimize")
                self._optimizer.start()
            thread = self._optimizer
        if thread is not None:
            thread.join()

    def wait_optimized(self, timeout: float | None = None) -> bool:
        thread = self._optimizer
        if thread is not None:
            thread.join(timeout)
        return self.stage == "optimized"

    @property
    def segments(self) -> list:
        """[(sub-model signature, executable)] in execution order."""
        return list(self._segments)

    # --- one run ------------------------------------------------------------------------------------
    def _run(self, request: Request, deadline: int | None, allow_unspecified_output: bool = True,
             loop_timeout_ns: int | None = None) -> list[OutputShape]:
        validate_request(request, self.model, allow_unspecified_output=allow_unspecified_output)
        device_buffers = buffers.resolve(request, self)  # tokens, roles, initialized (memory domains)
        try:
            return self._run_mapped(request, deadline, device_buffers, loop_timeout_ns)
        except BaseException:
            device_buffers.fail_outputs()  # a failed execution leaves its buffer outputs uninitialized
            raise

    def _run_mapped(self, request: Request, deadline: int | None, device_buffers,
                    loop_timeout_ns: int | None = None) -> list[OutputShape]:
        if deadline is not None and time.monotonic_ns() > deadline:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline had passed when the execution started")
        sig = self.signature
        pools = [None if p.token is not None else map_pool(p) for p in request.pools]
        shapes = []
        for k, (s, arg) in enumerate(zip(sig.outputs, request.outputs)):
            if k in device_buffers.outputs:
                device_buffers.check_output(k, s.shape())  # GENERAL_FAILURE when it does not fit
                shapes.append(OutputShape(s.shape(), True))
            else:
                shapes.append(OutputShape(s.shape(), s.nbytes <= _length(pools[arg.location.pool_index],
                                                                         arg.location.length)))
        if not all(s.is_sufficient for s in shapes):
            bad = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            raise NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"output buffers too small for outputs {bad}",
                          output_shapes=shapes)
        args = []
        for k, (arg, s) in enumerate(zip(request.inputs, sig.inputs)):
            if arg.has_no_value:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request input {k}: the xla driver needs a value")
            if arg.dimensions and tuple(arg.dimensions) != s.shape():
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request input {k}: dimensions {list(arg.dimensions)} differ from the "
                              f"compiled {list(s.shape())}")
            if k in device_buffers.inputs:  # a memory-domain buffer: its device array, else its bytes
                value = device_buffers.device_input(k, s.shape())
                args.append(value if value is not None else device_buffers.input_value(k, s.dtype, s.shape() or None))
                continue
            loc = arg.location
            pool = pools[loc.pool_index]
            if _length(pool, loc.length) != s.nbytes:
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request input {k}: length {loc.length} does not match {s.nbytes} bytes")
            x = pool.array(loc.offset, s.nbytes, s.dtype, s.shape())
            if x.nbytes >= ALIAS_MIN_BYTES and x.ctypes.data % prog.ALIGN == 0:
                x = jax.device_put(x)  # aliases the pool memory on the CPU backend
            args.append(x)
        values = {s.index: a for s, a in zip(sig.inputs, args)}
        segments = self._segments  # one consistent stage for the whole run
        for j, (seg, exe) in enumerate(segments):
            if j:
                checkpoint(f"sub-model {j} of {len(segments)}")  # preemption / deadline (QoS)
            seg_args = [*(values[s.index] for s in seg.inputs), *(self._constants[s.index] for s in seg.constants)]
            try:
                if seg.loops:
                    outs = self._run_with_budget(j, exe, seg_args, loop_timeout_ns)
                else:
                    outs = exe(*seg_args)
            except NnError:
                raise
            except Exception as e:  # never crash the caller on a runtime failure of XLA
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"xla execution failed: {type(e).__name__}: {e}") from e
            values.update(zip((s.index for s in seg.outputs), outs))
        results = [values[s.index] for s in sig.outputs]
        for k, (arg, result) in enumerate(zip(request.outputs, results)):
            if k in device_buffers.outputs:
                continue
            pool = pools[arg.location.pool_index]
            if not pool.writable:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request output {k}: pool is read-only")
            pool.write(arg.location.offset, np.asarray(result))  # the one copy: result buffer -> pool region
        # Memory-domain outputs stay device arrays: the next execution reads them without a host trip.
        device_buffers.store_outputs({k: jax.numpy.asarray(r) for k, r in enumerate(results)
                                      if k in device_buffers.outputs})
        self._count_run()
        return shapes

    def _run_with_budget(self, j: int, exe, args: list, loop_timeout_ns: int | None) -> list:
        """Run sub-model `j`, whose program has WHILE loops, until no loop runs out of its
        iteration budget; MISSED_DEADLINE_TRANSIENT once the loop timeout has passed."""
        timeout = LOOP_TIMEOUT_DEFAULT_NS if loop_timeout_ns is None else min(int(loop_timeout_ns),
                                                                               LOOP_TIMEOUT_MAXIMUM_NS)
        budget = self._loop_budgets.get(j, FIRST_LOOP_BUDGET)
        start = time.monotonic_ns()
        while True:
            run_start = time.monotonic_ns()
            *outs, ran_out = exe(*args, np.int32(budget))
            if not bool(ran_out):
                self._loop_budgets[j] = budget
                return outs
            now = time.monotonic_ns()
            if now - start >= timeout or budget >= MAX_LOOP_BUDGET:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              f"WHILE: loop ran longer than its timeout of {timeout / 1e9:g} s "
                              f"({budget} iterations)")
            checkpoint("WHILE loop")  # preemption / deadline (QoS) between runs
            # Grow the budget so the next run ends about when the timeout does, at most 4x.
            remaining, last = timeout - (now - start), max(now - run_start, 1)
            factor = min(LOOP_BUDGET_GROWTH, 1.0 + remaining / last)
            budget = min(MAX_LOOP_BUDGET, max(budget + 1, int(budget * factor)))

    def _timed(self, request: Request, measure: MeasureTiming, deadline: int | None,
               allow_unspecified_output: bool = True, client=None,
               loop_timeout_ns: int | None = None) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        deadline = _deadline(deadline)
        if deadline is not None and start > deadline:
            raise NnError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline had passed when the execution started")
        scheduler = self.scheduler or _shared_scheduler()
        ticket = scheduler.submit(client=_uid(client, self.client_uid), priority=self.priority, deadline=deadline,
                                  stats=self.stats, label="xla execution")
        shapes = ticket.run(lambda: self._run(request, None, allow_unspecified_output, loop_timeout_ns))
        if measure == MeasureTiming.YES:  # on the device: running time; in the driver: from the call
            return shapes, Timing(ticket.run_ns // 1000, prog.now_us(start))
        return shapes, Timing()

    # --- IPreparedModel ---------------------------------------------------------------------------------
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns, *, client=None):
        return self._timed(request, measure, deadline, client=client, loop_timeout_ns=loop_timeout_ns)

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, *, client=None):
        validate_request(request, self.model)

        def work() -> None:
            try:
                shapes, timing = self._timed(request, measure, deadline, client=client,
                                             loop_timeout_ns=loop_timeout_ns)
                callback(ErrorStatus.NONE, shapes, timing)
            except NnError as e:
                callback(e.status, e.output_shapes or [], Timing())
            except Exception:
                callback(ErrorStatus.GENERAL_FAILURE, [], Timing())

        threading.Thread(target=work, daemon=True, name="nnapi-xla-exec").start()

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns, *,
                       client=None):
        validate_request(request, self.model, allow_unspecified_output=False)
        launched = time.monotonic_ns()
        deadline = _deadline(deadline)
        wait_fences(wait_for, deadline)
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:
            after = fenced + timeout_after_fence_ns
            deadline = after if deadline is None else min(deadline, after)
        self._timed(request, MeasureTiming.NO, deadline, False, client=client, loop_timeout_ns=loop_timeout_ns)
        if measure == MeasureTiming.YES:
            end = time.monotonic_ns()
            return -1, FencedCallback(ErrorStatus.NONE, Timing((end - fenced) // 1000, (end - launched) // 1000),
                                       Timing((end - fenced) // 1000, (end - fenced) // 1000))
        return -1, FencedCallback(ErrorStatus.NONE, Timing(), Timing())


class CacheRewriter:
    """Duplicated cache handles kept for the rewrite after the optimised compile (C11)."""

    def __init__(self, handles: CacheHandles, token: bytes, save: Callable[[CacheHandles, bytes, XlaPreparedModel], None]):
        self.token = bytes(token)
        self.save = save
        self.handles = CacheHandles(tuple(os.dup(fd) for fd in handles.model_cache),
                                    tuple(os.dup(fd) for fd in handles.data_cache))

    def __call__(self, prepared: XlaPreparedModel) -> None:
        try:
            self.save(self.handles, self.token, prepared)
        finally:
            self.close()

    def close(self) -> None:
        for fd in (*self.handles.model_cache, *self.handles.data_cache):
            try:
                os.close(fd)
            except OSError:
                pass
        self.handles = CacheHandles()

    def __del__(self) -> None:
        self.close()
