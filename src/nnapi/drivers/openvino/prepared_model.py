"""A model prepared by the OpenVINO driver: one compiled model, run through reusable inference requests.

Each execution takes an idle `InferRequest` of this prepared model (one per concurrent execution,
kept for reuse), points its input and output tensors at the request's own memory (`ov.Tensor` over
the Binding's zero-copy numpy views: shared memory is used in place, nothing is copied), and sets a
tensor again only when the memory under it changed. The inference is one bounded native run of the
driver base (`base.native`): with a deadline it runs as an asynchronous request, cancelled
(`InferRequest.cancel()`) when the deadline passes (MISSED_DEADLINE_TRANSIENT), and higher-priority
work cancels it and runs it again later.

A graph with WHILE loops takes an iteration budget as its last input and tells whether a loop ran out
of it as its last output (`graph.build`): the execution runs again with a larger budget, as large as
the rest of the loop timeout and the deadline allow (`base.native.LoopBudgets`), until no loop runs out, or fails
with MISSED_DEADLINE_TRANSIENT when the loops cannot finish in time.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
from .backend import infer_call, ov

from ...hal import ErrorStatus, ExecutionPreference, Model, NnError, Priority
from ..base import Binding, DriverPreparedModel
from ..base.native import LoopBudgets, NativeCall, raise_failed_check, run_native
from .tensors import check_outputs, writable_alias

#: The most iterations a loop may run per entry in one run of a graph with loops, and how much the
#: budget grows at most from one run to the next.
MAX_LOOP_BUDGET = 1 << 40
LOOP_BUDGET_GROWTH = 16.0
#: Inputs and outputs up to this size are copied into and out of the request's own tensors: a copy costs
#: less than pointing a tensor at other memory, which OpenVINO then prepares for anew (measured: about
#: 7 us per changed output tensor on tiny_transformer_f32, whose outputs are new arrays every time).
SMALL_IO_BYTES = 64 << 10


class _Request:
    """One reusable inference request of a compiled model and the memory its tensors point at."""

    __slots__ = ("request", "native", "inputs", "arrays", "outputs", "owned", "own_tensors", "own_inputs",
                 "own_outputs", "flags", "flag_tensors", "steady", "steady_copies", "steady_results")

    def __init__(self, compiled: ov.CompiledModel, n_inputs: int, n_outputs: int, flag_ports: Sequence[int]) -> None:
        self.request = request = compiled.create_infer_request()
        #: Per flag output (the ran-out flag, the run-time checks: `flag_ports`), the request's own tensor,
        #: set once, and its memory, which each execution reads in place (no tensor fetched per run).
        self.flag_tensors = [ov.Tensor(compiled.output(k).get_element_type(), compiled.output(k).get_shape())
                             for k in flag_ports]
        for k, tensor in zip(flag_ports, self.flag_tensors):
            request.set_output_tensor(k, tensor)
        self.flags = [tensor.data for tensor in self.flag_tensors]
        #: Its inference as the driver base runs it (`base.native`), made once.
        self.native = NativeCall(infer_call(request), request.start_async, request.wait_for,
                                 request.cancel, what="openvino execution")
        #: Per input / output: (address, shape) of the memory its tensor points at, None if unset.
        self.inputs: list[tuple | None] = [None] * n_inputs
        #: Per input: the array its tensor was last set from (held, so its memory stays where it is: the
        #: same array again needs no new tensor).
        self.arrays: list[np.ndarray | None] = [None] * n_inputs
        self.outputs: list[tuple | None] = [None] * n_outputs
        #: Per output: the request's own tensor (used when the output has no writable region).
        self.owned: list[ov.Tensor | None] = [None] * n_outputs
        #: Small values are copied in and out (`SMALL_IO_BYTES`): per input, the request's own tensor
        #: and its memory; per output, the memory of `owned`.
        self.own_tensors: list[ov.Tensor | None] = [None] * n_inputs
        self.own_inputs: list[np.ndarray | None] = [None] * n_inputs
        self.own_outputs: list[np.ndarray | None] = [None] * n_outputs
        #: The kept binding (`Binding.kept`) whose last run on this request changed none of its tensors, so
        #: the next run of it only infers (`steady_copies`: the small outputs' (view, own memory) to copy out;
        #: `steady_results`: what `run` returns). None: run it in full.
        self.steady: Binding | None = None
        self.steady_copies: list[tuple[np.ndarray, np.ndarray]] = []
        self.steady_results: list[np.ndarray] = []


def _key(array: np.ndarray) -> tuple:
    return array.ctypes.data, array.shape, array.dtype.str


class OpenVinoPreparedModel(DriverPreparedModel):
    """See the module doc. `keep_alive` holds what the compiled model's shared constants point into."""

    def __init__(self, model: Model, preference: ExecutionPreference, priority: Priority,
                 compiled: ov.CompiledModel, *, keep_alive: Sequence[object] = (),
                 export: bytes | memoryview | None = None, has_budget: bool = False) -> None:
        super().__init__(model, preference, priority)
        self.compiled = compiled
        #: What the compiled model's memory may point into (mapped pools, the exported blob).
        self.keep_alive = list(keep_alive)
        #: The exported compiled model, when it was loaded from one (saved again as is; the compiled
        #: model may read its weights from it in place).
        self.export = export
        self._n_in, self._n_out = len(model.main.input_indexes), len(model.main.output_indexes)
        # The compiled graph's output shapes (shape inference may know what the model leaves unknown).
        self.static_output_shapes = [tuple(int(d) for d in compiled.output(k).get_shape()) for k in range(self._n_out)]
        #: The graph has loops: its last input is the iteration budget, its last output the ran-out flag.
        self.has_budget = has_budget
        #: (output index, one message per flag) of the graph's run-time checks (after the ran-out flag).
        self._checks = check_outputs(compiled, self._n_out + int(has_budget))
        self._loop_budget = LoopBudgets(model, MAX_LOOP_BUDGET, LOOP_BUDGET_GROWTH) if has_budget else None
        #: The outputs each request reads in its own tensors (`_Request.flags`): ran-out, then checks.
        self._flag_ports = ([self._n_out] if has_budget else []) + ([self._checks[0]] if self._checks else [])
        #: The check flags' bytes when every check passed.
        self._checks_passed = bytes(len(self._checks[1])) if self._checks else b""
        self._idle: list[_Request] = []
        self._lock = threading.Lock()

    # --- requests --------------------------------------------------------------------------------
    def _take(self) -> _Request:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Request(self.compiled, self._n_in, self._n_out, self._flag_ports)

    def _give(self, req: _Request) -> None:
        with self._lock:
            self._idle.append(req)

    # --- one execution ---------------------------------------------------------------------------
    def run(self, binding: Binding) -> list:
        req = self._take()
        results = self._run(req, binding)
        self._give(req)  # (a failed or cancelled request is not reused: its state is unknown)
        return results

    def _run(self, req: _Request, binding: Binding) -> list:
        if req.steady is binding:  # (a reusable execution's binding again: its tensors are set as they must be)
            self.call(req, binding)
            for view, own in req.steady_copies:
                view[...] = own  # (of one shape and dtype: a plain assignment costs a third of `np.copyto`)
            return req.steady_results
        req.steady = None
        r = req.request
        changed = False  # (a tensor set or a value copied in: the next run has to look again)
        for k in range(self._n_in):
            x = binding.input(k)
            if x is None:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"input {k} is omitted; the compiled model needs it")
            last = req.arrays[k]
            if last is x and req.inputs[k] != "owned":
                continue  # the array of the last execution, which its tensor points at (and holds)
            changed = True
            if x.nbytes <= SMALL_IO_BYTES and last is not x and self._copy_in(req, k, x):
                continue  # a new small array: copied (the same one twice in a row gets a tensor over it)
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            key = _key(x)
            if req.inputs[k] != key:
                r.set_input_tensor(k, ov.Tensor(writable_alias(x), shared_memory=True))
                req.inputs[k] = key
            req.arrays[k] = x
        views = []
        for k, shape in enumerate(self.static_output_shapes):
            view = binding.output_view(k, shape)
            if view is not None and view.flags.c_contiguous and view.nbytes > SMALL_IO_BYTES:
                key = _key(view)
                if req.outputs[k] != key:
                    r.set_output_tensor(k, ov.Tensor(view, shared_memory=True))
                    req.outputs[k] = key
                    changed = True
            else:
                if req.outputs[k] != "owned":
                    r.set_output_tensor(k, self._own_output(req, k))
                    req.outputs[k] = "owned"
                    changed = True
                own = req.own_outputs[k]
                if view is not None and not (view.dtype == own.dtype and view.shape == own.shape):
                    view = None
            views.append(view)
        if self.has_budget:
            self._loop_budget.run(lambda budget: self.call(req, binding, budget), binding)
        else:
            self.call(req, binding)
        results = []
        for k, view in enumerate(views):
            own = req.own_outputs[k]
            if req.outputs[k] != "owned":
                results.append(view)  # written in place
            elif view is not None:
                np.copyto(view, own)  # straight into the caller's region
                results.append(view)
            else:
                results.append(own.copy())
        changed = self._let_go(req, binding) or changed  # (a request that failed is not reused)
        if not changed and binding.kept and not self.has_budget and all(v is not None for v in views):
            req.steady, req.steady_results = binding, results
            req.steady_copies = [(view, req.own_outputs[k]) for k, view in enumerate(views)
                                 if req.outputs[k] == "owned"]
        return results

    def _let_go(self, req: _Request, binding: Binding) -> bool:
        """Point tensors over memory mapped for this request back at the request's own memory: only an
        in-process caller's arrays are kept between executions (`Binding.may_keep`); whether it did."""
        r = req.request
        changed = False
        for k in range(self._n_in):
            if req.inputs[k] not in (None, "owned") and not binding.may_keep(k):
                r.set_input_tensor(k, self._own_input(req, k))
                req.inputs[k], req.arrays[k] = "owned", None
                changed = True
        for k in range(self._n_out):
            if req.outputs[k] not in (None, "owned") and not binding.may_keep(k, output=True):
                r.set_output_tensor(k, self._own_output(req, k))
                req.outputs[k] = "owned"
                changed = True
        return changed

    def _own_input(self, req: _Request, k: int) -> ov.Tensor:
        """The request's own tensor for input `k` (made the first time; its pages cost nothing until written)."""
        if req.own_tensors[k] is None:
            port = self.compiled.input(k)
            req.own_tensors[k] = ov.Tensor(port.get_element_type(), port.get_shape())
            req.own_inputs[k] = req.own_tensors[k].data
        return req.own_tensors[k]

    def _own_output(self, req: _Request, k: int) -> ov.Tensor:
        """The request's own tensor for output `k` (made the first time)."""
        if req.owned[k] is None:
            port = self.compiled.output(k)
            req.owned[k] = ov.Tensor(port.get_element_type(), port.get_shape())
            req.own_outputs[k] = req.owned[k].data
        return req.owned[k]

    def _copy_in(self, req: _Request, k: int, x: np.ndarray) -> bool:
        """Copy input `k` into the request's own tensor (made and set the first time); False when that
        tensor does not take this array as it is."""
        self._own_input(req, k)
        own = req.own_inputs[k]
        if own.dtype != x.dtype or own.shape != x.shape:
            return False
        if req.inputs[k] != "owned":
            req.request.set_input_tensor(k, req.own_tensors[k])
            req.inputs[k] = "owned"
        np.copyto(own, x)
        req.arrays[k] = x
        return True

    def call(self, req: _Request, binding: Binding, budget: int | None = None) -> tuple[bool, None]:
        """One inference (with an iteration budget for a graph with loops), bounded and preemptible
        (`base.native`); its checks read; (whether a loop ran out of the budget, None)."""
        r = req.request
        if budget is not None:
            r.set_input_tensor(self._n_in, ov.Tensor(np.array(budget, np.int64)))
        run_native(binding, req.native)
        if self._checks is not None:  # (a failed check ends the execution, however the loops went)
            flags = req.flags[-1]
            if flags.tobytes() != self._checks_passed:  # (40 ns; `flags.any()` takes 570)
                raise_failed_check(self._checks[1], flags)
        return budget is not None and bool(req.flags[0]), None


