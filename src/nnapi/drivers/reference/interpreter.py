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
            self.steps.append(_Step(s, op.type, reg, op.inputs, op.outputs, release))

    def _tensor(self, index: int, values: dict[int, np.ndarray | None]) -> Tensor:
        operand = self.sub.operands[index]
        value = values.get(index)
        omitted = value is None and (operand.lifetime == OperandLifeTime.NO_VALUE or index in values)
        dims = operand.dimensions if value is None or operand.type.is_scalar else tuple(value.shape)
        return Tensor(operand.type, tuple(dims), operand.scale, operand.zero_point, operand.channel_quant,
                      value, omitted)

    def run(self, values: dict[int, np.ndarray | None], deadline: int | None = None,
            executor: "ModelExecutor | None" = None) -> dict[int, np.ndarray | None]:
        """Evaluate every step; `values` holds the subgraph inputs (None = omitted) and receives the outputs."""
        values.update(self.constants)
        operands = self.sub.operands
        check_allocation = executor.check_allocation if executor is not None else None
        ticket = current_ticket()  # the QoS work this thread runs, if any
        tracing = trace.active()
        for step in self.steps:
            if ticket is not None:  # checkpoint: deadline, preemption
                ticket.checkpoint(f"operation {step.index} ({step.type.name})")
            elif deadline is not None and time.monotonic_ns() > deadline:
                raise NnError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                              f"deadline passed before operation {step.index} ({step.type.name})")
            inputs = [self._tensor(i, values) for i in step.inputs]
            reg = step.registration
            for k, t in enumerate(inputs):
                if t.value is None and not t.omitted:
                    raise NnError(ErrorStatus.GENERAL_FAILURE,
                                  f"operation {step.index} ({step.type.name}): input {k} (operand "
                                  f"{step.inputs[k]}) has no value")
                if t.omitted and not reg.allow_omitted_operand:
                    raise NnError(ErrorStatus.INVALID_ARGUMENT,
                                  f"operation {step.index} ({step.type.name}): input {k} is omitted")
                if not reg.allow_zero_sized_input and t.value is not None and t.value.size == 0 \
                        and not t.type.is_scalar:
                    raise NnError(ErrorStatus.GENERAL_FAILURE,
                                  f"operation {step.index} ({step.type.name}): input {k} is zero-sized")
            outputs = [Tensor(operands[i].type, operands[i].dimensions, operands[i].scale,
                              operands[i].zero_point, operands[i].channel_quant) for i in step.outputs]
            ctx = OpContext(step.type, inputs, outputs, relaxed=self.relaxed, executor=executor)
            if tracing:
                start_us = trace.now_us()
            try:
                shapes = reg.prepare(ctx)
                if shapes is not None:
                    for k, (declared, dims) in enumerate(zip(outputs, shapes)):
                        _check_compatible(step, k, declared.dims, tuple(dims))
                        if check_allocation is not None and not declared.type.is_scalar:
                            check_allocation(dims, numpy_dtype(declared.type),
                                             f"operation {step.index} ({step.type.name}) output {k}")
                results = reg.execute(ctx)
                if shapes is None:  # data-dependent shapes (control flow): known after execute
                    shapes = [() if operands[i].type.is_scalar else tuple(np.shape(r))
                              for i, r in zip(step.outputs, results)]
                    for k, (declared, dims) in enumerate(zip(outputs, shapes)):
                        _check_compatible(step, k, declared.dims, tuple(dims))
            except NnError:
                raise
            except Exception as e:  # a kernel bug or an input the checks missed: never crash the driver
                raise NnError(ErrorStatus.GENERAL_FAILURE,
                              f"operation {step.index} ({step.type.name}) failed: {type(e).__name__}: {e}") from e
            if tracing:
                trace.complete(f"{step.index} {step.type.name}", "operation", start_us, trace.now_us(),
                               device="reference", app=ticket.uid if ticket is not None else None)
            for k, (i, r, dims) in enumerate(zip(step.outputs, results, shapes)):
                r = np.asarray(r)
                if operands[i].type.is_scalar:
                    r = r.reshape(())
                elif tuple(r.shape) != tuple(dims):
                    raise NnError(ErrorStatus.GENERAL_FAILURE,
                                  f"operation {step.index} ({step.type.name}): output {k} has shape "
                                  f"{tuple(r.shape)}, expected {tuple(dims)}")
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
