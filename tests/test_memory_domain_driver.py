"""Memory domains of the reference driver beyond what the kit requires of every driver.

`MemoryDomainAllocateTest`, `MemoryDomainCopyTest`, `MemoryDomainExecutionTest` and the requirements M8-M10
(VTS-BEHAVIOURS 3.1-3.3) are checks of the certification kit (`nnapi.conformance.vts.domains`), run on the
reference driver by test_vts_reference.py. Here: the reference driver's messages name the fault, its
tokens live exactly as long as their buffers, and concurrent use never crashes, hangs or tears a read (M12).
"""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from nnapi import OperandType as T
from nnapi.conformance.vts.domains import ForeignPreparedModel
from nnapi.conformance.vts.hal_exec import Shared, Token, separate_io, shared_memory
from nnapi.conformance.vts.models import DIMS, add_model, conv_model, size_of
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (BufferDesc, BufferRole, ErrorStatus, ExecutionPreference, MeasureTiming, NnError, Priority)

DEVICE = ReferenceDevice()


def prepare(model):
    return DEVICE.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None,
                                None)


def role(model_index=0, io_index=0, frequency=1.0):
    return BufferRole(model_index, io_index, frequency)


def status_of(prepared, io) -> ErrorStatus:
    """A synchronous execution straight on the driver (concurrent callers, no kit worker in between)."""
    try:
        prepared.execute_synchronously(io.request, MeasureTiming.NO, None, None)
        return ErrorStatus.NONE
    except NnError as e:
        return e.status


@pytest.fixture(scope="module")
def conv_model_f32():
    return conv_model(T.TENSOR_FLOAT32)   # kept alive: the prepared model reads its constants


@pytest.fixture(scope="module")
def conv(conv_model_f32):
    return prepare(conv_model_f32)


def _refused(*args) -> NnError:
    with pytest.raises(NnError) as e:
        DEVICE.allocate(*args)
    assert e.value.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
    return e.value


def test_allocation_errors_name_the_fault(conv):
    assert "not prepared by this driver" in _refused(BufferDesc(), [ForeignPreparedModel()], [role()], []).message
    assert "io_index 1 out of range" in _refused(BufferDesc(), [conv], [role(io_index=1)], []).message
    model = add_model(T.TENSOR_FLOAT32)
    assert "scalar" in _refused(BufferDesc((1,)), [prepare(model)], [role(io_index=2)], []).message


def test_malformed_allocations_are_exactly_invalid_argument(conv):
    for args in [(None, [conv], [role()], []), (BufferDesc(("x",)), [conv], [role()], []),
                 (BufferDesc(), conv, [role()], []), (BufferDesc(), [conv], [object()], []),
                 (BufferDesc(), [conv], [BufferRole("0", 0, 1.0)], []),
                 (BufferDesc(), [conv], [BufferRole(0, 0, float("nan"))], [])]:
        assert _refused(*args).status == ErrorStatus.INVALID_ARGUMENT


def test_tokens_are_unique_among_live_buffers_and_freed_with_the_buffer(conv):
    allocated = [DEVICE.allocate(BufferDesc(), [conv], [role()], [role()]) for _ in range(20)]
    tokens = [t for _, t in allocated]
    assert len(set(tokens)) == 20 and all(t > 0 for t in tokens)
    allocated[0][0].release()
    assert tokens[0] not in ReferenceDevice.shared_domain().tracker._buffers and tokens[1] in ReferenceDevice.shared_domain().tracker._buffers
    del allocated
    gc.collect()
    assert not set(tokens) & set(ReferenceDevice.shared_domain().tracker._buffers)
    with separate_io([Token(tokens[5])], [Shared(size_of(T.TENSOR_FLOAT32))]) as io:
        assert status_of(conv, io) in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)


def test_concurrent_reads_and_writes_never_crash_or_hang(conv):
    """Writers (copy_from, executions writing the buffer) race readers (copy_to, executions reading it):
    no crash, no hang, and every read sees one whole version (copy-on-write)."""
    size = size_of(T.TENSOR_FLOAT32)
    buffer, token = DEVICE.allocate(BufferDesc(), [conv], [role()], [role()])
    values = [np.full(DIMS, v, np.float32) for v in (1.0, 2.0)]
    with separate_io([Shared(size, values[1].tobytes())], [Shared(size)]) as io:
        assert status_of(conv, io) == ErrorStatus.NONE
        versions = [v.tobytes() for v in values] + [io.output_bytes(0, size)]
    first = shared_memory(versions[0])
    buffer.copy_from(first.handle, [])
    errors: list = []
    stop = threading.Event()

    def writer(k):
        src = shared_memory(versions[k])
        while not stop.is_set():
            try:
                buffer.copy_from(src.handle, [])
            except NnError as e:
                errors.append(e)

    def reader():
        dst = shared_memory(None, size)
        while not stop.is_set():
            try:
                buffer.copy_to(dst.handle)
            except NnError as e:
                errors.append(e)
                continue
            if dst.read(0, size) not in versions:
                errors.append(AssertionError("torn read"))

    def executions():
        while not stop.is_set():
            with separate_io([Token(token)], [Shared(size)]) as io:
                if status_of(conv, io) != ErrorStatus.NONE:
                    errors.append("execution reading the buffer failed")
            with separate_io([Shared(size, versions[1])], [Token(token)]) as io:
                if status_of(conv, io) != ErrorStatus.NONE:
                    errors.append("execution writing the buffer failed")

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
