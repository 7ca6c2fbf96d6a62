"""The XLA driver's prepared model: a partition compiled as one executable (or, for long partitions,
a few sub-model executables run in order), run from memory pools.

Inputs are read in place from the request's pools (`jax.device_put` aliases 64-byte aligned host
memory on the CPU backend instead of copying it; smaller or unaligned inputs go through the
executable's C++ argument path), constants live on the device from preparation on, and each
output is copied once, from the executable's result buffer straight into its pool region.
Memory-domain buffers (`memory.domains`) hold the device arrays themselves: an output written to
one is read by the next execution with no host copy in between.

Multi-stage compilation (C11, `base.stages`): the executable first compiled is the quick one (low XLA
optimisation). After `optimize_after` executions the optimised one is compiled and warmed up on a
background thread and swapped in between two executions; the cache, when the model was prepared with one, is
then rewritten under the exclusive lock through duplicated cache handles.

Quality of service: executions run through the device's `qos.Scheduler` (per-app queues,
priorities, deadlines); between sub-models the run reaches a `qos.checkpoint`, where the scheduler
may preempt it for higher-priority work or abort it at its deadline (Q3, Q6).

WHILE loops: a sub-model with loops runs with an iteration budget (`control_flow`); when a loop
runs out of it, the sub-model runs again with a larger one, sized so that the run ends before the
loop timeout and the deadline (`base.native.LoopBudgets`), until the loops finish (MISSED_DEADLINE_TRANSIENT when
they cannot in time). The budget that sufficed is kept for the next execution, so steady-state
executions run once.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

import jax

from ... import tracing as trace
from ...hal import ErrorStatus, ExecutionPreference, Model, NnError, Priority
from ..base import Binding, DriverPreparedModel
from ..base.stages import Stages
from ..base.native import LoopBudgets, NativeCall, raise_failed_check, run_native
from . import program as prog

#: Inputs at least this large and 64-byte aligned are aliased rather than copied.
ALIAS_MIN_BYTES = 1 << 16
#: The names of XLA's CPU worker threads (its intra-op pool), lowered with LOW work (`qos.background`).
WORKER_THREADS = ("tf_XLAEigen",)
#: The most iterations a WHILE loop may run per entry in one run of a sub-model: int32's largest.
MAX_LOOP_BUDGET = (1 << 31) - 1


class XlaPreparedModel(Stages, DriverPreparedModel):
    """A compiled partition. `model` is the relocated model (constants in pool 0, read in place);
    requests are validated against its main graph's declared operands; `signature` gives the
    compiled (inferred) shapes of the inputs and outputs."""

    def __init__(self, model: Model, sig: prog.Signature, segments: list, stage: str,
                 preference: ExecutionPreference, priority: Priority, *, optimize_after: int | None,
                 on_optimized: Callable[["XlaPreparedModel"], None] | None = None,
                 constants: prog.Constants | None = None) -> None:
        super().__init__(model, preference, priority)
        self.signature = sig
        self._input_shapes = [s.shape() for s in sig.inputs]
        self.static_output_shapes = [s.shape() for s in sig.outputs]
        self.init_stages(stage, optimize_after, on_optimized, "nnapi-xla-optimize")
        #: [(sub-model signature, compiled executable)], run in order (replaced whole by the optimised stage).
        self.segments = list(segments)
        #: Per sub-model with loops, its iteration budget (kept between executions).
        self._loop_budgets = LoopBudgets(model, MAX_LOOP_BUDGET)
        #: The constant arguments on the device (shared with other preparations of the same content).
        self.constants = constants if constants is not None else prog.device_constants(
            model.pools[0].pointer if model.pools else None, [seg for seg, _ in self.segments], model)

    # --- multi-stage compilation (`base.stages`) --------------------------------------------------------
    def optimized_stage(self, checkpoint: Callable[[str], None]) -> Callable[[], None]:
        """The optimised executables, compiled and warmed up."""
        dims, lowered = prog.analyze_supported(self.model)
        parts = prog.split(self.model, dims, lowered, self.signature, len(self.segments))
        checkpoint("compiling")
        segments = prog.compile_segments(self.model, parts, optimized=True, checkpoint=checkpoint)
        checkpoint("warming up")
        self._warm_up(segments)
        return lambda: setattr(self, "segments", segments)

    def _warm_up(self, segments: list) -> None:
        """Run each new executable once on zeros (loops: one iteration) before it serves requests:
        XLA's kernel library sets up its kernels and packs the weights on first use (tens of
        milliseconds), which the background thread pays instead of the execution after the swap."""
        for seg, exe in segments:
            args = [*(np.zeros(s.shape(), s.dtype) for s in seg.inputs),
                    *(self.constants[s.index] for s in seg.constants)]
            try:
                jax.block_until_ready(exe(*args, np.int32(1)) if seg.loops else exe(*args))
            except Exception:  # zeros may be bad data for this model: warming is only an optimisation
                pass

    # --- one run ------------------------------------------------------------------------------------
    def run(self, binding: Binding) -> list:
        """Inputs read in place (large aligned ones aliased as device arrays), the sub-models run in
        order with a QoS checkpoint between them; the results stay device arrays for the base to
        write back (or keep, for memory-domain outputs). A kept binding of one sub-model without loops
        runs again as it was set up the first time (`_Steady`)."""
        steady = binding.driver_state
        if type(steady) is _Steady and steady.segments is self.segments and not trace.active():
            return steady.run(binding, self)
        sig = self.signature
        args = []
        for k, shape in enumerate(self._input_shapes):
            if binding.request.inputs[k].has_no_value:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request input {k}: the xla driver needs a value")
            if binding.input_shape(k) != shape:
                raise NnError(ErrorStatus.INVALID_ARGUMENT,
                              f"request input {k}: dimensions {list(binding.input_shape(k))} differ from the "
                              f"compiled {list(shape)}")
            value = binding.device_input(k) if binding.buffers.inputs else None  # a memory-domain buffer's array
            if value is None:
                value = binding.input(k)
                if value.nbytes >= ALIAS_MIN_BYTES and value.ctypes.data % prog.ALIGN == 0:
                    value = jax.device_put(value)  # aliases the pool memory on the CPU backend
            args.append(value)
        values = {s.index: a for s, a in zip(sig.inputs, args)}
        segments = self.segments  # one consistent stage for the whole run
        for j, (seg, exe) in enumerate(segments):
            if j:
                binding.checkpoint(f"sub-model {j} of {len(segments)}")  # preemption / deadline (QoS)
            seg_args = [*(values[s.index] for s in seg.inputs), *(self.constants[s.index] for s in seg.constants)]
            try:
                if trace.active():
                    with trace.span(f"sub-model {j}", "operation", device="xla"):
                        outs = self._segment(j, seg, exe, seg_args, binding)
                else:
                    outs = self._segment(j, seg, exe, seg_args, binding)
            except NnError:
                raise
            except Exception as e:  # never crash the caller on a runtime failure of XLA
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"xla execution failed: {type(e).__name__}: {e}") from e
            values.update(zip((s.index for s in seg.outputs), outs))
        self.count_run()
        if binding.kept and not binding.buffers.inputs:
            binding.driver_state = _Steady.of(self, segments, args, binding)
        return [values[s.index] for s in sig.outputs]

    def _segment(self, j: int, seg: prog.Signature, exe, args: list, binding: Binding) -> list:
        """Sub-model `j`'s outputs (with loops: under its iteration budget)."""
        if seg.loops:
            return self._loop_budgets.run(lambda budget: self.call(seg, exe, args, binding, budget), binding, j)
        return self.call(seg, exe, args, binding)[1]

    @staticmethod
    def call(seg: prog.Signature, exe, args: list, binding: Binding, budget: int | None = None) -> tuple[bool, list]:
        """One run of a sub-model's executable (`base.native`; with an iteration budget when it has
        loops), its checks read: (whether a loop ran out of the budget, the outputs)."""
        outs = run_native(binding, NativeCall(
            lambda: _ready(exe(*args) if budget is None else exe(*args, np.int32(budget))),
            workers=WORKER_THREADS, what="xla execution"))  # (LOW work: in the OS's background)
        if seg.checks:  # a failed check ends the execution, whatever the loops did
            *outs, flags = outs
            raise_failed_check(seg.checks, flags)
        if budget is None:
            return False, list(outs)
        *outs, ran_out = outs
        return bool(ran_out), outs


def _ready(outs):
    """A sub-model's outputs (a flat sequence of device arrays), once computed."""
    for out in outs:
        out.block_until_ready()
    return outs


class _Steady:
    """A kept binding's run of a prepared model of one sub-model without loops (`Binding.driver_state`): its
    arguments and its native call made once, the aliased inputs (device arrays over the app's memory) made
    again at each run, the results written straight into the binding's output views where it has them (the
    base then has nothing to check or copy); valid while the prepared model runs these `segments` (a stage
    swap makes it anew)."""

    __slots__ = ("segments", "args", "aliased", "native", "checks", "picks", "views")

    def __init__(self, segments: list, args: list, aliased: list[tuple[int, int]], checks, picks: list[int],
                 views: list[np.ndarray] | None) -> None:
        self.segments, self.args, self.aliased, self.checks, self.picks = segments, args, aliased, checks, picks
        self.views = views
        exe = segments[0][1]
        if views is None:
            self.native = NativeCall(lambda: _ready(exe(*args)), workers=WORKER_THREADS, what="xla execution")
            return

        def written() -> list:
            outs = exe(*args)
            for view, j in zip(views, picks):
                view[...] = outs[j]  # (waits for the result, and casts as the base's write-back does)
            return outs
        self.native = NativeCall(written, workers=WORKER_THREADS, what="xla execution")

    @classmethod
    def of(cls, prepared: XlaPreparedModel, segments: list, inputs: list, binding: Binding) -> "_Steady | None":
        """The steady run of this computation's arguments, or None (several sub-models, loops, or a main
        output that is not the sub-model's)."""
        if len(segments) != 1 or segments[0][0].loops:
            return None
        seg = segments[0][0]
        sig = prepared.signature
        by_index = {s.index: j for j, s in enumerate(sig.inputs)}
        if any(s.index not in by_index for s in seg.inputs):
            return None
        produced = {s.index: j for j, s in enumerate(seg.outputs)}
        if any(s.index not in produced for s in sig.outputs):
            return None
        args = [*(inputs[by_index[s.index]] for s in seg.inputs), *(prepared.constants[s.index] for s in seg.constants)]
        aliased = [(j, by_index[s.index]) for j, s in enumerate(seg.inputs) if not isinstance(args[j], np.ndarray)]
        views = None if binding.buffers.outputs else [
            binding.output_view(k, shape) for k, shape in enumerate(prepared.static_output_shapes)]
        return cls(segments, args, aliased, seg.checks, [produced[s.index] for s in sig.outputs],
                   None if views is None or any(v is None for v in views) else views)

    def run(self, binding: Binding, prepared: XlaPreparedModel) -> list:
        args = self.args
        for j, k in self.aliased:  # (an alias is made at each run: the app's memory is read as it is then)
            args[j] = jax.device_put(binding.input(k))
        try:
            outs = run_native(binding, self.native)
        except NnError:
            raise
        except Exception as e:  # never crash the caller on a runtime failure of XLA
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla execution failed: {type(e).__name__}: {e}") from e
        if self.checks:
            *outs, flags = outs
            raise_failed_check(self.checks, flags)
        prepared.count_run()
        return self.views if self.views is not None else [outs[j] for j in self.picks]
