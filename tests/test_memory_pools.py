"""Memory pools: the memory kinds and hardware buffers (M1-M5), the reference driver's answers to memory it
cannot map, the runtime's checks (VTS-BEHAVIOURS 2.3) and zero-copy.

Request validation in the driver (2.2) and every memory kind as constants and execution I/O through each
executor (2.1) are checks of the certification kit (`nnapi.conformance.vts.memory`), run on the reference
driver by test_vts_reference.py.
"""
from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

import nnapi
from nnapi import (HardwareBuffer, HardwareBufferFormat as Fmt, HardwareBufferUsage as Usage, Memory,
                   OperandType as T, OperationType as Op, ResultCode)
from nnapi.hal import ErrorStatus, MemoryHandle, NnError, OperandLifeTime
from nnapi.memory import MappedImage, can_map, decode_hardware_buffer, map_handle, map_pool, mappable_constant_flags

from conftest import add_relu_model


def prepare(model: nnapi.Model):
    from nnapi.drivers.reference import ReferenceDevice
    from nnapi.hal import ExecutionPreference, Priority
    return ReferenceDevice().prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                           None, None, None)


def expect(code: ResultCode, fn, *args, **kwargs):
    with pytest.raises(NnError) as e:
        fn(*args, **kwargs)
    assert e.value.code == code, e.value
    return e.value


# --- hardware buffers ---------------------------------------------------------------------------------------
def test_blob_handle_carries_its_metadata():
    hb = HardwareBuffer(100, 1, 1, Fmt.BLOB, Usage.CPU_READ_OFTEN | Usage.CPU_WRITE_RARELY)
    h = hb.handle
    assert h.name == "hardware_buffer_blob" and h.size == 100 and len(h.fds) == 1
    assert h.ints == (100, 1, 1, Fmt.BLOB, 0x23, 0, 100)
    desc = decode_hardware_buffer(h)
    assert desc.is_blob and desc.packed_size == 100 and desc.cpu_readable and desc.cpu_writable
    assert os.fstat(h.fds[0]).st_size == 100


def test_image_handle_carries_its_metadata():
    usage = Usage.CPU_READ_OFTEN | Usage.GPU_SAMPLED_IMAGE | (1 << 40)   # 64-bit usage survives the split
    hb = HardwareBuffer(5, 3, 2, Fmt.R16G16B16A16_FLOAT, usage, stride=8)
    h = hb.handle
    assert h.name == "hardware_buffer" and h.size == 0
    assert h.ints == (5, 3, 2, Fmt.R16G16B16A16_FLOAT, usage & 0xFFFFFFFF, usage >> 32, 8)
    desc = decode_hardware_buffer(h)
    assert desc.usage == usage and desc.packed_size == 5 * 3 * 2 * 8 and desc.allocation_size == 8 * 3 * 2 * 8
    assert hb.size == 240 and os.fstat(h.fds[0]).st_size == 384
    # the handle is plain data: rebuilt from its parts on "the other side", it decodes the same
    clone = HardwareBuffer.from_handle(MemoryHandle(h.name, tuple(h.fds), tuple(h.ints), h.size))
    assert clone.desc == hb.desc and clone.handle.fds != h.fds


@pytest.mark.parametrize("args, fragment", [
    ((0, 1, 1, Fmt.BLOB), "positive"), ((10, 2, 1, Fmt.BLOB), "height 1 and layers 1"),
    ((10, 1, 2, Fmt.BLOB), "height 1 and layers 1"), ((4, 4, 1, 0x99), "unknown format"),
    ((4, 4, 1, Fmt.R8_UNORM, -1), "64-bit"), ((4, 4, 0, Fmt.R8_UNORM), "positive"),
    ((4.0, 4, 1, Fmt.R8_UNORM), "integer"),
])
def test_bad_hardware_buffer_descriptions(args, fragment):
    assert fragment in expect(ResultCode.BAD_DATA, HardwareBuffer, *args).message
    expect(ResultCode.BAD_DATA, HardwareBuffer, 4, 4, 1, Fmt.R8_UNORM, stride=3)


def test_padded_image_rows_decode_to_packed_content():
    hb = HardwareBuffer(3, 2, 2, Fmt.R8G8B8A8_UNORM, stride=5)
    data = np.arange(48, dtype=np.uint8)
    hb.write(data)
    assert hb.read() == data.tobytes()
    raw = np.frombuffer(os.pread(hb.handle.fds[0], 160, 0), np.uint8).reshape(4, 20)
    np.testing.assert_array_equal(raw[:, :12], data.reshape(4, 12))   # rows at the stride
    assert not raw[:, 12:].any()                                      # padding untouched
    mapped = map_handle(hb.handle)
    assert isinstance(mapped, MappedImage) and mapped.size == 48
    np.testing.assert_array_equal(mapped.array(4, 8, np.uint8, (8,)), data[4:12])
    mapped.write(13, np.full(20, 255, np.uint8))
    got = np.frombuffer(hb.read(), np.uint8)
    assert (got[13:33] == 255).all() and (got[:13] == data[:13]).all() and (got[33:] == data[33:]).all()
    assert hb.view().shape == (2, 2, 12)


def test_undecodable_or_inaccessible_buffers_cannot_be_mapped():
    yuv = HardwareBuffer(4, 4, 1, Fmt.Y8Cb8Cr8_420)
    gpu_only = HardwareBuffer(64, 1, 1, Fmt.BLOB, Usage.GPU_DATA_BUFFER)
    protected = HardwareBuffer(64, 1, 1, Fmt.BLOB, Usage.CPU_READ_OFTEN | Usage.PROTECTED_CONTENT)
    for hb in (yuv, gpu_only, protected):
        assert not can_map(hb.handle)
        with pytest.raises(NnError) as e:
            map_handle(hb.handle)
        assert e.value.status == ErrorStatus.GENERAL_FAILURE
        expect(ResultCode.UNMAPPABLE, hb.lock)
    for h in (MemoryHandle("hardware_buffer_blob", (gpu_only.handle.fds[0],), (64, 1, 1), 64),
              MemoryHandle("hardware_buffer_blob", (gpu_only.handle.fds[0],), (64, 1, 1, Fmt.BLOB, 3, 0, 64), 32),
              MemoryHandle("hardware_buffer", (yuv.handle.fds[0],), (4, 4, 1, Fmt.BLOB, 3, 0, 4), 0)):
        assert not can_map(h)
        with pytest.raises(NnError) as e:
            map_handle(h)
        assert e.value.status == ErrorStatus.GENERAL_FAILURE and "cannot decode" in e.value.message
    read_only = HardwareBuffer(16, 1, 1, Fmt.BLOB, Usage.CPU_READ_OFTEN)
    assert can_map(read_only.handle) and not map_handle(read_only.handle).writable


# --- 2.1: memory kinds, constants and I/O ------------------------------------------------------------------------
def _constant_model(memory: Memory, offset: int = 0, n: int = 4) -> nnapi.Model:
    """out = a + c where c (n floats) lives in `memory` at `offset`."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    c = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.set_operand_value_from_memory(c, memory, offset, 4 * n)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, c, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    return m


def _memories(tmp_path, nbytes: int, name: str = "weights.bin") -> dict[str, Memory]:
    path = tmp_path / name
    path.write_bytes(bytes(8192 + nbytes))
    fd = os.open(path, os.O_RDWR)
    try:
        from_fd = Memory.from_fd(fd, 8192, nbytes)   # the fd is duplicated; closing ours is fine
    finally:
        os.close(fd)
    return {"ashmem": Memory.ashmem(nbytes), "mmap_fd": from_fd,
            "hardware_buffer_blob": Memory.from_hardware_buffer(HardwareBuffer(nbytes))}


@pytest.mark.parametrize("kind", ["ashmem", "mmap_fd", "hardware_buffer_blob"])
def test_sized_kinds_hold_constants_and_io(tmp_path, kind):
    memory = _memories(tmp_path, 64)[kind]
    assert memory.kind == kind and memory.size == 64
    memory.array(np.float32, (4,), offset=16)[:] = [1, 2, 3, 4]
    c = nnapi.Compilation(_constant_model(memory, 16)).finish()
    (y,) = c.execute([np.ones(4, np.float32)])
    np.testing.assert_array_equal(y, [2, 3, 4, 5])
    io = _memories(tmp_path, 64, "io.bin")[kind]   # another file: rewriting weights.bin would zero the constant
    io.array(np.float32, (4,))[:] = [10, 20, 30, 40]
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, io, 0, 16)
    e.set_output_from_memory(0, io, 32, 16)
    e.compute()
    np.testing.assert_array_equal(io.array(np.float32, (4,), offset=32), [11, 22, 33, 44])


def test_non_blob_buffer_is_io_only_and_used_whole():
    image = Memory.from_hardware_buffer(HardwareBuffer(2, 2, 1, Fmt.R8G8B8A8_UNORM))
    assert image.kind == "hardware_buffer" and image.size == 0 and image.logical_size == 16
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,))
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, image, 0, 16)
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, image, 0, 0)
    c = nnapi.Compilation(add_relu_model()).finish()
    e = nnapi.Execution(c)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, image, 0, 16)
    expect(ResultCode.BAD_DATA, e.set_input_from_memory, 0, image, 4, 0)
    image.array(np.float32, (4,))[:] = [1, -2, 3, -4]
    e.set_input_from_memory(0, image, 0, 0)
    e.set_input(1, np.ones(4, np.float32))
    out_image = Memory.from_hardware_buffer(HardwareBuffer(1, 4, 1, Fmt.R8G8B8A8_UNORM, stride=3))
    e.set_output_from_memory(0, out_image, 0, 0)
    e.compute()
    np.testing.assert_array_equal(out_image.array(np.float32, (4,)), [2, 0, 4, 0])


def test_reference_driver_fails_unmappable_io_with_general_failure():
    """M5: execution fails with GENERAL_FAILURE when an input/output handle cannot be mapped."""
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    for hb in (HardwareBuffer(4, 1, 1, Fmt.Y8Cb8Cr8_420), HardwareBuffer(16, 1, 1, Fmt.BLOB, Usage.GPU_DATA_BUFFER)):
        memory = Memory.from_hardware_buffer(hb)
        e = nnapi.Execution(c)
        if memory.is_image:
            e.set_input_from_memory(0, memory, 0, 0)
        else:
            e.set_input_from_memory(0, memory, 0, 16)
        e.set_input(1, np.ones(4, np.float32))
        e.set_output(0, np.zeros(4, np.float32))
        err = expect(ResultCode.OP_FAILED, e.compute)
        assert err.status == ErrorStatus.GENERAL_FAILURE and "cannot map" in err.message


def test_reference_driver_fails_preparation_for_an_unmappable_constant():
    """M5: preparation fails with GENERAL_FAILURE when a constant's handle cannot be mapped."""
    hb = HardwareBuffer(16, 1, 1, Fmt.BLOB, Usage.GPU_DATA_BUFFER)
    model = _constant_model(Memory.from_hardware_buffer(hb))
    with pytest.raises(NnError) as e:
        prepare(model)
    assert e.value.status == ErrorStatus.GENERAL_FAILURE
    assert not can_map(model.to_hal().pools[-1].handle)   # the app memory comes after any shared pool
    # what get_supported_operations reports for it (M5): the ADD reads the unmappable constant
    assert mappable_constant_flags(model.to_hal()) == [False]
    assert mappable_constant_flags(add_relu_model(64, True).to_hal()) == [True, True, True]
    # Through the runtime the only device reports the operation unsupported, so nothing can run it.
    expect(ResultCode.BAD_DATA, nnapi.Compilation(model, devices=["reference"]).finish)


def test_large_values_move_to_one_shared_pool_at_finish():
    """M1: set_operand_value copies <= 128 bytes into the model, larger values into one ashmem pool."""
    m = nnapi.Model()
    small = m.add_operand(T.TENSOR_FLOAT32, (32,))
    large1 = m.add_operand(T.TENSOR_FLOAT32, (33,))
    large2 = m.add_operand(T.TENSOR_FLOAT32, (40,))
    m.set_operand_value(small, np.zeros(32, np.float32))
    m.set_operand_value(large1, np.arange(33, dtype=np.float32))
    m.set_operand_value(large2, np.arange(40, dtype=np.float32))
    a = m.add_operand(T.TENSOR_FLOAT32, (32,))
    out = m.add_operand(T.TENSOR_FLOAT32, (32,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, small, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    operands = m.to_hal().main.operands
    assert operands[small].lifetime == OperandLifeTime.CONSTANT_COPY
    assert operands[large1].lifetime == operands[large2].lifetime == OperandLifeTime.CONSTANT_REFERENCE
    assert operands[large1].location.pool_index == operands[large2].location.pool_index == 0
    assert m.to_hal().pools[0].handle.name == "ashmem"
    pool = map_pool(m.to_hal().pools[0])
    loc = operands[large2].location
    np.testing.assert_array_equal(np.frombuffer(pool.view(loc.offset, loc.length), np.float32), np.arange(40))


# --- 2.3: the runtime's checks --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def one_float():
    """out = in + in for float32 [1]."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (1,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (1,))
    m.add_operation(Op.ADD, [a, a, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    return nnapi.Compilation(m).finish()


def test_set_input_and_output(one_float):
    e = nnapi.Execution(one_float)
    for index in (999, -1):
        expect(ResultCode.BAD_DATA, e.set_input, index, np.ones(1, np.float32))
        expect(ResultCode.BAD_DATA, e.set_output, index, np.ones(1, np.float32))
    expect(ResultCode.BAD_DATA, e.set_input, 0, np.ones(2, np.float32))              # length != operand size
    expect(ResultCode.BAD_DATA, e.set_output, 0, np.ones(2, np.float32))
    expect(ResultCode.BAD_DATA, e.set_input, 0, np.ones(1, np.float32), (1, 1))      # inconsistent type
    expect(ResultCode.BAD_DATA, e.set_input, 0, np.ones(1, np.float32), ("a",))
    expect(ResultCode.UNEXPECTED_NULL, e.set_output, 0, None)
    e.set_input(0, np.ones(1, np.float32))
    expect(ResultCode.BAD_STATE, e.set_input, 0, np.ones(1, np.float32))
    e.set_output(0, np.ones(1, np.float32))
    expect(ResultCode.BAD_STATE, e.set_output, 0, np.ones(1, np.float32))


@pytest.mark.parametrize("kind", ["ashmem", "hardware_buffer_blob"])
@pytest.mark.parametrize("io", ["input", "output"])
def test_set_from_memory_bounds(one_float, kind, io):
    """ValidationTestExecution.Set{Input,Output}From{Memory,AHardwareBufferBlob}: 20-byte memory, float32 [1]."""
    memory = Memory.ashmem(20) if kind == "ashmem" else Memory.from_hardware_buffer(HardwareBuffer(20))
    e = nnapi.Execution(one_float)
    set_from = getattr(e, f"set_{io}_from_memory")
    expect(ResultCode.BAD_DATA, set_from, 0, memory, 0, 20)              # length != operand size
    expect(ResultCode.BAD_DATA, set_from, 0, memory, 21, 4)              # offset = size + 1
    expect(ResultCode.BAD_DATA, set_from, 0, memory, 17, 4)              # offset = size - 3, length 4
    expect(ResultCode.BAD_DATA, set_from, 0, memory, 0, 0)               # size cannot be implied
    expect(ResultCode.BAD_DATA, set_from, 0, memory, 0, 4, (1, 1))       # bad type
    expect(ResultCode.BAD_DATA, set_from, 1, memory, 0, 4)
    expect(ResultCode.UNEXPECTED_NULL, set_from, 0, None, 0, 4)
    set_from(0, memory, 16, 4)
    expect(ResultCode.BAD_STATE, set_from, 0, memory, 0, 4)
    set_plain = e.set_input if io == "input" else e.set_output
    expect(ResultCode.BAD_STATE, set_plain, 0, np.ones(1, np.float32))
    e2 = nnapi.Execution(one_float)
    (e2.set_input if io == "input" else e2.set_output)(0, np.ones(1, np.float32))
    expect(ResultCode.BAD_STATE, getattr(e2, f"set_{io}_from_memory"), 0, memory, 0, 4)


@pytest.mark.parametrize("kind", ["ashmem", "hardware_buffer_blob"])
def test_set_operand_value_from_memory(kind):
    memory = Memory.ashmem(20) if kind == "ashmem" else Memory.from_hardware_buffer(HardwareBuffer(20))
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (1,))
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 0, 20)   # size
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 17, 4)   # bounds
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 21, 0)
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, a, memory, 0, 0)
    expect(ResultCode.BAD_DATA, m.set_operand_value_from_memory, 7, memory, 0, 4)    # index
    m.set_operand_value_from_memory(a, memory, 16, 4)
    out = m.add_operand(T.TENSOR_FLOAT32, (1,))
    x = m.add_operand(T.TENSOR_FLOAT32, (1,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [x, a, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    expect(ResultCode.BAD_STATE, m.set_operand_value_from_memory, a, memory, 0, 4)
    memory.array(np.float32, (1,), offset=16)[0] = 5.0
    (y,) = nnapi.Compilation(m).finish().execute([np.array([1.0], np.float32)])
    assert y[0] == 6.0


def test_memory_creation_checks(tmp_path):
    for size in (0, -1, 2.5):
        expect(ResultCode.BAD_DATA, Memory.ashmem, size)
    path = tmp_path / "f"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDWR)
    try:
        expect(ResultCode.BAD_DATA, Memory.from_fd, fd, 0, 0)
        expect(ResultCode.BAD_DATA, Memory.from_fd, -1, 0, 16)
        expect(ResultCode.BAD_DATA, Memory.from_fd, fd, -1, 16)
        expect(ResultCode.BAD_DATA, Memory.from_fd, fd, 0, 16, 0x10)
        memory = Memory.from_fd(fd, 0, 64)
    finally:
        os.close(fd)
    assert memory.handle.fds[0] != fd and memory.handle.ints == (mmap.PROT_READ | mmap.PROT_WRITE, 0, 0)
    expect(ResultCode.UNEXPECTED_NULL, Memory.from_hardware_buffer, None)
    expect(ResultCode.BAD_DATA, Memory.from_hardware_buffer, object())
    hb = HardwareBuffer(16)
    hb.close()
    expect(ResultCode.BAD_DATA, Memory.from_hardware_buffer, hb)


def test_execution_usability(one_float):
    """Once started (sync or async) every setter and a second compute give BAD_STATE, during and after."""
    memory = Memory.ashmem(8)
    for start in ("compute", "start_compute"):
        e = nnapi.Execution(one_float)
        e.set_input(0, np.ones(1, np.float32))
        e.set_output(0, np.zeros(1, np.float32))
        event = e.start_compute() if start == "start_compute" else (e.compute(), None)[1]
        for _ in range(2):    # during (async) and after
            expect(ResultCode.BAD_STATE, e.set_loop_timeout, 1.0)
            expect(ResultCode.BAD_STATE, e.set_input, 0, np.ones(1, np.float32))
            expect(ResultCode.BAD_STATE, e.set_output, 0, np.ones(1, np.float32))
            expect(ResultCode.BAD_STATE, e.set_input_from_memory, 0, memory, 0, 4)
            expect(ResultCode.BAD_STATE, e.set_output_from_memory, 0, memory, 4, 4)
            expect(ResultCode.BAD_STATE, e.compute)
            expect(ResultCode.BAD_STATE, e.start_compute)
            if event is not None:
                event.wait(10)


# --- zero copy ----------------------------------------------------------------------------------------------------
def _address(a) -> int:
    return np.asarray(a).__array_interface__["data"][0]


def test_a_64mb_constant_from_a_file_is_never_copied(tmp_path, monkeypatch):
    """The runtime passes the file's handle; the driver's constant is a view of its mapping of the file
    (proved by addresses), and no allocation of the constant's size happens on the way."""
    import tracemalloc
    n = 16 * 1024 * 1024                            # 64 MB of float32
    path = tmp_path / "weights.bin"
    with open(path, "wb") as f:
        f.truncate(4096 + 4 * n)
        f.seek(4096)
        f.write(np.arange(16, dtype=np.float32).tobytes())
    tracemalloc.start()
    try:
        fd = os.open(path, os.O_RDWR)
        weights = Memory.from_fd(fd, 4096, 4 * n)
        os.close(fd)
        m = nnapi.Model()
        c = m.add_operand(T.TENSOR_FLOAT32, (n,))
        m.set_operand_value_from_memory(c, weights, 0, 4 * n)
        begin = m.add_operand(T.TENSOR_INT32, (1,))
        size = m.add_operand(T.TENSOR_INT32, (1,))
        m.set_operand_value(begin, np.array([4], np.int32))
        m.set_operand_value(size, np.array([8], np.int32))
        out = m.add_operand(T.TENSOR_FLOAT32, (8,))
        x = m.add_operand(T.TENSOR_FLOAT32, (8,))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        sliced = m.add_operand(T.TENSOR_FLOAT32, (8,))
        m.add_operation(Op.SLICE, [c, begin, size], [sliced])
        m.add_operation(Op.ADD, [sliced, x, act], [out])
        m.identify_inputs_and_outputs([x], [out])
        m.finish()
        hal_model = m.to_hal()
        assert len(hal_model.operand_values) < 1024
        pool = hal_model.pools[hal_model.main.operands[c].location.pool_index]
        assert pool.handle.name == "mmap_fd" and os.path.samestat(os.fstat(pool.handle.fds[0]), os.stat(path))
        prepared = prepare(m)
        (y,) = nnapi.Compilation(m, devices=["reference"]).finish().execute([np.ones(8, np.float32)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(y, np.arange(4, 12) + 1)
    assert peak < 8 * 1024 * 1024, f"{peak} bytes were allocated for a 64 MB constant"
    constant = prepared.main.constants[c]
    mapping = prepared._pools[hal_model.main.operands[c].location.pool_index]
    base = _address(np.frombuffer(mapping.buffer, np.uint8))
    assert base <= _address(constant) < base + mapping.size   # a view of the mapping, not a copy
    assert constant.nbytes == 4 * n


def test_memory_output_lands_in_the_callers_mapping_without_a_copy(monkeypatch):
    """The request carries the caller's memory (same memfd); the driver writes its result straight into
    its mapping of that memfd (addresses recorded), and the caller's mapping shows it."""
    from nnapi.memory import pools as pools_module
    c = nnapi.Compilation(add_relu_model(1024), devices=["reference"]).finish()
    out = Memory.ashmem(8192)
    caller_view = out.array(np.float32, (1024,), offset=4096)
    caller_address = _address(caller_view)
    writes = []
    original = pools_module.MappedPool.write

    def recording_write(self, offset, value):
        writes.append((self, offset, value.nbytes))
        return original(self, offset, value)

    monkeypatch.setattr(pools_module.MappedPool, "write", recording_write)
    requests = []
    step = c.steps[0]
    inner = step.prepared.execute_synchronously

    def recording_execute(request, *args, **kwargs):
        requests.append(request)
        return inner(request, *args, **kwargs)

    monkeypatch.setattr(step.prepared, "execute_synchronously", recording_execute)
    e = nnapi.Execution(c)
    e.set_input(0, np.full(1024, 2, np.float32))
    e.set_input(1, np.ones(1024, np.float32))
    e.set_output_from_memory(0, out, 4096, 4096)
    e.compute()
    (request,) = requests
    loc = request.outputs[0].location
    pool = request.pools[loc.pool_index]
    assert pool.handle is not None and pool.pointer is None      # no runtime staging buffer
    assert os.path.samestat(os.fstat(pool.handle.fds[0]), os.fstat(out.handle.fds[0]))
    assert (loc.offset, loc.length) == (4096, 4096)
    ((mapped, offset, nbytes),) = writes                             # one write, into the shared mapping
    assert (offset, nbytes) == (4096, 4096) and mapped.size == 8192
    np.testing.assert_array_equal(caller_view, 3)
    assert _address(caller_view) == caller_address


def test_numpy_arguments_are_used_in_place(monkeypatch):
    """In process, numpy inputs reach the interpreter as the caller's own buffers (no staging copy)."""
    from nnapi.drivers.reference import interpreter
    seen = {}
    original = interpreter.SubgraphPlan.run

    def recording_run(self, values, *args, **kwargs):
        seen.update({k: _address(v) for k, v in values.items() if v is not None})
        return original(self, values, *args, **kwargs)

    monkeypatch.setattr(interpreter.SubgraphPlan, "run", recording_run)
    c = nnapi.Compilation(add_relu_model(256), devices=["reference"]).finish()
    a, b = np.ones(256, np.float32), np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    e = nnapi.Execution(c)
    e.set_input(0, a)
    e.set_input(1, b)
    e.set_output(0, out)
    e.compute()
    main = c.model.to_hal().main
    assert seen[main.input_indexes[0]] == _address(a) and seen[main.input_indexes[1]] == _address(b)
    np.testing.assert_array_equal(out, 2)
    seen.clear()
    (y,) = c.execute([a, b])  # the common case, without an Execution object: in place as well
    assert seen[main.input_indexes[0]] == _address(a) and seen[main.input_indexes[1]] == _address(b)
    np.testing.assert_array_equal(y, 2)


def test_a_numpy_pool_gives_views_of_the_array_and_keeps_its_access():
    from nnapi.hal import MemoryPool
    array = np.arange(8, dtype=np.float32)
    pool = map_pool(MemoryPool(pointer=array))
    assert pool.size == 32 and pool.writable
    assert _address(pool.array(0, 32, np.dtype(np.float32), (2, 4))) == _address(array)
    np.testing.assert_array_equal(pool.array(8, 8, np.dtype(np.float32), (2,)), [2, 3])
    pool.write(4, np.array([10, 11], np.float32))
    np.testing.assert_array_equal(array[:4], [0, 10, 11, 3])
    assert bytes(pool.view(0, 4)) == np.float32(0).tobytes()
    with pytest.raises(NnError, match=r"region \[28, 36\) is outside the pool of 32 bytes"):
        pool.view(28, 8)
    array.flags.writeable = False
    frozen = map_pool(MemoryPool(pointer=array))
    assert not frozen.writable
    with pytest.raises(NnError, match="read-only"):
        frozen.write(0, np.zeros(1, np.float32))
    strided = map_pool(MemoryPool(pointer=np.zeros(8, np.float32)[::2].copy()))  # any buffer still maps
    assert strided.size == 16


def test_ashmem_sealed_once_written():
    """ashmem is a memfd that can be sealed once written: nobody can write it any more."""
    import gc
    memory = Memory.ashmem(16)
    view = memory.array(np.float32, (4,))
    view[:] = [1, 2, 3, 4]
    expect(ResultCode.BAD_STATE, memory.seal)              # a writable view is still alive
    del view
    gc.collect()
    memory.seal()
    assert memory.sealed and not memory.mapped().writable
    with pytest.raises(OSError):
        os.pwrite(memory.handle.fds[0], b"x", 0)
    c = nnapi.Compilation(_constant_model(memory)).finish()   # still fine as constants and inputs
    np.testing.assert_array_equal(c.execute([np.zeros(4, np.float32)])[0], [1, 2, 3, 4])
    e = nnapi.Execution(nnapi.Compilation(add_relu_model()).finish())
    e.set_input(0, np.ones(4, np.float32))
    e.set_input(1, np.ones(4, np.float32))
    e.set_output_from_memory(0, memory, 0, 16)
    expect(ResultCode.BAD_DATA, e.compute)                   # but a driver cannot write it
    expect(ResultCode.BAD_DATA, Memory.copy, Memory.ashmem(16), memory)


def test_closing_memory_twice_leaves_a_reused_descriptor_alone():
    """close() and then the finalizer: the second must not close the descriptor number, which the
    process may have reused for something else since."""
    memory = Memory.ashmem(16)
    number = memory.handle.fds[0]
    memory.close()
    reused = os.memfd_create("reused")
    try:
        assert reused == number  # the lowest free number comes back
        memory.close()
        del memory
        os.fstat(reused)  # still open
    finally:
        os.close(reused)


def _own_memfd_mappings(name: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if f"/memfd:{name}" in line)


@pytest.mark.parametrize("device", ["reference", "xla", "openvino"])
@pytest.mark.parametrize("through", ["execution", "burst"])
def test_every_driver_lets_go_of_shared_memory_so_the_app_can_seal_and_free_it(device, through):
    """A driver may keep an app's numpy arrays between executions, not shared memory mapped for one:
    after an execution (or while a burst holds it) the app seals its input and output memory, uses
    them sealed, and once it frees them nothing maps them any more."""
    import gc
    from nnapi.memory import allocate_ashmem
    n, name = 1 << 16, f"nnapi-let-go-{device}-{through}"
    c = nnapi.Compilation(add_relu_model(n), devices=[device]).finish()
    a, b, out = (Memory(allocate_ashmem(4 * n, name=name)) for _ in range(3))
    a.array(np.float32, (n,))[:] = 1
    b.array(np.float32, (n,))[:] = 2
    burst = c.create_burst() if through == "burst" else None

    def run(x: Memory, y: Memory, z: Memory) -> np.ndarray:
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, x, 0, 4 * n)
        e.set_input_from_memory(1, y, 0, 4 * n)
        e.set_output_from_memory(0, z, 0, 4 * n)
        e.burst_compute(burst) if burst is not None else e.compute()
        return z.array(np.float32, (n,))

    np.testing.assert_array_equal(run(a, b, out)[:2], [3, 3])
    np.testing.assert_array_equal(run(a, b, out)[-2:], [3, 3])
    out.seal()
    a.seal()
    np.testing.assert_array_equal(run(out, a, b)[:2], [4, 4])
    if burst is not None:
        burst.close()
    for memory in (a, b, out):
        memory.close()
    del memory
    gc.collect()
    assert _own_memfd_mappings(name) == 0


def test_in_process_drivers_map_an_apps_memory_once_until_it_is_closed():
    """Memory that comes back execution after execution is mapped once in the process (no mapping, page
    faults and unmapping per execution), and let go of when the app closes it."""
    from nnapi.memory import allocate_ashmem
    n, name = 1 << 16, "nnapi-mapped-once"
    memory = Memory(allocate_ashmem(4 * n, name=name))
    os.pwrite(memory.handle.fds[0], np.full(n, 2, np.float32).tobytes(), 0)  # (no mapping of the app's own)
    c = nnapi.Compilation(add_relu_model(n), devices=["reference"]).finish()
    out = np.zeros(n, np.float32)
    for k in range(3):
        e = nnapi.Execution(c)
        e.set_input_from_memory(0, memory, 0, 4 * n)
        e.set_input(1, np.full(n, k, np.float32))
        e.set_output(0, out)
        e.compute()
        np.testing.assert_array_equal(out[-2:], [2 + k, 2 + k])
        assert _own_memfd_mappings(name) == 1
    memory.close()
    assert _own_memfd_mappings(name) == 0


# --- the mapping cache (a service maps an app's shared memory once) -------------------------------
def _ashmem(size: int) -> MemoryHandle:
    from nnapi.memory import allocate_ashmem
    return allocate_ashmem(size)


def _another_fd(handle: MemoryHandle, flags: int = os.O_RDWR) -> MemoryHandle:
    """The same memory under a new descriptor, as a request across a process boundary brings it."""
    fd = os.open(f"/proc/self/fd/{handle.fds[0]}", flags)
    return MemoryHandle(handle.name, (fd,), handle.ints, handle.size)


def test_the_mapping_cache_maps_the_same_memory_once_whatever_its_descriptor():
    from nnapi.memory import MappingCache
    cache = MappingCache(min_bytes=0)
    h = _ashmem(1 << 20)
    first = cache.map(h)
    again = _another_fd(h)
    try:
        assert cache.map(again) is first and len(cache) == 1
        first.write(0, np.arange(4, dtype=np.float32))  # one mapping: a write is seen through both
        np.testing.assert_array_equal(cache.map(again).array(0, 16, np.float32, (4,)), np.arange(4))
        other = _ashmem(1 << 20)
        assert cache.map(other) is not first and len(cache) == 2
    finally:
        os.close(again.fds[0])


def test_a_read_only_descriptor_never_gets_a_cached_writable_mapping():
    from nnapi.memory import MappingCache
    cache = MappingCache(min_bytes=0)
    h = _ashmem(1 << 16)
    assert cache.map(h).writable
    read_only = _another_fd(h, os.O_RDONLY)
    try:
        with pytest.raises(NnError) as e:  # an ashmem handle is mapped writable: its descriptor must allow it
            cache.map(read_only)
        assert e.value.status == ErrorStatus.GENERAL_FAILURE
    finally:
        os.close(read_only.fds[0])


def test_a_shrunk_file_is_mapped_afresh_and_refused_not_read_past_its_end(tmp_path):
    from nnapi.memory import MappingCache, mmap_fd_handle
    cache = MappingCache(min_bytes=0)
    path = tmp_path / "pool"
    path.write_bytes(bytes(1 << 16))
    fd = os.open(path, os.O_RDWR)
    try:
        h = mmap_fd_handle(fd, 0, 1 << 16)
        assert cache.map(h) is cache.map(h)
        os.truncate(path, 4096)
        with pytest.raises(NnError) as e:
            cache.map(h)
        assert e.value.status == ErrorStatus.GENERAL_FAILURE and len(cache) == 0
    finally:
        os.close(fd)


def test_the_mapping_cache_stays_within_its_bounds_and_skips_small_regions():
    from nnapi.memory import MappingCache
    cache = MappingCache(max_bytes=3 << 16, max_entries=8, min_bytes=1 << 16)
    handles = [_ashmem(1 << 16) for _ in range(5)]
    for h in handles:
        cache.map(h)
    assert len(cache) == 3  # the least recently used went first
    assert cache.map(handles[-1]) is cache.map(handles[-1])
    small = _ashmem(4096)
    assert cache.map(small) is not cache.map(small) and len(cache) == 3
    cache.clear()
    assert len(cache) == 0


GC_DURING_FORGET = '''
import gc
from nnapi.memory import allocate_ashmem, close_handle, forget_mappings, on_forget

class Holder:
    def let_go(self, handle, wait):
        pass

holder = Holder()
on_forget(holder.let_go)
handle = allocate_ashmem(64)

class Garbage:  # in a cycle: freed by the collector, which runs its __del__ wherever it runs
    def __init__(self):
        self.me = self
        self.handle = allocate_ashmem(64)
    def __del__(self):
        close_handle(self.handle)  # (lets go of its mappings: forget_mappings)

gc.set_threshold(1)  # a collection at (almost) every allocation, inside forget_mappings too
for _ in range(200):
    Garbage()
    forget_mappings(handle, False)
print("done")
'''


def test_memory_closed_by_the_collector_during_forget_mappings_does_not_deadlock():
    """A `__del__` that closes memory, run by the collector while `forget_mappings` holds its lock on the
    same thread, calls it again: it must not wait for itself (it hung a test of the kit for minutes)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", GC_DURING_FORGET], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-1000:]
