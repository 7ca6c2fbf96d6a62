"""Suite `validation`: what VTS-BEHAVIOURS section 5 requires a driver to refuse.

One check per model of the vector corpus (`ValidationTest.Test`; names with `inputs_as_internal` or
`all_tensors_as_inputs` are left out, as the VTS does; `--quick`: the stratified sample):

- validateModel (5.1): every mutation class of `mutations.py` applied to the model; each mutated model
  gets INVALID_ARGUMENT from get_supported_operations (when the preference and priority are still
  valid) and from prepare_model, with no model. A full run takes up to `PER_CLASS` variants of each
  class per model, spread over all of them; a quick run fewer.
- validateRequest (5.2): each request input and each output removed in turn, through execute (the
  launch), execute_synchronously, a burst and execute_fenced: INVALID_ARGUMENT, no shapes, no timing;
  and a fenced execution waiting on a null fence (-1).
- validateBurst (5.3, for our IBurst): wrong memory-identifier tokens are INVALID_ARGUMENT; releasing a
  known, an unknown and an already released token never fails.
- validateFailure: a model expected to fail either cannot be prepared or fails to execute.

A model the driver does not fully support still has its mutations checked; the request checks need a
prepared model, so they are left out for it (as the VTS returns when preparation fails).

Plus `NeuralnetworksHidlTest.CycleTest` and `GetCapabilitiesTest` (5.1).
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ...hal import (Capabilities, DataLocation, ErrorStatus, MeasureTiming, Model, NnError, Operand,
                    OperandLifeTime as L, OperandType as T, Operation, OperationType as Op, Request, Subgraph)
from .core import Check, Fail, Kit, Skip, make, skipped, status_name
from .corpus import Case, case, raw_model, selection
from .hal_exec import EXECUTORS, NO_TIMING, execute, inputs_kept, prepare, vts_io
from .models import add_relu_model
from .mutations import Mutation, mutations

SUITE = "validation"
#: Variants of each mutation class tried per model: a full run / a quick run.
PER_CLASS = 12
PER_CLASS_QUICK = 4
SHOW = 3


def _excluded(name: str) -> bool:
    return "inputs_as_internal" in name or "all_tensors_as_inputs" in name


def _judge(kit: Kit, mutation: Mutation) -> str | None:
    """None when the driver refused the mutated model as it must, else what it did."""
    if mutation.valid_options:
        status, flags, message = kit.attempt("get_supported_operations", kit.driver.get_supported_operations,
                                             mutation.model)
        if status != ErrorStatus.INVALID_ARGUMENT:
            got = f"returned {flags}" if status == ErrorStatus.NONE else f"answered {status_name(status)} ({message})"
            return f"get_supported_operations {got}, expected INVALID_ARGUMENT"
    status, prepared, message = kit.attempt("prepare_model", kit.driver.prepare_model, mutation.model,
                                            mutation.preference, mutation.priority, None, None, None)
    if status == ErrorStatus.NONE or prepared is not None:
        return "prepare_model returned a prepared model, expected INVALID_ARGUMENT"
    if status != ErrorStatus.INVALID_ARGUMENT:
        return f"prepare_model answered {status_name(status)} ({message}), expected INVALID_ARGUMENT"
    return None


def validate_model(kit: Kit, model: Model, label: str) -> None:
    per_class = PER_CLASS_QUICK if kit.quick else PER_CLASS
    bad, total = [], 0
    for mutation in mutations(model, per_class, kit.options.seed):
        total += 1
        problem = _judge(kit, mutation)
        if problem:
            bad.append(f"{mutation.describe()}: {problem}")
    if bad:
        raise Fail(f"{label}: {len(bad)} of {total} invalid mutations were not refused, e.g. " + "; ".join(bad[:SHOW]))


def _remove(request: Request, kind: str, k: int) -> Request:
    if kind == "input":
        return Request(request.inputs[:k] + request.inputs[k + 1:], request.outputs, request.pools)
    return Request(request.inputs, request.outputs[:k] + request.outputs[k + 1:], request.pools)


def validate_request(kit: Kit, c: Case, prepared: Any) -> None:
    with vts_io(c.inputs, c.output_nbytes()) as io:
        request = io.request
        n = 0
        for kind, count in (("input", len(request.inputs)), ("output", len(request.outputs))):
            for k in range(count):
                mutated = _remove(request, kind, k)
                for executor in EXECUTORS:
                    measure = MeasureTiming.YES if n % 2 else MeasureTiming.NO
                    n += 1
                    outcome = execute(kit, prepared, mutated, executor, measure)
                    what = f"removeInputTest/removeOutputTest: request {kind} {k} removed, {executor} execution"
                    if outcome.status != ErrorStatus.INVALID_ARGUMENT:
                        raise Fail(f"{what} answered {outcome.describe()}, expected INVALID_ARGUMENT")
                    if outcome.shapes:
                        raise Fail(f"{what}: INVALID_ARGUMENT came with output shapes {outcome.shapes}")
                    if outcome.timing.time_on_device != NO_TIMING or outcome.timing.time_in_driver != NO_TIMING:
                        raise Fail(f"{what}: INVALID_ARGUMENT came with a measured timing {outcome.timing}")
        try:
            with inputs_kept(request, "fenced execution waiting on a null fence"):
                kit.call("execute_fenced", prepared.execute_fenced, request, [-1], MeasureTiming.NO, None, None,
                         None)
        except NnError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                raise Fail(f"execute_fenced waiting on a null fence (-1) answered {status_name(e.status)}, "
                           "expected INVALID_ARGUMENT") from None
        else:
            raise Fail("execute_fenced accepted wait_for = [-1] (a null fence), expected INVALID_ARGUMENT")
        validate_burst(kit, prepared, request)


def validate_burst(kit: Kit, prepared: Any, request: Request) -> None:
    burst = kit.call("configure_execution_burst", prepared.configure_execution_burst)
    if burst is None or not hasattr(burst, "execute_synchronously"):
        raise Fail(f"configure_execution_burst returned {burst!r}, not an IBurst")
    pools = len(request.pools)
    for tokens, what in ((list(range(pools - 1)), f"{pools - 1} memory identifier tokens for {pools} pools"),
                         (list(range(pools + 1)), f"{pools + 1} memory identifier tokens for {pools} pools"),
                         ([-2] + list(range(1, pools)), "memory identifier token -2")):
        try:
            with inputs_kept(request, f"burst execution with {what}"):
                kit.call("IBurst.execute_synchronously", burst.execute_synchronously, request, tokens,
                         MeasureTiming.NO, None, None)
        except NnError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                raise Fail(f"a burst execution with {what} answered {status_name(e.status)}, expected "
                           "INVALID_ARGUMENT") from None
            continue
        raise Fail(f"a burst execution with {what} succeeded, expected INVALID_ARGUMENT")
    for token in (0, 0, 12345):   # a valid key, the same key again, an unknown key: never a failure
        kit.call("IBurst.release_memory_resource", burst.release_memory_resource, token)


def validate_failure(kit: Kit, c: Case | None, model: Model, inputs: list) -> None:
    """A model expected to fail: preparation fails, or execution of its request does."""
    status, prepared, _ = kit.attempt("prepare_model", kit.driver.prepare_model, model, 1, 1, None, None, None)
    if status != ErrorStatus.NONE:
        return
    if prepared is None:
        raise Fail("prepare_model returned neither a model nor an error")
    main = model.main
    sizes = []
    for i in main.output_indexes:
        o = main.operands[i]
        sizes.append(max(o.byte_size(), o.type.element_size))
    loops = any(op.type == Op.WHILE for op in main.operations)
    with vts_io(inputs, sizes) as io:
        outcome = execute(kit, prepared, io.request, "sync", MeasureTiming.NO, None, 10_000_000 if loops else None)
    if outcome.status == ErrorStatus.NONE:
        raise Fail("validateFailure: a model expected to fail was prepared and executed successfully")
    if outcome.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and outcome.shapes:
        raise Fail(f"validateFailure: {status_name(outcome.status)} came with output shapes")
    if outcome.timing.time_on_device != NO_TIMING or outcome.timing.time_in_driver != NO_TIMING:
        raise Fail(f"validateFailure: {status_name(outcome.status)} came with a measured timing")


def validation_test(kit: Kit, test: Any) -> None:
    if test.expect_failure:
        try:
            c = case(test)
            model, inputs = c.model, c.inputs
        except Fail:   # the runtime refuses to build it: send it to the driver field by field
            raw = raw_model(test)
            if raw is None:
                raise Skip("a model expected to fail with referenced subgraphs that the runtime cannot build")
            model, inputs, handle = raw
            if handle is not None:
                from ...memory import close_handle
                kit.on_close(lambda: close_handle(handle))
            c = None
        validate_failure(kit, c, model, inputs)
        return
    c = case(test)
    validate_model(kit, c.model, "validateModel")
    status, flags, message = kit.attempt("get_supported_operations", kit.driver.get_supported_operations, c.model)
    if status != ErrorStatus.NONE:
        raise Fail(f"get_supported_operations rejected the valid model: {status_name(status)}: {message}")
    if not all(flags):
        return   # as the VTS: a model the driver cannot prepare has no request to validate
    prepared = prepare(kit, c.model, test.name)
    validate_request(kit, c, prepared)


# --- NeuralnetworksHidlTest ----------------------------------------------------------------------------
def cycle_test(kit: Kit) -> None:
    """A 3-ADD graph with a cycle: get_supported_operations and prepare_model give INVALID_ARGUMENT."""
    f = lambda lifetime, consumers: Operand(T.TENSOR_FLOAT32, (1,), consumers, lifetime=lifetime)  # noqa: E731
    operands = [f(L.SUBGRAPH_INPUT, 1), f(L.SUBGRAPH_INPUT, 1), f(L.TEMPORARY_VARIABLE, 2),
                f(L.TEMPORARY_VARIABLE, 1), f(L.TEMPORARY_VARIABLE, 1), f(L.SUBGRAPH_OUTPUT, 0),
                Operand(T.INT32, (), 3, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, 4))]
    # a = in0 + c ; b = in1 + a ; c = a + b ; out = b (through ADD with b) -- a and c depend on each other
    operations = [Operation(Op.ADD, (0, 4, 6), (2,)), Operation(Op.ADD, (1, 2, 6), (3,)),
                  Operation(Op.ADD, (2, 3, 6), (4,)), Operation(Op.ADD, (3, 3, 6), (5,))]
    operands[3].number_of_consumers = 3
    model = Model(Subgraph(operands, operations, (0, 1), (5,)), [], bytes(4), [])
    status, flags, _ = kit.attempt("get_supported_operations", kit.driver.get_supported_operations, model)
    if status != ErrorStatus.INVALID_ARGUMENT:
        raise Fail(f"get_supported_operations on a graph with a cycle answered "
                   f"{status_name(status) if status != ErrorStatus.NONE else flags}, expected INVALID_ARGUMENT")
    status, prepared, _ = kit.attempt("prepare_model", kit.driver.prepare_model, model, 1, 1, None, None, None)
    if status == ErrorStatus.NONE or prepared is not None:
        raise Fail("prepare_model accepted a graph with a cycle")


def capabilities_test(kit: Kit) -> None:
    caps = kit.call("get_capabilities", kit.driver.get_capabilities)
    if not isinstance(caps, Capabilities):
        raise Fail(f"get_capabilities returned {caps!r}, not a Capabilities")
    infos = [("relaxed scalar", caps.relaxed_float32_to_float16_performance_scalar),
             ("relaxed tensor", caps.relaxed_float32_to_float16_performance_tensor),
             ("IF", caps.if_performance), ("WHILE", caps.while_performance)]
    infos += [(p.type.name, p.info) for p in caps.operand_performance]
    for label, info in infos:
        if not (info.exec_time > 0 and info.power_usage > 0):
            raise Fail(f"get_capabilities: the {label} performance {info} is not positive")
    types = [int(p.type) for p in caps.operand_performance]
    if types != sorted(types) or len(set(types)) != len(types):
        raise Fail(f"get_capabilities: operand_performance is not sorted by type without repeats: {types}")
    if int(T.SUBGRAPH) in types:
        raise Fail("get_capabilities: operand_performance lists SUBGRAPH")


def burst_tokens(kit: Kit) -> None:
    """validateBurst on the kit's ADD + RELU model: wrong memory identifier tokens are INVALID_ARGUMENT. Run
    where the driver is (`Check.inside`): across a service the proxy checks the tokens and the driver gets
    slots of its own, so only there does the driver's own IBurst answer."""
    model = kit.memo("add-relu", add_relu_model).to_hal()
    kit.supports(model, "ADD + RELU on float32 [4]")
    prepared = kit.memo("add-relu-prepared", lambda: prepare(kit, model, "ADD + RELU"))
    with vts_io([np.ones(4, np.float32), np.ones(4, np.float32)], [16]) as io:
        validate_burst(kit, prepared, io.request)


def checks(kit: Kit) -> Iterator[Check]:
    yield make(SUITE, "cycle", "§5.1 NeuralnetworksHidlTest.CycleTest", cycle_test)
    yield make(SUITE, "capabilities", "§5.1 NeuralnetworksHidlTest.GetCapabilitiesTest", capabilities_test)
    yield make(SUITE, "burst-tokens", "§5.3 ValidationTest validateBurst (memory identifier tokens)", burst_tokens,
               inside=True)
    try:
        tests = selection(kit)
    except Skip as e:
        yield skipped(SUITE, "corpus", "§5 ValidationTest.Test (every model of the corpus)", str(e))
        return
    for test in tests:
        if _excluded(test.name):
            continue
        yield make(SUITE, test.name, "§5.1-5.3 ValidationTest.Test (validateModel, validateRequest, validateBurst"
                   + (", validateFailure)" if test.expect_failure else ")"), validation_test, test)

