"""The partitioner: the best device for each operation, grouped into steps (Android's ExecutionPlan).

Each operation goes to the supporting device with the lowest reported cost for its input-0
operand type (power for LOW_POWER, time otherwise); ties go to the reference device. When every
operation lands on one device the plan is one step holding the whole model; otherwise ready
operations are drained device by device into steps, and each step becomes a model of its own
whose boundary temporaries are step inputs and outputs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import hal
from ..hal import (ExecutionPreference, NnError, OperandLifeTime, OperationType, ResultCode)
from .devices import Device


@dataclass
class Step:
    """One partition: a device, the model it runs, and how its I/O maps to main-model operands."""

    device: Device
    model: hal.Model
    operations: list[int]
    #: Main-model operand index of each step input / output, in step order.
    inputs: list[int]
    outputs: list[int]
    prepared: hal.IPreparedModel | None = None
    cache: object | None = None  # CacheOutcome, set by the compilation


def _cost(device: Device, model: hal.Model, op: hal.Operation, preference: ExecutionPreference) -> float:
    caps = device.capabilities
    if op.type in (OperationType.IF, OperationType.WHILE):
        info = caps.if_performance if op.type == OperationType.IF else caps.while_performance
    else:
        operand_type = model.main.operands[op.inputs[0]].type if op.inputs else hal.OperandType.TENSOR_FLOAT32
        if model.relax_computation_float32_to_float16 and operand_type == hal.OperandType.TENSOR_FLOAT32:
            info = caps.relaxed_float32_to_float16_performance_tensor
        elif model.relax_computation_float32_to_float16 and operand_type == hal.OperandType.FLOAT32:
            info = caps.relaxed_float32_to_float16_performance_scalar
        else:
            info = caps.performance(operand_type)
    return info.power_usage if preference == ExecutionPreference.LOW_POWER else info.exec_time


def supported_by(devices: list[Device], model: hal.Model) -> dict[str, list[bool]]:
    """Each device's answer to get_supported_operations; a failing driver supports nothing."""
    n = len(model.main.operations)
    answers = {}
    for d in devices:
        try:
            flags = list(d.driver.get_supported_operations(model))
            answers[d.name] = flags if len(flags) == n else [False] * n
        except NnError as e:
            if e.status == hal.ErrorStatus.INVALID_ARGUMENT:
                raise NnError(ResultCode.BAD_DATA, f"device {d.name} rejected the model: {e.message}") from None
            answers[d.name] = [False] * n
        except Exception:
            answers[d.name] = [False] * n
    return answers


def assign_devices(devices: list[Device], model: hal.Model, preference: ExecutionPreference) -> list[Device]:
    """The chosen device of every main-model operation; BAD_DATA naming an operation no device can run."""
    support = supported_by(devices, model)
    chosen = []
    for i, op in enumerate(model.main.operations):
        best: Device | None = None
        best_cost = 0.0
        for d in devices:
            if not support[d.name][i]:
                continue
            cost = _cost(d, model, op, preference)
            if best is None or cost < best_cost or (cost == best_cost and d.name == "reference"):
                best, best_cost = d, cost
        if best is None:
            raise NnError(ResultCode.BAD_DATA, f"no device can run operation {i} ({op.type.name}) "
                                               f"(devices: {', '.join(d.name for d in devices)})")
        chosen.append(best)
    return chosen


def partition(devices: list[Device], model: hal.Model, preference: ExecutionPreference) -> list[Step]:
    """Steps in execution order; one step with the whole model when a single device gets everything."""
    main = model.main
    if not main.operations:
        raise NnError(ResultCode.BAD_DATA, "the model has no operations")
    chosen = assign_devices(devices, model, preference)
    if all(d is chosen[0] for d in chosen):
        return [Step(chosen[0], model, list(range(len(main.operations))), list(main.input_indexes),
                     list(main.output_indexes))]
    # Group ready operations per device, draining one device's queue into one step at a time.
    writer = {o: i for i, op in enumerate(main.operations) for o in op.outputs}
    pending = {i: {writer[o] for o in op.inputs if o in writer} for i, op in enumerate(main.operations)}
    done: set[int] = set()
    groups: list[tuple[Device, list[int]]] = []
    while len(done) < len(main.operations):
        ready = [i for i in range(len(main.operations)) if i not in done and pending[i] <= done]
        # Prefer a driver's queue before the reference device's, as Android drains higher-index queues first.
        device = next((chosen[i] for i in ready if chosen[i].name != "reference"), chosen[ready[0]])
        ops: list[int] = []
        while True:
            batch = [i for i in range(len(main.operations)) if i not in done and chosen[i] is device
                     and pending[i] <= done]
            if not batch:
                break
            ops.extend(batch)
            done.update(batch)
        groups.append((device, sorted(ops)))
    return [_step_model(model, device, ops, groups) for device, ops in groups]


def _step_model(model: hal.Model, device: Device, ops: list[int], groups) -> Step:
    """A model of just `ops`: constants kept, boundary temporaries turned into step inputs and outputs."""
    main = model.main
    in_step = set(ops)
    produced = {o for i in ops for o in main.operations[i].outputs}
    used_later = {o for _, other in groups for i in other if i not in in_step for o in main.operations[i].inputs}
    touched: list[int] = []
    for i in ops:
        for o in (*main.operations[i].inputs, *main.operations[i].outputs):
            if o not in touched:
                touched.append(o)
    remap = {o: k for k, o in enumerate(touched)}
    operands = []
    inputs, outputs = [], []
    for o in touched:
        operand = dataclasses.replace(main.operands[o])
        lifetime = operand.lifetime
        if lifetime in (OperandLifeTime.SUBGRAPH_INPUT,) or (
                lifetime in (OperandLifeTime.TEMPORARY_VARIABLE, OperandLifeTime.SUBGRAPH_OUTPUT)
                and o not in produced):
            operand.lifetime = OperandLifeTime.SUBGRAPH_INPUT
            inputs.append(o)
        elif o in produced and (lifetime == OperandLifeTime.SUBGRAPH_OUTPUT or o in used_later):
            operand.lifetime = OperandLifeTime.SUBGRAPH_OUTPUT
            outputs.append(o)
        operand.number_of_consumers = sum(main.operations[i].inputs.count(o) for i in ops)
        operands.append(operand)
    operations = [hal.Operation(main.operations[i].type, tuple(remap[o] for o in main.operations[i].inputs),
                                tuple(remap[o] for o in main.operations[i].outputs)) for i in ops]
    sub = hal.Subgraph(operands, operations, tuple(remap[o] for o in inputs), tuple(remap[o] for o in outputs))
    step_model = hal.Model(sub, model.referenced, model.operand_values, model.pools,
                           model.relax_computation_float32_to_float16)
    return Step(device, step_model, ops, inputs, outputs)
