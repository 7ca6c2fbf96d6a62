"""Fuzzing that stays: random models through the public API and random HAL requests through every driver.

Whatever the input, the answer is a result or an `NnError`, never another exception, never a hang,
and never a write outside the regions given. Each test is bounded (hypothesis examples, and
deadlines inside the calls); `NNAPI_FUZZ_EXAMPLES` raises the number of examples for `make fuzz`.
Inputs that once failed are kept as explicit `@example`s (the regression corpus).
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.hal import (DataLocation, ErrorStatus, MeasureTiming, MemoryPool, NnError, Request, RequestArgument)
from nnapi.memory import allocate_ashmem, close_handle

from conftest import fuzz_examples


FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                  HealthCheck.data_too_large])
DRIVERS = ["reference", "xla"]
SECONDS = 5 * 1e9  # no call under test may take longer than this (ns): a deadline in every compile and run

# --- random models through the public API -----------------------------------------------------------
TYPES = [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
         T.TENSOR_BOOL8, T.INT32, T.FLOAT32, T.BOOL]
OPS = [Op.ADD, Op.MUL, Op.SUB, Op.RELU, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.RESHAPE,
       Op.CONCATENATION, Op.SOFTMAX, Op.AVERAGE_POOL_2D, Op.MEAN, Op.TRANSPOSE, Op.PAD, Op.TILE, Op.GATHER,
       Op.STRIDED_SLICE, Op.LOCAL_RESPONSE_NORMALIZATION, Op.SPLIT, Op.CAST, Op.WHILE, Op.IF, Op.ARGMAX]

dims = st.lists(st.integers(0, 6), max_size=4).map(tuple)
operand = st.tuples(st.sampled_from(TYPES), dims, st.sampled_from([0.0, 0.5, 1.0, -1.0, float("nan")]),
                    st.integers(-300, 300))
value = st.one_of(st.none(), st.integers(-(2**33), 2**33), st.floats(allow_nan=True, allow_infinity=True),
                  st.booleans(), st.binary(max_size=64))
operation = st.tuples(st.sampled_from(OPS + [9999, -1, 102]), st.lists(st.integers(-1, 12), max_size=8),
                      st.lists(st.integers(-1, 12), min_size=1, max_size=3))


def _build(operands, values, operations, io) -> nnapi.Model:
    m = nnapi.Model()
    for t, d, scale, zp in operands:
        m.add_operand(t, d if not t.is_scalar else (), scale if t.is_quantized else 0.0,
                      zp if t.is_quantized else 0)
    for index, v in values:
        target = index % len(operands)
        if v is None:
            continue
        if isinstance(v, bytes) or not operands[target][0].is_scalar:
            m.set_operand_value(target, v if isinstance(v, bytes) else np.full(1, v))
        else:
            with np.errstate(all="ignore"):  # (wrapped and saturated scalars are fuzz values too)
                raw = np.asarray(v).astype(nnapi.ops.numpy_dtype(operands[target][0]))
            m.set_operand_value(target, raw)
    for op_type, ins, outs in operations:
        m.add_operation(op_type, ins, outs)
    ins, outs = io
    m.identify_inputs_and_outputs(ins, outs)
    m.finish()
    return m


@settings(max_examples=fuzz_examples(60), **FUZZ)
@given(operands=st.lists(operand, min_size=1, max_size=8), values=st.lists(st.tuples(st.integers(0, 7), value),
                                                                             max_size=4),
       operations=st.lists(operation, min_size=1, max_size=4),
       io=st.tuples(st.lists(st.integers(-1, 9), max_size=3), st.lists(st.integers(-1, 9), min_size=1, max_size=2)),
       seed=st.integers(0, 2**16))
@example(operands=[(T.TENSOR_FLOAT32, (4,), 0.0, 0), (T.TENSOR_INT32, (1,), 0.0, 0), (T.TENSOR_FLOAT32, (0,), 0.0, 0)],
         values=[], operations=[(Op.TILE, [0, 1], [2])], io=([0, 1], [2]), seed=1)   # a run-time shape of 2^32
def test_random_models_give_results_or_nn_errors(operands, values, operations, io, seed):
    try:
        model = _build(operands, values, operations, io)
    except NnError:
        return
    rng = np.random.default_rng(seed)
    for device in DRIVERS:
        try:
            c = nnapi.Compilation(model, devices=[device], timeout=SECONDS / 1e9).finish()
        except NnError:
            continue
        inputs = []
        for k in range(len(io[0])):
            operand_index = model.to_hal().main.input_indexes[k]
            op = model.to_hal().main.operands[operand_index]
            shape = () if op.type.is_scalar else tuple(d or int(rng.integers(1, 4)) for d in op.dimensions) or (1,)
            dtype = nnapi.ops.numpy_dtype(op.type)
            inputs.append((rng.standard_normal(shape) * 4).astype(dtype) if dtype.kind == "f" else
                          rng.integers(0, 3, shape).astype(dtype))
        if len(inputs) == 2 and inputs[1].dtype == np.int32:
            inputs[1] = np.full(inputs[1].shape, 2**30, np.int32)  # the corpus' huge TILE multiple
        try:
            c.execute(inputs, timeout=SECONDS / 1e9)
        except NnError:
            pass


# --- random HAL requests through every driver --------------------------------------------------------
def _add_model() -> nnapi.Model:
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    b = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    y = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    m.add_operation(Op.ADD, [a, b, act], [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    return m


_MODEL = _add_model()
_PREPARED: dict[str, object] = {}


def _prepared(device: str):
    if device not in _PREPARED:
        _PREPARED[device] = nnapi.Compilation(_MODEL, devices=[device]).finish().steps[0].prepared
    return _PREPARED[device]


CANARY = 0x5A
argument = st.tuples(st.booleans(), st.integers(-1, 4), st.integers(-8, 80), st.integers(-8, 80),
                     st.lists(st.integers(-1, 5), max_size=3))
pool = st.tuples(st.sampled_from(["pointer", "ashmem", "token", "readonly"]), st.integers(0, 96),
                 st.integers(-2, 2**31))


@settings(max_examples=fuzz_examples(80), **FUZZ)
@given(device=st.sampled_from(DRIVERS), executor=st.sampled_from(["sync", "async", "fenced", "burst"]),
       inputs=st.lists(argument, max_size=3), outputs=st.lists(argument, max_size=2),
       pools=st.lists(pool, max_size=4))
def test_random_requests_give_results_or_nn_errors_and_stay_in_their_regions(device, executor, inputs, outputs,
                                                                             pools):
    hal_pools, guards, handles = [], [], []
    try:
        _run_random_request(device, executor, inputs, outputs, pools, hal_pools, guards, handles)
    finally:
        for handle in handles:          # plain HAL data: the client closes its descriptors
            close_handle(handle)


def _run_random_request(device, executor, inputs, outputs, pools, hal_pools, guards, handles) -> None:
    for kind, size, token in pools:
        if kind == "token":
            hal_pools.append(MemoryPool(token=token))
            continue
        if kind in ("pointer", "readonly"):
            buf = np.full(size + 16, CANARY, np.uint8)
            region = buf[8:8 + size]
            if kind == "readonly":
                region.flags.writeable = False
            hal_pools.append(MemoryPool(pointer=region))
            guards.append(buf)
            continue
        handle = allocate_ashmem(max(size, 1))
        handles.append(handle)
        hal_pools.append(MemoryPool(handle=handle))
    args = [[RequestArgument(bool(no_value), DataLocation(p, off, length), tuple(d))
             for no_value, p, off, length, d in group] for group in (inputs, outputs)]
    request = Request(args[0], args[1], hal_pools)
    prepared = _prepared(device)
    try:
        if executor == "sync":
            prepared.execute_synchronously(request, MeasureTiming.YES, None, None)
        elif executor == "burst":
            prepared.configure_execution_burst().execute_synchronously(request, [-1] * len(hal_pools),
                                                                        MeasureTiming.NO, None, None)
        elif executor == "fenced":
            prepared.execute_fenced(request, [], MeasureTiming.NO, None, None, None)
        else:
            done = threading.Event()
            prepared.execute(request, MeasureTiming.NO, None, None, lambda *result: done.set())
            assert done.wait(30), "the asynchronous execution never called back"
    except NnError as e:
        assert isinstance(e.status, ErrorStatus)
    for buf in guards:
        assert (buf[:8] == CANARY).all() and (buf[-8:] == CANARY).all(), "a write outside the region"


# --- the conformance models with their parameters mutated ----------------------------------------------
INTERESTING = {"INT32": [0, 1, -1, 2, 3, 7, 255, 2**16, 2**31 - 1, -(2**31)],
               "UINT32": [0, 1, 2**32 - 1],
               "FLOAT32": [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, float("inf"), float("-inf"), float("nan")],
               "FLOAT16": [0.0, 1.0, -1.0, 65504.0, float("inf"), float("nan")],
               "BOOL": [0, 1, 255]}
_DTYPE = {"INT32": "<i4", "UINT32": "<u4", "FLOAT32": "<f4", "FLOAT16": "<f2", "BOOL": "u1"}
_VECTORS: list = []


def _vectors() -> list:
    """Every valid model of the conformance corpus (../shared/cts), loaded once."""
    if not _VECTORS:
        from conftest import CTS
        from nnapi.conformance.vectors import load_vectors
        if os.path.isdir(CTS):
            _VECTORS.extend(t for t in load_vectors([CTS]) if not t.expect_failure)
    return _VECTORS


def _run_bounded(fn, seconds: float) -> None:
    """Run `fn` on a thread; fail when it has not returned after `seconds` (a hang, or an unbounded call)."""
    outcome: dict = {}

    def work() -> None:
        try:
            fn()
        except BaseException as e:  # reported below
            outcome["error"] = e

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]


@pytest.mark.skipif(not os.path.isdir(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "cts")),
                    reason="no conformance vectors beside the project")
@settings(max_examples=fuzz_examples(150), **FUZZ)
@given(pick=st.integers(0, 10**9), device=st.sampled_from(DRIVERS), data=st.data())
def test_conformance_models_with_mutated_parameters_give_results_or_nn_errors(pick, device, data):
    import base64
    import copy
    from nnapi.conformance.vectors import build
    vectors = _vectors()
    test = copy.copy(vectors[pick % len(vectors)])
    test.spec = copy.deepcopy(test.spec)
    operands = test.spec["main"]["operands"]
    scalars = [o for o in operands if o["lifetime"] == "CONSTANT_COPY" and o["type"] in INTERESTING]
    if not scalars:
        return
    for o in data.draw(st.lists(st.sampled_from(scalars), min_size=1, max_size=3, unique_by=id)):
        v = data.draw(st.sampled_from(INTERESTING[o["type"]]))
        o["data"] = {"dtype": _DTYPE[o["type"]].lstrip("<"),
                     "b64": base64.b64encode(np.array([v]).astype(_DTYPE[o["type"]]).tobytes()).decode()}

    def compile_and_run() -> None:
        try:
            built = build(test)
            c = nnapi.Compilation(built.model, devices=[device], timeout=5).finish()
            c.execute(built.inputs, timeout=5)
        except NnError:
            pass

    _run_bounded(compile_and_run, 60)
