"""Memory domains in the runtime: `MemoryDesc`, `Memory.from_desc`, `Memory.copy` and executions
with memory from a descriptor (VTS-BEHAVIOURS 3.4 and 3.5), and the state-tensor loop.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import nnapi
from nnapi import Memory, MemoryDesc, OperandType as T, OperationType as Op, ResultCode
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (Capabilities, DeviceInfo, DeviceType, ErrorStatus, IDevice, NnError, OperandPerformance,
                       PerformanceInfo)
from nnapi.validation import validate_model

devices_module = importlib.import_module("nnapi.runtime.devices")  # the module (the package exports a function)


def expect(code: ResultCode, fn, *args, **kwargs):
    with pytest.raises(NnError) as e:
        fn(*args, **kwargs)
    assert e.value.code == code, e.value
    return e.value


# --- models -------------------------------------------------------------------------------------------
def float_model(dims=(1, 2), n_in=1, n_out=1, op=Op.ADD, out_dims=None) -> nnapi.Model:
    """out_k = in_k + in_k (k < n_in), as many outputs as asked (extra ones also from input 0)."""
    m = nnapi.Model()
    ins = [m.add_operand(T.TENSOR_FLOAT32, dims) for _ in range(n_in)]
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    outs = []
    for k in range(n_out):
        out = m.add_operand(T.TENSOR_FLOAT32, dims if out_dims is None else out_dims)
        x = ins[min(k, n_in - 1)]
        m.add_operation(op, [x, x, act], [out])
        outs.append(out)
    m.identify_inputs_and_outputs(ins, outs)
    m.finish()
    return m


def compile_(model, devices=None):
    return nnapi.Compilation(model, devices=devices).finish()


@pytest.fixture(scope="module")
def compilation():
    return compile_(float_model(), ["reference"])


def finished_desc(*roles, dims=None) -> MemoryDesc:
    desc = MemoryDesc()
    for io, c, k in roles:
        (desc.add_input_role if io == "in" else desc.add_output_role)(c, k)
    if dims is not None:
        desc.set_dimensions(dims)
    return desc.finish()


def ashmem_with(values, dtype=np.float32) -> Memory:
    values = np.asarray(values, dtype)
    mem = Memory.ashmem(values.nbytes)
    mem.array(dtype, values.shape)[...] = values
    return mem


# --- 3.5 ValidationTestMemoryDesc ---------------------------------------------------------------------
def test_add_role_checks(compilation):
    for add in ("add_input_role", "add_output_role"):
        desc = MemoryDesc()
        expect(ResultCode.UNEXPECTED_NULL, getattr(desc, add), None, 0)
        unfinished = nnapi.Compilation(float_model())
        expect(ResultCode.BAD_DATA, getattr(desc, add), unfinished, 0)
        expect(ResultCode.BAD_DATA, getattr(desc, add), compilation, 999)
        expect(ResultCode.BAD_DATA, getattr(desc, add), compilation, -1)
        for frequency in (10, 0, -1, float("nan")):
            expect(ResultCode.BAD_DATA, getattr(desc, add), compilation, 0, frequency)
        getattr(desc, add)(compilation, 0)
        expect(ResultCode.BAD_DATA, getattr(desc, add), compilation, 0)
        desc.finish()
        expect(ResultCode.BAD_STATE, getattr(desc, add), compilation, 0)


def test_invalid_compilation_role():
    """ValidationTestInvalidCompilation.MemoryDescAddRole: a compilation whose finish failed."""
    nothing = devices_module._make(FakeDriver("fake-nothing", set()))
    c = nnapi.Compilation(float_model(), devices=[nothing])
    expect(ResultCode.BAD_DATA, c.finish)
    expect(ResultCode.BAD_DATA, MemoryDesc().add_input_role, c, 0)
    expect(ResultCode.BAD_DATA, MemoryDesc().add_output_role, c, 0)


def test_operand_metadata_must_match():
    base = compile_(float_model((1, 2)), ["reference"])
    m16 = nnapi.Model()
    a = m16.add_operand(T.TENSOR_FLOAT16, (1, 2))
    out = m16.add_operand(T.TENSOR_FLOAT16, (1, 2))
    m16.add_operation(Op.RELU, [a], [out])
    m16.identify_inputs_and_outputs([a], [out])
    m16.finish()
    for other in (compile_(m16, ["reference"]), compile_(float_model((1, 3)), ["reference"]),
                  compile_(float_model((2,)), ["reference"])):
        desc = MemoryDesc()
        desc.add_input_role(base, 0)
        expect(ResultCode.BAD_DATA, desc.add_input_role, other, 0)
    q = []
    for scale, zp in ((0.5, 0), (1.0, 0), (0.5, 10)):
        mq = nnapi.Model()
        a = mq.add_operand(T.TENSOR_QUANT8_ASYMM, (2,), scale, zp)
        out = mq.add_operand(T.TENSOR_QUANT8_ASYMM, (2,), scale, zp)
        mq.add_operation(Op.RELU, [a], [out])
        mq.identify_inputs_and_outputs([a], [out])
        mq.finish()
        q.append(compile_(mq, ["reference"]))
    for other in q[1:]:
        desc = MemoryDesc()
        desc.add_input_role(q[0], 0)
        expect(ResultCode.BAD_DATA, desc.add_output_role, other, 0)


def _per_channel_compilation(scales):
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 2, 2, 2), 1.0, 0)
    w = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 1, 1, 2))
    m.set_operand_symm_per_channel_quant_params(w, scales, 0)
    b = m.add_operand(T.TENSOR_INT32, (2,))
    pad, sw, sh, act = (m.add_operand(T.INT32) for _ in range(4))
    out = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 2, 2, 2), 1.0, 0)
    m.add_operation(Op.CONV_2D, [x, w, b, pad, sw, sh, act], [out])
    for i, v in ((pad, 1), (sw, 1), (sh, 1), (act, 0)):
        m.set_operand_value(i, v)
    m.identify_inputs_and_outputs([x, w, b], [out])
    m.finish()
    return compile_(m, ["reference"])


def test_extra_params_must_match():
    a, b = _per_channel_compilation([1.0, 1.0]), _per_channel_compilation([0.5, 0.5])
    desc = MemoryDesc()
    desc.add_input_role(a, 1)
    expect(ResultCode.BAD_DATA, desc.add_input_role, b, 1)
    desc.add_input_role(_per_channel_compilation([1.0, 1.0]), 1)


def test_set_dimensions():
    dynamic = compile_(float_model((0,)), ["reference"])
    desc = MemoryDesc()
    desc.add_input_role(dynamic, 0)
    expect(ResultCode.BAD_DATA, desc.set_dimensions, "xy")
    desc.set_dimensions([2])
    expect(ResultCode.BAD_DATA, desc.set_dimensions, [3])
    expect(ResultCode.BAD_DATA, desc.set_dimensions, [2, 1])
    desc.finish()
    expect(ResultCode.BAD_STATE, desc.set_dimensions, [2])


def _scalar_compilation():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (2,))
    b = m.add_operand(T.TENSOR_FLOAT32, (2,))
    act = m.add_operand(T.INT32)
    out = m.add_operand(T.TENSOR_FLOAT32, (2,))
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b, act], [out])
    m.finish()
    return compile_(m, ["reference"])


def test_scalar_dimensions_before_and_after_role():
    c = _scalar_compilation()
    desc = MemoryDesc()
    desc.set_dimensions([2])
    expect(ResultCode.BAD_DATA, desc.add_input_role, c, 2)
    desc = MemoryDesc()
    desc.add_input_role(c, 2)
    desc.set_dimensions(None)       # rank 0 with no dimensions
    desc.set_dimensions(())
    expect(ResultCode.BAD_DATA, desc.set_dimensions, [2])
    memory = Memory.from_desc(desc.finish())
    nnapi.Memory.copy(ashmem_with(np.int32(1), np.int32), memory)
    e = nnapi.Execution(c)
    e.set_input(0, np.ones(2, np.float32))
    e.set_input(1, np.ones(2, np.float32))
    e.set_input_from_memory(2, memory, 0, 0)     # the fused activation RELU (1) from device memory
    out = np.zeros(2, np.float32)
    e.set_output(0, out)
    e.compute()
    np.testing.assert_array_equal(out, [2, 2])


def test_finish_and_create_memory(compilation):
    expect(ResultCode.BAD_DATA, MemoryDesc().finish)
    desc = finished_desc(("in", compilation, 0))
    expect(ResultCode.BAD_STATE, desc.finish)
    expect(ResultCode.UNEXPECTED_NULL, Memory.from_desc, None)
    unfinished = MemoryDesc()
    unfinished.add_input_role(compilation, 0)
    expect(ResultCode.BAD_STATE, Memory.from_desc, unfinished)


def test_memory_copying(compilation):
    """ValidationTestMemoryDesc.MemoryCopying: float32 [1, 2], good size 8 bytes."""
    good, bad = Memory.ashmem(8), Memory.ashmem(4)
    desc = finished_desc(("in", compilation, 0))
    dev1, dev2 = Memory.from_desc(desc), Memory.from_desc(desc)
    expect(ResultCode.BAD_DATA, Memory.copy, good, bad)             # ashmem sizes differ
    expect(ResultCode.BAD_DATA, Memory.copy, bad, dev1)             # wrong size into device memory
    expect(ResultCode.BAD_DATA, Memory.copy, dev1, dev2)            # uninitialized source
    Memory.copy(good, dev1)
    Memory.copy(dev1, dev2)
    expect(ResultCode.BAD_DATA, Memory.copy, bad, dev1)             # a failed copy uninitializes dev1
    expect(ResultCode.BAD_DATA, Memory.copy, dev1, dev2)
    expect(ResultCode.UNEXPECTED_NULL, Memory.copy, None, dev1)
    expect(ResultCode.UNEXPECTED_NULL, Memory.copy, good, None)
    Memory.copy(dev2, dev2)                                         # same object: nothing to do
    rank1 = Memory.from_desc(finished_desc(("in", compile_(float_model((2,)), ["reference"]), 0)))
    Memory.copy(ashmem_with([1, 2]), rank1)
    expect(ResultCode.BAD_DATA, Memory.copy, rank1, dev1)           # [2] against [1, 2]
    dims21 = Memory.from_desc(finished_desc(("in", compile_(float_model((2, 1)), ["reference"]), 0)))
    Memory.copy(ashmem_with([[1], [2]]), dims21)
    expect(ResultCode.BAD_DATA, Memory.copy, dims21, dev2)          # [2, 1] against [1, 2]


def test_memory_copy_semantics_with_dynamic_device_memory():
    c = compile_(float_model((0,)), ["reference"])
    dynamic = Memory.from_desc(finished_desc(("in", c, 0), ("out", c, 0)))
    assert dynamic.is_device and dynamic.logical_size == 0
    expect(ResultCode.BAD_DATA, Memory.copy, ashmem_with([1, 2, 3]), dynamic)  # size of the destination unknown
    sized = Memory.from_desc(finished_desc(("in", c, 0), ("out", c, 0), dims=[3]))
    Memory.copy(ashmem_with([1, 2, 3]), sized)
    Memory.copy(sized, dynamic)                          # the destination takes the source's dimensions
    assert dynamic.dimensions == (3,) and dynamic.logical_size == 12
    out = Memory.ashmem(12)
    Memory.copy(dynamic, out)
    np.testing.assert_array_equal(out.array(np.float32, (3,)), [1, 2, 3])


# --- 3.5 ValidationTestExecutionDeviceMemory ----------------------------------------------------------
def test_execution_set_input_from_device_memory(compilation):
    memory = Memory.from_desc(finished_desc(("in", compilation, 0)))
    e = nnapi.Execution(compilation)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, memory, 1, 0)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, memory, 0, 4)
    expect(ResultCode.BAD_DATA, e.set_output_from_memory, 0, memory, 0, 0)   # no output role
    e.set_input_from_memory(0, memory, 0, 0)
    e.set_output(0, np.zeros((1, 2), np.float32))
    expect(ResultCode.OP_FAILED, e.compute)                                  # uninitialized
    Memory.copy(ashmem_with([[1, 2]]), memory)
    e.compute()
    (out,) = nnapi.Compilation.execute(compilation, [np.array([[1, 2]], np.float32)])
    np.testing.assert_array_equal(out, [[2, 4]])


def test_execution_set_output_from_device_memory(compilation):
    memory = Memory.from_desc(finished_desc(("out", compilation, 0)))
    e = nnapi.Execution(compilation)
    expect(ResultCode.BAD_DATA, e.set_output_from_memory, 0, memory, 1, 0)
    expect(ResultCode.BAD_DATA, e.set_output_from_memory, 0, memory, 0, 4)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, memory, 0, 0)    # no input role
    e.set_output_from_memory(0, memory, 0, 0)
    expect(ResultCode.BAD_STATE, e.set_output_from_memory, 0, memory, 0, 0)
    e.set_input(0, np.array([[1, 2]], np.float32))
    assert not memory.initialized
    e.compute()
    assert memory.initialized and memory.dimensions == (1, 2)
    back = Memory.ashmem(8)
    Memory.copy(memory, back)
    np.testing.assert_array_equal(back.array(np.float32, (1, 2)), [[2, 4]])


def test_memory_made_uninitialized_between_binding_and_compute():
    # Two outputs; output 1 has an unknown size, so a too-small buffer fails the execution.
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (2,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out0 = m.add_operand(T.TENSOR_FLOAT32, (2,))
    out1 = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.ADD, [a, a, act], [out0])
    m.add_operation(Op.ADD, [a, a, act], [out1])
    m.identify_inputs_and_outputs([a], [out0, out1])
    m.finish()
    c = compile_(m, ["reference"])
    reader = compile_(float_model((2,)), ["reference"])
    memory = Memory.from_desc(finished_desc(("out", c, 0), ("in", reader, 0)))
    writer = nnapi.Execution(c)
    writer.set_input(0, np.ones(2, np.float32))
    writer.set_output_from_memory(0, memory, 0, 0)
    writer.set_output(1, np.zeros(2, np.float32))
    writer.compute()
    assert memory.initialized
    e = nnapi.Execution(reader)
    e.set_input_from_memory(0, memory, 0, 0)
    e.set_output(0, np.zeros(2, np.float32))
    failing = nnapi.Execution(c)
    failing.set_input(0, np.ones(2, np.float32))
    failing.set_output_from_memory(0, memory, 0, 0)
    failing.set_output(1, np.zeros(1, np.float32))
    expect(ResultCode.OUTPUT_INSUFFICIENT_SIZE, failing.compute)
    assert not memory.initialized
    expect(ResultCode.OP_FAILED, e.compute)


def test_execution_device_memory_dynamic_shape():
    c = compile_(float_model((0,)), ["reference"])
    memory = Memory.from_desc(finished_desc(("in", c, 0), ("out", c, 0), dims=[1]))
    e = nnapi.Execution(c)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, memory, 0, 0, (2,))
    expect(ResultCode.BAD_DATA, e.set_output_from_memory, 0, memory, 0, 0, (2,))
    e.set_input_from_memory(0, memory, 0, 0, (1,))


def test_device_memory_cannot_be_a_constant(compilation):
    memory = Memory.from_desc(finished_desc(("in", compilation, 0)))
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (1, 2))
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 0, 8)
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 0, 0)


# --- 3.4 TestMemoryDomain: fallback and device choice ---------------------------------------------------
class FakeDriver(IDevice):
    """A device over the reference interpreter that supports some operations and answers `allocate`
    the way the test asks: OK, BAD_TOKEN (token 0), BAD_IBUFFER (no buffer), BAD_STATUS or NOT_SUPPORTED
    (GENERAL_FAILURE). Feature level 29 plays a 1.2 driver (never allocates)."""

    def __init__(self, name, ops, result="OK", feature_level=30):
        self.name, self.ops, self.result, self.level = name, set(ops), result, feature_level
        self.inner = ReferenceDevice()
        self.allocations = 0

    def get_info(self):
        return DeviceInfo(self.name, "1", DeviceType.ACCELERATOR, self.level)

    def get_capabilities(self):
        fast = PerformanceInfo(0.5, 0.5)
        types = sorted(t for t in T if t not in (T.SUBGRAPH, T.OEM, T.TENSOR_OEM_BYTE))
        return Capabilities(fast, fast, tuple(OperandPerformance(t, fast) for t in types), fast, fast)

    def get_supported_operations(self, model):
        validate_model(model)
        return [op.type in self.ops for op in model.main.operations]

    def get_number_of_cache_files_needed(self):
        return 0, 0

    def prepare_model(self, model, preference=None, priority=None, deadline=None, cache=None, token=None,
                      **kwargs):
        return self.inner.prepare_model(model, preference, priority, deadline, None, None)

    def prepare_model_from_cache(self, deadline, cache, token, **kwargs):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "no cache")

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        self.allocations += 1
        result = "NOT_SUPPORTED" if self.level < 30 else self.result
        if result in ("BAD_STATUS", "NOT_SUPPORTED"):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "allocation refused")
        buffer, token = self.inner.allocate(desc, prepared_models, input_roles, output_roles)
        if result == "BAD_TOKEN":
            return buffer, 0
        if result == "BAD_IBUFFER":
            return None, token
        return buffer, token


def three_op_model() -> nnapi.Model:
    """out0 = ADD(in0, in1), temp = SUB(in1, in2), out1 = MUL(out0, temp) with out1 of dims {0}."""
    m = nnapi.Model()
    in0, in1, in2 = (m.add_operand(T.TENSOR_FLOAT32, (1,)) for _ in range(3))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out0 = m.add_operand(T.TENSOR_FLOAT32, (1,))
    temp = m.add_operand(T.TENSOR_FLOAT32, (1,))
    out1 = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.ADD, [in0, in1, act], [out0])
    m.add_operation(Op.SUB, [in1, in2, act], [temp])
    m.add_operation(Op.MUL, [out0, temp, act], [out1])
    m.identify_inputs_and_outputs([in0, in1, in2], [out0, out1])
    m.finish()
    return m


RESULTS = ["OK", "BAD_TOKEN", "BAD_IBUFFER", "BAD_STATUS", "NOT_SUPPORTED"]


@pytest.fixture
def install(monkeypatch):
    """Make exactly these fake drivers (plus the reference device) the available devices."""
    import nnapi.runtime.compilation as compilation_module

    def do(*drivers):
        made = [devices_module._make(d) for d in drivers]
        reference = devices_module.find_device("reference")
        available = [*made, reference]
        monkeypatch.setattr(compilation_module, "all_devices", lambda: list(available))
        monkeypatch.setattr(devices_module, "devices", lambda: list(available))
        return made
    return do


def _expect_allocation(desc, ok: bool, explicit: bool, level: int, size_known: bool = True):
    """Android's rules: OK -> a driver buffer; failure -> OP_FAILED with an explicit device list or an
    unknown size, else the fallback ("ashmem" for a 1.2 driver, "hardware_buffer_blob" otherwise)."""
    if ok:
        memory = Memory.from_desc(desc)
        assert memory.kind == "device"
        return memory
    if explicit or not size_known:
        expect(ResultCode.OP_FAILED, Memory.from_desc, desc)
        return None
    memory = Memory.from_desc(desc)
    assert memory.kind == ("ashmem" if level < 30 else "hardware_buffer_blob")
    return memory


@pytest.mark.parametrize("level", [29, 30], ids=["v1_2", "latest"])
@pytest.mark.parametrize("explicit", [False, True], ids=["all_devices", "device_list"])
@pytest.mark.parametrize("result", RESULTS)
def test_single_partition(install, result, explicit, level):
    (dev,) = install(FakeDriver("fake-all", {Op.ADD, Op.SUB, Op.MUL}, result, level))
    c = compile_(three_op_model(), [dev] if explicit else None)
    assert [s.device.name for s in c.steps] == ["fake-all"]
    desc = finished_desc(("in", c, 0), ("out", c, 0))
    ok = result == "OK" and level >= 30
    memory = _expect_allocation(desc, ok, explicit, level)
    if memory is None:
        return
    # The memory works in its roles whatever backs it: input 0, then output 0.
    Memory.copy(ashmem_with([3.0]), memory)
    out0, out1 = np.zeros(1, np.float32), np.zeros(1, np.float32)
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, memory, 0, 0)
    for k in (1, 2):
        e.set_input(k, np.array([1.0], np.float32))
    e.set_output(0, out0)
    e.set_output(1, out1)
    e.compute()
    assert out0[0] == 4.0 and out1[0] == 0.0
    e = nnapi.Execution(c)
    for k, v in enumerate((2.0, 2.0, 1.0)):
        e.set_input(k, np.array([v], np.float32))
    e.set_output_from_memory(0, memory, 0, 0)
    e.set_output(1, out1)
    e.compute()
    back = Memory.ashmem(4)
    Memory.copy(memory, back)
    assert back.array(np.float32, (1,))[0] == 4.0 and out1[0] == 4.0
    # The same memory as input 0 and output 0 of one execution: the driver refuses a device buffer.
    if memory.is_device:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, memory, 0, 0)
        for k in (1, 2):
            e.set_input(k, np.array([1.0], np.float32))
        e.set_output_from_memory(0, memory, 0, 0)
        e.set_output(1, out1)
        expect(ResultCode.BAD_DATA, e.compute)


@pytest.mark.parametrize("explicit", [False, True], ids=["all_devices", "device_list"])
@pytest.mark.parametrize("result", RESULTS)
def test_multiple_partitions(install, result, explicit, android_partitioning):
    devs = install(FakeDriver("fake-add", {Op.ADD}, result), FakeDriver("fake-sub", {Op.SUB}, result),
                   FakeDriver("fake-mul", {Op.MUL}, result))
    c = compile_(three_op_model(), devs if explicit else None)
    assert sorted(s.device.name for s in c.steps) == ["fake-add", "fake-mul", "fake-sub"]
    ok = result == "OK"
    in0 = _expect_allocation(finished_desc(("in", c, 0)), ok, explicit, 30)
    # input 1: ADD and SUB partitions on different devices -> never allocated on a device
    in1 = _expect_allocation(finished_desc(("in", c, 1)), False, explicit, 30)
    # output 0: ADD output and MUL input -> never allocated on a device
    out0 = _expect_allocation(finished_desc(("out", c, 0)), False, explicit, 30)
    if in0 is None or in1 is None or out0 is None:
        return
    Memory.copy(ashmem_with([2.0]), in0)
    Memory.copy(ashmem_with([5.0]), in1)
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, in0, 0, 0)
    e.set_input_from_memory(1, in1, 0, 0)
    e.set_input(2, np.array([1.0], np.float32))
    out1 = np.zeros(1, np.float32)
    e.set_output_from_memory(0, out0, 0, 0)
    e.set_output(1, out1)
    e.compute()
    check = Memory.ashmem(4)
    Memory.copy(out0, check)
    assert check.array(np.float32, (1,))[0] == 7.0 and out1[0] == 7.0 * 4.0


@pytest.mark.parametrize("explicit", [False, True], ids=["all_devices", "device_list"])
@pytest.mark.parametrize("result", RESULTS)
def test_dynamic_shape(install, result, explicit):
    (dev,) = install(FakeDriver("fake-all", {Op.ADD, Op.SUB, Op.MUL}, result))
    c = compile_(three_op_model(), [dev] if explicit else None)
    desc = finished_desc(("out", c, 1))
    memory = _expect_allocation(desc, result == "OK", explicit, 30, size_known=False)
    if memory is None:
        return
    e = nnapi.Execution(c)
    for k, v in enumerate((2.0, 3.0, 1.0)):
        e.set_input(k, np.array([v], np.float32))
    e.set_output(0, np.zeros(1, np.float32))
    e.set_output_from_memory(1, memory, 0, 0)
    e.compute()
    assert memory.dimensions == (1,) and e.get_output_shape(1) == (1,)
    out = Memory.ashmem(4)
    Memory.copy(memory, out)
    assert out.array(np.float32, (1,))[0] == 10.0


def test_memory_copy_test():
    """MemoryDomainCopyTest.MemoryCopyTest: ashmem1 -> devmem1 -> devmem2 -> ashmem2 keeps 3.14."""
    c = compile_(float_model((1,)), ["reference"])
    desc = finished_desc(("in", c, 0))
    dev1, dev2 = Memory.from_desc(desc), Memory.from_desc(desc)
    assert dev1.is_device and dev2.is_device
    ashmem1, ashmem2 = ashmem_with([3.14]), Memory.ashmem(4)
    Memory.copy(ashmem1, dev1)
    Memory.copy(dev1, dev2)
    Memory.copy(dev2, ashmem2)
    assert ashmem2.array(np.float32, (1,))[0] == np.float32(3.14)


def test_copies_between_every_kind():
    c = compile_(float_model((2, 2)), ["reference"])
    device = Memory.from_desc(finished_desc(("in", c, 0)))
    blob = Memory.from_hardware_buffer(nnapi.HardwareBuffer(16))
    image = Memory.from_hardware_buffer(nnapi.HardwareBuffer(2, 2, 1, nnapi.HardwareBufferFormat.R8G8B8A8_UNORM,
                                                             stride=4))
    gpu_only = Memory.from_hardware_buffer(nnapi.HardwareBuffer(16, 1, 1, nnapi.HardwareBufferFormat.BLOB,
                                                                nnapi.HardwareBufferUsage.GPU_DATA_BUFFER))
    src = ashmem_with([[1, 2], [3, 4]])
    Memory.copy(src, image)           # into a padded image: rows land at the stride
    Memory.copy(image, device)        # image -> device (staged through a BLOB)
    Memory.copy(device, blob)
    back = Memory.ashmem(16)
    Memory.copy(blob, back)
    np.testing.assert_array_equal(back.array(np.float32, (2, 2)), [[1, 2], [3, 4]])
    image2 = Memory.from_hardware_buffer(nnapi.HardwareBuffer(4, 1, 1, nnapi.HardwareBufferFormat.R8G8B8A8_UNORM))
    Memory.copy(device, image2)       # device -> image (staged)
    assert image2.logical_size == 16 and image2.size == 0
    expect(ResultCode.UNMAPPABLE, Memory.copy, src, gpu_only)
    expect(ResultCode.BAD_DATA, Memory.copy, ashmem_with([1, 2, 3]), image)


# --- the state-tensor loop ----------------------------------------------------------------------------------
def state_model(n: int = 8):
    """An RNN/LSTM-style cell: h' = TANH(FC(x, Wx, b) + FC(h, Wh, 0)); outputs h' (the state) and y = 2 h'."""
    rng = np.random.default_rng(1)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    h = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    wx = m.add_operand(T.TENSOR_FLOAT32, (n, n))
    wh = m.add_operand(T.TENSOR_FLOAT32, (n, n))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    zero = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(wx, rng.normal(0, 0.5, (n, n)).astype(np.float32))
    m.set_operand_value(wh, rng.normal(0, 0.5, (n, n)).astype(np.float32))
    m.set_operand_value(b, rng.normal(0, 0.1, n).astype(np.float32))
    m.set_operand_value(zero, np.zeros(n, np.float32))
    m.set_operand_value(act, 0)
    fx = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    fh = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    s = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    h2 = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    y = m.add_operand(T.TENSOR_FLOAT32, (1, n))
    m.add_operation(Op.FULLY_CONNECTED, [x, wx, b, act], [fx])
    m.add_operation(Op.FULLY_CONNECTED, [h, wh, zero, act], [fh])
    m.add_operation(Op.ADD, [fx, fh, act], [s])
    m.add_operation(Op.TANH, [s], [h2])
    m.add_operation(Op.ADD, [h2, h2, act], [y])
    m.identify_inputs_and_outputs([x, h], [h2, y])
    m.finish()
    return m


def test_state_tensor_loop_in_device_buffers_matches_plain_arrays():
    """The state stays in two driver-managed buffers (ping-pong) for 100 executions and matches the
    same loop with plain arrays; it is read back only at the end."""
    n = 8
    c = compile_(state_model(n), ["reference"])
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(100, 1, n)).astype(np.float32)
    h0 = rng.normal(size=(1, n)).astype(np.float32)
    h = h0.copy()
    ys = []
    for x in xs:
        h, y = c.execute([x, h])
        ys.append(y)
    desc = finished_desc(("in", c, 1), ("out", c, 0))
    a, b = Memory.from_desc(desc), Memory.from_desc(desc)
    assert a.is_device and b.is_device and a.pool.token != b.pool.token
    Memory.copy(ashmem_with(h0), a)
    y = np.zeros((1, n), np.float32)
    for k, x in enumerate(xs):
        e = nnapi.Execution(c)
        e.set_input(0, x)
        e.set_input_from_memory(1, a, 0, 0)
        e.set_output_from_memory(0, b, 0, 0)
        e.set_output(1, y)
        e.compute()
        np.testing.assert_array_equal(y, ys[k])
        a, b = b, a
    final = Memory.ashmem(4 * n)
    Memory.copy(a, final)
    np.testing.assert_array_equal(final.array(np.float32, (1, n)), h)
