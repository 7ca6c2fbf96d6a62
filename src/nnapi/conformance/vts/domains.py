"""Suite `domains`: memory domains as VTS-BEHAVIOURS section 3 requires them of any driver.

`MemoryDomainAllocateTest` (every invalid allocation gives INVALID_ARGUMENT or GENERAL_FAILURE, no
buffer, no token), `MemoryDomainCopyTest` (copy sizes and dimensions, uninitialized buffers) and
`MemoryDomainExecutionTest` (tokens, prepared models, roles, initialization, dimensions) through
SYNC, ASYNC and FENCED, for the four operand types; then what the requirements add: a token used by
another client is refused (M8), copies with every shared-memory kind (M9), dynamic buffers take new
shapes (M10), a failed execution uninitializes its outputs. Through the public API, as the CTS does:
ashmem -> device memory -> device memory -> ashmem keeps the value.

Memory domains are optional: when a valid allocation gives GENERAL_FAILURE, the checks that need a
buffer are skipped (the allocation-validation checks still run).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

from ...hal import BufferDesc, BufferRole, ErrorStatus, IPreparedModel, NnError, OperandType as T
from ...memory import HardwareBuffer, HardwareBufferFormat as Fmt
from ...hal.identity import calling_client, current_client
from .core import Check, Fail, Kit, Skip, make, status_name
from .hal_exec import Shared, Token, execute, expect, prepare, separate_io, shared_memory
from .models import DIMS, DOMAIN_TYPES, add_model, conv_model, data_for, size_of

SUITE = "domains"
FAIL = (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
EXECUTORS = ("sync", "async", "fenced")
A = "§3.2 MemoryDomainAllocateTest"
C = "§3.3 MemoryDomainCopyTest"
E = "§3.3 MemoryDomainExecutionTest"


def role(model_index: int = 0, io_index: int = 0, frequency: float = 1.0) -> BufferRole:
    return BufferRole(model_index, io_index, frequency)


# --- models and buffers ------------------------------------------------------------------------------------
def _prepared(kit: Kit, key: tuple, build: Any, what: str) -> Any:
    def make_prepared() -> Any:
        model = kit.memo(("domain-model", *key), build).to_hal()   # the runtime model owns the constants' memory
        kit.supports(model, what)
        return prepare(kit, model, what)
    return kit.memo(("domain-prepared", *key), make_prepared)


def conv(kit: Kit, t: T, n_ops: int = 1, dims: tuple[int, ...] = DIMS, scale: float | None = None,
         zero_point: int | None = None, copy: int = 0) -> Any:
    """The prepared conv model; `copy` > 0 prepares another instance of the same graph."""
    key = ("conv", t, n_ops, dims, scale, zero_point, copy)
    return _prepared(kit, key, lambda: conv_model(t, n_ops, dims, scale, zero_point),
                     f"{n_ops} CONV_2D on {t.name} {list(dims)}")


def add(kit: Kit, t: T, dims: tuple[int, ...] = DIMS) -> Any:
    return _prepared(kit, ("add", t, dims), lambda: add_model(t, dims), f"ADD on {t.name} {list(dims)}")


def allocate(kit: Kit, desc: BufferDesc, models: Sequence[Any], inputs: Sequence[BufferRole],
             outputs: Sequence[BufferRole]) -> tuple[ErrorStatus, Any, int, str]:
    """(status, buffer, token, message) of one allocate call, its result checked for shape."""
    status, value, message = kit.attempt("allocate", kit.driver.allocate, desc, list(models), list(inputs),
                                         list(outputs))
    if status != ErrorStatus.NONE:
        return status, None, 0, message
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"allocate returned {value!r}, expected (IBuffer, token)")
    buffer, token = value
    if buffer is None or not hasattr(buffer, "copy_to") or not hasattr(buffer, "copy_from"):
        raise Fail(f"allocate returned NONE with {buffer!r} instead of an IBuffer")
    if isinstance(token, bool) or not isinstance(token, int) or token <= 0:
        raise Fail(f"allocate returned NONE with token {token!r}: a token is an integer > 0")
    return status, buffer, token, ""


def expect_refused(kit: Kit, what: str, models: Sequence[Any], inputs: Sequence[BufferRole],
                   outputs: Sequence[BufferRole], desc: BufferDesc = BufferDesc()) -> None:
    status, buffer, token, _ = allocate(kit, desc, models, inputs, outputs)
    if status == ErrorStatus.NONE:
        raise Fail(f"allocate accepted {what} (returned a buffer with token {token}); expected INVALID_ARGUMENT "
                   "or GENERAL_FAILURE and no buffer")
    if status not in FAIL:
        raise Fail(f"allocate answered {status_name(status)} for {what}, expected INVALID_ARGUMENT or "
                   "GENERAL_FAILURE")


def buffer_for(kit: Kit, models: Sequence[Any], inputs: Sequence[BufferRole], outputs: Sequence[BufferRole],
               desc: BufferDesc = BufferDesc(), what: str = "a valid allocation") -> tuple[Any, int]:
    """A valid allocation: NONE, a buffer and a token; GENERAL_FAILURE skips (domains not supported)."""
    status, buffer, token, message = allocate(kit, desc, models, inputs, outputs)
    if status == ErrorStatus.GENERAL_FAILURE:
        raise Skip(f"the driver does not allocate {what} (GENERAL_FAILURE: {message}); memory domains are "
                   "optional")
    if status != ErrorStatus.NONE:
        raise Fail(f"allocate answered {status_name(status)} for {what}, expected NONE (or GENERAL_FAILURE "
                   "when not supported)")
    kit.on_close(lambda: _release(buffer))
    return buffer, token


def _release(buffer: Any) -> None:
    release = getattr(buffer, "release", None)
    if callable(release):
        release()


def _ashmem(data: bytes | None, size: int) -> Any:
    return shared_memory(data, size)


def _copy(kit: Kit, fn: Any, what: str, *args: Any) -> ErrorStatus:
    status, _, _ = kit.attempt(what, fn, *args)
    return status


def copy_from(kit: Kit, buffer: Any, data: bytes | None, size: int, dims: Sequence[int]) -> ErrorStatus:
    region = _ashmem(data, size)
    try:
        return _copy(kit, buffer.copy_from, "IBuffer.copy_from", region.handle, list(dims))
    finally:
        region.close()


def copy_to(kit: Kit, buffer: Any, size: int) -> tuple[ErrorStatus, bytes]:
    region = _ashmem(None, size)
    try:
        status = _copy(kit, buffer.copy_to, "IBuffer.copy_to", region.handle)
        return status, region.read(0, size)
    finally:
        region.close()


def expect_copy(status: ErrorStatus, expected: ErrorStatus, what: str) -> None:
    if status != expected:
        raise Fail(f"{what}: the driver answered {status_name(status)}, expected {status_name(expected)}")


def initialized(kit: Kit, buffer: Any, t: T, dims: tuple[int, ...] = DIMS, seed: int = 0) -> np.ndarray:
    data = data_for(t, dims, seed)
    expect_copy(copy_from(kit, buffer, data.tobytes(), data.nbytes, dims), ErrorStatus.NONE,
                "copy_from of the right size and dimensions into a new buffer")
    return data


def claimed(kit: Kit, t: T) -> None:
    """Skip unless the driver allocates a plain buffer for conv input 0 and output 0 of this type."""
    buffer_for(kit, [conv(kit, t)], [role()], [role()], what=f"a buffer for a {t.name} conv input and output")


# --- §3.2 MemoryDomainAllocateTest -------------------------------------------------------------------------
def empty_role(kit: Kit, t: T) -> None:
    expect_refused(kit, "no prepared models and no roles", [], [], [])
    expect_refused(kit, "one prepared model but no roles", [conv(kit, t)], [], [])


def nullptr_prepared_model(kit: Kit) -> None:
    expect_refused(kit, "prepared_models = [None] with an input role", [None], [role()], [])
    expect_refused(kit, "prepared_models = [None] with an output role", [None], [], [role()])


class ForeignPreparedModel(IPreparedModel):
    """A locally implemented IPreparedModel the driver did not create."""

    def execute(self, *a: Any, **k: Any) -> None:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "not a real prepared model")

    def execute_synchronously(self, *a: Any, **k: Any) -> Any:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "not a real prepared model")

    def execute_fenced(self, *a: Any, **k: Any) -> Any:
        raise NnError(ErrorStatus.GENERAL_FAILURE, "not a real prepared model")


def invalid_prepared_model(kit: Kit) -> None:
    foreign = ForeignPreparedModel()
    expect_refused(kit, "a prepared model the driver did not create (input role)", [foreign], [role()], [])
    expect_refused(kit, "a prepared model the driver did not create (output role)", [foreign], [], [role()])


def invalid_model_index(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    expect_refused(kit, "an input role with model_index 1 of 1 model", [c], [role(model_index=1)], [])
    expect_refused(kit, "an output role with model_index 1 of 1 model", [c], [], [role(model_index=1)])


def invalid_io_index(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    expect_refused(kit, "input role io_index 1 of a 1-input model", [c], [role(io_index=1)], [])
    expect_refused(kit, "output role io_index 1 of a 1-output model", [c], [], [role(io_index=1)])


def invalid_frequency(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    for f in (10.0, 0.0, -0.5):
        expect_refused(kit, f"an input role of frequency {f}", [c], [role(frequency=f)], [])
        expect_refused(kit, f"an output role of frequency {f}", [c], [], [role(frequency=f)])


def same_role_twice(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    expect_refused(kit, "the same input role twice", [c], [role(), role()], [])
    expect_refused(kit, "the same output role twice", [c], [], [role(), role()])
    expect_refused(kit, "one input role through two model indexes of the same model", [c, c], [role(0), role(1)], [])
    expect_refused(kit, "one output role through two model indexes of the same model", [c, c], [], [role(0), role(1)])


def _three(kit: Kit, a: Any, b: Any, what: str) -> None:
    expect_refused(kit, f"input roles on {what}", [a, b], [role(0), role(1)], [])
    expect_refused(kit, f"an input and an output role on {what}", [a, b], [role(0)], [role(1)])
    expect_refused(kit, f"output roles on {what}", [a, b], [], [role(0), role(1)])


_CONFLICTING = {T.TENSOR_FLOAT32: T.TENSOR_FLOAT16, T.TENSOR_FLOAT16: T.TENSOR_FLOAT32,
                T.TENSOR_QUANT8_ASYMM: T.TENSOR_QUANT8_ASYMM_SIGNED,
                T.TENSOR_QUANT8_ASYMM_SIGNED: T.TENSOR_QUANT8_ASYMM}


def conflict_operand_type(kit: Kit, t: T) -> None:
    other = _CONFLICTING[t]
    _three(kit, conv(kit, t), conv(kit, other), f"{t.name} and {other.name} models")


def conflict_scale(kit: Kit, t: T) -> None:
    _three(kit, conv(kit, t), conv(kit, t, scale=1.0), "models of scale 0.5 and 1.0")


def conflict_zero_point(kit: Kit, t: T) -> None:
    _three(kit, conv(kit, t), conv(kit, t, zero_point=10), "models of zero point 0 and 10")


def conflict_rank_between_roles(kit: Kit, t: T) -> None:
    _three(kit, add(kit, t), add(kit, t, DIMS[:3]), "rank-4 and rank-3 models")


def conflict_dims_between_roles(kit: Kit, t: T) -> None:
    _three(kit, conv(kit, t), conv(kit, t, dims=(4, 32, 32, 8)), "models of batch 1 and 4")


def conflict_rank_role_desc(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    expect_refused(kit, "desc dimensions of rank 3 for a rank-4 input role", [c], [role()], [], BufferDesc((1, 32, 32)))
    expect_refused(kit, "desc dimensions of rank 3 for a rank-4 output role", [c], [], [role()], BufferDesc((1, 32, 32)))


def conflict_dims_role_desc(kit: Kit, t: T) -> None:
    c = conv(kit, t)
    desc = BufferDesc((4, 32, 32, 8))
    expect_refused(kit, "desc dimensions [4, 32, 32, 8] for a [1, 32, 32, 8] input role", [c], [role()], [], desc)
    expect_refused(kit, "desc dimensions [4, 32, 32, 8] for a [1, 32, 32, 8] output role", [c], [], [role()], desc)


def conflict_rank_scalar_role(kit: Kit, t: T) -> None:
    expect_refused(kit, "desc dimensions [1] for a role on an INT32 scalar", [add(kit, t)], [role(io_index=2)], [],
                   BufferDesc((1,)))


def malformed_arguments(kit: Kit) -> None:
    """Arguments that are not the HAL's plain data (a service may receive anything): an error, never a crash."""
    c = conv(kit, T.TENSOR_FLOAT32)
    cases = [("desc None", (None, [c], [role()], [])),
             ("a dimension that is a string", (BufferDesc(("x",)), [c], [role()], [])),
             ("prepared_models not a list", (BufferDesc(), c, [role()], [])),
             ("a role that is not a BufferRole", (BufferDesc(), [c], [object()], [])),
             ("a model index that is a string", (BufferDesc(), [c], [BufferRole("0", 0, 1.0)], [])),
             ("a frequency that is NaN", (BufferDesc(), [c], [BufferRole(0, 0, float("nan"))], []))]
    for what, args in cases:
        status, _, _ = kit.attempt("allocate", kit.driver.allocate, *args)
        if status not in FAIL:
            raise Fail(f"allocate with {what} answered {status_name(status)}, expected INVALID_ARGUMENT or "
                       "GENERAL_FAILURE")


def valid_allocations(kit: Kit, t: T) -> None:
    """Valid allocations give NONE, a buffer and a token > 0 unique among live buffers."""
    c = conv(kit, t)
    _, token1 = buffer_for(kit, [c], [role()], [role()])
    _, token2 = buffer_for(kit, [c, conv(kit, t, copy=1)], [role(0), role(1)], [role(1)], BufferDesc(DIMS))
    if token2 == token1:
        raise Fail(f"two live buffers got the same token {token1}")


# --- §3.3 MemoryDomainCopyTest --------------------------------------------------------------------------------
def _static(kit: Kit, t: T) -> Any:
    return buffer_for(kit, [conv(kit, t)], [role()], [role()])[0]


def _dynamic(kit: Kit, t: T) -> Any:
    return buffer_for(kit, [conv(kit, t, dims=(0, 32, 32, 8))], [role()], [role()],
                      what="a buffer of unknown batch size (dynamic)")[0]


def copy_from_invalid_size(kit: Kit, t: T) -> None:
    buffer, size = _static(kit, t), size_of(t)
    for n in (size // 2, size * 2):
        expect_copy(copy_from(kit, buffer, None, n, []), ErrorStatus.INVALID_ARGUMENT,
                    f"copy_from {n} bytes into a {size}-byte buffer")


def copy_from_invalid_size_dynamic(kit: Kit, t: T) -> None:
    buffer, size = _dynamic(kit, t), size_of(t)
    for n in (size // 2, size * 2):
        expect_copy(copy_from(kit, buffer, None, n, DIMS), ErrorStatus.INVALID_ARGUMENT,
                    f"copy_from {n} bytes with dimensions {list(DIMS)} ({size} bytes)")
    expect_copy(copy_from(kit, buffer, None, size, DIMS), ErrorStatus.NONE,
                f"copy_from {size} bytes with dimensions {list(DIMS)}")
    expect_copy(copy_from(kit, buffer, None, size, (2, 32, 32, 8)), ErrorStatus.INVALID_ARGUMENT,
                f"copy_from {size} bytes with dimensions [2, 32, 32, 8]")


def copy_from_invalid_dims(kit: Kit, t: T) -> None:
    buffer, size = _static(kit, t), size_of(t)
    for dims in ((1, 32, 32), (2, 32, 32, 8), (0, 32, 32, 8)):
        expect_copy(copy_from(kit, buffer, None, size, dims), ErrorStatus.INVALID_ARGUMENT,
                    f"copy_from with dimensions {list(dims)} into a [1, 32, 32, 8] buffer")
    expect_copy(copy_from(kit, buffer, None, size, ()), ErrorStatus.NONE, "copy_from with empty dimensions")
    expect_copy(copy_from(kit, buffer, None, size, DIMS), ErrorStatus.NONE, "copy_from with the buffer's dimensions")


def copy_from_invalid_dims_dynamic(kit: Kit, t: T) -> None:
    buffer, size = _dynamic(kit, t), size_of(t)
    for dims in ((1, 32, 32), (2, 32, 32, 4), (1, 32, 32, 0), ()):
        expect_copy(copy_from(kit, buffer, None, size, dims), ErrorStatus.INVALID_ARGUMENT,
                    f"copy_from with dimensions {list(dims)} into a buffer of unknown batch size")
    expect_copy(copy_from(kit, buffer, None, size, DIMS), ErrorStatus.NONE,
                "copy_from with full dimensions into a dynamic buffer")


def copy_to_uninitialized(kit: Kit, t: T) -> None:
    status, _ = copy_to(kit, _static(kit, t), size_of(t))
    expect_copy(status, ErrorStatus.GENERAL_FAILURE, "copy_to from a new (uninitialized) buffer")


def copy_to_invalid_size(kit: Kit, t: T, dynamic: bool) -> None:
    buffer, size = (_dynamic if dynamic else _static)(kit, t), size_of(t)
    data = initialized(kit, buffer, t).tobytes()
    for n in (size // 2, size * 2):
        expect_copy(copy_to(kit, buffer, n)[0], ErrorStatus.INVALID_ARGUMENT,
                    f"copy_to {n} bytes from a {size}-byte buffer")
    status, got = copy_to(kit, buffer, size)
    expect_copy(status, ErrorStatus.NONE, "copy_to of the right size from an initialized buffer")
    if got != data:
        raise Fail("copy_to gave back other bytes than copy_from put in")


def copy_failure_uninitializes(kit: Kit, t: T) -> None:
    """IBuffer.copyFrom: failure marks the buffer uninitialized."""
    buffer, size = _static(kit, t), size_of(t)
    initialized(kit, buffer, t)
    expect_copy(copy_to(kit, buffer, size)[0], ErrorStatus.NONE, "copy_to from an initialized buffer")
    expect_copy(copy_from(kit, buffer, None, size // 2, []), ErrorStatus.INVALID_ARGUMENT,
                "copy_from of half the size")
    expect_copy(copy_to(kit, buffer, size)[0], ErrorStatus.GENERAL_FAILURE,
                "copy_to after a failed copy_from (the buffer must be uninitialized again)")


def copies_with_memory_kinds(kit: Kit, t: T) -> None:
    """M9: copy_from / copy_to with ashmem, mmap_fd and hardware_buffer_blob memory; a non-BLOB buffer is
    not a valid copy target (INVALID_ARGUMENT)."""
    from .hal_exec import Region
    buffer, size = _static(kit, t), size_of(t)
    for kind in ("mmap_fd", "hardware_buffer_blob"):
        data = data_for(t, seed=3).tobytes()
        src, dst = Region(kind, size), Region(kind, size)
        try:
            src.write(0, data)
            expect_copy(_copy(kit, buffer.copy_from, "IBuffer.copy_from", src.handle, []), ErrorStatus.NONE,
                        f"copy_from {kind} memory")
            expect_copy(_copy(kit, buffer.copy_to, "IBuffer.copy_to", dst.handle), ErrorStatus.NONE,
                        f"copy_to {kind} memory")
            if dst.read(0, size) != data:
                raise Fail(f"a round trip through {kind} memory changed the bytes")
        finally:
            src.close()
            dst.close()
    image = HardwareBuffer(size // 4, 1, 1, Fmt.R8G8B8A8_UNORM)
    try:
        expect_copy(_copy(kit, buffer.copy_to, "IBuffer.copy_to", image.handle), ErrorStatus.INVALID_ARGUMENT,
                    "copy_to a non-BLOB hardware buffer")
    finally:
        image.close()
    expect_copy(_copy(kit, buffer.copy_to, "IBuffer.copy_to", None), ErrorStatus.INVALID_ARGUMENT, "copy_to None")
    expect_copy(_copy(kit, buffer.copy_from, "IBuffer.copy_from", None, []), ErrorStatus.INVALID_ARGUMENT,
                "copy_from None")


# --- §3.3 MemoryDomainExecutionTest ----------------------------------------------------------------------------
def _run(kit: Kit, prepared: Any, inputs: list, outputs: list, executor: str, expected: Any, what: str) -> Any:
    with separate_io(inputs, outputs) as io:
        outcome = execute(kit, prepared, io.request, executor)
        expect(outcome, expected, f"{executor} execution with {what}")
        if outcome.timing.time_on_device != 2**64 - 1 or outcome.timing.time_in_driver != 2**64 - 1:
            raise Fail(f"{executor} execution with {what}: timing was not requested but came back {outcome.timing}")
        return outcome


def _free_token(used: set[int]) -> int:
    """A token no buffer of this check holds, far above the tokens a driver hands out in sequence (its
    other clients' buffers may be alive while the kit runs)."""
    token = (1 << 30) + 12_345
    while token in used:
        token += 1
    return token


def invalid_token(kit: Kit, t: T, executor: str) -> None:
    c, size = conv(kit, t), size_of(t)
    _, live = buffer_for(kit, [c], [role()], [role()])
    for bad in (0, _free_token({live})):
        _run(kit, c, [Token(bad)], [Shared(size)], executor, ErrorStatus.INVALID_ARGUMENT,
             f"input token {bad} (no such buffer)")
        _run(kit, c, [Shared(size)], [Token(bad)], executor, ErrorStatus.INVALID_ARGUMENT,
             f"output token {bad} (no such buffer)")


def invalid_prepared_model_execution(kit: Kit, t: T, executor: str) -> None:
    c, other, size = conv(kit, t), conv(kit, t, copy=1), size_of(t)
    buffer, token = buffer_for(kit, [c], [role()], [role()])
    initialized(kit, buffer, t)
    _run(kit, other, [Token(token)], [Shared(size)], executor, ErrorStatus.INVALID_ARGUMENT,
         "an input buffer allocated for another prepared model")
    _run(kit, other, [Shared(size)], [Token(token)], executor, ErrorStatus.INVALID_ARGUMENT,
         "an output buffer allocated for another prepared model")


def invalid_io_index_execution(kit: Kit, t: T, executor: str) -> None:
    c2, size = conv(kit, t, 2), size_of(t)
    buffer, token = buffer_for(kit, [c2], [role(io_index=0)], [])
    initialized(kit, buffer, t)
    _run(kit, c2, [Shared(size), Token(token)], [Shared(size), Shared(size)], executor,
         ErrorStatus.INVALID_ARGUMENT, "a buffer declared for input 0 used as input 1")
    _run(kit, c2, [Shared(size), Shared(size)], [Shared(size), Token(token)], executor,
         ErrorStatus.INVALID_ARGUMENT, "a buffer declared for input 0 used as output 1")


def invalid_io_type(kit: Kit, t: T, executor: str) -> None:
    c, size = conv(kit, t), size_of(t)
    in_only, in_token = buffer_for(kit, [c], [role()], [])
    initialized(kit, in_only, t)
    _run(kit, c, [Shared(size)], [Token(in_token)], executor, ErrorStatus.INVALID_ARGUMENT,
         "an input-only buffer used as an output")
    out_only, out_token = buffer_for(kit, [c], [], [role()])
    initialized(kit, out_only, t)
    _run(kit, c, [Token(out_token)], [Shared(size)], executor, ErrorStatus.INVALID_ARGUMENT,
         "an output-only buffer used as an input")


def uninitialized_memory(kit: Kit, t: T, executor: str) -> None:
    c, size = conv(kit, t), size_of(t)
    _, token = buffer_for(kit, [c], [role()], [role()])
    _run(kit, c, [Token(token)], [Shared(size)], executor, ErrorStatus.GENERAL_FAILURE,
         "an uninitialized buffer as input")
    x = data_for(t).tobytes()
    _run(kit, c, [Shared(size, x)], [Token(token)], executor, ErrorStatus.NONE,
         "the buffer as output (which initializes it)")
    _run(kit, c, [Token(token)], [Shared(size)], executor, ErrorStatus.NONE, "the now initialized buffer as input")


def same_request_multiple_roles(kit: Kit, t: T, executor: str) -> None:
    c2, size = conv(kit, t, 2), size_of(t)
    buffer, token = buffer_for(kit, [c2], [role(io_index=0), role(io_index=1)], [role(io_index=0), role(io_index=1)])
    initialized(kit, buffer, t)
    _run(kit, c2, [Token(token), Shared(size)], [Token(token), Shared(size)], executor, ErrorStatus.INVALID_ARGUMENT,
         "one buffer as input 0 and output 0")
    _run(kit, c2, [Shared(size), Shared(size)], [Token(token), Token(token)], executor, ErrorStatus.INVALID_ARGUMENT,
         "one buffer as both outputs")
    _run(kit, c2, [Token(token), Token(token)], [Shared(size), Shared(size)], executor, ErrorStatus.NONE,
         "one buffer as both inputs")


def invalid_dimensions(kit: Kit, t: T, executor: str) -> None:
    cd, size = conv(kit, t, dims=(0, 32, 32, 8)), size_of(t)
    buffer, token = buffer_for(kit, [cd], [role()], [role()], BufferDesc(DIMS))
    initialized(kit, buffer, t)
    bad = (2, 32, 32, 8)
    _run(kit, cd, [Token(token, bad)], [Shared(size * 2, dims=bad)], executor, ErrorStatus.INVALID_ARGUMENT,
         "a [1, 32, 32, 8] buffer as input with request dimensions [2, 32, 32, 8]")
    _run(kit, cd, [Shared(size * 2, bytes(size * 2), bad)], [Token(token, bad)], executor,
         ErrorStatus.INVALID_ARGUMENT, "a [1, 32, 32, 8] buffer as output with request dimensions [2, 32, 32, 8]")
    _run(kit, cd, [Shared(size * 2, bytes(size * 2), bad)], [Token(token)], executor, ErrorStatus.GENERAL_FAILURE,
         "a [2, 32, 32, 8] result for a [1, 32, 32, 8] output buffer (it does not fit: GENERAL_FAILURE, "
         "not OUTPUT_INSUFFICIENT_SIZE)")


def round_trip(kit: Kit, t: T, executor: str) -> None:
    """The same execution with buffer input and output and with shared memory gives the same bytes."""
    c, size = conv(kit, t), size_of(t)
    x = data_for(t, seed=7).tobytes()
    with separate_io([Shared(size, x)], [Shared(size)]) as io:
        expect(execute(kit, c, io.request, executor), ErrorStatus.NONE, f"{executor} execution in shared memory")
        expected = io.output_bytes(0, size)
    src, src_token = buffer_for(kit, [c], [role()], [])
    dst, dst_token = buffer_for(kit, [c], [], [role()])
    expect_copy(copy_from(kit, src, x, size, ()), ErrorStatus.NONE, "copy_from into the input buffer")
    _run(kit, c, [Token(src_token)], [Token(dst_token)], executor, ErrorStatus.NONE, "buffer input and output")
    status, got = copy_to(kit, dst, size)
    expect_copy(status, ErrorStatus.NONE, "copy_to from the output buffer")
    if got != expected:
        raise Fail(f"{executor} execution with buffer input and output gave other bytes than in shared memory")


def failed_execution_uninitializes(kit: Kit, t: T) -> None:
    """A failed execution (output 1 too small) leaves the buffer it wrote as output 0 uninitialized."""
    model, size = conv(kit, t, 2, dims=(0, 32, 32, 8)), size_of(t)
    buffer, token = buffer_for(kit, [model], [], [role()], BufferDesc(DIMS))
    initialized(kit, buffer, t)
    x = data_for(t).tobytes()
    with separate_io([Shared(size, x, DIMS), Shared(size, x, DIMS)], [Token(token), Shared(size // 2)]) as io:
        outcome = execute(kit, model, io.request, "sync")
    if outcome.status == ErrorStatus.NONE:
        raise Fail("an execution whose output 1 has half the space it needs succeeded")
    expect_copy(copy_to(kit, buffer, size)[0], ErrorStatus.GENERAL_FAILURE,
                f"copy_to after an execution that failed ({status_name(outcome.status)}) and had the buffer as "
                "output (it must be uninitialized)")
    with separate_io([Shared(size, x, DIMS), Shared(size, x, DIMS)], [Token(token), Shared(size)]) as io:
        expect(execute(kit, model, io.request, "sync"), ErrorStatus.NONE, "the same execution with room for output 1")
    expect_copy(copy_to(kit, buffer, size)[0], ErrorStatus.NONE, "copy_to after a successful execution")


def dynamic_buffer_resizes(kit: Kit, t: T) -> None:
    """M10: a buffer of unknown shape takes each execution's output shape; as input it needs dimensions."""
    cd = conv(kit, t, dims=(0, 32, 32, 8))
    buffer, token = buffer_for(kit, [cd], [role()], [role()], what="a dynamic buffer (unknown batch size)")
    for batch in (1, 3, 2):
        dims = (batch, 32, 32, 8)
        x = data_for(t, dims, seed=batch)
        outcome = _run(kit, cd, [Shared(x.nbytes, x.tobytes(), dims)], [Token(token)], "sync", ErrorStatus.NONE,
                       f"a dynamic buffer as output of a batch-{batch} execution")
        if outcome.shapes and tuple(outcome.shapes[0].dimensions) != dims:
            raise Fail(f"the batch-{batch} execution reported output shape {outcome.shapes[0].dimensions}")
        status, _ = copy_to(kit, buffer, x.nbytes)
        expect_copy(status, ErrorStatus.NONE, f"copy_to of {x.nbytes} bytes after a batch-{batch} output")
        _run(kit, cd, [Token(token)], [Shared(x.nbytes, dims=dims)], "sync", ErrorStatus.INVALID_ARGUMENT,
             "the dynamic buffer as input without request dimensions (its operand's shape is unknown)")
        _run(kit, cd, [Token(token, dims)], [Shared(x.nbytes, dims=dims)], "sync", ErrorStatus.NONE,
             f"the buffer as input with its dimensions {list(dims)}")
        _run(kit, cd, [Token(token, (batch + 1, 32, 32, 8))], [Shared(x.nbytes * 2)], "sync",
             ErrorStatus.INVALID_ARGUMENT, f"the batch-{batch} buffer as input with batch {batch + 1}")


def another_clients_token(kit: Kit, t: T) -> None:
    """M8: a buffer allocated by one client (process) may not be used by another: its token and its IBuffer
    are refused with INVALID_ARGUMENT. The kit plays the other client through
    `nnapi.memory.domains.calling_client`, the identity a driver service sets for each caller; for a driver
    the kit hosts in a process of its own, the host sets it (`host.Host.impersonate`)."""
    host = kit.supervisor if hasattr(kit.supervisor, "impersonate") else None
    if host is None and (getattr(kit.device, "location", "") == "service"
                         or type(kit.driver).__module__.startswith("nnapi.service")):
        raise Skip("a driver served by `nnapi serve` knows its clients by their connection's credentials, so the "
                   "other client would be another process, where this prepared model and buffer do not exist "
                   "(the service's own tests cover M8 across processes)")
    as_client = host.impersonate if host is not None else calling_client
    c, size = conv(kit, t), size_of(t)
    uid, pid = current_client()
    owner = (uid, pid + 1_000_000)
    with contextlib.nullcontext() if host is not None else calling_client(*owner):   # (hosted: the kit's own)
        buffer, token = buffer_for(kit, [c], [role()], [role()])
        initialized(kit, buffer, t)
        for executor in EXECUTORS:
            _run(kit, c, [Token(token)], [Shared(size)], executor, ErrorStatus.NONE,
                 "the allocating client's own buffer")
    for other, label in (((uid + 1, pid + 2_000_000), "another user id"), ((uid, pid + 3_000_000),
                                                                           "the same user id in another process")):
        with as_client(*other):
            for executor in EXECUTORS:
                _run(kit, c, [Token(token)], [Shared(size)], executor, ErrorStatus.INVALID_ARGUMENT,
                     f"a buffer token of another client ({label})")
            status, _ = copy_to(kit, buffer, size)
            expect_copy(status, ErrorStatus.INVALID_ARGUMENT, f"copy_to on another client's buffer ({label})")
            expect_copy(copy_from(kit, buffer, None, size, ()), ErrorStatus.INVALID_ARGUMENT,
                        f"copy_from into another client's buffer ({label})")


# --- through the public API -------------------------------------------------------------------------------------
def runtime_memory_copy(kit: Kit) -> None:
    """MemoryDomainCopyTest.MemoryCopyTest: ashmem1 -> devmem1 -> devmem2 -> ashmem2 keeps the value 3.14."""
    from ...runtime import Compilation, Memory, MemoryDesc
    t = T.TENSOR_FLOAT32
    claimed(kit, t)
    model = kit.memo(("domain-runtime-model",), lambda: conv_model(t))
    try:
        compilation = Compilation(model, devices=[kit.device])
        kit.call("Compilation.finish", compilation.finish)
        memories = []
        for _ in range(2):
            desc = MemoryDesc()
            desc.add_input_role(compilation, 0, 1.0)
            memories.append(kit.call("Memory.from_desc", Memory.from_desc, desc.finish()))
        size = size_of(t)
        src = Memory.ashmem(size)
        src.array(np.float32, DIMS)[...] = 3.14
        dst = Memory.ashmem(size)
        kit.call("Memory.copy", Memory.copy, src, memories[0])
        kit.call("Memory.copy", Memory.copy, memories[0], memories[1])
        kit.call("Memory.copy", Memory.copy, memories[1], dst)
    except NnError as e:
        raise Fail(f"copying through device memory with the runtime failed: {e}") from None
    got = dst.array(np.float32, DIMS)
    if not np.all(got == np.float32(3.14)):
        raise Fail(f"ashmem -> device memory -> device memory -> ashmem changed the value 3.14 (got e.g. "
                   f"{got.reshape(-1)[:3].tolist()})")


def checks(kit: Kit) -> Iterator[Check]:
    types = (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM) if kit.quick else DOMAIN_TYPES
    yield make(SUITE, "allocate-nullptr-prepared-model", f"{A}.NullptrPreparedModel", nullptr_prepared_model)
    yield make(SUITE, "allocate-invalid-prepared-model", f"{A}.InvalidPreparedModel", invalid_prepared_model)
    yield make(SUITE, "allocate-malformed-arguments", "§3.1 allocate: bad input is an error, never a crash",
               malformed_arguments)
    for t in types:
        p = f"[{t.name}]"
        allocate_checks = [("allocate-empty-role", "EmptyRole", empty_role),
                           ("allocate-invalid-model-index", "InvalidModelIndex", invalid_model_index),
                           ("allocate-invalid-io-index", "InvalidIOIndex", invalid_io_index),
                           ("allocate-invalid-frequency", "InvalidFrequency", invalid_frequency),
                           ("allocate-same-role-twice", "SameRoleSpecifiedTwice", same_role_twice),
                           ("allocate-conflict-operand-type", "ConflictOperandType", conflict_operand_type),
                           ("allocate-conflict-rank-between-roles", "ConflictRankBetweenRoles",
                            conflict_rank_between_roles),
                           ("allocate-conflict-dimensions-between-roles", "ConflictDimensionsBetweenRoles",
                            conflict_dims_between_roles),
                           ("allocate-conflict-rank-role-desc", "ConflictRankBetweenRoleAndDesc",
                            conflict_rank_role_desc),
                           ("allocate-conflict-dimensions-role-desc", "ConflictDimensionsBetweenRoleAndDesc",
                            conflict_dims_role_desc),
                           ("allocate-conflict-rank-scalar-role", "ConflictRankWithScalarRole",
                            conflict_rank_scalar_role)]
        if t.is_quantized:
            allocate_checks += [("allocate-conflict-scale", "ConflictScale", conflict_scale),
                                ("allocate-conflict-zero-point", "ConflictZeroPoint", conflict_zero_point)]
        for name, test, fn in allocate_checks:
            yield make(SUITE, name + p, f"{A}.{test}", fn, t)
        yield make(SUITE, "allocate-valid" + p, "§3.1 allocate: NONE, a buffer and a token > 0 unique among live "
                   "buffers", valid_allocations, t)
        copy_checks = [("copy-from-invalid-size", "CopyFrom_InvalidMemorySize", copy_from_invalid_size),
                       ("copy-from-invalid-size-dynamic", "CopyFrom_InvalidMemorySize_DynamicShape",
                        copy_from_invalid_size_dynamic),
                       ("copy-from-invalid-dimensions", "CopyFrom_InvalidDimensions", copy_from_invalid_dims),
                       ("copy-from-invalid-dimensions-dynamic", "CopyFrom_InvalidDimensions_DynamicShape",
                        copy_from_invalid_dims_dynamic),
                       ("copy-to-uninitialized", "CopyTo_UninitializedMemory", copy_to_uninitialized)]
        for name, test, fn in copy_checks:
            yield make(SUITE, name + p, f"{C}.{test}", fn, t)
        yield make(SUITE, "copy-to-invalid-size" + p, f"{C}.CopyTo_InvalidMemorySize", copy_to_invalid_size, t, False)
        yield make(SUITE, "copy-to-invalid-size-dynamic" + p, f"{C}.CopyTo_InvalidMemorySize_DynamicShape",
                   copy_to_invalid_size, t, True)
        yield make(SUITE, "copy-failure-uninitializes" + p, "§3.3 IBuffer.copyFrom: failure marks it uninitialized",
                   copy_failure_uninitializes, t)
        yield make(SUITE, "copy-memory-kinds" + p, "§3.3 / M9: copies with ashmem, mmap_fd and BLOB memory",
                   copies_with_memory_kinds, t)
        execution_checks = [("execution-invalid-token", "InvalidToken", invalid_token),
                            ("execution-invalid-prepared-model", "InvalidPreparedModel",
                             invalid_prepared_model_execution),
                            ("execution-invalid-io-index", "InvalidIOIndex", invalid_io_index_execution),
                            ("execution-invalid-io-type", "InvalidIOType", invalid_io_type),
                            ("execution-uninitialized-memory", "UninitializedMemory", uninitialized_memory),
                            ("execution-same-request-multiple-roles", "SameRequestMultipleRoles",
                             same_request_multiple_roles),
                            ("execution-round-trip", "Test (MEMORY_DOMAIN: device memory I/O = shared memory I/O)",
                             round_trip)]
        for executor in EXECUTORS:
            for name, test, fn in execution_checks:
                yield make(SUITE, f"{name}{p}[{executor}]", f"{E}.{test}", fn, t, executor)
            if executor != "fenced":
                yield make(SUITE, f"execution-invalid-dimensions{p}[{executor}]", f"{E}.InvalidDimensions",
                           invalid_dimensions, t, executor)
        yield make(SUITE, "failed-execution-uninitializes" + p,
                   "§3.1 a failed execution leaves its output buffers uninitialized", failed_execution_uninitializes, t)
        yield make(SUITE, "dynamic-buffer-resizes" + p, "§3.1 / M10: dynamic buffers take each output shape",
                   dynamic_buffer_resizes, t)
        yield make(SUITE, "another-clients-token" + p, "§3.1 / M8: a buffer of one client is refused to another",
                   another_clients_token, t)
    yield make(SUITE, "runtime-memory-copy", "§3.4 MemoryDomainCopyTest.MemoryCopyTest", runtime_memory_copy)
