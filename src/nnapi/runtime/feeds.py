"""`FeedRunner`: one compilation run on numpy feeds one after another, as `nnapi.load` sessions run it.

A one-step plan whose arguments are all of sizes the model declares already runs every feed through
a request built once (the plan's direct template: `Compilation.execute`, only the pools new). Any
other plan (partitioned, outputs sized by the run, inputs of unknown dimensions) runs the first feed
of each signature (each input's shape, the dtypes being the model's) as `Compilation.execute` does,
then binds the plan to arrays of that signature (`ExecutionPlan.bind`: the requests of every static
step built once, the temporaries between steps placed once) and keeps the binding: every later feed
of the signature points it at its arrays and at fresh output buffers sized from the shapes the last
run reported (`BoundPlan.rebind`). No Execution object, no argument checks again, no output grown
again (a plain run of such a model computes twice: once to learn an output's size).

A small feed (every input and output at most `SMALL_FEED_BYTES`, the outputs of sizes the model declares,
no timeout) is copied into arrays the runner keeps for its signature, bound once to the drivers' reusable
executions (`ExecutionPlan.bind(..., reusable=True)`: validated, admitted and bound once), and its
outputs copied out: copying a few kilobytes costs less than binding new memory, which is most of a tiny
model's execution.

Results are `Compilation.execute`'s: fresh arrays of the shapes the drivers report. A feed whose
outputs turn out larger than last time runs again at the sizes reported, which the binding keeps.
Runs of one signature take turns on its binding; one that finds it busy (another thread) runs as
`Compilation.execute` does.
"""
from __future__ import annotations

import math
import operator
import threading
from typing import Protocol, Sequence, TypeVar

import numpy as np

from ..hal import ErrorStatus, LOOP_TIMEOUT_DEFAULT_NS, NnError
from .deadlines import deadline_after, timeout_ns
from .plan import MAX_RETRIES, PREPARED, Arg, Arguments, BoundPlan, ExecutionPlan, Outcome

T = TypeVar("T")

#: Signatures whose bindings a runner keeps (the oldest goes first).
MAX_SIGNATURES = 8
#: A feed whose every input and output is at most this large runs through arrays the runner keeps (above).
SMALL_FEED_BYTES = 64 << 10
#: A signature not seen yet (`FeedRunner._kept` holds None for one whose feeds are not kept).
_UNKEPT = object()


class Executes(Protocol):
    """What a runner runs: a finished compilation (`Compilation`)."""

    @property
    def plan(self) -> ExecutionPlan | None: ...

    def execute(self, inputs: Sequence[np.ndarray | None], timeout: float | None = None) -> list[np.ndarray]: ...


class _Binding:
    """A plan bound to arrays of one signature, the output buffers' shapes and dtypes, and whose turn it is."""

    def __init__(self, bound: BoundPlan, buffers: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        self.bound = bound
        self.buffers = buffers
        self.lock = threading.Lock()


class _Kept:
    """A plan bound once, for reuse, to input and output arrays of one small signature that the runner owns."""

    def __init__(self, bound: BoundPlan, inputs: list[np.ndarray | None], outputs: list[np.ndarray]) -> None:
        self.bound, self.inputs, self.outputs = bound, inputs, outputs
        self.lock = threading.Lock()
        #: The output shapes last found to be the kept arrays' (the drivers report the same objects again
        #: while nothing changed: no look at their dimensions then).
        self._matched: tuple = ()

    def run(self, feed: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        """The feed's outputs (fresh arrays); None where a driver reports other shapes than the kept ones."""
        for kept, x in zip(self.inputs, feed):
            if kept is not None:
                kept[...] = x  # (of its shape and dtype: a plain assignment, a third of `np.copyto`'s cost)
        shapes = _run(self.bound, None).output_shapes
        matched = self._matched
        if len(shapes) != len(matched) or not all(map(operator.is_, shapes, matched)):
            if any(tuple(s.dimensions) != out.shape for s, out in zip(shapes, self.outputs)):
                return None
            self._matched = tuple(shapes)
        return [out.copy() for out in self.outputs]


class FeedRunner:
    """Runs `compilation` on one feed after another (see the module doc)."""

    def __init__(self, compilation: Executes) -> None:
        self.compilation = compilation
        self._bindings: dict[tuple, _Binding] = {}
        #: Per signature: its kept arrays' binding, or None when its feeds are not small.
        self._kept: dict[tuple, _Kept | None] = {}
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[np.ndarray | None], timeout: float | None = None) -> list[np.ndarray]:
        """The outputs of one feed (numpy arrays in input order, None for an omitted input), as
        `Compilation.execute(inputs, timeout)` gives them."""
        plan = self.compilation.plan
        if plan is None:
            return self.compilation.execute(inputs, timeout=timeout)
        key = _signature(plan, inputs)
        if key is not None and not timeout:
            kept = self._kept.get(key, _UNKEPT)
            if kept is _UNKEPT:
                kept = self._keep(plan, key, inputs)
            if kept is not None and kept.lock.acquire(blocking=False):
                try:
                    outputs = kept.run(inputs)
                finally:
                    kept.lock.release()
                if outputs is not None:
                    return outputs
        if plan.direct is not None and plan.direct.arrays:  # (its template is the binding)
            return self.compilation.execute(inputs, timeout=timeout)
        binding = None if key is None else self._bindings.get(key)
        if binding is None:
            outputs = self.compilation.execute(inputs, timeout=timeout)
            if key is not None:
                self._learn(plan, key, inputs, [out.shape for out in outputs], None)
            return outputs
        for _ in range(MAX_RETRIES):  # (then again at the sizes a too-small output reported)
            if not binding.lock.acquire(blocking=False):
                break
            try:
                outcome = self._run_bound(binding, inputs, timeout)
            finally:
                binding.lock.release()
            if type(outcome) is list:
                return outcome
            if outcome is None:
                break
            binding = self._learn(plan, key, inputs, outcome.shapes, binding)
            if binding is None:
                break
        return self.compilation.execute(inputs, timeout=timeout)

    def _run_bound(self, binding: _Binding, inputs: Sequence[np.ndarray | None],
                   timeout: float | None) -> "list[np.ndarray] | _Grew | None":
        """The outputs through `binding`; else `_Grew` (an output was too small: the shapes reported) or None
        (arrays the binding cannot take: the feed runs as `Compilation.execute` runs it)."""
        buffers = [np.zeros(shape, dtype) for shape, dtype in binding.buffers]
        if not binding.bound.rebind(inputs, buffers):
            return None
        deadline = deadline_after(timeout_ns(timeout, "Execution.set_timeout")) if timeout else None
        try:
            outcome = _run(binding.bound, deadline)
        except NnError as e:
            if e.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and e.output_shapes:
                return _Grew([tuple(s.dimensions) for s in e.output_shapes])
            raise
        results = []
        for buf, shape in zip(buffers, outcome.output_shapes):
            dims = tuple(shape.dimensions)
            if buf.shape == dims:
                results.append(buf)
            else:  # (as `Execution.run`: the reported shape out of a buffer sized last time)
                count = math.prod(dims)
                results.append(buf.reshape(dims) if buf.size == count else
                               (buf[:count].reshape(dims) if dims else buf[:1].reshape(())))
        return results

    def _learn(self, plan: ExecutionPlan, key: tuple, inputs: Sequence[np.ndarray | None],
               shapes: Sequence[Sequence[int]], last: _Binding | None) -> _Binding | None:
        """Bind the plan to this feed's signature, each output of unknown size in a buffer of its shape in
        `shapes` (at least as large as in `last`), and keep it; None where it cannot be bound (two inputs
        are one array, or the plan refuses the arguments): such feeds run as `Compilation.execute` runs them."""
        arrays = [x for x in inputs if x is not None]
        if len({id(x) for x in arrays}) != len(arrays):
            return None
        ins = _input_args(plan, inputs)
        buffers: list[tuple[tuple[int, ...], np.dtype]] = []
        outs = []
        for k, (shape, io) in enumerate(zip(shapes, plan.outputs)):
            if io.dims is None:
                count = max(math.prod(shape), 1, last.buffers[k][0][0] if last is not None else 1)
                shape = (count,)
            else:
                shape = io.dims
            buf = np.zeros(shape, io.dtype)
            buffers.append((shape, io.dtype))
            outs.append(Arg(array=buf, dims=io.dims if io.dims is not None else (), length=buf.nbytes))
        try:
            binding = _Binding(plan.bind(Arguments(ins, outs, False, None, LOOP_TIMEOUT_DEFAULT_NS)), buffers)
        except NnError:
            return None
        return self._remember(self._bindings, key, binding)

    def _keep(self, plan: ExecutionPlan, key: tuple, inputs: Sequence[np.ndarray | None]) -> _Kept | None:
        """Arrays for a signature's small feeds, bound once for reuse (None, remembered, where they are not
        small, an output's size is not declared, or the plan refuses the arguments)."""
        kept = None
        if all(io.dims is not None and io.nbytes is not None and io.nbytes <= SMALL_FEED_BYTES
               for io in plan.outputs) and all(x is None or x.nbytes <= SMALL_FEED_BYTES for x in inputs):
            ins = [None if x is None else np.zeros(x.shape, io.dtype) for x, io in zip(inputs, plan.inputs)]
            outs = [np.zeros(io.dims, io.dtype) for io in plan.outputs]
            args = Arguments(_input_args(plan, ins), [Arg(array=o, dims=io.dims, length=o.nbytes)
                                                      for o, io in zip(outs, plan.outputs)],
                             False, None, LOOP_TIMEOUT_DEFAULT_NS)
            try:
                kept = _Kept(plan.bind(args, reusable=True), ins, outs)
            except NnError:
                kept = None
        return self._remember(self._kept, key, kept)

    def _remember(self, table: dict, key: tuple, value: T) -> T:
        """Keep `value` for signature `key` in `table` (at most MAX_SIGNATURES: the oldest goes first)."""
        with self._lock:
            if len(table) >= MAX_SIGNATURES and key not in table:
                table.pop(next(iter(table)))
            table[key] = value
        return value


def _input_args(plan: ExecutionPlan, inputs: Sequence[np.ndarray | None]) -> list[Arg]:
    """The plan's inputs bound to `inputs` (None: omitted), each of the operand's dimensions where it has them."""
    return [Arg(omitted=True) if x is None else
            Arg(array=x, dims=io.dims if io.dims is not None else (() if io.scalar else tuple(x.shape)),
                length=x.nbytes) for x, io in zip(inputs, plan.inputs)]


def _run(bound: BoundPlan, deadline: int | None) -> Outcome:
    """`bound.run` through the prepared models; a runtime or driver bug as NnError, never anything else."""
    try:
        return bound.run(PREPARED, deadline)
    except NnError:
        raise
    except Exception as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}") from None


class _Grew:
    """`FeedRunner._run_bound`: an output was too small; the shape of every output, as reported."""

    def __init__(self, shapes: list[tuple[int, ...]]) -> None:
        self.shapes = shapes


def _signature(plan: ExecutionPlan | None, inputs: Sequence[np.ndarray | None]) -> tuple | None:
    """Each input's shape (None: omitted) when every input is a contiguous numpy array of the model's dtype
    or None; None otherwise (such a feed runs as `Compilation.execute` runs it)."""
    if plan is None or len(inputs) != len(plan.inputs):
        return None
    key = []
    for x, io in zip(inputs, plan.inputs):
        if x is None:
            key.append(None)
        elif type(x) is np.ndarray and x.dtype == io.dtype and x.flags.c_contiguous:
            key.append(x.shape)
        else:
            return None
    return tuple(key)
