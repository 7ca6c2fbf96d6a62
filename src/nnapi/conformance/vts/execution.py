"""Suite `execution`: the generated-test harness of VTS-BEHAVIOURS section 6, for any driver.

First the kit's own models, so each behaviour has a check of its own name: synchronous, asynchronous
(a callback that never comes fails after the kit's time limit), fenced (also after a real sync fence),
burst, reusable (Android 13's IExecution, computed twice), in-place pointer pools, dynamic output shapes, OUTPUT_INSUFFICIENT_SIZE with the needed shapes,
and measured timing (time on the device <= time in the driver, UINT64_MAX when not asked).

Then one check per model of the vector corpus (`--quick`: the stratified sample), each running the
VTS configurations (6.1): GENERAL {sync, async, burst, reusable} x timing {NO, YES}; FENCED_COMPUTE (fenced x
timing, a second fenced execution waiting on a returned fence); shared memory read in place
(pointers); MEMORY_DOMAIN {sync, async, fenced} with every input and output in its own driver buffer;
DYNAMIC_SHAPE with every output dimension unknown, UNSPECIFIED and INSUFFICIENT through {sync, async,
burst} x timing, fenced refused. Outputs are compared with AOSP's tolerances. A dynamic-shape or
memory-domain configuration a driver answers with GENERAL_FAILURE counts as not supported (skipped
within the check), as the VTS allows.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Iterator

import numpy as np

from ...hal import (BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, MemoryPool, Model, NnError,
                    Request, RequestArgument, Subgraph)
from .core import Check, Fail, Kit, Skip, make, skipped, status_name
from .corpus import Case, case, selection
from .hal_exec import (NO_TIMING, Io, Outcome, Region, execute, execute_fenced_after, execute_fenced_chain,
                       expect, expect_no_timing, expect_timing_order, inputs_kept, prepare, shared_memory, vts_io)
from .models import add_relu_model, alternating_chain_subject, dynamic_relu_model

SUITE = "execution"
G = "§6.1 GeneratedTest.Test"
MEASURES = (MeasureTiming.NO, MeasureTiming.YES)


# --- the kit's models --------------------------------------------------------------------------------------
X = np.array([1, -2, 3, -4], np.float32)
Y = np.array([1, 1, 1, 1], np.float32)
GOLDEN = [2.0, 0.0, 4.0, 0.0]


def _add_relu(kit: Kit) -> Any:
    model = kit.memo("add-relu", add_relu_model).to_hal()
    kit.supports(model, "ADD + RELU on float32 [4]")
    return kit.memo("add-relu-prepared", lambda: prepare(kit, model, "ADD + RELU"))


def executor_check(kit: Kit, executor: str, measure: MeasureTiming) -> None:
    prepared = _add_relu(kit)
    what = f"{executor} execution (timing {measure.name})"
    with vts_io([X, Y], [16]) as io:
        if executor == "fenced":
            outcome = execute_fenced_chain(kit, prepared, io.request, measure)
        else:
            outcome = execute(kit, prepared, io.request, executor, measure)
        expect(outcome, ErrorStatus.NONE, what)
        _timing_rules(outcome, measure, what)
        if outcome.shapes and [(tuple(s.dimensions), s.is_sufficient) for s in outcome.shapes] != [((4,), True)]:
            raise Fail(f"{what}: output shapes {outcome.shapes}, expected one sufficient [4]")
        got = io.output_array(0, np.float32, (4,)).tolist()
        if got != GOLDEN:
            raise Fail(f"{what} computed {got}, expected {GOLDEN}")


def _timing_rules(outcome: Outcome, measure: MeasureTiming, what: str) -> None:
    if measure == MeasureTiming.NO:
        expect_no_timing(outcome, what)
    else:
        expect_timing_order(outcome.timing, what)
        if outcome.fenced_timing is not None:
            expect_timing_order(outcome.fenced_timing, what + " (timing since the fences)")


def timing_check(kit: Kit, executor: str) -> None:
    """MeasureTiming YES on a chain of 10 operations: when reported, time on device <= time in driver."""
    subject = kit.memo("exec-chain", lambda: alternating_chain_subject(10, 256))
    kit.supports(subject.hal, "an ADD / MUL chain")
    prepared = kit.memo("exec-chain-prepared", lambda: prepare(kit, subject.hal, "an ADD / MUL chain"))
    what = f"{executor} execution with timing measured"
    for _ in range(3):
        with vts_io(subject.inputs, [subject.golden[0].nbytes]) as io:
            outcome = (execute_fenced_chain(kit, prepared, io.request, MeasureTiming.YES) if executor == "fenced"
                       else execute(kit, prepared, io.request, executor, MeasureTiming.YES))
            expect(outcome, ErrorStatus.NONE, what)
            _timing_rules(outcome, MeasureTiming.YES, what)
            problem = subject.problem([io.output_array(0, np.float32, (256,))])
            if problem:
                raise Fail(f"{what}: wrong outputs: {problem}")


def async_callback(kit: Kit) -> None:
    """An asynchronous execution calls its callback exactly once, within the time limit."""
    prepared = _add_relu(kit)
    done = threading.Event()
    calls: list = []

    def callback(*args: Any) -> None:
        calls.append(args)
        done.set()

    with vts_io([X, Y], [16]) as io, inputs_kept(io.request, "async execution"):
        try:
            kit.call("execute (asynchronous)", prepared.execute, io.request, MeasureTiming.NO, None, None, callback)
        except NnError as e:
            raise Fail(f"execute (asynchronous) of a valid request raised {status_name(e.status)} at launch") from None
        kit.wait(done, "the callback of execute (asynchronous)")
        threading.Event().wait(0.05)   # room for a wrong second call
        if len(calls) != 1:
            raise Fail(f"the callback of execute (asynchronous) was called {len(calls)} times, expected once")
        status = calls[0][0] if calls[0] else None
        if status != ErrorStatus.NONE:
            raise Fail(f"the callback of a valid asynchronous execution reported {status!r}, expected NONE")
        got = io.output_array(0, np.float32, (4,)).tolist()
        if got != GOLDEN:
            raise Fail(f"the asynchronous execution computed {got}, expected {GOLDEN} (by the time of the callback)")


def fenced_waits_for_fence(kit: Kit) -> None:
    """execute_fenced runs only after its wait_for fences are signalled, then succeeds."""
    prepared = _add_relu(kit)
    fence = os.eventfd(0, os.EFD_CLOEXEC)
    signalled = threading.Event()

    def signal() -> None:
        signalled.set()
        os.eventfd_write(fence, 1)

    timer = threading.Timer(0.05, signal)
    try:
        with vts_io([X, Y], [16]) as io:
            timer.start()
            outcome = execute_fenced_after(kit, prepared, io.request, [fence])
            expect(outcome, ErrorStatus.NONE, "execute_fenced waiting on a sync fence signalled 50 ms later")
            if not signalled.is_set():
                raise Fail("execute_fenced finished before the fence it waits on was signalled")
            got = io.output_array(0, np.float32, (4,)).tolist()
            if got != GOLDEN:
                raise Fail(f"the fenced execution computed {got}, expected {GOLDEN}")
    finally:
        timer.cancel()
        os.close(fence)


def _dynamic_relu(kit: Kit) -> Any:
    model = kit.memo("dynamic-relu", dynamic_relu_model).to_hal()
    kit.supports(model, "RELU with unknown dimensions")
    return kit.memo("dynamic-relu-prepared", lambda: prepare(kit, model, "RELU with unknown dimensions"))


def dynamic_output_shape(kit: Kit, executor: str) -> None:
    """An output of unknown dimensions: the execution reports one shape per output, the actual [4]."""
    prepared = _dynamic_relu(kit)
    with vts_io([X], [16], input_dims=[(4,)]) as io:
        outcome = execute(kit, prepared, io.request, executor)
        what = f"{executor} execution with an output of unknown dimensions"
        if outcome.status == ErrorStatus.GENERAL_FAILURE:
            raise Skip(f"{what}: GENERAL_FAILURE (dynamic output shapes not supported)")
        expect(outcome, ErrorStatus.NONE, what)
        if [(tuple(s.dimensions), s.is_sufficient) for s in outcome.shapes] != [((4,), True)]:
            raise Fail(f"{what}: reported output shapes {outcome.shapes}, expected exactly one sufficient [4]")
        got = io.output_array(0, np.float32, (4,)).tolist()
        if got != [1.0, 0.0, 3.0, 0.0]:
            raise Fail(f"{what} computed {got}, expected [1, 0, 3, 0]")


def insufficient_output(kit: Kit, executor: str) -> None:
    """An output buffer one byte too small: OUTPUT_INSUFFICIENT_SIZE with the needed shape, not sufficient."""
    prepared = _dynamic_relu(kit)
    with vts_io([X], [15], input_dims=[(4,)]) as io:
        outcome = execute(kit, prepared, io.request, executor)
        what = f"{executor} execution into a 15-byte buffer for a 16-byte output"
        if outcome.status == ErrorStatus.GENERAL_FAILURE:
            raise Skip(f"{what}: GENERAL_FAILURE (dynamic output shapes not supported)")
        expect(outcome, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, what)
        if [(tuple(s.dimensions), s.is_sufficient) for s in outcome.shapes] != [((4,), False)]:
            raise Fail(f"{what}: OUTPUT_INSUFFICIENT_SIZE came with shapes {outcome.shapes}, expected one shape "
                       "[4] marked insufficient")


# --- the corpus ---------------------------------------------------------------------------------------------
def _compare(kit: Kit, c: Case, io: Io, outcome: Outcome, what: str, shapes_required: bool = False) -> None:
    """The result checks of EvaluatePreparedModel for a successful configuration."""
    n = len(c.output_dims())
    if shapes_required and len(outcome.shapes) != n:
        raise Fail(f"{what}: {len(outcome.shapes)} output shapes for {n} outputs")
    if outcome.shapes and len(outcome.shapes) != n:
        raise Fail(f"{what}: {len(outcome.shapes)} output shapes for {n} outputs (must be none or one each)")
    for k, (shape, dims) in enumerate(zip(outcome.shapes, c.output_dims())):
        ignored = c.built.outputs[k][1]["ignored"]
        if not shape.is_sufficient or (not ignored and tuple(shape.dimensions) != dims):
            raise Fail(f"{what}: output {k} shape {shape}, expected {list(dims)} and sufficient")
    problem = c.problem(c.read_outputs(io))
    if problem:
        raise Fail(f"{what}: wrong outputs: {problem}")


def _general(kit: Kit, c: Case, prepared: Any) -> None:
    zero = c.has_zero_sized_output
    for executor in ("sync", "async", "burst", "fenced", "reusable"):
        for measure in MEASURES:
            what = f"{executor} execution (timing {measure.name})"
            with vts_io(c.inputs, c.output_nbytes()) as io:
                if executor == "fenced":
                    outcome = execute_fenced_chain(kit, prepared, io.request, measure)
                    if zero:
                        expect(outcome, ErrorStatus.INVALID_ARGUMENT, f"{what} with a zero-sized output")
                        continue
                else:
                    outcome = execute(kit, prepared, io.request, executor, measure)
                expect(outcome, ErrorStatus.NONE, what)
                _timing_rules(outcome, measure, what)
                _compare(kit, c, io, outcome, what)


def _pointer(kit: Kit, c: Case, prepared: Any) -> None:
    with vts_io(c.inputs, c.output_nbytes(), kind="pointer") as io:
        outcome = execute(kit, prepared, io.request, "sync")
        expect(outcome, ErrorStatus.NONE, "sync execution with in-place (pointer) pools")
        _compare(kit, c, io, outcome, "sync execution with in-place (pointer) pools")


def _domain(kit: Kit, c: Case, prepared: Any) -> None:
    """MEMORY_DOMAIN: each input and output in its own driver buffer (desc dims {}, one role); inputs filled
    with copy_from, outputs read back with copy_to; an IO whose allocation gives GENERAL_FAILURE stays in
    shared memory; nothing allocated: the configuration is skipped."""
    if c.has_zero_sized_output:
        return
    main = c.model.main
    for executor in ("sync", "async", "fenced"):
        with vts_io(c.inputs, c.output_nbytes()) as io:
            buffers: list[tuple[str, int, Any, int]] = []
            pools = list(io.request.pools)
            inputs, outputs = list(io.request.inputs), list(io.request.outputs)
            for kind, args, indexes in (("input", inputs, main.input_indexes), ("output", outputs,
                                                                                   main.output_indexes)):
                for k, index in enumerate(indexes):
                    if kind == "input" and (c.inputs[k] is None or c.inputs[k].nbytes == 0):
                        continue
                    roles = ([BufferRole(0, k, 1.0)], []) if kind == "input" else ([], [BufferRole(0, k, 1.0)])
                    status, value, message = kit.attempt("allocate", kit.driver.allocate, BufferDesc(), [prepared],
                                                         *roles)
                    if status == ErrorStatus.GENERAL_FAILURE:
                        continue
                    if status != ErrorStatus.NONE or not isinstance(value, (tuple, list)) or len(value) != 2:
                        raise Fail(f"allocate for {kind} {k} answered {status_name(status)} {message or value!r}, "
                                   "expected NONE with (IBuffer, token), or GENERAL_FAILURE")
                    buffer, token = value
                    if kind == "input":
                        data = np.ascontiguousarray(c.inputs[k]).tobytes()
                        src = shared_memory(data)
                        try:
                            kit.call("IBuffer.copy_from", buffer.copy_from, src.handle, [])
                        except NnError as e:
                            raise Fail(f"copy_from into the buffer of input {k} failed: {e}") from None
                        finally:
                            src.close()
                    pools.append(MemoryPool(token=token))
                    args[k] = RequestArgument(False, DataLocation(len(pools) - 1, 0, 0), ())
                    buffers.append((kind, k, buffer, token))
            if not buffers:
                return
            request = Request(inputs, outputs, pools)
            what = f"{executor} execution with {len(buffers)} inputs and outputs in driver buffers"
            outcome = (execute_fenced_chain(kit, prepared, request, MeasureTiming.NO) if executor == "fenced"
                       else execute(kit, prepared, request, executor))
            expect(outcome, ErrorStatus.NONE, what)
            expect_no_timing(outcome, what)
            for kind, k, buffer, _ in buffers:
                if kind != "output":
                    continue
                size = c.output_nbytes()[k]
                dst = Region("ashmem", size)
                try:
                    kit.call("IBuffer.copy_to", buffer.copy_to, dst.handle)
                    pool, offset = io.out_at[k]
                    io.regions[pool].write(offset, dst.read(0, size))
                except NnError as e:
                    raise Fail(f"copy_to from the buffer of output {k} after {what} failed: {e}") from None
                finally:
                    dst.close()
            _compare(kit, c, io, dataclasses.replace(outcome, shapes=[]), what)
            for _, _, buffer, _ in buffers:
                release = getattr(buffer, "release", None)
                if callable(release):
                    release()


def _unknown_outputs(model: Model) -> Model:
    """The model with every main output's dimensions set to 0 (rank kept)."""
    operands = list(model.main.operands)
    for i in model.main.output_indexes:
        o = operands[i]
        operands[i] = dataclasses.replace(o, dimensions=tuple(0 for _ in o.dimensions))
    main = model.main
    return Model(Subgraph(operands, main.operations, main.input_indexes, main.output_indexes), model.referenced,
                 model.operand_values, model.pools, model.relax_computation_float32_to_float16)


def _dynamic(kit: Kit, c: Case) -> None:
    """DYNAMIC_SHAPE: UNSPECIFIED and INSUFFICIENT outputs. GENERAL_FAILURE means not supported."""
    if c.has_scalar_outputs:
        return
    model = _unknown_outputs(c.model)
    status, flags, _ = kit.attempt("get_supported_operations", kit.driver.get_supported_operations, model)
    if status != ErrorStatus.NONE:
        raise Fail(f"get_supported_operations rejected the model with unknown output dimensions (a valid model): "
                   f"{status_name(status)}")
    if not all(flags):
        return
    prepared = prepare(kit, model, f"{c.name} with unknown output dimensions")
    nbytes = c.output_nbytes()
    sizes = {"UNSPECIFIED": nbytes}
    if nbytes and nbytes[0] > 1:
        sizes["INSUFFICIENT"] = [nbytes[0] - 1] + nbytes[1:]
    for kind, out_sizes in sizes.items():
        for executor in ("sync", "async", "burst", "fenced"):
            for measure in (MEASURES if executor != "fenced" else (MeasureTiming.NO,)):
                what = f"{kind} outputs, {executor} execution (timing {measure.name})"
                with vts_io(c.inputs, out_sizes) as io:
                    outcome = execute(kit, prepared, io.request, executor, measure)
                    if outcome.status == ErrorStatus.GENERAL_FAILURE:
                        return   # dynamic shapes not supported for this model: the VTS skips
                    if executor == "fenced":
                        expect(outcome, ErrorStatus.INVALID_ARGUMENT, f"{what} (fenced outputs must be fully "
                                                                      "specified)")
                        continue
                    if kind == "UNSPECIFIED":
                        expect(outcome, ErrorStatus.NONE, what)
                        _timing_rules(outcome, measure, what)
                        _compare(kit, c, io, outcome, what, shapes_required=True)
                        continue
                    _insufficient(c, outcome, what)


def _insufficient(c: Case, outcome: Outcome, what: str) -> None:
    if outcome.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
        raise Fail(f"{what}: output 0 is one byte short but the driver answered {outcome.describe()}, expected "
                   "OUTPUT_INSUFFICIENT_SIZE")
    dims = c.output_dims()
    if len(outcome.shapes) != len(dims):
        raise Fail(f"{what}: OUTPUT_INSUFFICIENT_SIZE came with {len(outcome.shapes)} shapes for {len(dims)} outputs")
    for k, (shape, want) in enumerate(zip(outcome.shapes, dims)):
        if shape.is_sufficient != (k != 0):
            raise Fail(f"{what}: output {k} reported is_sufficient={shape.is_sufficient}; only output 0 is short")
        got = tuple(shape.dimensions)
        if len(got) != len(want) or any(g and g != w for g, w in zip(got, want)):
            raise Fail(f"{what}: output {k} reported dimensions {list(got)}, the output needs {list(want)}")
    if outcome.timing.time_on_device != NO_TIMING or outcome.timing.time_in_driver != NO_TIMING:
        raise Fail(f"{what}: OUTPUT_INSUFFICIENT_SIZE came with a measured timing")


def generated_test(kit: Kit, test: Any) -> None:
    c = case(test)
    kit.supports(c.model, test.name)
    prepared = prepare(kit, c.model, test.name)
    _general(kit, c, prepared)
    _pointer(kit, c, prepared)
    _domain(kit, c, prepared)
    _dynamic(kit, c)


def checks(kit: Kit) -> Iterator[Check]:
    for executor in ("sync", "async", "fenced", "burst", "reusable"):
        for measure in MEASURES:
            yield make(SUITE, f"{executor}[timing-{measure.name.lower()}]", f"{G} (Executor {executor.upper()}, "
                       f"MeasureTiming {measure.name})", executor_check, executor, measure)
    yield make(SUITE, "async-callback-once", "§6.1 ASYNC: the callback comes once (HAL execute_1_3)", async_callback)
    yield make(SUITE, "fenced-waits-for-fence", "§4.3 executeFenced runs after its waitFor fences",
               fenced_waits_for_fence)
    for executor in ("sync", "async", "burst", "fenced", "reusable"):
        yield make(SUITE, f"timing-order[{executor}]", "§6.1 MeasureTiming YES: timeOnDevice <= timeInDriver "
                   "(§6.4 TimingTest)", timing_check, executor)
    for executor in ("sync", "async", "burst"):
        yield make(SUITE, f"dynamic-output-shape[{executor}]", "§6.1 DynamicOutputShapeTest (UNSPECIFIED)",
                   dynamic_output_shape, executor)
        yield make(SUITE, f"insufficient-output[{executor}]", "§6.1 DynamicOutputShapeTest (INSUFFICIENT)",
                   insufficient_output, executor)
    try:
        tests = selection(kit)
    except Skip as e:
        yield skipped(SUITE, "corpus", f"{G} (every model of the corpus)", str(e))
        return
    for test in tests:
        if test.expect_failure:
            continue
        yield make(SUITE, test.name, f"{G}, FencedComputeTest, MemoryDomainTest, DynamicOutputShapeTest",
                   generated_test, test)

