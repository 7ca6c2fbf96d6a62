"""The partitioner: which device runs each operation, grouped into steps (Android's ExecutionPlan).

Each operation costs, on a device that supports it, the device's reported ratio to the CPU
reference for its input-0 operand type (power for LOW_POWER, time otherwise) times an estimate of
its work (a fixed cost per operation plus its elements and multiply-accumulates). A partition
boundary costs too: one more launch and the tensors crossing it. The plan is the cheapest of
(a) each operation on its cheapest device, then runs of operations moved to a neighbouring
device wherever the move saves more than it costs, so a single cheap operation never splits a
graph, and (b) the whole model on each single device that supports all of it. Ties go to the
reference device. Ready operations are then drained device by device into steps, and each step
becomes a model of its own whose boundary temporaries are step inputs and outputs.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from dataclasses import dataclass

from .. import hal
from ..hal import (ExecutionPreference, NnError, OperandLifeTime, OperationType, ResultCode)
from .devices import CLAIM_TIMEOUT_S, Device, bounded

log = logging.getLogger("nnapi.runtime")


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
    #: Times the step's first executions for the latency record (`latency.Observer`), until it is done.
    observer: object | None = None

    @classmethod
    def whole(cls, device: Device, model: hal.Model) -> "Step":
        """The one step that runs the whole model on `device`."""
        main = model.main
        return cls(device, model, list(range(len(main.operations))), list(main.input_indexes),
                   list(main.output_indexes))


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
    """Each device's answer to get_supported_operations, asked of all at once; a failing driver, or one
    that has not answered within CLAIM_TIMEOUT_S, supports nothing (logged)."""
    n = len(model.main.operations)
    claims = {d.name: bounded(lambda d=d: d.driver.get_supported_operations(model), CLAIM_TIMEOUT_S,
                              f"nnapi-claim-{d.name}") for d in devices}
    concurrent.futures.wait(list(claims.values()), timeout=CLAIM_TIMEOUT_S)
    answers = {}
    for d in devices:
        claim = claims[d.name]
        if not claim.done():
            log.warning("device %s: get_supported_operations has not answered within %g s: it runs nothing of "
                        "this model", d.name, CLAIM_TIMEOUT_S)
            answers[d.name] = [False] * n
            continue
        try:
            flags = list(claim.result())
            answers[d.name] = flags if len(flags) == n and all(f in (True, False) for f in flags) else [False] * n
            if answers[d.name] is not flags:
                log.warning("device %s: get_supported_operations answered %d values for %d operations: it runs "
                            "nothing of this model", d.name, len(flags), n)
        except NnError as e:
            if e.status == hal.ErrorStatus.INVALID_ARGUMENT:
                raise NnError(ResultCode.BAD_DATA, f"device {d.name} rejected the model: {e.message}") from None
            if e.status == hal.ErrorStatus.DEVICE_UNAVAILABLE:  # a dead service: the compilation decides
                raise NnError(ResultCode.UNAVAILABLE_DEVICE, f"device {d.name}: {e.message}") from None
            answers[d.name] = [False] * n
        except Exception as e:
            log.warning("device %s: get_supported_operations raised %s: %s", d.name, type(e).__name__, e)
            answers[d.name] = [False] * n
    return answers


#: The fixed cost of one operation on the CPU reference, in ns (dispatch, checks, bookkeeping).
OP_NS = 20_000.0
#: Reference cost per element read or written, or per multiply-accumulate, in ns.
UNIT_NS = 0.5
#: What one more step costs: a launch on a device, its request, its admission, in ns.
STEP_NS = 150_000.0
#: What a byte crossing a step boundary costs (written to shared memory, read back), in ns.
BYTE_NS = 0.2


def _costs(devices: list[Device], model: hal.Model, preference: ExecutionPreference,
           support: dict[str, list[bool]]) -> dict[str, list[float | None]]:
    """Per device, the estimated cost of each operation (None where unsupported)."""
    from ..qos.estimate import operation_work
    main = model.main
    base = [OP_NS + UNIT_NS * operation_work(main, op) for op in main.operations]
    return {d.name: [b * _cost(d, model, op, preference) if ok else None
                     for b, op, ok in zip(base, main.operations, support[d.name])] for d in devices}


def _boundary_bytes(model: hal.Model, chosen: list[Device]) -> int:
    """Bytes of the computed tensors one device writes and another reads."""
    main = model.main
    writer = {o: i for i, op in enumerate(main.operations) for o in op.outputs}
    crossing = {o for i, op in enumerate(main.operations) for o in op.inputs
                if o in writer and chosen[writer[o]] is not chosen[i]}
    return sum(main.operands[o].byte_size() for o in crossing)


def _plan_cost(model: hal.Model, chosen: list[Device], costs: dict[str, list[float | None]]) -> float:
    runs = 1 + sum(1 for a, b in zip(chosen, chosen[1:]) if a is not b)
    return (sum(costs[d.name][i] for i, d in enumerate(chosen)) + STEP_NS * runs
            + BYTE_NS * _boundary_bytes(model, chosen))


#: Most steps a plan has, unless no device can take a run over from its neighbours.
MAX_STEPS = 3


def _merge_runs(chosen: list[Device], costs: dict[str, list[float | None]]) -> list[Device]:
    """Move runs of operations (in execution order) to a neighbouring run's device while that saves
    more than the boundaries it removes cost, then, while there are more than MAX_STEPS runs, make
    the move that costs least."""
    chosen = list(chosen)
    for _ in range(4 * len(chosen) + 1):
        runs: list[tuple[int, int]] = []  # [start, end) of same-device runs
        for i in range(len(chosen)):
            if runs and chosen[runs[-1][0]] is chosen[i]:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        best: tuple[float, int, Device] | None = None
        for r, (start, end) in enumerate(runs):
            here = chosen[start]
            for neighbour in {chosen[runs[n][0]] for n in (r - 1, r + 1) if 0 <= n < len(runs)}:
                moved = [costs[neighbour.name][i] for i in range(start, end)]
                if any(c is None for c in moved):
                    continue
                joined = sum(1 for n in (r - 1, r + 1) if 0 <= n < len(runs) and chosen[runs[n][0]] is neighbour)
                delta = sum(moved) - sum(costs[here.name][i] for i in range(start, end)) - STEP_NS * joined
                if (delta < 0 or len(runs) > MAX_STEPS) and (best is None or delta < best[0]):
                    best = (delta, r, neighbour)
        if best is None:
            return chosen
        start, end = runs[best[1]]
        chosen[start:end] = [best[2]] * (end - start)
    return chosen


def assign_devices(devices: list[Device], model: hal.Model, preference: ExecutionPreference,
                   measured: dict[str, float] | None = None) -> list[Device]:
    """The chosen device of every main-model operation (see the module doc); BAD_DATA naming an
    operation no device can run. `measured`: the recorded latency (ns) of the whole model on some
    devices, which replaces the estimate of their single-device plans (see `_measured_costs`)."""
    support = supported_by(devices, model)
    costs = _costs(devices, model, preference, support)
    chosen = []
    for i, op in enumerate(model.main.operations):
        best: Device | None = None
        for d in devices:
            cost = costs[d.name][i]
            if cost is None:
                continue
            if best is None or cost < costs[best.name][i] or (cost == costs[best.name][i] and d.name == "reference"):
                best = d
        if best is None:
            raise NnError(ResultCode.BAD_DATA, f"no device can run operation {i} ({op.type.name}) "
                                               f"(devices: {', '.join(d.name for d in devices)})")
        chosen.append(best)
    plans = [_merge_runs(chosen, costs)]
    plans += [[d] * len(chosen) for d in devices if all(c is not None for c in costs[d.name])]
    estimates = [_plan_cost(model, plan, costs) for plan in plans]
    if measured and preference != ExecutionPreference.LOW_POWER:
        estimates = _measured_costs(plans, estimates, measured)
    scored = [(cost, plan[0].name != "reference", k, plan) for k, (cost, plan) in enumerate(zip(estimates, plans))]
    best_plan = min(scored, key=lambda x: x[:3])[3]
    if log.isEnabledFor(logging.INFO):
        n = len(model.main.operations)
        log.info("placement of %d operations: %s; estimated cost of each plan (from the devices' capabilities%s): "
                 "%s; chosen: %s", n, ", ".join(f"{d.name} supports {sum(support[d.name])}" for d in devices),
                 ", and the latency measured on " + ", ".join(sorted(measured)) if measured else "",
                 ", ".join(dict.fromkeys(f"{_plan_name(plan)} {cost / 1e6:.3g} ms" for cost, _, _, plan in scored)),
                 _plan_name(best_plan))
    return best_plan


def _measured_costs(plans: list[list[Device]], estimates: list[float], measured: dict[str, float]) -> list[float]:
    """Plan costs where measurements exist: a single-device plan whose device has a recorded latency
    costs that; every other plan's estimate is scaled by how far the estimates of the measured plans
    were off (the median of measured / estimated), so that estimates and measurements compare: a
    device measured slower than another measured one, or than another's scaled estimate, loses the model."""
    ratios = sorted(measured[plan[0].name] / cost for plan, cost in zip(plans[1:], estimates[1:])
                    if plan[0].name in measured and cost > 0)
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return [measured[plan[0].name] if k > 0 and plan[0].name in measured else cost * scale
            for k, (plan, cost) in enumerate(zip(plans, estimates))]


def _plan_name(plan: list[Device]) -> str:
    """`xla` for a plan of one device, else its devices and how many operations each runs."""
    names = [d.name for d in plan]
    if len(set(names)) == 1:
        return names[0]
    return "split (" + ", ".join(f"{name} {names.count(name)}" for name in dict.fromkeys(names)) + ")"


def partition(devices: list[Device], model: hal.Model, preference: ExecutionPreference,
              measured: dict[str, float] | None = None) -> list[Step]:
    """Steps in execution order; one step with the whole model when a single device gets everything
    (`measured`: see `assign_devices`)."""
    main = model.main
    if not main.operations:
        raise NnError(ResultCode.BAD_DATA, "the model has no operations")
    chosen = assign_devices(devices, model, preference, measured)
    if all(d is chosen[0] for d in chosen):
        return [Step.whole(chosen[0], model)]
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
