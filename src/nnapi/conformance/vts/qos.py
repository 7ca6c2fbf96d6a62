"""Suite `qos`: quality of service as VTS-BEHAVIOURS section 4 requires it of any driver.

- Priorities (4.1): -1, 3 and other non-values are refused with INVALID_ARGUMENT and no model; LOW and
  HIGH prepare and run.
- Deadlines (4.2, `DeadlineTest`) on preparation, preparation from cache and every execute call, with
  the deadline NOW (already passed), SHORT (5 ms) and UNLIMITED (the largest value, which must not
  overflow): UNLIMITED succeeds; SHORT succeeds or misses (MISSED_DEADLINE_*); NOW is refused with
  MISSED_DEADLINE_*, the answer of Android's sample driver (4.2 reference behaviour) and what Q6 asks of
  a driver that honours deadlines: the kit is stricter than the VTS table here, which also lets NOW
  pass, because a driver that runs work whose deadline has already passed does not honour deadlines at
  all. An asynchronous launch returns normally and reports the miss through its callback. Timing is
  not measured, shapes and outputs are right when the status is NONE.
- Loop timeouts (4.5, `InfiniteLoopTimeoutTest`): the corpus's infinite WHILE loops with a 1 ms loop
  timeout end with MISSED_DEADLINE_* through every executor that takes one (sync, async, fenced), with
  and without timing.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

from ...hal import (NO_DEADLINE, ErrorStatus, ExecutionPreference, MeasureTiming, NnError, Priority)
from .caching import VtsCache, claims_caching
from .core import Check, Fail, Kit, Skip, make, status_name
from .corpus import case, find
from .hal_exec import EXECUTORS, NO_TIMING, Outcome, execute, expect_no_timing, prepare, vts_io
from .models import Subject, alternating_chain_subject

SUITE = "qos"
MS = 1_000_000
MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
BOUNDS = ("now", "short", "unlimited")
D = "§4.2 DeadlineTest.Test"
#: Corpus models of the deadline matrix (a quick run takes the first three).
DEADLINE_MODELS = ("add", "conv_float", "softmax_v1_2", "if_simple_true", "while_fib_n_1_unused_output")


def _deadline(bound: str) -> int:
    now = time.monotonic_ns()
    return {"now": now, "short": now + 5 * MS, "unlimited": NO_DEADLINE}[bound]


def _allowed(bound: str) -> tuple[ErrorStatus, ...]:
    return {"now": MISSED, "short": (ErrorStatus.NONE, *MISSED), "unlimited": (ErrorStatus.NONE,)}[bound]


def _chain(kit: Kit) -> Subject:
    subject = kit.memo("qos-chain", lambda: alternating_chain_subject(10))
    kit.supports(subject.hal, "an ADD / MUL chain on float32 [16]")
    return subject


def _prepared_chain(kit: Kit) -> Any:
    subject = _chain(kit)
    return kit.memo("qos-chain-prepared", lambda: prepare(kit, subject.hal, "an ADD / MUL chain"))


def _run_subject(kit: Kit, prepared: Any, subject: Subject, executor: str, what: str, **kwargs: Any) -> Outcome:
    main = subject.hal.main
    with vts_io(subject.inputs, [main.operands[i].byte_size() for i in main.output_indexes]) as io:
        outcome = execute(kit, prepared, io.request, executor, **kwargs)
        if outcome.status == ErrorStatus.NONE:
            operand = main.operands[main.output_indexes[0]]
            from ...ops import numpy_dtype
            problem = subject.problem([io.output_array(0, numpy_dtype(operand.type), operand.dimensions)])
            if problem:
                raise Fail(f"{what}: wrong outputs: {problem}")
        return outcome


# --- 4.1 priority -------------------------------------------------------------------------------------
def invalid_priority(kit: Kit) -> None:
    subject = _chain(kit)
    for priority in (-1, 3, 100, 1.5, "HIGH", None):
        status, prepared, _ = kit.attempt("prepare_model", kit.driver.prepare_model, subject.hal,
                                          ExecutionPreference.FAST_SINGLE_ANSWER, priority, None, None, None)
        if status != ErrorStatus.INVALID_ARGUMENT or prepared is not None:
            got = "a prepared model" if prepared is not None else status_name(status)
            raise Fail(f"prepare_model with priority {priority!r} returned {got}, expected INVALID_ARGUMENT and "
                       "no model (valid priorities are LOW=0, MEDIUM=1, HIGH=2)")


def invalid_preference(kit: Kit) -> None:
    subject = _chain(kit)
    for preference in (-1, 3, None):
        status, prepared, _ = kit.attempt("prepare_model", kit.driver.prepare_model, subject.hal, preference,
                                          Priority.MEDIUM, None, None, None)
        if status != ErrorStatus.INVALID_ARGUMENT or prepared is not None:
            got = "a prepared model" if prepared is not None else status_name(status)
            raise Fail(f"prepare_model with preference {preference!r} returned {got}, expected INVALID_ARGUMENT")


def low_and_high_priority(kit: Kit) -> None:
    subject = _chain(kit)
    for priority in (Priority.LOW, Priority.HIGH):
        prepared = prepare(kit, subject.hal, f"the chain at priority {priority.name}", priority=priority)
        for executor in EXECUTORS:
            outcome = _run_subject(kit, prepared, subject, executor, f"{executor} at priority {priority.name}")
            if outcome.status != ErrorStatus.NONE:
                raise Fail(f"{executor} execution of a model prepared at {priority.name} failed: {outcome.describe()}")


# --- 4.2 deadlines ---------------------------------------------------------------------------------------
def _deadline_case(kit: Kit, name: str) -> Any:
    return kit.memo(("deadline-case", name), lambda: case(find(kit, name)))


def deadline_prepare(kit: Kit, name: str, bound: str) -> None:
    c = _deadline_case(kit, name)
    kit.supports(c.model, name)
    status, prepared, message = kit.attempt("prepare_model", kit.driver.prepare_model, c.model,
                                            ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                            _deadline(bound), None, None)
    if status not in _allowed(bound):
        raise Fail(f"prepare_model with the deadline {bound.upper()} answered {status_name(status)}"
                   + (f" ({message})" if message else "") + f", expected {' or '.join(map(status_name, _allowed(bound)))}")
    if (prepared is not None) != (status == ErrorStatus.NONE):
        raise Fail(f"prepare_model with the deadline {bound.upper()}: a model came back with status "
                   f"{status_name(status)}")


def deadline_prepare_from_cache(kit: Kit, bound: str) -> None:
    counts = claims_caching(kit)
    subject = _chain(kit)
    cache = VtsCache(kit.scratch(f"deadline-cache-{bound}"), counts)
    kit.on_close(cache.close)
    token = kit.token(f"deadline-{bound}")
    try:
        kit.call("prepare_model with cache handles", kit.driver.prepare_model, subject.hal,
                 ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, cache.handles(), token)
    except NnError as e:
        raise Fail(f"prepare_model with cache handles failed: {e}") from None
    status, _, _ = kit.attempt("prepare_model_from_cache", kit.driver.prepare_model_from_cache, None,
                               cache.handles(), token)
    if status == ErrorStatus.GENERAL_FAILURE:
        raise Skip("the driver chose not to cache the chain model (retrieval without a deadline gave GENERAL_FAILURE)")
    status, prepared, message = kit.attempt("prepare_model_from_cache", kit.driver.prepare_model_from_cache,
                                            _deadline(bound), cache.handles(), token)
    allowed = _allowed(bound)
    if status not in allowed:
        raise Fail(f"prepare_model_from_cache with the deadline {bound.upper()} answered {status_name(status)}"
                   + (f" ({message})" if message else "") + f", expected {' or '.join(map(status_name, allowed))}")
    if prepared is not None and status == ErrorStatus.NONE:
        outcome = _run_subject(kit, prepared, subject, "sync", "the model prepared from cache with a deadline")
        if outcome.status != ErrorStatus.NONE:
            raise Fail(f"the model prepared from cache with a deadline failed to execute: {outcome.describe()}")


def deadline_execute(kit: Kit, name: str, bound: str, executor: str) -> None:
    c = _deadline_case(kit, name)
    kit.supports(c.model, name)
    prepared = kit.memo(("deadline-prepared", name), lambda: prepare(kit, c.model, name))
    with vts_io(c.inputs, c.output_nbytes()) as io:
        outcome = execute(kit, prepared, io.request, executor, MeasureTiming.NO, _deadline(bound))
        what = f"{executor} execution with the deadline {bound.upper()}"
        if outcome.launch and executor == "async":
            raise Fail(f"{what}: the launch raised {outcome.describe()}; a missed deadline must come through the "
                       "callback and the launch return normally")
        if outcome.status not in _allowed(bound):
            raise Fail(f"{what} answered {outcome.describe()}, expected "
                       f"{' or '.join(map(status_name, _allowed(bound)))}")
        expect_no_timing(outcome, what)
        if outcome.status != ErrorStatus.NONE:
            if outcome.shapes:
                raise Fail(f"{what}: {status_name(outcome.status)} came with output shapes")
            return
        dims = c.output_dims()
        if outcome.shapes and [(tuple(s.dimensions), s.is_sufficient) for s in outcome.shapes] != \
                [(d, True) for d in dims]:
            raise Fail(f"{what}: output shapes {outcome.shapes}, expected {dims} all sufficient")
        problem = c.problem(c.read_outputs(io))
        if problem:
            raise Fail(f"{what}: wrong outputs: {problem}")


def passed_deadline_async_launch(kit: Kit) -> None:
    """A deadline already passed at an asynchronous launch: the launch returns normally, the callback
    reports MISSED_DEADLINE_*."""
    subject = _chain(kit)
    prepared = _prepared_chain(kit)
    outcome = _run_subject(kit, prepared, subject, "async", "async execution", deadline=time.monotonic_ns() - 1)
    if outcome.launch:
        raise Fail(f"execute with a deadline already passed raised {outcome.describe()} at launch; it must return "
                   "normally and report the miss through the callback")
    if outcome.status not in MISSED:
        raise Fail(f"execute with a deadline already passed reported {outcome.describe()} through the callback, "
                   "expected MISSED_DEADLINE_TRANSIENT or MISSED_DEADLINE_PERSISTENT")


def invalid_request_beats_deadline(kit: Kit) -> None:
    """An invalid request is INVALID_ARGUMENT whatever the deadline (validation comes first)."""
    subject = _chain(kit)
    prepared = _prepared_chain(kit)
    with vts_io([], [subject.golden[0].nbytes]) as io:   # the input is missing
        for executor in EXECUTORS:
            outcome = execute(kit, prepared, io.request, executor, deadline=time.monotonic_ns() - 1)
            if outcome.status != ErrorStatus.INVALID_ARGUMENT:
                raise Fail(f"{executor} execution of a request without its input and with a passed deadline "
                           f"answered {outcome.describe()}, expected INVALID_ARGUMENT")


# --- 4.5 loop timeouts ------------------------------------------------------------------------------------------
def infinite_loop(kit: Kit, name: str, executor: str, measure: MeasureTiming) -> None:
    c = _deadline_case(kit, name)
    if not c.test.expect_failure or c.test.spec["main"]["operations"][0]["type"] != "WHILE":
        raise Fail(f"{name} is not an infinite-loop model of the corpus")
    kit.supports(c.model, name)
    prepared = kit.memo(("deadline-prepared", name), lambda: prepare(kit, c.model, name))
    sizes = [max(n, 1) for n in c.output_nbytes()]
    what = f"{executor} execution of an infinite WHILE loop with a 1 ms loop timeout"
    for _ in range(2):   # the second run is timed: the first may include a just-in-time compilation
        with vts_io(c.inputs, sizes) as io:
            start = time.monotonic()
            outcome = execute(kit, prepared, io.request, executor, measure, None, 1 * MS)
            seconds = time.monotonic() - start
        if outcome.launch and executor == "async":
            raise Fail(f"{what}: the launch raised {outcome.describe()}, expected a normal launch")
        if outcome.status not in MISSED:
            raise Fail(f"{what} answered {outcome.describe()}, expected MISSED_DEADLINE_TRANSIENT or "
                       "MISSED_DEADLINE_PERSISTENT")
        if outcome.timing.time_on_device != NO_TIMING or outcome.timing.time_in_driver != NO_TIMING:
            raise Fail(f"{what}: a missed deadline came with a measured timing {outcome.timing}")
    if seconds > 1.9:   # the default loop timeout is 2 s: a driver ignoring the given 1 ms takes that long
        raise Fail(f"{what} took {seconds:.1f} s: the 1 ms loop timeout was not applied")


def checks(kit: Kit) -> Iterator[Check]:
    yield make(SUITE, "invalid-priority", "§4.1 ValidateModel mutateExecutionPriorityTest (-1, 3, ...)",
               invalid_priority)
    yield make(SUITE, "invalid-preference", "§5.1 ValidateModel mutateExecutionPreferenceTest (-1, 3)",
               invalid_preference)
    yield make(SUITE, "low-and-high-priority", "§4.1 DeadlineTest: prepare with LOW and HIGH, no deadline",
               low_and_high_priority)
    models = DEADLINE_MODELS[:3] if kit.quick else DEADLINE_MODELS
    for bound in BOUNDS:
        for name in models:
            yield make(SUITE, f"deadline-prepare[{name}][{bound}]", f"{D} (prepareModel_1_3)", deadline_prepare,
                       name, bound)
        yield make(SUITE, f"deadline-prepare-from-cache[{bound}]", "§4.3 prepareModelFromCache_1_3 may miss its "
                   "deadline (Q6)", deadline_prepare_from_cache, bound)
        for name in models:
            for executor in EXECUTORS:
                yield make(SUITE, f"deadline-execute[{name}][{bound}][{executor}]",
                           f"{D} (execute_1_3 / executeSynchronously_1_3; §4.4 burst and fenced)", deadline_execute,
                           name, bound, executor)
    yield make(SUITE, "passed-deadline-async-launch", "§4.2 execute_1_3: the launch is NONE, the miss comes through "
               "the callback", passed_deadline_async_launch)
    yield make(SUITE, "invalid-request-beats-deadline", "§2.2 / §5.2 an invalid request is INVALID_ARGUMENT",
               invalid_request_beats_deadline)
    loops = ("while_infinite_loop",) if kit.quick else ("while_infinite_loop", "while_infinite_loop_relaxed",
                                                        "while_infinite_loop_float16", "while_infinite_loop_quant8",
                                                        "while_infinite_loop_quant8_signed")
    for name in loops:
        for executor in ("sync", "async", "fenced"):
            for measure in (MeasureTiming.NO, MeasureTiming.YES):
                yield make(SUITE, f"infinite-loop-timeout[{name}][{executor}][{measure.name.lower()}]",
                           "§4.5 InfiniteLoopTimeoutTest.Test", infinite_loop, name, executor, measure)
