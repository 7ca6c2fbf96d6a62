"""Reusable executions (issue 36, item 1; ANeuralNetworksExecution_setReusable, NNAPI feature level 5) and
sessions that reuse a request when the shapes of their feeds repeat.

A reusable execution is computed again and again with new contents in the arrays and memory it is bound
to; every computation must give what a fresh execution gives on those contents (in-process drivers,
a served one, partitioned plans, shared memory, output shapes known only at run time). The states are
NNAPI's: arguments are set in the preparation state only, one computation at a time, a plain execution
computes once."""
from __future__ import annotations

import dataclasses

import os

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op, ResultCode
from nnapi.hal import ErrorStatus
from nnapi.runtime import ExecutionPlan
from nnapi.runtime.devices import register_device, unregister_device

from conftest import add_relu_model
from test_partitioner import AddOnlyDevice
from test_service import service, services_dir  # noqa: F401  (fixtures: the served reference driver)

pytestmark = pytest.mark.timing

DEVICES = ["reference", "xla", "openvino"]
RUNS = 6


def _installed(device: str) -> None:
    if device not in [d.name for d in nnapi.devices()]:
        pytest.skip(f"{device} is not installed")


def _feeds(n: int, k: int) -> list[np.ndarray]:
    """The contents of run `k`: different every run, negative and positive (so RELU matters)."""
    rng = np.random.default_rng(k)
    return [rng.uniform(-5, 5, n).astype(np.float32) for _ in range(2)]


@pytest.fixture
def split(android_partitioning, monkeypatch):
    """Partition by the devices' reported performance alone, as Android does: no boundary weighed, no
    latency measured by an earlier test of the same model (that would keep it whole on one device), and the
    compiling drivers' float ratio pinned (not how busy the machine was during their calibration)."""
    from nnapi.runtime import latency
    monkeypatch.setattr(latency, "measured", lambda model, devices: {})
    monkeypatch.setenv("NNAPI_XLA_PERFORMANCE", "0.1")
    monkeypatch.setenv("NNAPI_OPENVINO_PERFORMANCE", "0.1")

    def devices(*names: str) -> list:
        """The devices by name, the compiling ones with the pinned ratio (a device found earlier in the
        process keeps the capabilities it was found with: the pin applies to these copies)."""
        found = {d.name: d for d in nnapi.devices()}

        def pinned(d: nnapi.Device) -> nnapi.Device:  # (a plain Device: a remembered one does not take replace)
            values = {f.name: getattr(d, f.name) for f in dataclasses.fields(nnapi.Device)}
            return nnapi.Device(**{**values, "capabilities": d.driver.calibrated_capabilities()})
        return [pinned(found[n]) if n in ("xla", "openvino") else found[n] for n in names]
    return devices


def _reusable(c: nnapi.Compilation, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> nnapi.Execution:
    e = nnapi.Execution(c)
    e.set_reusable(True)
    for k, x in enumerate(inputs):
        e.set_input(k, x)
    for k, y in enumerate(outputs):
        e.set_output(k, y)
    return e


def _fresh(c: nnapi.Compilation, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """What a plain execution gives on these contents (copies: nothing shared with the reusable one)."""
    return nnapi.Execution(c).run([x.copy() for x in inputs])


def _counting(c: nnapi.Compilation) -> list[int]:
    """Computations of every step's prepared model, counted: its synchronous executions and those of the
    reusable executions made of it."""
    calls: list[int] = []

    def counted(real):
        return lambda *a, **k: calls.append(1) or real(*a, **k)

    def reusable(real):
        def make(*a, **k):
            execution = real(*a, **k)
            execution.compute = counted(execution.compute)
            return execution
        return make

    for step in c.steps:
        step.prepared.execute_synchronously = counted(step.prepared.execute_synchronously)
        step.prepared.create_reusable_execution = reusable(step.prepared.create_reusable_execution)
    return calls


def _reshape_model() -> nnapi.Model:
    """out = RESHAPE(a + b, shape): the output's dimensions are the contents of input `shape`."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,))
    b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    s = m.add_operand(T.TENSOR_FLOAT32, (4,))
    m.add_operation(Op.ADD, [a, b, act], [s])
    shape = m.add_operand(T.TENSOR_INT32, (2,))
    out = m.add_operand(T.TENSOR_FLOAT32, (0, 0))
    m.add_operation(Op.RESHAPE, [s, shape], [out])
    m.identify_inputs_and_outputs([a, b, shape], [out])
    m.finish()
    return m


@pytest.mark.parametrize("device", DEVICES)
def test_a_reusable_execution_computes_again_on_new_contents(device):
    """compute, start_compute and burst compute, again and again on the same arrays, whose contents change
    in between: each time what a fresh execution gives."""
    _installed(device)
    c = nnapi.Compilation(add_relu_model(), devices=[device]).finish()
    a, b, out = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    e = _reusable(c, [a, b], [out])
    with c.create_burst() as burst:
        for k in range(RUNS):
            a[:], b[:] = _feeds(4, k)
            (expected,) = _fresh(c, [a, b])
            [e.compute, lambda: e.start_compute().wait(30), lambda: e.burst_compute(burst)][k % 3]()
            np.testing.assert_array_equal(out, expected)
            np.testing.assert_array_equal(out, np.maximum(a + b, 0))
            assert e.get_output_shape(0) == (4,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [4, 1 << 15])
def test_the_steady_computations_of_a_reusable_execution_read_and_write_the_arrays_as_they_are_then(device, n):
    """Past its first computations a reusable execution runs as the drivers set it up (tensors kept over the
    arrays, aliases, the results' checks remembered): small arrays and large ones (128 KB: over the size at
    which the drivers point at the app's memory instead of copying), an int32 and a bool output beside the
    float one, many computations on new contents, each what a fresh execution gives; two reusable executions
    of one compilation taking turns do not mix up their arrays."""
    _installed(device)
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    total = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, b, act], [total])
    axis = m.add_operand(T.INT32)
    m.set_operand_value(axis, 0)
    arg = m.add_operand(T.TENSOR_INT32, (1,))
    m.add_operation(Op.ARGMAX, [a, axis], [arg])
    greater = m.add_operand(T.TENSOR_BOOL8, (n,))
    m.add_operation(Op.GREATER, [a, b], [greater])
    m.identify_inputs_and_outputs([a, b], [total, arg, greater])
    m.finish()
    c = nnapi.Compilation(m, devices=[device]).finish()
    first = [np.zeros(n, np.float32), np.zeros(n, np.float32)]
    second = [np.zeros(n, np.float32), np.zeros(n, np.float32)]
    outs = {id(first): [np.zeros(n, np.float32), np.zeros(1, np.int32), np.zeros(n, np.bool_)],
            id(second): [np.zeros(n, np.float32), np.zeros(1, np.int32), np.zeros(n, np.bool_)]}
    executions = {id(first): _reusable(c, first, outs[id(first)]), id(second): _reusable(c, second, outs[id(second)])}
    for k in range(3 * RUNS):  # (nothing else runs the compilation in between: its drivers stay set up)
        ins = first if k < RUNS or k % 2 else second
        ins[0][:], ins[1][:] = _feeds(n, k)
        executions[id(ins)].compute()
        got = outs[id(ins)]
        np.testing.assert_array_equal(got[0], ins[0] + ins[1])
        assert got[1][0] == np.argmax(ins[0])
        np.testing.assert_array_equal(got[2], ins[0] > ins[1])
    for got, expected in zip(outs[id(ins)], _fresh(c, ins)):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_shared_memory_arguments_are_read_and_written_again_at_each_computation(device):
    _installed(device)
    n = 64
    c = nnapi.Compilation(add_relu_model(n, large_constant=True), devices=[device]).finish()
    mem_in, mem_out = nnapi.Memory.ashmem(2 * 4 * n), nnapi.Memory.ashmem(4 * n + 64)
    b = np.zeros(n, np.float32)
    e = nnapi.Execution(c)
    e.set_reusable(True)
    e.set_input_from_memory(0, mem_in, 4 * n, 4 * n)   # the second half of the region
    e.set_input(1, b)
    e.set_output_from_memory(0, mem_out, 64, 4 * n)
    for k in range(RUNS):
        a, b[:] = _feeds(n, k)
        mem_in.array(np.float32, (n,), offset=4 * n)[:] = a
        mem_out.array(np.float32, (n,), offset=64)[:] = np.nan  # (what the last run wrote cannot pass)
        (expected,) = _fresh(c, [a, b])
        (e.compute if k % 2 else lambda: e.start_compute().wait(30))()
        np.testing.assert_array_equal(mem_out.array(np.float32, (n,), offset=64), expected)


@pytest.mark.parametrize("device", ["xla", "openvino"])
def test_a_model_partitioned_over_two_devices_is_reused(device, split):
    """ADD on `device`, RESHAPE (its shape given at run time) on the reference driver: the value between
    them in shared memory placed once, the output's shape each computation's own."""
    _installed(device)
    c = nnapi.Compilation(_reshape_model(), devices=split(device, "reference")).finish()
    assert [s.device.name for s in c.steps] == [device, "reference"]
    a, b, out = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    shape = np.zeros(2, np.int32)
    e = _reusable(c, [a, b, shape], [out])
    for k, dims in enumerate([(2, 2), (1, 4), (4, 1), (2, 2), (4, 1)]):
        a[:], b[:] = _feeds(4, k)
        shape[:] = dims
        (expected,) = _fresh(c, [a, b, shape])
        e.compute()
        assert e.get_output_shape(0) == dims == expected.shape
        np.testing.assert_array_equal(out.reshape(dims), expected)


def test_a_value_between_steps_of_unknown_size_is_grown_once_and_kept(split):
    """The temporary between the two steps has no declared size: the first computation learns it (the driver
    reports it and the step runs again), later ones write it where it was grown."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (8,))
    b = m.add_operand(T.TENSOR_FLOAT32, (8,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    s = m.add_operand(T.TENSOR_FLOAT32, (0,))            # known only when the first step runs
    m.add_operation(Op.ADD, [a, b, act], [s])
    out = m.add_operand(T.TENSOR_FLOAT32, (8,))
    m.add_operation(Op.RELU, [s], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    add_only = register_device(AddOnlyDevice())
    try:
        c = nnapi.Compilation(m, devices=[add_only, "reference"]).finish()
        assert [st.device.name for st in c.steps] == ["add-only", "reference"]
        calls = _counting(c)
        x, y, out_buf = np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
        e = _reusable(c, [x, y], [out_buf])
        for k in range(RUNS):
            x[:], y[:] = _feeds(8, k)
            e.compute()
            np.testing.assert_array_equal(out_buf, np.maximum(x + y, 0))
        assert len(calls) == 2 * RUNS + 1  # (the first step ran twice once: its output grown)
    finally:
        unregister_device("add-only")


def test_output_shapes_known_only_at_run_time_are_reported_at_each_computation():
    c = nnapi.Compilation(_reshape_model(), devices=["reference"]).finish()
    a, b = np.ones(4, np.float32), np.arange(4, dtype=np.float32)
    shape, out = np.zeros(2, np.int32), np.zeros(4, np.float32)
    e = _reusable(c, [a, b, shape], [out])
    for dims in [(2, 2), (4, 1), (1, 4)]:
        shape[:] = dims
        e.compute()
        assert e.get_output_shape(0) == dims and tuple(e.output_shapes[0].dimensions) == dims
        np.testing.assert_array_equal(out, a + b)
    small = nnapi.Execution(c)                   # too small a buffer: the same error at every computation
    small.set_reusable(True)
    for k, x in enumerate([a, b, shape]):
        small.set_input(k, x)
    small.set_output(0, np.zeros(2, np.float32))
    for _ in range(2):
        with pytest.raises(nnapi.NnError) as err:
            small.compute()
        assert err.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert small.get_output_shape(0) == (1, 4)


def test_the_states_are_nnapis():
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    plain = nnapi.Execution(c)
    assert not plain.reusable
    plain.set_input(0, x)
    plain.set_reusable(True)                     # in the preparation state: after arguments are set, too
    plain.set_reusable(False)
    plain.set_input(1, x)
    plain.set_output(0, out)
    plain.compute()
    with pytest.raises(nnapi.NnError) as err:
        plain.compute()                          # a plain execution computes once
    assert err.value.code == ResultCode.BAD_STATE
    with pytest.raises(nnapi.NnError) as err:
        plain.set_reusable(True)                 # not in the preparation state any more
    assert err.value.code == ResultCode.BAD_STATE

    e = _reusable(c, [x, x], [out])
    with pytest.raises(nnapi.NnError) as err:
        e.set_reusable("yes")
    assert err.value.code == ResultCode.BAD_DATA
    e.compute()
    e.compute(timeout=30)                        # a timeout of this computation only: no setting changed
    for change in (lambda: e.set_input(0, x), lambda: e.set_output(0, out), lambda: e.set_timeout(1),
                   lambda: e.set_measure_timing(True), lambda: e.set_loop_timeout(1), lambda: e.set_reusable(False)):
        with pytest.raises(nnapi.NnError) as err:
            change()
        assert err.value.code == ResultCode.BAD_STATE
    gate = _unsignalled_event()
    event = e.start_compute_with_dependencies([gate])  # in flight until the gate is signalled
    for again in (e.compute, e.start_compute, lambda: e.start_compute_with_dependencies([])):
        with pytest.raises(nnapi.NnError) as err:
            again()
        assert err.value.code == ResultCode.BAD_STATE and "in flight" in err.value.message
    with pytest.raises(nnapi.NnError) as err:
        e.get_output_shape(0)                    # no shapes while computing
    assert err.value.code == ResultCode.BAD_STATE
    os.eventfd_write(gate.get_sync_fence_fd(), 1)
    event.wait(30)
    e.compute()                                  # completed: it computes again
    np.testing.assert_array_equal(out, 2 * x)

    unset = nnapi.Execution(c)
    unset.set_reusable(True)
    unset.set_input(0, x)
    with pytest.raises(nnapi.NnError) as err:
        unset.compute()                          # checked at the first computation, still in preparation
    assert err.value.code == ResultCode.BAD_DATA
    unset.set_input(1, x)
    unset.set_output(0, out)
    unset.compute()


def _unsignalled_event() -> nnapi.Event:
    raw = os.eventfd(0)
    gate = nnapi.Event.create_from_sync_fence_fd(raw)
    os.close(raw)
    return gate


def test_arguments_are_bound_once(monkeypatch):
    """The first computation binds (`ExecutionPlan.bind`); later ones run what it bound."""
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    binds = []
    real = ExecutionPlan.bind
    monkeypatch.setattr(ExecutionPlan, "bind", lambda self, arguments, **kw: binds.append(1) or real(self, arguments, **kw))
    a, b, out = np.zeros(4, np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)
    e = _reusable(c, [a, b], [out])
    for k in range(RUNS):
        a[:] = k - 3
        e.compute()
        np.testing.assert_array_equal(out, np.maximum(a + b, 0))
    assert len(binds) == 1


def test_memory_from_a_desc_is_checked_at_each_computation():
    """An input in memory from a MemoryDesc: each computation reads what was last written into it, and one
    that finds it uninitialized (its writer failed) fails, as a fresh execution would."""
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    desc = nnapi.MemoryDesc()
    desc.add_input_role(c, 0, 1.0)
    desc.add_output_role(c, 0, 1.0)
    desc.finish()
    memory = nnapi.Memory.from_desc(desc)
    x, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    writer = _reusable(c, [x, np.zeros(4, np.float32)], [])
    writer.set_output_from_memory(0, memory, 0, 0)
    reader = _reusable(c, [], [out])
    reader.set_input_from_memory(0, memory, 0, 0)
    reader.set_input(1, np.ones(4, np.float32))
    for k in range(3):
        x[:] = np.arange(4) - k
        writer.compute()
        reader.compute()
        np.testing.assert_array_equal(out, np.maximum(np.maximum(x, 0) + 1, 0))
    memory.validator.set_initialized(False)
    with pytest.raises(nnapi.NnError) as err:
        reader.compute()
    assert err.value.code == ResultCode.OP_FAILED


def test_a_served_driver_computes_a_reusable_execution_on_new_contents(services_dir):
    """The reference driver behind `nnapi serve` in another process (test_service's fixtures)."""
    n = 64
    c = nnapi.Compilation(add_relu_model(n, large_constant=True), devices=["reference"]).finish()
    assert c.steps[0].device.location == "service"
    a, out = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mem = nnapi.Memory.ashmem(4 * n)
    e = nnapi.Execution(c)
    e.set_reusable(True)
    e.set_input(0, a)                            # an array: sent again at each computation
    e.set_input_from_memory(1, mem, 0, 4 * n)    # shared memory: read in place by the service
    e.set_output(0, out)
    with c.create_burst() as burst:
        for k in range(RUNS):
            a[:], b = _feeds(n, k)
            mem.array(np.float32, (n,))[:] = b
            (e.compute if k % 2 else lambda: e.burst_compute(burst))()
            np.testing.assert_array_equal(out, np.maximum(a + b + np.arange(n, dtype=np.float32), 0))


# --- sessions ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_a_session_gives_a_plain_runs_results_on_repeated_shapes(device):
    _installed(device)
    session = nnapi.load(add_relu_model(), devices=device)
    for k in range(RUNS):
        a, b = _feeds(4, k)
        feed = {"input_0": a, "input_1": b} if k % 2 else [a, b]
        out = session.run(feed)
        (expected,) = _fresh(session.compilation, [a, b])
        np.testing.assert_array_equal(out["output_0"], expected)
        assert out["output_0"] is not session.run(feed)["output_0"]  # fresh arrays every run
    with pytest.raises(nnapi.NnError, match="expects float32"):
        session.run({"input_0": a.astype(np.float64), "input_1": b})   # a known form, another dtype: checked


@pytest.mark.parametrize("device", DEVICES)
def test_a_sessions_small_feeds_run_through_one_reusable_execution_of_the_driver(device, monkeypatch):
    """Small feeds of a repeated signature are copied into arrays the session keeps, bound once to a reusable
    execution of the driver (made once, then computed per feed); each feed still gets fresh arrays of its
    own results. Feeds above `SMALL_FEED_BYTES` are bound to their own memory, not copied."""
    from nnapi.runtime import feeds
    _installed(device)
    for n, small in ((4, True), (feeds.SMALL_FEED_BYTES // 4 + 1, False)):
        session = nnapi.load(add_relu_model(n), devices=device)
        prepared = session.compilation.steps[0].prepared
        made, computed = [], []
        real = prepared.create_reusable_execution

        def create(*a, **k):
            execution = real(*a, **k)
            made.append(execution)
            compute = execution.compute
            execution.compute = lambda *ca, **ck: computed.append(1) or compute(*ca, **ck)
            return execution

        monkeypatch.setattr(prepared, "create_reusable_execution", create)
        outs = []
        for k in range(RUNS):
            a, b = _feeds(n, k)
            out = session.run([a, b])["output_0"]
            (expected,) = _fresh(session.compilation, [a, b])
            np.testing.assert_array_equal(out, expected)
            outs.append(out)
        assert len({id(o) for o in outs}) == RUNS  # fresh arrays, each still holding its own feed's results
        np.testing.assert_array_equal(outs[0], _fresh(session.compilation, _feeds(n, 0))[0])
        assert (len(made), len(computed)) == ((1, RUNS) if small else (0, 0))


def test_a_session_learns_output_sizes_and_runs_a_partitioned_model_once_per_feed(split):
    """The output's size comes from the run (RESHAPE by a shape input): the first feed computes twice (once to
    learn the size), later ones of those shapes once; a feed whose output needs another shape still gets it."""
    session = nnapi.load(_reshape_model(), devices=split("xla", "reference") if "xla" in [
        d.name for d in nnapi.devices()] else ["reference"])
    calls = _counting(session.compilation)
    steps = len(session.compilation.steps)
    a = np.arange(4, dtype=np.float32)
    for k, dims in enumerate([(2, 2), (2, 2), (4, 1), (1, 4), (2, 2)]):
        before = len(calls)
        out = session.run([a + k, a, np.array(dims, np.int32)])["output_0"]
        assert out.shape == dims
        np.testing.assert_array_equal(out, (2 * a + k).reshape(dims))
        assert len(calls) - before == (2 * steps if k == 0 else steps)


def test_a_session_binds_again_when_shapes_change():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (0,))    # any length
    out = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.RELU, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    session = nnapi.load(m, devices="reference")
    for n in (3, 3, 5, 3, 1, 5):
        x = np.linspace(-1, 1, n).astype(np.float32)
        out = session.run(x)["output_0"]
        assert out.shape == (n,)
        np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_a_session_follows_output_sizes_that_change_with_the_contents():
    """SLICE of a length given at run time: a longer output than last time is run again at its size (and
    learnt), a shorter one cut from the buffer; the driver computes twice only when the size grew."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (8,))
    begin = m.add_operand(T.TENSOR_INT32, (1,))
    size = m.add_operand(T.TENSOR_INT32, (1,))
    out = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.SLICE, [a, begin, size], [out])
    m.identify_inputs_and_outputs([a, begin, size], [out])
    m.finish()
    session = nnapi.load(m, devices="reference")
    calls = _counting(session.compilation)
    x = np.linspace(-4, 4, 8).astype(np.float32)
    learnt = 0
    for n in (2, 2, 5, 3, 8, 1, 8):
        before = len(calls)
        y = session.run([x, np.array([8 - n], np.int32), np.array([n], np.int32)])["output_0"]
        np.testing.assert_array_equal(y, x[8 - n:])
        grew = n > learnt
        assert len(calls) - before == (2 if grew else 1)
        learnt = n if grew else learnt


def test_a_session_run_from_several_threads_at_once_gives_each_its_own_results():
    """Runs of one signature take turns on its binding; one that finds it busy runs as a plain run does."""
    import concurrent.futures
    session = nnapi.load(_reshape_model(), devices="reference")
    a = np.arange(4, dtype=np.float32)

    def one(k: int) -> bool:
        dims = [(2, 2), (4, 1), (1, 4)][k % 3]
        out = session.run([a + k, a, np.array(dims, np.int32)])["output_0"]
        return out.shape == dims and np.array_equal(out, (2 * a + k).reshape(dims))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(60)))


# --- the driver side: IPreparedModel.create_reusable_execution (Android's IExecution) --------------------------
def _hal_request(x: np.ndarray, y: np.ndarray, out: np.ndarray):
    from nnapi.hal import DataLocation, MemoryPool, Request, RequestArgument
    return Request([RequestArgument(location=DataLocation(k, 0, x.nbytes)) for k in (0, 1)],
                   [RequestArgument(location=DataLocation(2, 0, out.nbytes))],
                   [MemoryPool(pointer=x), MemoryPool(pointer=y), MemoryPool(pointer=out)])


@pytest.mark.parametrize("device", DEVICES)
def test_a_drivers_reusable_execution_reads_its_memory_anew_at_each_computation(device):
    from nnapi.hal import ExecutionPreference, MeasureTiming, Priority
    _installed(device)
    dev = next(d for d in nnapi.devices() if d.name == device)
    model = add_relu_model(4)
    prepared = dev.driver.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                        None, None, None)
    x, y, out = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    execution = prepared.create_reusable_execution(_hal_request(x, y, out), MeasureTiming.YES, None)
    for k in range(RUNS):
        x[:], y[:] = _feeds(4, k)
        shapes, timing = execution.compute()
        np.testing.assert_array_equal(out, np.maximum(x + y, 0))
        assert [tuple(s.dimensions) for s in shapes] == [(4,)] and timing.time_in_driver >= timing.time_on_device >= 0
    with pytest.raises(nnapi.NnError) as missed:
        execution.compute(deadline=1)  # (monotonic ns 1: long past)
    assert missed.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    x[:], y[:] = _feeds(4, 99)
    execution.compute()  # (a refused computation leaves the execution usable)
    np.testing.assert_array_equal(out, np.maximum(x + y, 0))


def test_a_drivers_reusable_execution_of_an_invalid_request_is_refused_when_made():
    from nnapi.hal import DataLocation, ExecutionPreference, MeasureTiming, MemoryPool, Priority, Request, \
        RequestArgument
    dev = next(d for d in nnapi.devices() if d.name == "reference")
    prepared = dev.driver.prepare_model(add_relu_model(4).to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER,
                                        Priority.MEDIUM, None, None, None)
    x = np.zeros(4, np.float32)
    short = Request([RequestArgument(location=DataLocation(0, 0, 16)), RequestArgument(location=DataLocation(0, 0, 8))],
                    [RequestArgument(location=DataLocation(0, 0, 16))], [MemoryPool(pointer=x)])
    with pytest.raises(nnapi.NnError) as refused:
        prepared.create_reusable_execution(short, MeasureTiming.NO, None)
    assert refused.value.status == ErrorStatus.INVALID_ARGUMENT and "input 1" in refused.value.message


def test_a_driver_without_its_own_reusable_execution_gets_one_that_executes_each_time():
    """A HAL driver that implements only the abstract calls: the default reusable execution is an
    `execute_synchronously` per computation, and a reusable runtime execution works on it."""
    from nnapi.hal import SimpleExecution
    dev = next(d for d in nnapi.devices() if d.name == "reference")
    from nnapi.hal import ExecutionPreference, MeasureTiming, Priority
    from nnapi.hal.interfaces import IPreparedModel
    prepared = dev.driver.prepare_model(add_relu_model(4).to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER,
                                        Priority.MEDIUM, None, None, None)
    x, y, out = np.ones(4, np.float32), -np.ones(4, np.float32) * 3, np.zeros(4, np.float32)
    default = IPreparedModel.create_reusable_execution(prepared, _hal_request(x, y, out), MeasureTiming.NO, None)
    assert isinstance(default, SimpleExecution)
    calls = []
    real = prepared.execute_synchronously
    prepared.execute_synchronously = lambda *a, **k: calls.append(1) or real(*a, **k)
    default.compute()
    x[:] = 5
    default.compute()
    assert len(calls) == 2
    np.testing.assert_array_equal(out, np.full(4, 2, np.float32))
