"""One execution's request as a driver sees it: inputs as zero-copy arrays, outputs as writable views.

The base maps the request's pools (or takes them mapped from a burst), resolves its memory-domain
buffers, and hands the driver a `Binding`; the driver's `run` reads `input(k)` and returns one
value per output. What it returns is checked and written back by the base (`finish`). A driver
that keeps pointing at request memory between executions (to skip setting it up again) keeps only
what `may_keep` allows: the app may seal or free its shared memory once the execution is over.
"""
from __future__ import annotations

import contextlib
import math
import operator
import weakref
from typing import Callable, Sequence

import numpy as np

from ...hal import ErrorStatus, Model, NnError, OutputShape, Request, RequestArgument
from ...hal.constants import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS
from ...memory import ArrayPool, MappedImage, MappedPool
from ...memory.domains import RequestBuffers
from ...hal import numpy_dtype
from ...qos import checkpoint, current as current_ticket
from ...qos.background import native_call


def region_length(pool: MappedPool, length: int) -> int:
    """A region's length; a non-BLOB hardware buffer is used whole (length 0 = its packed content)."""
    return pool.size if length == 0 and isinstance(pool, MappedImage) else length


#: The read-only view of an array handed out last, by (id, dtype, shape, strides): the same view object
#: for the same array, as drivers that keep a tensor set up over an input compare identity. An entry
#: (a weak reference: the view lives as long as a driver keeps it) is reused only for the very array it
#: was made of (its `base`, alive: a numpy array's memory never moves while a view of it exists), with no
#: look at its data pointer (which costs more than the rest of the call). A view of a view has the first
#: one's base (numpy collapses them), which cannot tell two slices of one array apart: such an array gets a
#: new view each time. Plain references without callbacks (a WeakValueDictionary's cost 1.5 us a call):
#: entries whose view died are dropped once the table holds `MAX_READ_ONLY_VIEWS`.
_read_only_views: dict[tuple, "weakref.ref[np.ndarray]"] = {}
MAX_READ_ONLY_VIEWS = 256


def read_only(array: np.ndarray) -> np.ndarray:
    """`array` as a read-only view of the same memory (no copy): numpy refuses a driver's write to it
    (the app's memory, which a driver must never change); the array itself when it is read-only already."""
    if not array.flags.writeable:
        return array
    key = (id(array), array.dtype, array.shape, array.strides)
    ref = _read_only_views.get(key)
    view = ref() if ref is not None else None
    if view is None or view.base is not array:
        view = array.view()
        view.flags.writeable = False
        if view.base is array:
            if len(_read_only_views) >= MAX_READ_ONLY_VIEWS:
                _drop_dead_views()
            _read_only_views[key] = weakref.ref(view)
    return view


def _drop_dead_views() -> None:
    """Forget the views no driver keeps any more (all of them if they all still live)."""
    for key, ref in list(_read_only_views.items()):
        if ref() is None:
            _read_only_views.pop(key, None)
    if len(_read_only_views) >= MAX_READ_ONLY_VIEWS:
        _read_only_views.clear()


def loop_timeout(ns: int | None) -> int:
    """A WHILE loop's timeout: the default when none is given, clamped at the maximum."""
    return LOOP_TIMEOUT_DEFAULT_NS if ns is None else max(0, min(int(ns), LOOP_TIMEOUT_MAXIMUM_NS))


def _shape_of(value: object) -> tuple[int, ...]:
    """The shape of a driver's result that is not a numpy array (a device array's own tuple, when it has one)."""
    shape = getattr(value, "shape", None)
    return shape if type(shape) is tuple else tuple(int(d) for d in np.shape(value))


class ModelIo:
    """What binding a model's inputs and outputs needs, worked out once per prepared model."""

    def __init__(self, model: Model) -> None:
        self.model = model
        main = model.main
        self.inputs = [main.operands[i] for i in main.input_indexes]
        self.outputs = [main.operands[i] for i in main.output_indexes]
        #: Per input: a scalar?, its declared dimensions (() for a scalar), numpy dtype and byte size
        #: (0: unknown).
        self.input_facts = [(o.type.is_scalar, () if o.type.is_scalar else tuple(o.dimensions), numpy_dtype(o.type),
                             o.byte_size()) for o in self.inputs]


class Binding:
    """The arguments of one execution of a prepared model (see the module doc)."""

    def __init__(self, model: Model, request: Request, pools: Sequence[MappedPool | None],
                 buffers: RequestBuffers, deadline: int | None, loop_timeout_ns: int | None,
                 memory_limit_bytes: int | None, io: ModelIo | None = None) -> None:
        self.model = model
        self.request = request
        self.pools = pools
        self.buffers = buffers
        #: Absolute monotonic deadline (ns) of this execution, None for none: drivers that can cancel
        #: native work (an inference request) use it; checkpoints enforce it anyway.
        self.deadline = deadline
        #: How long each WHILE loop may run (default 2 s, at most 15 s).
        self.loop_timeout_ns = loop_timeout(loop_timeout_ns)
        #: The most bytes one tensor may take (allocations beyond: RESOURCE_EXHAUSTED_PERSISTENT).
        self.memory_limit_bytes = memory_limit_bytes
        self._checked: list[OutputShape] | None = None
        self._io = io if io is not None and io.model is model else ModelIo(model)
        self._inputs = self._io.inputs
        self._outputs = self._io.outputs
        #: The inputs' arrays of a binding kept for a reusable execution (`again`): views of the same
        #: memory, so each computation reads what is there then. None: a binding of one execution.
        self._kept_inputs: dict[int, np.ndarray | None] | None = None
        #: A kept binding's output views by (output, shape), and its outputs' sufficiency for the static
        #: shapes last checked (its request and pools never change); made when it is kept (`again`).
        self._kept_views: dict[tuple, np.ndarray | None] | None = None
        self._kept_static: tuple[Sequence, list[tuple[int, ...]], list[OutputShape]] | None = None
        #: A kept binding's last results when the driver wrote every output in place (its output views,
        #: held here, so the same objects again mean the same regions and shapes) and what they checked as.
        self._kept_written: tuple[tuple[object, ...], list[OutputShape]] | None = None
        #: What the driver keeps about a kept binding between its computations (`kept`), to run it again
        #: without working it out anew; it goes with the binding.
        self.driver_state: object = None
        #: A kept binding's last output shapes and their sufficiency.
        self._kept_shapes: tuple[list[tuple[int, ...]], list[OutputShape]] | None = None

    def again(self, buffers: RequestBuffers, deadline: int | None) -> "Binding":
        """This binding for the next computation of a reusable execution (its request and mapped pools are
        the same): that computation's memory-domain buffers and deadline; the inputs' arrays are kept."""
        self.buffers, self.deadline, self._checked = buffers, deadline, None
        if self._kept_inputs is None:
            self._kept_inputs, self._kept_views = {}, {}
        return self

    @property
    def kept(self) -> bool:
        """A reusable execution's binding (`again`): each computation hands out the same input arrays and
        output views, over the same memory."""
        return self._kept_inputs is not None

    # --- inputs ----------------------------------------------------------------------------------
    def input_shape(self, k: int) -> tuple[int, ...]:
        """Dimensions of input `k` in this request (the operand's, refined by the request)."""
        operand = self._inputs[k]
        if operand.type.is_scalar:
            return ()
        if k in self.buffers.inputs and not (self.request.inputs[k].dimensions or operand.is_fully_specified):
            return tuple(self.buffers.inputs[k][1])
        return tuple(self.request.inputs[k].dimensions or operand.dimensions)

    def input(self, k: int) -> np.ndarray | None:
        """Input `k` as a read-only zero-copy array (None when the request omits it): a driver's write
        into the app's input memory is refused by numpy, not made."""
        arg = self.request.inputs[k]
        if arg.has_no_value:
            return None
        scalar, dims, dtype, need = self._io.input_facts[k]
        if k in self.buffers.inputs:
            return self.buffers.input_value(k, dtype, self.input_shape(k) or None)
        kept = self._kept_inputs
        if kept is not None:
            array = kept.get(k)
            if array is None:
                array = kept[k] = self._input_array(k, arg, scalar, dims, dtype, need)
            return array
        return self._input_array(k, arg, scalar, dims, dtype, need)

    def _input_array(self, k: int, arg: RequestArgument, scalar: bool, dims: tuple, dtype: np.dtype,
                     need: int) -> np.ndarray:
        """Input `k`'s region of its pool as a read-only array of its shape (INVALID_ARGUMENT when the
        region's length is not the shape's)."""
        if arg.dimensions and not scalar:  # the request's dimensions refine the operand's
            dims = tuple(arg.dimensions)
            need = self._inputs[k].byte_size(dims)
        pool = self.pools[arg.location.pool_index]
        length = region_length(pool, arg.location.length)
        if length != need:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"request input {k}: length {length} does not match {need} bytes of shape {list(dims)}")
        return read_only(pool.array(arg.location.offset, need, dtype, dims))

    def device_input(self, k: int):
        """Input `k` as the device array a memory-domain buffer holds, or None (then use `input`)."""
        if k not in self.buffers.inputs:
            return None
        return self.buffers.device_input(k, self.input_shape(k))

    def may_keep(self, k: int, output: bool = False) -> bool:
        """True when input (or output) `k` lies in an in-process caller's array, which a driver may keep
        pointing at between executions; shared memory mapped for a request must be let go of when the
        execution ends (the app may seal or free it, and a mapping kept alive holds its pages)."""
        arg = (self.request.outputs if output else self.request.inputs)[k]
        return not arg.has_no_value and type(self.pools[arg.location.pool_index]) is ArrayPool

    # --- outputs ---------------------------------------------------------------------------------
    def output_view(self, k: int, shape: Sequence[int]) -> np.ndarray | None:
        """A writable zero-copy view of output `k`'s region holding `shape`, or None (a memory-domain
        output, a read-only pool, or a region too small). Returning this very array from `run`
        saves the copy back."""
        if k in self.buffers.outputs:
            return None
        views = self._kept_views
        if views is None:
            return self._output_view(k, tuple(shape))
        key = (k, tuple(shape))
        try:
            return views[key]
        except KeyError:
            view = views[key] = self._output_view(k, key[1])
            return view

    def _output_view(self, k: int, shape: tuple[int, ...]) -> np.ndarray | None:
        arg = self.request.outputs[k]
        pool = self.pools[arg.location.pool_index]
        if not pool.writable or isinstance(pool, MappedImage):
            return None
        operand = self._outputs[k]
        need = operand.byte_size(shape)
        if need > region_length(pool, arg.location.length):
            return None
        return pool.array(arg.location.offset, need, numpy_dtype(operand.type), shape)

    def check_allocation(self, shape: Sequence[int], dtype: np.dtype, what: str) -> None:
        """RESOURCE_EXHAUSTED_PERSISTENT before allocating a tensor larger than the driver's limit."""
        limit = self.memory_limit_bytes
        if limit is None:
            return
        nbytes = int(math.prod(shape)) * np.dtype(dtype).itemsize
        if nbytes > limit:
            raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                          f"{what} needs {nbytes} bytes ({list(shape)}), more than the driver's memory limit of "
                          f"{limit} bytes")

    @staticmethod
    def checkpoint(where: str = "") -> None:
        """A QoS checkpoint between units of work: preemption by higher-priority work, abort at the deadline."""
        checkpoint(where)

    @staticmethod
    def preemptible(stop: Callable[[], None]):
        """A context manager around one native call without checkpoints: `stop()` ends it early when
        higher-priority work needs the device; the driver then calls `checkpoint` (pausing until it may go
        on) and runs the call again from scratch (`qos.Ticket.preemptible`). A no-op outside the scheduler."""
        ticket = current_ticket()
        return ticket.preemptible(stop) if ticket is not None else contextlib.nullcontext()

    @staticmethod
    def native(workers: Sequence[str] = ()):
        """A context manager around one native call that reaches no checkpoint: LOW work runs it at the
        lowest OS priority, with the library's worker threads named `workers` (`qos.background`)."""
        ticket = current_ticket()
        return native_call(ticket.priority, workers) if ticket is not None else contextlib.nullcontext()

    @staticmethod
    def yield_requested() -> bool:
        """True when the scheduler has asked this execution to pause (a native call was stopped for it)."""
        ticket = current_ticket()
        return ticket is not None and ticket.yield_requested

    # --- after the run (the base) ----------------------------------------------------------------
    def check_static_outputs(self, shapes: Sequence[Sequence[int]]) -> None:
        """OUTPUT_INSUFFICIENT_SIZE (with every shape) before running, when the shapes are known."""
        kept = self._kept_static
        if kept is not None and not self.buffers.outputs and (kept[0] is shapes or kept[1] == shapes):
            self._checked = list(kept[2])  # (a kept binding's regions are those it checked)
            return
        given, shapes = shapes, [tuple(s) for s in shapes]
        self._checked = self._sufficiency(shapes)
        if self._kept_inputs is not None and not self.buffers.outputs:
            self._kept_static = (given, shapes, self._checked)

    def _sufficiency(self, shapes: list[tuple[int, ...]]) -> list[OutputShape]:
        result = []
        for k, (arg, shape) in enumerate(zip(self.request.outputs, shapes)):
            if k in self.buffers.outputs:
                self.buffers.check_output(k, shape)  # GENERAL_FAILURE when it does not fit
                result.append(OutputShape(shape, True))
                continue
            pool = self.pools[arg.location.pool_index]
            need = self._outputs[k].byte_size(shape)
            result.append(OutputShape(shape, need <= region_length(pool, arg.location.length)))
        if not all(s.is_sufficient for s in result):
            bad = [k for k, s in enumerate(result) if not s.is_sufficient]
            raise NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"output buffers too small for outputs {bad}",
                          output_shapes=result)
        return result

    def finish(self, values: Sequence[object]) -> list[OutputShape]:
        """Check the run's outputs against their regions, write them back, keep memory-domain outputs."""
        written = self._kept_written
        if written is not None and len(values) == len(written[0]) and all(map(operator.is_, values, written[0])) \
                and not self.buffers.outputs:
            return list(written[1])  # (the views written in place last time, again: nothing to check or copy)
        if len(values) != len(self._outputs):
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"the driver produced {len(values)} outputs, the model has {len(self._outputs)}")
        shapes = [() if operand.type.is_scalar else (v.shape if type(v) is np.ndarray else _shape_of(v))
                  for operand, v in zip(self._outputs, values)]
        if self._kept_views is not None and not self.buffers.outputs:
            result = self._finish_kept(values, shapes)
            if result is not None:
                return result
        checked = self._checked  # the shapes checked before the run, if the results have them
        result = checked if checked is not None and all(s == c.dimensions for s, c in zip(shapes, checked)) else \
            self._sufficiency(shapes)
        kept = {}
        for k, (arg, value) in enumerate(zip(self.request.outputs, values)):
            if k in self.buffers.outputs:
                kept[k] = value
                continue
            pool = self.pools[arg.location.pool_index]
            if not pool.writable:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"request output {k}: pool is read-only")
            if isinstance(value, np.ndarray) and pool.is_region(value, arg.location.offset):
                continue  # the driver wrote straight into the region
            array = value if type(value) is np.ndarray else np.asarray(value)
            want = numpy_dtype(self._outputs[k].type)
            pool.write(arg.location.offset, array if array.dtype == want else array.astype(want))
        if kept:
            self.buffers.store_outputs(kept)
        return result

    def _finish_kept(self, values: Sequence[object], shapes: list[tuple[int, ...]]) -> list[OutputShape] | None:
        """`finish` for a kept binding without memory-domain outputs: its regions never change, so the
        sufficiency of the shapes of the last run holds again, and each output goes through its view (the
        driver's own when it wrote in place); None where an output has no view (read-only or an image)."""
        views = [self.output_view(k, shape) for k, shape in enumerate(shapes)]
        if any(view is None for view in views):
            return None
        memo = self._kept_shapes
        if memo is not None and memo[0] == shapes:
            result = list(memo[1])
        else:
            checked = self._checked
            result = checked if checked is not None and all(s == c.dimensions for s, c in zip(shapes, checked)) \
                else self._sufficiency(shapes)
            self._kept_shapes = (shapes, list(result))
        in_place = True
        for view, value in zip(views, values):
            if value is view:
                continue  # the driver wrote straight into the region
            in_place = False
            array = value if type(value) is np.ndarray else np.asarray(value)
            view[...] = array if array.shape == view.shape else array.reshape(view.shape)  # (cast as `astype` does)
        if in_place:
            self._kept_written = (tuple(values), list(result))
        return result
