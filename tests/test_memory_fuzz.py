"""Hypothesis fuzzing of memory pools and domains: random offsets, lengths, dimensions and roles.

Whatever the arguments, the driver and the runtime answer with a result or an `NnError`, never
another exception, and never touch memory outside the region they were given (canary bytes
around every region stay intact).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import nnapi
from nnapi import Memory, MemoryDesc, OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (BufferDesc, BufferRole, DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool,
                       NnError, Priority, Request, RequestArgument)
from nnapi.memory import HardwareBuffer, HardwareBufferFormat, allocate_ashmem, close_handle, map_handle

from conftest import fuzz_examples

_DEVICE = ReferenceDevice()


def device() -> ReferenceDevice:
    return _DEVICE


def prepare(model: nnapi.Model):
    return _DEVICE.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None,
                                 None)


FUZZ = settings(max_examples=fuzz_examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
CANARY = 0xA5


def dynamic_model() -> nnapi.Model:
    """out0 = a + b (dims [0, 3]), out1 = RELU(a) (dims [2, 3]); input 2 is an unused-by-shape scalar."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (0, 3))
    b = m.add_operand(T.TENSOR_FLOAT32, (0, 3))
    act = m.add_operand(T.INT32)
    out0 = m.add_operand(T.TENSOR_FLOAT32, (0, 3))
    m.add_operation(Op.ADD, [a, b, act], [out0])
    c = m.add_operand(T.TENSOR_FLOAT32, (2, 3))
    out1 = m.add_operand(T.TENSOR_FLOAT32, (2, 3))
    m.add_operation(Op.RELU, [c], [out1])
    m.identify_inputs_and_outputs([a, b, act, c], [out0, out1])
    m.finish()
    return m


_MODEL = dynamic_model()
_PREPARED = [None]


def prepared():
    if _PREPARED[0] is None:
        _PREPARED[0] = prepare(_MODEL)
    return _PREPARED[0]


dims_st = st.lists(st.integers(0, 4), max_size=3).map(tuple)
index_st = st.integers(-1, 5)
freq_st = st.sampled_from([1.0, 0.5, 0.0, -1.0, 2.0, float("nan")])


@FUZZ
@given(dims=dims_st,
       inputs=st.lists(st.tuples(st.integers(-1, 2), index_st, freq_st), max_size=4),
       outputs=st.lists(st.tuples(st.integers(-1, 2), index_st, freq_st), max_size=3),
       n_models=st.integers(0, 2))
def test_allocate_with_random_roles(dims, inputs, outputs, n_models):
    models = [prepared()] * n_models
    try:
        buffer, token = device().allocate(BufferDesc(dims), models, [BufferRole(*r) for r in inputs],
                                          [BufferRole(*r) for r in outputs])
    except NnError as e:
        assert e.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
        return
    assert token > 0 and buffer is not None
    roles = [(r[1], r[2]) for r in inputs + outputs]
    assert all(0.0 < f <= 1.0 for _, f in roles)


#: The pools an example has made, closed when it ends (`_closing_pools`): HAL handles are plain data
#: whose descriptors their owner closes, so an example that dropped them would leak two per run.
_OPEN: list = []


def _open_descriptors() -> int:
    """The process's open shared-memory descriptors (not, say, the SQLite files a driver thread keeps open)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:")
        except OSError:  # (the listing's own descriptor, closed by now)
            pass
    return count


@contextlib.contextmanager
def _closing_pools() -> Iterator[None]:
    """Close every pool made inside; the driver must then hold no descriptor of them either."""
    before = _open_descriptors()
    try:
        yield
    finally:
        while _OPEN:
            close_handle(_OPEN.pop())
    assert _open_descriptors() <= before, "the driver kept a descriptor of a pool the client closed"


def _region_pool(size: int, payload: bytes | None = None):
    """An ashmem pool of `size` bytes, all canary except an optional payload at 0 (closed by `_closing_pools`)."""
    handle = allocate_ashmem(max(size, 1))
    _OPEN.append(handle)
    mapped = map_handle(handle)
    mapped.write_bytes(0, bytes([CANARY]) * max(size, 1))
    if payload:
        mapped.write_bytes(0, payload[:size])
    return handle, mapped


@FUZZ
@given(pool_size=st.integers(1, 96),
       args=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100), dims_st), min_size=6, max_size=6),
       use_token=st.booleans(), token_dims=dims_st, init_rows=st.integers(0, 3))
@_closing_pools()
def test_requests_with_random_regions(pool_size, args, use_token, token_dims, init_rows):
    """Four inputs, two outputs, each in a random region of one shared pool (or one in a buffer)."""
    model = prepared()
    payload = np.linspace(-1, 1, pool_size // 4 + 1, dtype=np.float32).tobytes()
    in_handle, in_mapped = _region_pool(pool_size, payload)
    before = bytes(in_mapped.view(0, in_mapped.size))
    out_handle, out_mapped = _region_pool(pool_size)
    pools = [MemoryPool(handle=in_handle), MemoryPool(handle=out_handle)]
    req_in = [RequestArgument(False, DataLocation(0, o, n), d) for o, n, d in args[:4]]
    req_out = [RequestArgument(False, DataLocation(1, o, n), d) for o, n, d in args[4:]]
    keep = None
    if use_token:
        try:
            keep, token = device().allocate(BufferDesc(token_dims), [model], [BufferRole(0, 0, 1.0)],
                                            [BufferRole(0, 0, 1.0)])
        except NnError as e:
            assert e.status == ErrorStatus.INVALID_ARGUMENT
        else:
            if init_rows:
                src, _ = _region_pool(init_rows * 12, bytes(init_rows * 12))
                try:
                    keep.copy_from(src, [init_rows, 3])
                except NnError as e:
                    assert e.status == ErrorStatus.INVALID_ARGUMENT
            pools.append(MemoryPool(token=token))
            req_in[0] = RequestArgument(False, DataLocation(2, 0, 0), token_dims)
    request = Request(req_in, req_out, pools)
    try:
        model.execute_synchronously(request, MeasureTiming.NO, None, None)
    except NnError:
        pass
    assert bytes(in_mapped.view(0, in_mapped.size)) == before            # inputs are never written
    written = np.zeros(out_mapped.size, bool)
    for o, n, _ in args[4:]:
        written[o:o + n] = True
    outside = np.frombuffer(out_mapped.view(0, out_mapped.size), np.uint8)[~written]
    assert (outside == CANARY).all()                                     # nothing outside the regions
    del keep


@FUZZ
@given(memory_size=st.integers(1, 64), dims=dims_st, dynamic=st.booleans(), copy_dims=dims_st)
@_closing_pools()
def test_buffer_copies_with_random_sizes_and_dims(memory_size, dims, dynamic, copy_dims):
    model = prepared()
    try:
        buffer, _ = device().allocate(BufferDesc(dims), [model], [BufferRole(0, 3 if not dynamic else 0, 1.0)], [])
    except NnError as e:
        assert e.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
        return
    data = bytes(range(memory_size))
    src, _ = _region_pool(memory_size, data)
    try:
        buffer.copy_from(src, list(copy_dims))
    except NnError as e:
        assert e.status == ErrorStatus.INVALID_ARGUMENT
        dst, mapped = _region_pool(memory_size)
        try:
            buffer.copy_to(dst)
            raise AssertionError("copy_to after a failed copy_from must fail")
        except NnError as e2:
            assert e2.status == ErrorStatus.GENERAL_FAILURE
        return
    assert memory_size % 4 == 0
    dst, mapped = _region_pool(memory_size)
    buffer.copy_to(dst)
    assert bytes(mapped.view(0, memory_size)) == data
    for wrong in (memory_size - 1, memory_size + 4):
        if wrong > 0:
            other, _ = _region_pool(wrong)
            try:
                buffer.copy_to(other)
                raise AssertionError("a copy_to of the wrong size must fail")
            except NnError as e:
                assert e.status == ErrorStatus.INVALID_ARGUMENT


_COMPILATION = [None]


def compilation():
    if _COMPILATION[0] is None:
        _COMPILATION[0] = nnapi.Compilation(_MODEL, devices=["reference"]).finish()
    return _COMPILATION[0]


memory_kind = st.sampled_from(["ashmem", "blob", "image", "desc"])


def _memory(kind: str, size: int) -> Memory:
    if kind == "ashmem":
        return Memory.ashmem(size)
    if kind == "blob":
        return Memory.from_hardware_buffer(HardwareBuffer(size))
    if kind == "image":
        return Memory.from_hardware_buffer(HardwareBuffer(max(size // 4, 1), 1, 1, HardwareBufferFormat.R8G8B8A8_UNORM))
    desc = MemoryDesc()
    desc.add_output_role(compilation(), 1)
    desc.add_input_role(compilation(), 3)
    return Memory.from_desc(desc.finish())


@FUZZ
@given(kind=memory_kind, size=st.integers(4, 64), offset=st.integers(-2, 70), length=st.integers(-2, 70),
       io=st.sampled_from(["input", "output"]), index=st.integers(-1, 4), dims=st.one_of(st.none(), dims_st))
def test_runtime_bindings_with_random_regions(kind, size, offset, length, io, index, dims):
    c = compilation()
    memory = _memory(kind, size)
    if memory.handle is not None and not memory.is_image:
        memory.mapped().write_bytes(0, bytes([CANARY]) * memory.size)
    e = nnapi.Execution(c)
    try:
        getattr(e, f"set_{io}_from_memory")(index, memory, offset, length, dims)
    except NnError as err:
        assert err.code in (nnapi.ResultCode.BAD_DATA, nnapi.ResultCode.UNEXPECTED_NULL,
                            nnapi.ResultCode.BAD_STATE)
        return
    # Accepted: the region is inside the memory (or the whole memory for images / desc memory).
    if memory.is_image or memory.from_memory_desc:
        assert offset == length == 0
    else:
        assert 0 <= offset and offset + length <= memory.size and (offset or length)
    values = {0: np.ones((2, 3), np.float32), 1: np.ones((2, 3), np.float32), 2: np.int32(0),
              3: -np.ones((2, 3), np.float32)}
    for k in range(4):
        if not (io == "input" and k == index):
            e.set_input(k, values[k])
    outs = [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)]
    for k in range(2):
        if not (io == "output" and k == index):
            e.set_output(k, outs[k])
    try:
        e.compute()
    except NnError:
        pass
    if io == "output" and memory.handle is not None and not memory.is_image:
        outside = np.frombuffer(memory.mapped().view(0, memory.size), np.uint8).copy()
        outside[offset:offset + length] = CANARY
        assert (outside == CANARY).all()


@FUZZ
@given(roles=st.lists(st.tuples(st.sampled_from(["in", "out"]), st.integers(-1, 4),
                                st.sampled_from([1.0, 0.3, 0.0, 5.0])), max_size=4),
       dims=st.one_of(st.none(), dims_st), finish=st.booleans())
def test_memory_desc_with_random_roles(roles, dims, finish):
    c = compilation()
    desc = MemoryDesc()
    for io, index, frequency in roles:
        try:
            (desc.add_input_role if io == "in" else desc.add_output_role)(c, index, frequency)
        except NnError as e:
            assert e.code == nnapi.ResultCode.BAD_DATA
    try:
        desc.set_dimensions(dims)
    except NnError as e:
        assert e.code == nnapi.ResultCode.BAD_DATA
    if not finish:
        return
    try:
        desc.finish()
        memory = Memory.from_desc(desc)
    except NnError as e:
        assert e.code in (nnapi.ResultCode.BAD_DATA, nnapi.ResultCode.OP_FAILED)
        return
    assert memory.from_memory_desc
