"""The reference interpreter: runs a subgraph operation by operation through the ops registry.

A `SubgraphPlan` is built once per prepared model (constants materialised, registrations looked
up, last uses computed); `run` then evaluates it over input arrays. Between operations is the QoS
checkpoint: the scheduler ticket this thread runs (`nnapi.qos`) aborts there once the deadline has
passed (MISSED_DEADLINE_TRANSIENT) and may pause there for higher-priority work; a paused run keeps
its place and its live operands on this thread's stack and resumes from the same operation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import tracing as trace
from ...hal import (ErrorStatus, Model, NnError, OperandLifeTime, OperationType, Subgraph)
from ...memory import MappedPool
from ...ops import OpContext, OperationRegistration, Tensor, find_operation, numpy_dtype
from ...qos import current as current_ticket

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE, OperandLifeTime.SUBGRAPH)


@dataclass
class _Step:
    index: int
    type: OperationType
    registration: OperationRegistration
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    #: Operands whose last reader is this step (freed after it runs).
    release: tuple[int, ...]
    #: Per input: (operand index, operand, its lifetime is NO_VALUE, scalar, declared dimensions,
    #: the Tensor of a constant made once, else None).
    input_specs: tuple = ()
    #: "operation 3 (ADD)", for messages.
    label: str = ""
    #: The declared outputs as kernels see them (made once) and whether each is a scalar.
    output_tensors: tuple = ()
    output_scalar: tuple = ()


def constant_value(model: Model, sub: Subgraph, index: int, pools: list[MappedPool]) -> np.ndarray | None:
    """The value of a constant operand as a read-only numpy array (0-d for scalars)."""
    operand = sub.operands[index]
    loc = operand.location
    dtype = numpy_dtype(operand.type)
    if operand.lifetime == OperandLifeTime.SUBGRAPH:
        return np.array(loc.offset, dtype=np.uint32)  # the referenced subgraph's index
    if operand.lifetime == OperandLifeTime.CONSTANT_COPY:
        data = memoryview(model.operand_values)[loc.offset:loc.offset + loc.length]
    elif operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
        data = pools[loc.pool_index].view(loc.offset, loc.length)
    else:
        return None
    shape = () if operand.type.is_scalar else operand.dimensions
    arr = np.frombuffer(data, dtype=dtype)
    if arr.dtype == np.bool_ and arr.size and arr.view(np.uint8).max() > 1:
        arr = arr.view(np.uint8) != 0  # any non-zero byte is true
    return arr.reshape(shape)


class SubgraphPlan:
    """A subgraph ready to run: steps in order and its constants."""

    def __init__(self, model: Model, sub: Subgraph, pools: list[MappedPool]) -> None:
        self.model = model
        self.sub = sub
        self.relaxed = model.relax_computation_float32_to_float16
        self.constants: dict[int, np.ndarray | None] = {}
        for i, operand in enumerate(sub.operands):
            if operand.lifetime in _CONSTANT:
                self.constants[i] = constant_value(model, sub, i, pools)
            elif operand.lifetime == OperandLifeTime.NO_VALUE:
                self.constants[i] = None
        keep = set(sub.output_indexes) | set(self.constants)
        last_use: dict[int, int] = {}
        for s, op in enumerate(sub.operations):
            for i in op.inputs:
                last_use[i] = s
        self.steps: list[_Step] = []
        for s, op in enumerate(sub.operations):
            reg = find_operation(op.type)
            if reg is None:
                raise NnError(ErrorStatus.INVALID_ARGUMENT, f"operation {s} ({op.type.name}) is not supported "
                                                            "by the reference driver")
            release = tuple(i for i in set(op.inputs) if last_use.get(i) == s and i not in keep)
            ins = tuple(self._input_spec(reg, i) for i in op.inputs)
            outs = tuple(sub.operands[i] for i in op.outputs)
            self.steps.append(_Step(s, op.type, reg, op.inputs, op.outputs, release, ins,
                                    f"operation {s} ({op.type.name})",
                                    tuple(Tensor(o.type, tuple(o.dimensions), o.scale, o.zero_point, o.channel_quant)
                                          for o in outs),
                                    tuple(o.type.is_scalar for o in outs)))

    def _input_spec(self, reg: OperationRegistration, i: int) -> tuple:
        """What `run` needs of input operand `i`, with the Tensor of a usable constant made now (kernels
        never change the tensors they are given)."""
        operand = self.sub.operands[i]
        scalar = operand.type.is_scalar
        dims = tuple(operand.dimensions)
        value = self.constants.get(i)
        fixed = None
        if value is not None and (scalar or value.size or reg.allow_zero_sized_input):
            fixed = Tensor(operand.type, dims if scalar else value.shape, operand.scale, operand.zero_point,
                           operand.channel_quant, value, False)
        return i, operand, operand.lifetime == OperandLifeTime.NO_VALUE, scalar, dims, fixed

    def run(self, values: dict[int, np.ndarray | None], deadline: int | None = None,
            executor: "ModelExecutor | None" = None) -> dict[int, np.ndarray | None]:
        """Evaluate every step; `values` holds the subgraph inputs (None = omitted) and receives the outputs."""
        values.update(self.constants)
        check_allocation = executor.check_allocation if executor is not None else None
        ticket = current_ticket()  # the QoS work this thread runs, if any
        tracing = trace.active()
        relaxed = self.relaxed
        for step in self.steps:
            if ticket is not None:  # checkpoint: deadline, preemption
                ticket.checkpoint(step.label)
            elif deadline is not None and time.monotonic_ns() > deadline:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before {step.label}")
            reg = step.registration
            inputs = []
            for k, (i, operand, no_value, scalar, dims, fixed) in enumerate(step.input_specs):
                if fixed is not None:
                    inputs.append(fixed)
                    continue
                value = values.get(i)
                if value is None:
                    omitted = no_value or i in values
                    if not omitted:
                        raise NnError(ErrorStatus.GENERAL_FAILURE,
                                      f"{step.label}: input {k} (operand {i}) has no value")
                    if not reg.allow_omitted_operand:
                        raise NnError(ErrorStatus.INVALID_ARGUMENT, f"{step.label}: input {k} is omitted")
                    inputs.append(Tensor(operand.type, dims, operand.scale, operand.zero_point,
                                         operand.channel_quant, None, True))
                    continue
                if not scalar and value.size == 0 and not reg.allow_zero_sized_input:
                    raise NnError(ErrorStatus.GENERAL_FAILURE, f"{step.label}: input {k} is zero-sized")
                inputs.append(Tensor(operand.type, dims if scalar else value.shape,
                                     operand.scale, operand.zero_point, operand.channel_quant, value, False))
            outputs = step.output_tensors
            ctx = OpContext(step.type, inputs, outputs, relaxed=relaxed, executor=executor)
            if tracing:
                start_us = trace.now_us()
            try:
                shapes = reg.prepare(ctx)
                if shapes is not None:
                    for k, (declared, dims, scalar) in enumerate(zip(outputs, shapes, step.output_scalar)):
                        if declared.dims != dims:
                            _check_compatible(step, k, declared.dims, tuple(dims))
                        if check_allocation is not None and not scalar:
                            check_allocation(dims, declared.dtype, f"{step.label} output {k}")
                results = reg.execute(ctx)
                if shapes is None:  # data-dependent shapes (control flow): known after execute
                    shapes = [() if scalar else tuple(np.shape(r)) for scalar, r in zip(step.output_scalar, results)]
                    for k, (declared, dims) in enumerate(zip(outputs, shapes)):
                        _check_compatible(step, k, declared.dims, tuple(dims))
            except NnError:
                raise
            except Exception as e:  # a kernel bug or an input the checks missed: never crash the driver
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"{step.label} failed: {type(e).__name__}: {e}") from e
            if tracing:
                trace.complete(f"{step.index} {step.type.name}", "operation", start_us, trace.now_us(),
                               device="reference", app=ticket.uid if ticket is not None else None)
            for k, (i, r, dims, scalar) in enumerate(zip(step.outputs, results, shapes, step.output_scalar)):
                if type(r) is not np.ndarray:
                    r = np.asarray(r)
                if scalar:
                    r = r.reshape(())
                elif r.shape != tuple(dims):
                    raise NnError(ErrorStatus.GENERAL_FAILURE,
                                  f"{step.label}: output {k} has shape {tuple(r.shape)}, expected {tuple(dims)}")
                values[i] = r
            for i in step.release:
                values.pop(i, None)
        return values


def _check_compatible(step: _Step, k: int, declared: tuple[int, ...], inferred: tuple[int, ...]) -> None:
    if not declared:
        return
    if len(declared) != len(inferred) or any(d and d != e for d, e in zip(declared, inferred)):
        raise NnError(ErrorStatus.GENERAL_FAILURE,
                      f"operation {step.index} ({step.type.name}): output {k} has inferred shape {inferred}, "
                      f"incompatible with the declared {declared}")


class ModelExecutor:
    """Runs one execution of a model: the main plan and, for IF/WHILE, its referenced subgraphs."""

    def __init__(self, plans: list[SubgraphPlan], deadline: int | None, loop_timeout_ns: int,
                 check_allocation: Callable[[tuple[int, ...], np.dtype, str], None] | None = None) -> None:
        self.plans = plans  # referenced subgraph plans, by index
        self.deadline = deadline
        self.loop_timeout_ns = loop_timeout_ns
        #: Raises RESOURCE_EXHAUSTED_PERSISTENT before a tensor larger than the driver's limit is computed.
        self.check_allocation = check_allocation
        self._ticket = current_ticket()

    def now_ns(self) -> int:
        """The clock WHILE measures its loop timeout on: running time, which stops while the
        execution is paused for higher-priority work (monotonic time outside the scheduler)."""
        return self._ticket.running_ns() if self._ticket is not None else time.monotonic_ns()

    def run_subgraph(self, index: int, inputs) -> list[np.ndarray]:
        plan = self.plans[index]
        sub = plan.sub
        if len(inputs) != len(sub.input_indexes):
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"referenced subgraph {index} takes "
                                                       f"{len(sub.input_indexes)} inputs, got {len(inputs)}")
        values = dict(zip(sub.input_indexes, inputs))
        plan.run(values, self.deadline, self)
        return [values[i] for i in sub.output_indexes]
