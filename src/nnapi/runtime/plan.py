"""`ExecutionPlan`: how a finished compilation runs, worked out once at `Compilation.finish`.

The plan holds the steps (partitions, each on its device), what binding each input and output
checks (`Io`), the routes of main-model operands to inputs, outputs and the values passed between
steps, and, for a one-step plan, the direct request template (argument k in pool k; only the
pools change per execution). Every execution runs through `run(arguments, executor)` (a reusable
one through its `BoundPlan`, below): sync and async through `PREPARED` (each step's prepared
model), bursts through the `Burst` (its driver bursts), fenced executions through a `FencedExecutor`. Temporaries between steps are in shared
memory (ashmem), as Android's runtime passes them, so every driver maps them as any request memory.

`bind(arguments)` gives a `BoundPlan`: the temporaries placed and the request of every static step
(one whose argument sizes the model fixes) built once; `BoundPlan.run(executor, deadline)` runs the
steps, building only the other requests. A plain execution binds and runs once (`run`); a reusable
execution (`Execution.set_reusable`) keeps its `BoundPlan` and runs it at every computation, and a
session (`nnapi.load`) points one at each feed's arrays (`BoundPlan.rebind`) when the shapes repeat.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence

import numpy as np

from .. import hal
from .. import tracing as trace
from ..hal import (DataLocation, ErrorStatus, IExecution, LOOP_TIMEOUT_DEFAULT_NS, MeasureTiming, MemoryPool, NnError,
                   OutputShape, Request, RequestArgument, SimpleExecution, Timing, numpy_dtype)
from ..memory import max_tensor_bytes
from .memory import Memory
from .partitioner import Step

#: How many times a step runs again after a driver reports a temporary larger than was given.
MAX_RETRIES = 4

_NO_TIMING = Timing()
_NO_SHAPE = OutputShape(())


@dataclass(frozen=True)
class Io:
    """What binding one input or output checks, worked out once per plan."""

    operand: hal.Operand
    dtype: np.dtype
    scalar: bool
    #: The operand's dimensions and byte size when fully specified, else None.
    dims: tuple[int, ...] | None
    nbytes: int | None

    @classmethod
    def of(cls, operand: hal.Operand) -> "Io":
        full = operand.is_fully_specified
        return cls(operand, numpy_dtype(operand.type), operand.type.is_scalar,
                   tuple(operand.dimensions) if full else None, operand.byte_size() if full else None)


@dataclass
class Arg:
    """One bound input or output: a numpy array, a Memory region, or omitted."""

    array: np.ndarray | None = None
    memory: Memory | None = None
    offset: int = 0
    length: int = 0
    dims: tuple[int, ...] = ()
    omitted: bool = False


@dataclass
class Arguments:
    """What one execution hands the plan: its bound arguments and its settings for the run."""

    inputs: Sequence[Arg]
    outputs: Sequence[Arg]
    measure: bool = False
    #: The one absolute deadline of every step (monotonic ns), or None.
    deadline: int | None = None
    loop_timeout_ns: int = LOOP_TIMEOUT_DEFAULT_NS


@dataclass
class Outcome:
    """What a run reports: every output's shape and the timing of the last step."""

    output_shapes: list[OutputShape]
    timing: Timing = field(default_factory=Timing)


class StepExecutor(Protocol):
    """What runs a step's request: its prepared model (`PREPARED`), a burst, a fenced call."""

    def execute_step(self, index: int, step: Step, request: Request, measure: MeasureTiming, deadline: int | None,
                     loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]: ...


class PreparedExecutor:
    """Each step runs synchronously on its prepared model (sync and async executions)."""

    def execute_step(self, index: int, step: Step, request: Request, measure: MeasureTiming, deadline: int | None,
                     loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]:
        return step.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns)


#: The executor of plain executions (it holds nothing).
PREPARED = PreparedExecutor()


class ReusingExecutor:
    """Each step's request runs through a reusable execution of its prepared model, made the first time
    that very request runs (`IPreparedModel.create_reusable_execution`: the driver checks and maps it
    once) and computed again at each later run of it. A reusable `BoundPlan`'s plain runs go through one."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Request, MeasureTiming, int, IExecution]] = {}

    def execute_step(self, index: int, step: Step, request: Request, measure: MeasureTiming, deadline: int | None,
                     loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]:
        made = self._made.get(index)
        if made is None or made[0] is not request or made[1] != measure or made[2] != loop_timeout_ns:
            # (a plug-in's prepared model that implements the HAL without deriving from IPreparedModel may
            # lack the method: one call per computation then)
            create = getattr(step.prepared, "create_reusable_execution", None)
            execution = create(request, measure, loop_timeout_ns) if create is not None else \
                SimpleExecution(step.prepared, request, measure, loop_timeout_ns)
            made = self._made[index] = (request, measure, loop_timeout_ns, execution)
        return made[3].compute(deadline)


@dataclass
class _Temporary:
    """A value passed from one step to the next: its place in shared memory and, once written, its
    dimensions."""

    memory: Memory
    offset: int
    capacity: int
    dims: tuple[int, ...] = ()


class _SharedTemporaries:
    """The values one run passes between steps: one ashmem region for every value whose size the model
    declares (each 64-byte aligned), a region of its own for one known only when a driver reports it."""

    ALIGN = 64

    def __init__(self, operands: Sequence[hal.Operand], boundary: Sequence[int]) -> None:
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
        self.values: dict[int, _Temporary] = {}

    def output(self, o: int) -> Arg:
        """Where step output `o` is written (placed on first use)."""
        t = self.values.get(o)
        if t is None:
            t = self.values[o] = self._place(o)
        return Arg(memory=t.memory, offset=t.offset, length=t.capacity)

    def grow(self, o: int, nbytes: int) -> None:
        """Give value `o` a region of its own of `nbytes` (a driver reported it needs more)."""
        self.values[o] = self._place(o, nbytes)

    def written(self, o: int, dims: tuple[int, ...]) -> None:
        self.values[o].dims = dims

    def input(self, o: int) -> Arg:
        """Value `o` as the input of a later step, of the dimensions it was written with (a value of a size the
        model declares: placed, of those dimensions, before it is written)."""
        t = self.values.get(o)
        if t is None:
            t = self.values[o] = self._place(o)
        return Arg(memory=t.memory, offset=t.offset, length=self._operands[o].byte_size(t.dims), dims=t.dims)

    def _place(self, o: int, nbytes: int | None = None) -> _Temporary:
        if nbytes is None and o in self._offsets:
            offset, size = self._offsets[o]
            operand = self._operands[o]
            return _Temporary(self._region, offset, size, () if operand.type.is_scalar else tuple(operand.dimensions))
        size = max(int(nbytes or 1), 1)
        return _Temporary(Memory.ashmem(size), 0, size)


@dataclass(frozen=True)
class _DirectTemplate:
    """The request arguments of a one-step plan whose arguments are distinct numpy arrays of the operands'
    full sizes: argument k in pool k, the same every time."""

    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    #: Whether `ExecutionPlan.execute_arrays` applies: every size known, no output empty or too large.
    arrays: bool


class _Request:
    """Builds one step's request argument by argument, one pool per distinct buffer or memory."""

    def __init__(self) -> None:
        self.pools: list[MemoryPool] = []
        self._pool_of: dict[int, int] = {}

    def argument(self, arg: Arg) -> RequestArgument:
        array = arg.array
        if array is not None:  # an in-process buffer, used in place
            return RequestArgument(False, DataLocation(self._pool(array, None), 0, arg.length), arg.dims)
        if arg.omitted:
            return RequestArgument(has_no_value=True)
        memory = arg.memory
        if memory is None:
            raise NnError(ErrorStatus.GENERAL_FAILURE, "an execution argument with neither memory nor a buffer")
        p = self._pool(memory, memory)
        if memory.is_device or memory.is_image:  # used whole: offset = length = 0
            return RequestArgument(False, DataLocation(p, 0, 0), arg.dims)
        return RequestArgument(False, DataLocation(p, arg.offset, arg.length), arg.dims)

    def _pool(self, key: object, memory: Memory | None) -> int:
        p = self._pool_of.get(id(key))
        if p is None:
            p = self._pool_of[id(key)] = len(self.pools)
            self.pools.append(MemoryPool(pointer=key) if memory is None else memory.pool)
        return p


class Compiled(Protocol):
    """What executions and bursts need of a compilation: the plan made when it finished (None before)."""

    @property
    def plan(self) -> "ExecutionPlan | None": ...


class ExecutionPlan:
    """The steps of a finished compilation and the facts every execution of it uses (see the module doc)."""

    def __init__(self, main: hal.Subgraph, steps: list[Step]) -> None:
        self.main = main
        self.steps = steps
        self.inputs = [Io.of(main.operands[i]) for i in main.input_indexes]
        self.outputs = [Io.of(main.operands[i]) for i in main.output_indexes]
        #: Main-model operand -> input index, -> output index; the values passed between steps.
        self.main_in = {o: k for k, o in enumerate(main.input_indexes)}
        self.main_out = {o: k for k, o in enumerate(main.output_indexes)}
        self.boundary = ([o for step in steps for o in step.outputs if o not in self.main_out]
                         if len(steps) > 1 else [])
        first = steps[0].model.main
        #: Whether the first step's outputs are fully specified, as a fenced run on its driver needs.
        self.fenceable = all(first.operands[o].is_fully_specified for o in first.output_indexes)
        self.direct = self._direct_template()
        #: One step, writing the model's outputs in their order: it runs without routing values between steps.
        self.whole = len(steps) == 1 and steps[0].outputs == list(main.output_indexes)

    def _direct_template(self) -> _DirectTemplate | None:
        steps, main = self.steps, self.main
        if len(steps) != 1 or steps[0].inputs != list(main.input_indexes) or \
                steps[0].outputs != list(main.output_indexes):
            return None
        ios = [*self.inputs, *self.outputs]
        made = [RequestArgument(False, DataLocation(k, 0, io.nbytes or 0), io.dims) for k, io in enumerate(ios)]
        arrays = all(io.nbytes is not None for io in self.inputs) and all(
            io.nbytes and io.nbytes <= max_tensor_bytes() for io in self.outputs)
        return _DirectTemplate(made[:len(self.inputs)], made[len(self.inputs):], arrays)

    # --- running --------------------------------------------------------------------------------------
    def bind(self, arguments: Arguments, reusable: bool = False) -> "BoundPlan":
        """`arguments` bound to this plan: the temporaries placed and the request of every static step built
        (`BoundPlan`); its `run` runs them, as often as a reusable execution computes (each run has its own
        deadline: `arguments.deadline` is not used). `reusable`: the plain runs go through the drivers'
        reusable executions (an app's reusable execution; not a one-shot run, which would pay for one)."""
        return BoundPlan(self, arguments, reusable)

    def run(self, arguments: Arguments, executor: StepExecutor = PREPARED) -> Outcome:
        """Run every step in order through `executor`, once (`bind`, then `BoundPlan.run` against
        `arguments.deadline`)."""
        return BoundPlan(self, arguments).run(executor, arguments.deadline)

    def execute_arrays(self, inputs: Sequence[np.ndarray | None], deadline: int | None) -> list[np.ndarray] | None:
        """`Compilation.execute` where the direct template applies (numpy inputs of the operands' dtype and
        size, outputs of known size), without an Execution; None where it does not."""
        direct = self.direct
        if direct is None or not direct.arrays or len(inputs) != len(self.inputs):
            return None
        pools = []
        for x, io in zip(inputs, self.inputs):
            if type(x) is not np.ndarray or x.dtype != io.dtype or x.nbytes != io.nbytes or not x.flags.c_contiguous:
                return None
            pools.append(MemoryPool(pointer=x))
        outs = [np.zeros(io.dims, io.dtype) for io in self.outputs]
        for out in outs:
            pools.append(MemoryPool(pointer=out))
        self._execute(0, self.steps[0], Request(direct.inputs, direct.outputs, pools), PREPARED, MeasureTiming.NO,
                      deadline, LOOP_TIMEOUT_DEFAULT_NS)
        return outs

    def _static(self, step: Step) -> bool:
        """Whether the places and sizes of all of `step`'s arguments follow from the bound arguments and the
        model alone: every value it reads from an earlier step, and every temporary it writes, is of a size
        the model declares (its request can be built before anything runs)."""
        operands, main_in, main_out = self.main.operands, self.main_in, self.main_out
        return all(o in main_in or operands[o].is_fully_specified for o in step.inputs) and all(
            o in main_out or operands[o].is_fully_specified for o in step.outputs)

    def _direct_request(self, arguments: Arguments) -> Request | None:
        """The request of a one-step plan when every argument is a distinct numpy array of the operand's full
        size (the template's arguments, only the pools new); None: build it argument by argument."""
        direct = self.direct
        if direct is None:
            return None
        args = [*arguments.inputs, *arguments.outputs]
        for arg, io in zip(args, [*self.inputs, *self.outputs]):
            if arg.array is None or io.nbytes is None or arg.length != io.nbytes or arg.dims != io.dims:
                return None
        if len({id(a.array) for a in args}) != len(args):
            return None
        return Request(direct.inputs, direct.outputs, [MemoryPool(pointer=a.array) for a in args])

    def _step_request(self, step: Step, arguments: Arguments, shared: _SharedTemporaries | None,
                      shapes: Sequence[OutputShape | None] | None) -> Request:
        """The request of one step, argument by argument (memory, temporaries between steps, omitted).
        `shapes`: the main outputs' shapes reported so far this run; None for a static step (the ones it
        reads are fully specified)."""
        operands, main_in, main_out = self.main.operands, self.main_in, self.main_out
        made = _Request()
        req_inputs = []
        for o in step.inputs:
            if o in main_in:
                req_inputs.append(made.argument(arguments.inputs[main_in[o]]))
            elif o in main_out:  # an output of an earlier step read by a later one
                arg = arguments.outputs[main_out[o]]
                shape = tuple(operands[o].dimensions) if shapes is None else shapes[main_out[o]].dimensions
                req_inputs.append(made.argument(Arg(arg.array, arg.memory, arg.offset,
                                                    operands[o].byte_size(shape), shape)))
            else:
                req_inputs.append(made.argument(shared.input(o)))
        req_outputs = [made.argument(arguments.outputs[main_out[o]] if o in main_out else shared.output(o))
                       for o in step.outputs]
        return Request(req_inputs, req_outputs, made.pools)

    @staticmethod
    def _execute(k: int, step: Step, request: Request, executor: StepExecutor, measure: MeasureTiming,
                 deadline: int | None, loop_timeout_ns: int) -> tuple[list[OutputShape], Timing]:
        """Step `k` through `executor`: traced, timed for the latency record while it asks, and a driver
        bug as GENERAL_FAILURE (never anything but NnError)."""
        observer = step.observer
        start = time.perf_counter_ns() if observer is not None else 0
        try:
            if trace.active():
                with trace.span("execute", "execute", device=step.device.name, operations=len(step.operations)):
                    result = executor.execute_step(k, step, request, measure, deadline, loop_timeout_ns)
            else:
                result = executor.execute_step(k, step, request, measure, deadline, loop_timeout_ns)
        except NnError:
            raise
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}") from None
        if observer is not None:
            observer.observe(time.perf_counter_ns() - start)
            if observer.done:  # (the record has what it needs: the step stops timing)
                step.observer = None
        return result


class BoundPlan:
    """One execution's arguments bound to its plan (`ExecutionPlan.bind`). The values passed between steps
    are placed once, and the request of every static step (`ExecutionPlan._static`: all of them unless a
    size is known only when a driver reports it) is built once; `run` runs the steps through an executor,
    building only the other requests, and can run again and again (a reusable execution): the requests
    point at the bound arrays and memory in place, so each run reads their contents as they are then.
    One run at a time (the temporaries are shared by the runs)."""

    def __init__(self, plan: ExecutionPlan, arguments: Arguments, reusable: bool = False) -> None:
        self.plan = plan
        self.arguments = arguments
        self.measure = MeasureTiming.YES if arguments.measure else MeasureTiming.NO
        self._shared = _SharedTemporaries(plan.main.operands, plan.boundary) if plan.boundary else None
        direct = plan._direct_request(arguments)
        #: Per step: its request, built once (None: built at each run, from the sizes reported).
        self.requests: list[Request | None] = [direct] if direct is not None else [
            plan._step_request(step, arguments, self._shared, None) if plan._static(step) else None
            for step in plan.steps]
        #: Plain runs of a reusable binding go through the drivers' reusable executions.
        self._reusing = ReusingExecutor() if reusable else None

    def run(self, executor: StepExecutor = PREPARED, deadline: int | None = None) -> Outcome:
        """Run every step in order through `executor` against `deadline` (monotonic ns, None: none).
        OUTPUT_INSUFFICIENT_SIZE for a main output carries the shape of every output
        (`NnError.output_shapes`); a temporary a driver needs larger is grown and its step run again."""
        plan = self.plan
        if executor is PREPARED and self._reusing is not None:
            executor = self._reusing
        shapes: list[OutputShape | None] = [None] * len(plan.outputs)
        request = self.requests[0] if plan.whole else None
        if request is not None:  # (one step, its request built: nothing to route)
            step = plan.steps[0]
            try:
                out_shapes, timing = plan._execute(0, step, request, executor, self.measure, deadline,
                                                   self.arguments.loop_timeout_ns)
            except NnError as e:
                self._reported(step, e, shapes)  # (raises: one step has no temporary to grow)
                raise
            self._record(step, out_shapes, shapes)
        else:
            timing = _NO_TIMING
            for k, step in enumerate(plan.steps):
                timing = self._run_step(k, step, executor, deadline, shapes)
        return Outcome([s if s is not None else _NO_SHAPE for s in shapes], timing)

    def rebind(self, inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> bool:
        """Point this binding at other numpy arrays, each of the dtype and shape of the array it replaces
        (contiguous; outputs writable; all distinct where the bound ones were), as a session does with each
        feed of a shape it has run before: the requests keep their arguments, only their pools change.
        False, changing nothing, where an argument was not a distinct array or a new one differs."""
        args = self.arguments
        olds = [*args.inputs, *args.outputs]
        news = [*inputs, *outputs]
        if len(news) != len(olds):
            return False
        bound: list[Arg] = []
        for j, (old, new) in enumerate(zip(olds, news)):
            if old.omitted and new is None:
                bound.append(old)
                continue
            array = old.array
            if array is None or type(new) is not np.ndarray or new.dtype != array.dtype or new.shape != array.shape \
                    or not new.flags.c_contiguous or (j >= len(args.inputs) and not new.flags.writeable):
                return False
            bound.append(old if new is array else Arg(array=new, dims=old.dims, length=old.length))
        arrays = [a.array for a in olds if a.array is not None]
        if len({id(a) for a in arrays}) != len(arrays) or len({id(a.array) for a in bound if a.array is not None}) \
                != len(arrays):
            return False
        swap = {id(old.array): arg.array for old, arg in zip(olds, bound) if old.array is not None and
                arg.array is not old.array}
        if swap:
            self.requests = [None if r is None else Request(r.inputs, r.outputs, [
                MemoryPool(pointer=swap[id(p.pointer)]) if p.pointer is not None and id(p.pointer) in swap else p
                for p in r.pools]) for r in self.requests]
        n = len(args.inputs)
        self.arguments = replace(args, inputs=bound[:n], outputs=bound[n:])
        return True

    def _run_step(self, k: int, step: Step, executor: StepExecutor, deadline: int | None,
                  shapes: list[OutputShape | None]) -> Timing:
        plan, arguments = self.plan, self.arguments
        for attempt in range(MAX_RETRIES):
            request = self.requests[k] or plan._step_request(step, arguments, self._shared, shapes)
            try:
                out_shapes, timing = plan._execute(k, step, request, executor, self.measure, deadline,
                                                   arguments.loop_timeout_ns)
            except NnError as e:
                self._reported(step, e, shapes)
                continue
            self._record(step, out_shapes, shapes)
            return timing
        raise NnError(ErrorStatus.GENERAL_FAILURE, "step outputs kept growing; giving up")

    def _reported(self, step: Step, e: NnError, shapes: list[OutputShape | None]) -> None:
        """`step` failed with `e`: after OUTPUT_INSUFFICIENT_SIZE, the main outputs' shapes noted and the
        temporaries it needs larger grown (then the step runs again); raises in every other case (with
        every output's shape when a main output was too small)."""
        if e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE or not e.output_shapes:
            raise e
        operands, main_out = self.plan.main.operands, self.plan.main_out
        grow = False
        for o, s in zip(step.outputs, e.output_shapes):
            if o in main_out:
                shapes[main_out[o]] = s
            elif not s.is_sufficient:
                self._shared.grow(o, operands[o].byte_size(tuple(s.dimensions)))
                self._forget(o)
                grow = True
        if any(o in main_out and not s.is_sufficient for o, s in zip(step.outputs, e.output_shapes)):
            raise NnError(e.status, e.message, output_shapes=[
                s if s is not None else OutputShape(()) for s in shapes]) from None
        if not grow:
            raise NnError(e.status, e.message) from None

    def _record(self, step: Step, out_shapes: Sequence[OutputShape], shapes: list[OutputShape | None]) -> None:
        """What `step` reported: its main outputs' shapes into `shapes`, its temporaries' dimensions noted
        (the operands' own when it reported none)."""
        operands, main_out = self.plan.main.operands, self.plan.main_out
        for j, o in enumerate(step.outputs):
            if o in main_out and out_shapes and out_shapes[j].is_sufficient:
                shapes[main_out[o]] = out_shapes[j]
                continue
            dims = out_shapes[j].dimensions if out_shapes else operands[o].dimensions
            if o in main_out:
                shapes[main_out[o]] = OutputShape(tuple(dims), True)
            else:
                self._shared.written(o, () if operands[o].type.is_scalar else tuple(dims))

    def _forget(self, o: int) -> None:
        """Temporary `o` moved (grown): the requests built once that point at its old place are built at
        each run from now on."""
        for j, step in enumerate(self.plan.steps):
            if o in step.inputs or o in step.outputs:
                self.requests[j] = None
