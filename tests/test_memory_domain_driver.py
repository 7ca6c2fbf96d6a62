"""Memory domains in the reference driver, as the VTS checks them (VTS-BEHAVIOURS 3.1-3.3).

`MemoryDomainAllocateTest`, `MemoryDomainCopyTest` and `MemoryDomainExecutionTest` for the four
operand types (executions through SYNC, ASYNC and FENCED), plus what the issue adds: tokens
owned by the allocating client, unique among live buffers and freed with their IBuffer, dynamic
buffers resized by outputs, and concurrent use that never crashes or hangs.
"""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from nnapi import OperandType as T
from nnapi.drivers.reference import buffers
from nnapi.hal import BufferDesc, BufferRole, ErrorStatus, IPreparedModel, NnError
from nnapi.memory import HardwareBuffer, HardwareBufferFormat, allocate_ashmem, map_handle
from nnapi.memory.domains import calling_client

from memory_kit import (DIMS, EXECUTORS, TYPES, Shared, Token, add_model, check_result, conv_model, data_for,
                        device, execute, make_request, prepare, size_of)

FAIL = (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)


def expect_allocate_failure(prepared_models, input_roles, output_roles, desc=BufferDesc()):
    """Every invalid allocate gives INVALID_ARGUMENT or GENERAL_FAILURE (and so no buffer, no token)."""
    with pytest.raises(NnError) as e:
        device().allocate(desc, prepared_models, input_roles, output_roles)
    assert e.value.status in FAIL, e.value
    return e.value


def role(model_index=0, io_index=0, frequency=1.0):
    return BufferRole(model_index, io_index, frequency)


@pytest.fixture(scope="module", params=TYPES, ids=lambda t: t.name)
def operand_type(request):
    return request.param


@pytest.fixture(scope="module")
def conv(operand_type):
    return prepare(conv_model(operand_type))


@pytest.fixture(scope="module")
def conv2(operand_type):
    return prepare(conv_model(operand_type, 2))


@pytest.fixture(scope="module")
def conv_dynamic(operand_type):
    return prepare(conv_model(operand_type, dims=(0, 32, 32, 8)))


# --- 3.2 MemoryDomainAllocateTest ---------------------------------------------------------------------
def test_empty_role(conv):
    expect_allocate_failure([], [], [])
    expect_allocate_failure([conv], [], [])


def test_nullptr_prepared_model():
    expect_allocate_failure([None], [role()], [])
    expect_allocate_failure([None], [], [role()])


class ForeignPreparedModel(IPreparedModel):
    """A locally implemented IPreparedModel the driver did not create."""

    def execute(self, *a, **k):
        raise NotImplementedError

    def execute_synchronously(self, *a, **k):
        raise NotImplementedError

    def execute_fenced(self, *a, **k):
        raise NotImplementedError


def test_allocate_invalid_prepared_model():
    foreign = ForeignPreparedModel()
    e = expect_allocate_failure([foreign], [role()], [])
    assert "not prepared by this driver" in e.message
    expect_allocate_failure([foreign], [], [role()])


def test_invalid_model_index(conv):
    expect_allocate_failure([conv], [role(model_index=1)], [])
    expect_allocate_failure([conv], [], [role(model_index=1)])


def test_allocate_invalid_io_index(conv):
    e = expect_allocate_failure([conv], [role(io_index=1)], [])
    assert "io_index 1 out of range" in e.message
    expect_allocate_failure([conv], [], [role(io_index=1)])


@pytest.mark.parametrize("frequency", [10.0, 0.0, -0.5])
def test_invalid_frequency(conv, frequency):
    expect_allocate_failure([conv], [role(frequency=frequency)], [])
    expect_allocate_failure([conv], [], [role(frequency=frequency)])


def test_same_role_specified_twice(conv):
    expect_allocate_failure([conv], [role(), role()], [])
    expect_allocate_failure([conv], [], [role(), role()])
    expect_allocate_failure([conv, conv], [role(0), role(1)], [])
    expect_allocate_failure([conv, conv], [], [role(0), role(1)])


_CONFLICTING = {T.TENSOR_FLOAT32: T.TENSOR_FLOAT16, T.TENSOR_FLOAT16: T.TENSOR_FLOAT32,
                T.TENSOR_QUANT8_ASYMM: T.TENSOR_QUANT8_ASYMM_SIGNED,
                T.TENSOR_QUANT8_ASYMM_SIGNED: T.TENSOR_QUANT8_ASYMM}


def _three_combinations(a, b):
    expect_allocate_failure([a, b], [role(0), role(1)], [])
    expect_allocate_failure([a, b], [role(0)], [role(1)])
    expect_allocate_failure([a, b], [], [role(0), role(1)])


def test_conflict_operand_type(operand_type, conv):
    _three_combinations(conv, prepare(conv_model(_CONFLICTING[operand_type])))


_QUANTIZED = [t for t in TYPES if t.is_quantized]


@pytest.mark.parametrize("quant_type", _QUANTIZED, ids=lambda t: t.name)
def test_conflict_scale(quant_type):
    conv = prepare(conv_model(quant_type))
    _three_combinations(conv, prepare(conv_model(quant_type, scale=1.0)))


@pytest.mark.parametrize("quant_type", _QUANTIZED, ids=lambda t: t.name)
def test_conflict_zero_point(quant_type):
    conv = prepare(conv_model(quant_type))
    _three_combinations(conv, prepare(conv_model(quant_type, zero_point=10)))


def test_conflict_rank_between_roles(operand_type):
    _three_combinations(prepare(add_model(operand_type)), prepare(add_model(operand_type, dims=DIMS[:3])))


def test_conflict_dimensions_between_roles(operand_type, conv):
    _three_combinations(conv, prepare(conv_model(operand_type, dims=(4, 32, 32, 8))))


def test_conflict_rank_between_role_and_desc(conv):
    expect_allocate_failure([conv], [role()], [], BufferDesc((1, 32, 32)))
    expect_allocate_failure([conv], [], [role()], BufferDesc((1, 32, 32)))


def test_conflict_dimensions_between_role_and_desc(conv):
    expect_allocate_failure([conv], [role()], [], BufferDesc((4, 32, 32, 8)))
    expect_allocate_failure([conv], [], [role()], BufferDesc((4, 32, 32, 8)))


def test_conflict_rank_with_scalar_role(operand_type):
    add = prepare(add_model(operand_type))
    e = expect_allocate_failure([add], [role(io_index=2)], [], BufferDesc((1,)))
    assert "scalar" in e.message


def test_valid_allocations_give_a_live_positive_token(conv, conv_dynamic):
    buffer, token = device().allocate(BufferDesc(), [conv], [role()], [role()])
    assert buffer is not None and token > 0
    other, token2 = device().allocate(BufferDesc(DIMS), [conv, conv_dynamic], [role(0), role(1)], [role(1)])
    assert token2 > 0 and token2 != token
    dynamic, token3 = device().allocate(BufferDesc(), [conv_dynamic], [role()], [role()])
    assert token3 not in (token, token2)   # unknown dimensions are supported (dynamic buffer)


def test_malformed_allocate_calls_never_crash(conv):
    for args in [(None, [conv], [role()], []), (BufferDesc(("x",)), [conv], [role()], []),
                 (BufferDesc(), conv, [role()], []), (BufferDesc(), [conv], [object()], []),
                 (BufferDesc(), [conv], [BufferRole("0", 0, 1.0)], []),
                 (BufferDesc(), [conv], [BufferRole(0, 0, float("nan"))], [])]:
        with pytest.raises(NnError) as e:
            device().allocate(*args)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT


# --- 3.3 MemoryDomainCopyTest --------------------------------------------------------------------------
def _ashmem(nbytes: int, data: bytes | None = None):
    handle = allocate_ashmem(nbytes)
    if data is not None:
        map_handle(handle).write_bytes(0, data)
    return handle


def _status(fn, *args) -> ErrorStatus:
    try:
        fn(*args)
        return ErrorStatus.NONE
    except NnError as e:
        return e.status


@pytest.fixture
def static_buffer(conv):
    buffer, _ = device().allocate(BufferDesc(), [conv], [role()], [role()])
    return buffer


@pytest.fixture
def dynamic_buffer(conv_dynamic):
    buffer, _ = device().allocate(BufferDesc(), [conv_dynamic], [role()], [role()])
    return buffer


def test_copy_from_invalid_memory_size(operand_type, static_buffer):
    size = size_of(operand_type)
    assert _status(static_buffer.copy_from, _ashmem(size // 2), []) == ErrorStatus.INVALID_ARGUMENT
    assert _status(static_buffer.copy_from, _ashmem(size * 2), []) == ErrorStatus.INVALID_ARGUMENT


def test_copy_from_invalid_memory_size_dynamic_shape(operand_type, dynamic_buffer):
    size = size_of(operand_type)
    copy = dynamic_buffer.copy_from
    assert _status(copy, _ashmem(size // 2), list(DIMS)) == ErrorStatus.INVALID_ARGUMENT
    assert _status(copy, _ashmem(size * 2), list(DIMS)) == ErrorStatus.INVALID_ARGUMENT
    assert _status(copy, _ashmem(size), list(DIMS)) == ErrorStatus.NONE
    assert _status(copy, _ashmem(size), [2, 32, 32, 8]) == ErrorStatus.INVALID_ARGUMENT


def test_copy_from_invalid_dimensions(operand_type, static_buffer):
    size = size_of(operand_type)
    copy = static_buffer.copy_from
    for dims in ([1, 32, 32], [2, 32, 32, 8], [0, 32, 32, 8]):
        assert _status(copy, _ashmem(size), dims) == ErrorStatus.INVALID_ARGUMENT, dims
    assert _status(copy, _ashmem(size), []) == ErrorStatus.NONE
    assert _status(copy, _ashmem(size), list(DIMS)) == ErrorStatus.NONE


def test_copy_from_invalid_dimensions_dynamic_shape(operand_type, dynamic_buffer):
    size = size_of(operand_type)
    copy = dynamic_buffer.copy_from
    for dims in ([1, 32, 32], [2, 32, 32, 4], [1, 32, 32, 0], []):
        assert _status(copy, _ashmem(size), dims) == ErrorStatus.INVALID_ARGUMENT, dims
    assert _status(copy, _ashmem(size), list(DIMS)) == ErrorStatus.NONE


def test_copy_to_uninitialized_memory(operand_type, static_buffer):
    assert _status(static_buffer.copy_to, _ashmem(size_of(operand_type))) == ErrorStatus.GENERAL_FAILURE


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_copy_to_invalid_memory_size(operand_type, static_buffer, dynamic_buffer, dynamic):
    buffer = dynamic_buffer if dynamic else static_buffer
    size = size_of(operand_type)
    data = data_for(operand_type).tobytes()
    buffer.copy_from(_ashmem(size, data), list(DIMS))
    assert _status(buffer.copy_to, _ashmem(size // 2)) == ErrorStatus.INVALID_ARGUMENT
    assert _status(buffer.copy_to, _ashmem(size * 2)) == ErrorStatus.INVALID_ARGUMENT
    out = _ashmem(size)
    assert _status(buffer.copy_to, out) == ErrorStatus.NONE
    assert bytes(map_handle(out).view(0, size)) == data


def test_copy_from_failure_uninitializes(operand_type, static_buffer):
    size = size_of(operand_type)
    static_buffer.copy_from(_ashmem(size), [])
    assert _status(static_buffer.copy_to, _ashmem(size)) == ErrorStatus.NONE
    assert _status(static_buffer.copy_from, _ashmem(size // 2), []) == ErrorStatus.INVALID_ARGUMENT
    assert _status(static_buffer.copy_to, _ashmem(size)) == ErrorStatus.GENERAL_FAILURE


def test_copies_with_every_shared_memory_kind(operand_type, static_buffer, tmp_path):
    """M9: copy_to / copy_from with ashmem, mmap_fd and hardware_buffer_blob; not a non-BLOB buffer."""
    import mmap
    import os
    from nnapi.memory import mmap_fd_handle
    size = size_of(operand_type)
    data = data_for(operand_type, seed=3).tobytes()
    blob = HardwareBuffer(size)
    blob.write(data)
    static_buffer.copy_from(blob.handle, [])
    path = tmp_path / "f"
    path.write_bytes(bytes(4096 + size))
    fd = os.open(path, os.O_RDWR)
    handle = mmap_fd_handle(fd, 4096, size, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)
    static_buffer.copy_to(handle)
    assert path.read_bytes()[4096:] == data
    image = HardwareBuffer(size // 4, 1, 1, HardwareBufferFormat.R8G8B8A8_UNORM)
    assert _status(static_buffer.copy_to, image.handle) == ErrorStatus.INVALID_ARGUMENT
    assert _status(static_buffer.copy_to, None) == ErrorStatus.INVALID_ARGUMENT


# --- 3.3 MemoryDomainExecutionTest ---------------------------------------------------------------------
@pytest.fixture(params=EXECUTORS)
def executor(request):
    return request.param


def _initialized(buffer, t, dims=DIMS, seed=0):
    data = data_for(t, dims, seed)
    buffer.copy_from(_ashmem(data.nbytes, data.tobytes()), list(dims))
    return data


def _live_free_token() -> int:
    token = 100
    while token in buffers.DOMAIN.tracker._buffers:
        token += 1
    return token


def test_invalid_token(operand_type, conv, executor):
    size = size_of(operand_type)
    for bad in (0, _live_free_token()):
        request, _ = make_request([Token(bad)], [Shared(size)])
        check_result(execute(conv, request, executor), ErrorStatus.INVALID_ARGUMENT)
        request, _ = make_request([Shared(size)], [Token(bad)])
        check_result(execute(conv, request, executor), ErrorStatus.INVALID_ARGUMENT)


def test_invalid_prepared_model(operand_type, conv, executor):
    other = prepare(conv_model(operand_type))
    buffer, token = device().allocate(BufferDesc(), [conv], [role()], [role()])
    _initialized(buffer, operand_type)
    size = size_of(operand_type)
    check_result(execute(other, make_request([Token(token)], [Shared(size)])[0], executor),
                 ErrorStatus.INVALID_ARGUMENT)
    check_result(execute(other, make_request([Shared(size)], [Token(token)])[0], executor),
                 ErrorStatus.INVALID_ARGUMENT)


def test_invalid_io_index(operand_type, conv2, executor):
    buffer, token = device().allocate(BufferDesc(), [conv2], [role(io_index=0)], [])
    _initialized(buffer, operand_type)
    size = size_of(operand_type)
    request, _ = make_request([Shared(size), Token(token)], [Shared(size), Shared(size)])
    check_result(execute(conv2, request, executor), ErrorStatus.INVALID_ARGUMENT)
    request, _ = make_request([Shared(size), Shared(size)], [Shared(size), Token(token)])
    check_result(execute(conv2, request, executor), ErrorStatus.INVALID_ARGUMENT)


def test_invalid_io_type(operand_type, conv, executor):
    size = size_of(operand_type)
    in_only, in_token = device().allocate(BufferDesc(), [conv], [role()], [])
    _initialized(in_only, operand_type)
    check_result(execute(conv, make_request([Shared(size)], [Token(in_token)])[0], executor),
                 ErrorStatus.INVALID_ARGUMENT)
    out_only, out_token = device().allocate(BufferDesc(), [conv], [], [role()])
    _initialized(out_only, operand_type)
    check_result(execute(conv, make_request([Token(out_token)], [Shared(size)])[0], executor),
                 ErrorStatus.INVALID_ARGUMENT)


def test_uninitialized_memory(operand_type, conv, executor):
    size = size_of(operand_type)
    buffer, token = device().allocate(BufferDesc(), [conv], [role()], [role()])
    check_result(execute(conv, make_request([Token(token)], [Shared(size)])[0], executor),
                 ErrorStatus.GENERAL_FAILURE)
    x = data_for(operand_type).tobytes()
    check_result(execute(conv, make_request([Shared(size, x)], [Token(token)])[0], executor), ErrorStatus.NONE)
    request, maps = make_request([Token(token)], [Shared(size)])
    check_result(execute(conv, request, executor), ErrorStatus.NONE)


def test_same_request_multiple_roles(operand_type, conv2, executor):
    size = size_of(operand_type)
    buffer, token = device().allocate(BufferDesc(), [conv2], [role(io_index=0), role(io_index=1)],
                                      [role(io_index=0), role(io_index=1)])
    _initialized(buffer, operand_type)
    request, _ = make_request([Token(token), Shared(size)], [Token(token), Shared(size)])
    check_result(execute(conv2, request, executor), ErrorStatus.INVALID_ARGUMENT)
    request, _ = make_request([Shared(size), Shared(size)], [Token(token), Token(token)])
    check_result(execute(conv2, request, executor), ErrorStatus.INVALID_ARGUMENT)
    request, _ = make_request([Token(token), Token(token)], [Shared(size), Shared(size)])
    check_result(execute(conv2, request, executor), ErrorStatus.NONE)


@pytest.mark.parametrize("executor", [e for e in EXECUTORS if e != "fenced"])   # fenced outputs are fully specified
def test_invalid_dimensions(operand_type, conv_dynamic, executor):
    size = size_of(operand_type)
    buffer, token = device().allocate(BufferDesc(DIMS), [conv_dynamic], [role()], [role()])
    _initialized(buffer, operand_type)
    bad = (2, 32, 32, 8)
    request, _ = make_request([Token(token, bad)], [Shared(size * 2, dims=bad)])
    check_result(execute(conv_dynamic, request, executor), ErrorStatus.INVALID_ARGUMENT)
    request, _ = make_request([Shared(size * 2, bytes(size * 2), bad)], [Token(token, bad)])
    check_result(execute(conv_dynamic, request, executor), ErrorStatus.INVALID_ARGUMENT)
    request, _ = make_request([Shared(size * 2, bytes(size * 2), bad)], [Token(token)])
    check_result(execute(conv_dynamic, request, executor), ErrorStatus.GENERAL_FAILURE)


def test_buffer_round_trip_matches_shared_memory(operand_type, conv, executor):
    """The same execution with a buffer input/output and with shared memory gives the same bytes."""
    size = size_of(operand_type)
    x = data_for(operand_type, seed=7)
    request, maps = make_request([Shared(size, x.tobytes())], [Shared(size)])
    check_result(execute(conv, request, executor), ErrorStatus.NONE)
    expected = bytes(maps[("out", 0)].view(0, size))
    src, src_token = device().allocate(BufferDesc(), [conv], [role()], [])
    dst, dst_token = device().allocate(BufferDesc(), [conv], [], [role()])
    src.copy_from(_ashmem(size, x.tobytes()), [])
    check_result(execute(conv, make_request([Token(src_token)], [Token(dst_token)])[0], executor),
                 ErrorStatus.NONE)
    out = _ashmem(size)
    dst.copy_to(out)
    assert bytes(map_handle(out).view(0, size)) == expected


def test_failed_execution_uninitializes_its_outputs(operand_type):
    """Output 1 too small (OUTPUT_INSUFFICIENT_SIZE): the buffer written as output 0 is uninitialized."""
    model = prepare(conv_model(operand_type, 2, dims=(0, 32, 32, 8)))
    size = size_of(operand_type)
    buffer, token = device().allocate(BufferDesc(DIMS), [model], [], [role()])
    _initialized(buffer, operand_type)
    x = data_for(operand_type).tobytes()
    request, _ = make_request([Shared(size, x, DIMS), Shared(size, x, DIMS)], [Token(token), Shared(size // 2)])
    status, shapes, _ = execute(model, request, "sync")
    assert status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and not shapes[1].is_sufficient
    assert _status(buffer.copy_to, _ashmem(size)) == ErrorStatus.GENERAL_FAILURE
    request, _ = make_request([Shared(size, x, DIMS), Shared(size, x, DIMS)], [Token(token), Shared(size)])
    assert execute(model, request, "sync")[0] == ErrorStatus.NONE
    assert _status(buffer.copy_to, _ashmem(size)) == ErrorStatus.NONE


def test_dynamic_output_buffer_resizes(operand_type, conv_dynamic):
    """M10: a dynamic buffer takes different output shapes in different executions; an input is fixed."""
    buffer, token = device().allocate(BufferDesc(), [conv_dynamic], [role()], [role()])
    for batch in (1, 3, 2):
        dims = (batch, 32, 32, 8)
        x = data_for(operand_type, dims, seed=batch)
        request, _ = make_request([Shared(x.nbytes, x.tobytes(), dims)], [Token(token)])
        status, shapes, _ = execute(conv_dynamic, request, "sync")
        assert status == ErrorStatus.NONE and shapes[0].dimensions == dims
        assert buffer.dimensions == dims
        out = _ashmem(x.nbytes)
        buffer.copy_to(out)
        assert buffer.dimensions == dims
        request, _ = make_request([Token(token)], [Shared(x.nbytes, dims=dims)])  # a dynamic input needs dims
        assert execute(conv_dynamic, request, "sync")[0] == ErrorStatus.INVALID_ARGUMENT
        request, _ = make_request([Token(token, dims)], [Shared(x.nbytes, dims=dims)])
        assert execute(conv_dynamic, request, "sync")[0] == ErrorStatus.NONE
        request, _ = make_request([Token(token, (batch + 1, 32, 32, 8))], [Shared(x.nbytes * 2)])
        assert execute(conv_dynamic, request, "sync")[0] == ErrorStatus.INVALID_ARGUMENT


# --- tokens: uniqueness, lifetime, ownership ------------------------------------------------------------
def test_tokens_are_unique_among_live_buffers_and_freed_with_the_buffer(conv):
    allocated = [device().allocate(BufferDesc(), [conv], [role()], [role()]) for _ in range(20)]
    tokens = [t for _, t in allocated]
    assert len(set(tokens)) == 20 and all(t > 0 for t in tokens)
    allocated[0][0].release()
    assert tokens[0] not in buffers.DOMAIN.tracker._buffers and tokens[1] in buffers.DOMAIN.tracker._buffers
    del allocated
    gc.collect()
    assert not set(tokens) & set(buffers.DOMAIN.tracker._buffers)
    request, _ = make_request([Token(tokens[5])], [Shared(size_of(T.TENSOR_FLOAT32))])
    assert execute(conv, request, "sync")[0] in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)


def test_a_token_used_by_another_client_is_refused(operand_type, conv):
    size = size_of(operand_type)
    with calling_client(10001, 4242):
        buffer, token = device().allocate(BufferDesc(), [conv], [role()], [role()])
        _initialized(buffer, operand_type)
        request, _ = make_request([Token(token)], [Shared(size)])
        assert execute(conv, request, "sync")[0] == ErrorStatus.NONE
        assert execute(conv, request, "async")[0] == ErrorStatus.NONE  # the identity follows async work
    with calling_client(10002, 4343):
        for executor in EXECUTORS:
            check_result(execute(conv, request, executor), ErrorStatus.INVALID_ARGUMENT)
        assert _status(buffer.copy_to, _ashmem(size)) == ErrorStatus.INVALID_ARGUMENT
        assert _status(buffer.copy_from, _ashmem(size), []) == ErrorStatus.INVALID_ARGUMENT
    # the same uid in another process is another client too
    with calling_client(10001, 4243):
        assert execute(conv, request, "sync")[0] == ErrorStatus.INVALID_ARGUMENT


# --- M12: concurrency -------------------------------------------------------------------------------------
def test_concurrent_reads_and_writes_never_crash_or_hang():
    """Writers (copy_from, executions writing the buffer) race readers (copy_to, executions reading
    it): no crash, no hang, and every read sees one whole version (copy-on-write)."""
    t = T.TENSOR_FLOAT32
    conv = prepare(conv_model(t))
    size = size_of(t)
    buffer, token = device().allocate(BufferDesc(), [conv], [role()], [role()])
    values = [np.full(DIMS, v, np.float32) for v in (1.0, 2.0)]
    request, maps = make_request([Shared(size, values[1].tobytes())], [Shared(size)])
    assert execute(conv, request, "sync")[0] == ErrorStatus.NONE
    versions = [v.tobytes() for v in values] + [bytes(maps[("out", 0)].view(0, size))]
    buffer.copy_from(_ashmem(size, versions[0]), [])
    errors: list = []
    stop = threading.Event()

    def writer(k):
        src = _ashmem(size, versions[k])
        while not stop.is_set():
            try:
                buffer.copy_from(src, [])
            except NnError as e:
                errors.append(e)

    def reader():
        dst = _ashmem(size)
        mapped = map_handle(dst)
        while not stop.is_set():
            try:
                buffer.copy_to(dst)
            except NnError as e:
                errors.append(e)
                continue
            if bytes(mapped.view(0, size)) not in versions:
                errors.append(AssertionError("torn read"))

    def executions():
        while not stop.is_set():
            request, _ = make_request([Token(token)], [Shared(size)])
            status = execute(conv, request, "sync")[0]
            if status != ErrorStatus.NONE:
                errors.append(status)
            request, _ = make_request([Shared(size, versions[1])], [Token(token)])
            status = execute(conv, request, "async")[0]
            if status != ErrorStatus.NONE:
                errors.append(status)

    threads = [threading.Thread(target=f, args=a, daemon=True)
               for f, a in ((writer, (0,)), (writer, (1,)), (reader, ()), (reader, ()), (executions, ()))]
    for th in threads:
        th.start()
    stop.wait(1.0)
    stop.set()
    for th in threads:
        th.join(10)
        assert not th.is_alive(), "a thread hung"
    assert not errors, errors[:3]
