"""Suite `memory`: memory pools as VTS-BEHAVIOURS section 2 requires them of any driver.

Every memory kind the driver must accept (M4: ashmem, mmap_fd, hardware_buffer_blob) as model
constants and as request inputs and outputs through every executor, the in-process pointer pools,
the optional non-BLOB hardware buffer (used whole), unmappable and malformed handles, and the
request-validation rules of 2.2 (argument counts, no-value locations, regions outside their pool,
token pools, unspecified and mismatched dimensions, bad pools, read-only outputs, bad wait fences):
each invalid request gives INVALID_ARGUMENT with no shapes and no timing, never a crash, and leaves
the memory around its regions untouched. Through the public API, as the CTS does: constants and
execution I/O in each memory kind.
"""
from __future__ import annotations

import mmap
import os
from typing import Any, Iterator

import numpy as np

from ...hal import (DataLocation, ErrorStatus, MemoryHandle, MemoryPool, Model, NnError, Request, RequestArgument)
from ...memory import HardwareBuffer, HardwareBufferFormat as Fmt
from ...runtime import Compilation, Execution, Memory
from .core import Check, Fail, Kit, Skip, make, status_name
from .hal_exec import EXECUTORS, execute, expect, inputs_kept, prepare, shared_memory, vts_io
from .models import add_relu_model, constant_model, dynamic_relu_model

SUITE = "memory"
CANARY = 0xA5
MANDATORY = ("ashmem", "mmap_fd", "hardware_buffer_blob")
INVALID = (ErrorStatus.INVALID_ARGUMENT,)
FAILURE = (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)


def _memory(kit: Kit, kind: str, nbytes: int, tag: str) -> Memory:
    """Runtime memory of `kind` holding `nbytes` (mmap_fd: a file mapped from offset 8192)."""
    if kind == "ashmem":
        return Memory.ashmem(nbytes)
    if kind == "mmap_fd":
        path = kit.scratch(f"mmap-{tag}") / "weights.bin"
        path.write_bytes(bytes(8192 + nbytes))
        fd = os.open(path, os.O_RDWR)
        try:
            return Memory.from_fd(fd, 8192, nbytes)
        finally:
            os.close(fd)
    if kind == "hardware_buffer_blob":
        return Memory.from_hardware_buffer(HardwareBuffer(nbytes))
    raise ValueError(kind)


# --- 2.1 memory kinds as model constants -------------------------------------------------------------------
def _constant_case(kit: Kit, kind: str) -> tuple[Memory, Model]:
    memory = _memory(kit, kind, 64, f"const-{kind}")
    memory.array(np.float32, (4,), offset=16)[:] = [1, 2, 3, 4]
    return memory, constant_model(memory, 16)


def constant_pool(kit: Kit, kind: str) -> None:
    memory, model = kit.memo(("constant-model", kind), lambda: _constant_case(kit, kind))
    hal = model.to_hal()
    if kind != "ashmem":
        _, ashmem_model = kit.memo(("constant-model", "ashmem"), lambda: _constant_case(kit, "ashmem"))
        kit.supports(ashmem_model.to_hal(), "ADD with an ashmem constant")
        status, flags, message = kit.attempt("get_supported_operations", kit.driver.get_supported_operations, hal)
        if status != ErrorStatus.NONE or not all(flags or [False]):
            got = status_name(status) if status != ErrorStatus.NONE else f"flags {flags}"
            raise Fail(f"get_supported_operations answered {got} for ADD reading a constant in {kind} memory, "
                       "though ADD with an ashmem constant is supported (M4: every driver supports ashmem, "
                       "mmap_fd and hardware_buffer_blob)")
    else:
        kit.supports(hal, "ADD with an ashmem constant")
    prepared = prepare(kit, hal, f"ADD reading a constant from {kind} memory")
    x = np.array([10, 20, 30, 40], np.float32)
    with vts_io([x], [16]) as io:
        for executor in EXECUTORS:
            outcome = execute(kit, prepared, io.request, executor)
            expect(outcome, ErrorStatus.NONE, f"{executor} execution with a constant in {kind} memory")
            got = io.output_array(0, np.float32, (4,))
            if got.tolist() != [11, 22, 33, 44]:
                raise Fail(f"{executor} execution with a constant in {kind} memory computed {got.tolist()}, "
                           "expected [11, 22, 33, 44]")


def constant_non_blob(kit: Kit) -> None:
    """A non-BLOB hardware buffer cannot hold model constants: preparation fails, no model."""
    memory, model = kit.memo(("constant-model", "ashmem"), lambda: _constant_case(kit, "ashmem"))
    hal = model.to_hal()
    kit.supports(hal, "ADD with an ashmem constant")
    image = HardwareBuffer(4, 4, 1, Fmt.R8G8B8A8_UNORM)
    kit.on_close(image.close)
    index = next(i for i, o in enumerate(hal.main.operands) if o.lifetime.name == "CONSTANT_REFERENCE")
    pool_index = hal.main.operands[index].location.pool_index
    pools = list(hal.pools)
    pools[pool_index] = MemoryPool(handle=image.handle)
    bad = Model(hal.main, hal.referenced, hal.operand_values, pools, hal.relax_computation_float32_to_float16)
    status, prepared, message = kit.attempt("prepare_model", kit.driver.prepare_model, bad, 1, 1, None, None, None)
    if status == ErrorStatus.NONE or prepared is not None:
        raise Fail("prepare_model accepted a model whose constant lives in a non-BLOB hardware buffer "
                   "(only ashmem, mmap_fd and BLOB buffers may hold constants)")
    if status not in FAILURE:
        raise Fail(f"prepare_model answered {status_name(status)} for a constant in a non-BLOB hardware buffer, "
                   "expected INVALID_ARGUMENT or GENERAL_FAILURE")


# --- 2.1 memory kinds as execution I/O -----------------------------------------------------------------------
X = np.array([1, -2, 3, -4], np.float32)
Y = np.array([1, 1, 1, 1], np.float32)
GOLDEN = [2, 0, 4, 0]


def _add_relu(kit: Kit) -> Any:
    model = kit.memo("add-relu", add_relu_model).to_hal()
    kit.supports(model, "ADD + RELU on float32 [4]")
    return kit.memo("add-relu-prepared", lambda: prepare(kit, model, "ADD + RELU"))


def io_pool(kit: Kit, kind: str, executor: str) -> None:
    prepared = _add_relu(kit)
    with vts_io([X, Y], [16], kind=kind) as io:
        outcome = execute(kit, prepared, io.request, executor)
        if kind == "pointer" and outcome.status != ErrorStatus.NONE:
            raise Fail(f"{executor} execution with in-place (pointer) pools failed: {outcome.describe()} "
                       "(an in-process driver receives numpy arguments this way)")
        expect(outcome, ErrorStatus.NONE, f"{executor} execution with {kind} pools")
        got = io.output_array(0, np.float32, (4,))
        if got.tolist() != GOLDEN:
            raise Fail(f"{executor} execution with {kind} pools computed {got.tolist()}, expected {GOLDEN}")


def io_non_blob(kit: Kit, executor: str) -> None:
    """A non-BLOB buffer is used whole (offset = length = 0); drivers may not support it (M4) but then fail
    the execution with GENERAL_FAILURE (M5); a region inside it is INVALID_ARGUMENT."""
    prepared = _add_relu(kit)
    inputs = shared_memory(np.concatenate([X, Y]).tobytes())
    image = HardwareBuffer(2, 2, 1, Fmt.R8G8B8A8_UNORM, stride=3)
    try:
        pools = [inputs.pool, MemoryPool(handle=image.handle)]
        args = [RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(0, 16, 16))]
        whole = Request(args, [RequestArgument(False, DataLocation(1, 0, 0))], pools)
        outcome = execute(kit, prepared, whole, executor)
        if outcome.status == ErrorStatus.GENERAL_FAILURE:
            raise Skip("the driver does not access non-BLOB hardware buffers (optional, M4): GENERAL_FAILURE")
        expect(outcome, ErrorStatus.NONE, f"{executor} execution with a non-BLOB output buffer used whole")
        got = np.frombuffer(image.read(), np.float32).tolist()
        if got != GOLDEN:
            raise Fail(f"{executor} execution into a non-BLOB buffer wrote {got}, expected {GOLDEN}")
        region = Request(args, [RequestArgument(False, DataLocation(1, 0, 16))], pools)
        expect(execute(kit, prepared, region, executor), INVALID,
               f"{executor} execution with a 16-byte region of a non-BLOB buffer (it must be used whole)")
        small = HardwareBuffer(1, 2, 1, Fmt.R8G8B8A8_UNORM)   # 8 bytes for a 16-byte output
        try:
            request = Request(args, [RequestArgument(False, DataLocation(1, 0, 0))],
                              [inputs.pool, MemoryPool(handle=small.handle)])
            outcome = execute(kit, prepared, request, executor)
            if executor == "fenced":
                expect(outcome, (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE),
                       "fenced execution into an 8-byte non-BLOB buffer for a 16-byte output")
            else:
                expect(outcome, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
                       f"{executor} execution into an 8-byte non-BLOB buffer for a 16-byte output")
                if [(tuple(o.dimensions), o.is_sufficient) for o in outcome.shapes] != [((4,), False)]:
                    raise Fail(f"{executor} execution into a too small non-BLOB buffer reported shapes "
                               f"{outcome.shapes}, expected one [4] marked insufficient")
            request = Request([RequestArgument(False, DataLocation(1, 0, 0)), args[1]],
                              [RequestArgument(False, DataLocation(0, 0, 16))],
                              [inputs.pool, MemoryPool(handle=small.handle)])
            expect(execute(kit, prepared, request, executor), INVALID,
                   f"{executor} execution with an 8-byte non-BLOB buffer as a 16-byte input")
        finally:
            small.close()
    finally:
        image.close()
        inputs.close()


def io_unmappable(kit: Kit, executor: str) -> None:
    """Handles the driver cannot decode: the execution fails (M5) with an error, never a crash."""
    prepared = _add_relu(kit)
    out = shared_memory(None, 16)
    blob = HardwareBuffer(32)
    try:
        bad_handles = {
            "a BLOB handle with truncated metadata": MemoryHandle("hardware_buffer_blob", blob.handle.fds, (32, 1),
                                                                  32),
            "a handle of an unknown memory kind": MemoryHandle("gralloc_v9", blob.handle.fds, (), 32),
            "a handle without file descriptors": MemoryHandle("ashmem", (), (), 32),
        }
        for label, handle in bad_handles.items():
            request = Request([RequestArgument(False, DataLocation(0, 0, 16)),
                               RequestArgument(False, DataLocation(0, 16, 16))],
                              [RequestArgument(False, DataLocation(1, 0, 16))],
                              [MemoryPool(handle=handle), out.pool])
            expect(execute(kit, prepared, request, executor), FAILURE, f"{executor} execution with {label}")
    finally:
        blob.close()
        out.close()


# --- 2.2 request validation -------------------------------------------------------------------------------
def _arg(pool: int = 0, offset: int = 0, length: int = 16, dims: tuple[int, ...] = (),
         no_value: bool = False) -> RequestArgument:
    return RequestArgument(no_value, DataLocation(pool, offset, length), tuple(dims))


class _Pools:
    """Pool 0: 32 bytes of inputs; pool 1: a 16-byte output region inside 48 bytes of canaries."""

    def __init__(self) -> None:
        self.inputs = shared_memory(np.concatenate([X, Y]).tobytes())
        self.outputs = shared_memory(bytes([CANARY]) * 48)

    def request(self, inputs: list[RequestArgument] | None = None, outputs: list[RequestArgument] | None = None,
                pools: list[MemoryPool] | None = None) -> Request:
        return Request(inputs if inputs is not None else [_arg(), _arg(offset=16)],
                       outputs if outputs is not None else [_arg(pool=1, offset=16)],
                       pools if pools is not None else [self.inputs.pool, self.outputs.pool])

    def untouched(self, what: str) -> None:
        if self.inputs.read(0, 32) != np.concatenate([X, Y]).tobytes():
            raise Fail(f"{what}: the driver wrote into the input pool")
        if self.outputs.read(0, 48) != bytes([CANARY]) * 48:
            raise Fail(f"{what}: the driver wrote into the output pool although it rejected the request")

    def close(self) -> None:
        self.inputs.close()
        self.outputs.close()


def _all_invalid(kit: Kit, prepared: Any, cases: list[tuple[str, Any]], executors=EXECUTORS,
                 allowed: tuple[ErrorStatus, ...] = INVALID) -> None:
    for executor in executors:
        for label, build in cases:
            pools = _Pools()
            try:
                outcome = execute(kit, prepared, build(pools), executor)
                expect(outcome, allowed, f"{executor} execution with {label}")
                pools.untouched(f"{executor} execution with {label}")
            finally:
                pools.close()


def argument_counts(kit: Kit) -> None:
    prepared = _add_relu(kit)
    _all_invalid(kit, prepared, [
        ("one input missing", lambda p: p.request(inputs=[_arg()])),
        ("one input too many", lambda p: p.request(inputs=[_arg(), _arg(offset=16), _arg()])),
        ("no output", lambda p: p.request(outputs=[])),
        ("one output too many", lambda p: p.request(outputs=[_arg(pool=1), _arg(pool=1, offset=16)])),
    ])


def no_value_location(kit: Kit) -> None:
    prepared = _add_relu(kit)
    _all_invalid(kit, prepared, [
        (f"input 0 without a value but {what}", lambda p, a=a: p.request(inputs=[a, _arg(offset=16)]))
        for what, a in [("a 16-byte location", _arg(no_value=True)),
                        ("pool index 1", _arg(pool=1, length=0, no_value=True)),
                        ("offset 4", _arg(offset=4, length=0, no_value=True)),
                        ("dimensions [4]", _arg(length=0, dims=(4,), no_value=True))]])


def region_out_of_bounds(kit: Kit) -> None:
    prepared = _add_relu(kit)
    cases = [(f"input 1 {what}", lambda p, a=a: p.request(inputs=[_arg(), a]))
             for what, a in [("in pool 7 of 2", _arg(pool=7)),
                             ("at offset 24 of a 32-byte pool", _arg(offset=24)),
                             ("past the end through 64-bit wrap-around (offset 2^64 - 8)", _arg(offset=2**64 - 8,
                                                                                               length=24)),
                             ("with offset 2^63 and length 2^63 + 16", _arg(offset=2**63, length=2**63 + 16))]]
    cases.append(("output 0 at offset 40 of a 48-byte pool", lambda p: p.request(outputs=[_arg(pool=1,
                                                                                                offset=40)])))
    cases.append(("output 0 in pool 2 of 2", lambda p: p.request(outputs=[_arg(pool=2)])))
    _all_invalid(kit, prepared, cases)


def token_pool_length(kit: Kit) -> None:
    """A token pool has size 0: any non-empty region of it is invalid (whether or not the token exists)."""
    prepared = _add_relu(kit)
    _all_invalid(kit, prepared, [
        ("output 0 as 16 bytes of a token pool", lambda p: p.request(
            outputs=[_arg(pool=2, length=16)], pools=[p.inputs.pool, p.outputs.pool, MemoryPool(token=7)])),
        ("output 0 at offset 4 of a token pool", lambda p: p.request(
            outputs=[_arg(pool=2, offset=4, length=0)], pools=[p.inputs.pool, p.outputs.pool, MemoryPool(token=7)])),
        ("a token pool with token 0", lambda p: p.request(
            outputs=[_arg(pool=2, length=0)], pools=[p.inputs.pool, p.outputs.pool, MemoryPool(token=0)])),
    ])


def bad_pools(kit: Kit) -> None:
    prepared = _add_relu(kit)

    def both(p: _Pools) -> Request:
        return p.request(pools=[p.inputs.pool, MemoryPool(handle=p.outputs.handle, token=3)])

    _all_invalid(kit, prepared, [
        ("an empty pool (no memory, no token)", lambda p: p.request(pools=[p.inputs.pool, MemoryPool()])),
        ("a pool with both a handle and a token", both),
        ("a pool of a negative size", lambda p: p.request(pools=[p.inputs.pool, MemoryPool(
            handle=MemoryHandle("ashmem", p.outputs.handle.fds, (), -16))])),
        ("an extra unused pool of an unknown kind", lambda p: p.request(pools=[p.inputs.pool, p.outputs.pool, MemoryPool(
            handle=MemoryHandle("bogus", p.outputs.handle.fds, (), 16))])),
        ("an extra unused ashmem pool with fd -1", lambda p: p.request(pools=[p.inputs.pool, p.outputs.pool,
                                                                              MemoryPool(handle=MemoryHandle(
                                                                                  "ashmem", (-1,), (), 16))])),
        ("an extra unused pool of token 0", lambda p: p.request(pools=[p.inputs.pool, p.outputs.pool,
                                                                       MemoryPool(token=0)])),
    ], allowed=FAILURE)


def read_only_output(kit: Kit) -> None:
    """An output region in memory mapped read-only cannot receive the result: an error, the file unchanged."""
    prepared = _add_relu(kit)
    path = kit.scratch("readonly") / "out.bin"
    path.write_bytes(bytes([CANARY]) * 16)
    fd = os.open(path, os.O_RDONLY)
    from ...memory import mmap_fd_handle
    try:
        handle = mmap_fd_handle(fd, 0, 16, mmap.PROT_READ)
    finally:
        os.close(fd)
    inputs = shared_memory(np.concatenate([X, Y]).tobytes())
    try:
        for executor in EXECUTORS:
            request = Request([_arg(), _arg(offset=16)], [_arg(pool=1)], [inputs.pool, MemoryPool(handle=handle)])
            expect(execute(kit, prepared, request, executor), FAILURE,
                   f"{executor} execution with its output in a read-only mmap_fd pool")
            if path.read_bytes() != bytes([CANARY]) * 16:
                raise Fail(f"{executor} execution wrote into a file mapped read-only")
    finally:
        for fd in handle.fds:
            os.close(fd)
        inputs.close()


def read_only_input(kit: Kit) -> None:
    """Rule 8: inputs may be read-only memory (mmap_fd PROT_READ); the driver reads them and never writes."""
    prepared = _add_relu(kit)
    data = np.concatenate([X, Y]).tobytes()
    path = kit.scratch("readonly-in") / "in.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    from ...memory import mmap_fd_handle
    try:
        handle = mmap_fd_handle(fd, 0, 32, mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        for executor in EXECUTORS:
            out = shared_memory(None, 16)
            try:
                request = Request([_arg(), _arg(offset=16)], [_arg(pool=1)], [MemoryPool(handle=handle), out.pool])
                expect(execute(kit, prepared, request, executor), ErrorStatus.NONE,
                       f"{executor} execution with its inputs in a read-only mmap_fd pool")
                got = np.frombuffer(out.read(0, 16), np.float32).tolist()
                if got != GOLDEN:
                    raise Fail(f"{executor} execution from read-only inputs computed {got}, expected {GOLDEN}")
            finally:
                out.close()
            if path.read_bytes() != data:
                raise Fail(f"{executor} execution wrote into its (read-only) input file")
    finally:
        for fd in handle.fds:
            os.close(fd)


def fenced_zero_sized_output(kit: Kit) -> None:
    """Rule 7: a fenced execution with a zero-sized output is INVALID_ARGUMENT (VTS FENCED)."""
    model = kit.memo("dynamic-relu", dynamic_relu_model).to_hal()
    kit.supports(model, "RELU with unknown dimensions")
    prepared = kit.memo("dynamic-relu-prepared", lambda: prepare(kit, model, "RELU with unknown dimensions"))
    with vts_io([b""], [0], input_dims=[(0,)], output_dims=[(0,)]) as io:
        expect(execute(kit, prepared, io.request, "fenced"), INVALID, "fenced execution with a zero-sized output")


def unspecified_dimensions(kit: Kit) -> None:
    """Rule 4: an input of unknown shape needs request dimensions; an output may stay unspecified except
    in a fenced execution."""
    model = kit.memo("dynamic-relu", dynamic_relu_model).to_hal()
    kit.supports(model, "RELU with unknown dimensions")
    prepared = kit.memo("dynamic-relu-prepared", lambda: prepare(kit, model, "RELU with unknown dimensions"))
    for executor in EXECUTORS:
        with vts_io([X], [16]) as io:
            expect(execute(kit, prepared, io.request, executor), INVALID,
                   f"{executor} execution without dimensions for an input of unknown shape")
        with vts_io([X], [16], input_dims=[(4,)]) as io:
            outcome = execute(kit, prepared, io.request, executor)
            if executor == "fenced":
                expect(outcome, INVALID, "fenced execution with an output of unspecified dimensions")
                continue
            expect(outcome, ErrorStatus.NONE, f"{executor} execution with an output of unspecified dimensions")
            if outcome.shapes and tuple(outcome.shapes[0].dimensions) != (4,):
                raise Fail(f"{executor} execution reported output shape {outcome.shapes[0].dimensions}, expected (4,)")
            got = io.output_array(0, np.float32, (4,)).tolist()
            if got != [1, 0, 3, 0]:
                raise Fail(f"{executor} execution of RELU computed {got}, expected [1, 0, 3, 0]")
        with vts_io([X], [16], input_dims=[(4,)], output_dims=[(0,)]) as io:
            expect(execute(kit, prepared, io.request, executor), INVALID if executor == "fenced" else ErrorStatus.NONE,
                   f"{executor} execution with output request dimensions [0]")
        with vts_io([X], [16], input_dims=[(4,)], output_dims=[(4,)]) as io:
            expect(execute(kit, prepared, io.request, executor), ErrorStatus.NONE,
                   f"{executor} execution with fully specified request dimensions")


def mismatched_dimensions(kit: Kit) -> None:
    """Rule 5: request dimensions must match the model's rank and every dimension it specifies."""
    prepared = _add_relu(kit)
    _all_invalid(kit, prepared, [
        ("input 0 of request dimensions [2, 2] for a [4] operand",
         lambda p: p.request(inputs=[_arg(dims=(2, 2)), _arg(offset=16)])),
        ("input 0 of request dimensions [5] for a [4] operand",
         lambda p: p.request(inputs=[_arg(dims=(5,)), _arg(offset=16)])),
        ("output 0 of request dimensions [8] for a [4] operand",
         lambda p: p.request(outputs=[_arg(pool=1, dims=(8,))])),
        ("input 0 of request dimensions [0]", lambda p: p.request(inputs=[_arg(dims=(0,)), _arg(offset=16)])),
    ])


def fenced_bad_wait_fence(kit: Kit) -> None:
    """Rule 7: a wait_for entry that is no fence (-1) gives INVALID_ARGUMENT at once."""
    prepared = _add_relu(kit)
    with vts_io([X, Y], [16]) as io, inputs_kept(io.request, "fenced execution waiting on fence -1"):
        try:
            kit.call("execute_fenced", prepared.execute_fenced, io.request, [-1], 0, None, None, None)
        except NnError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                raise Fail(f"execute_fenced waiting on fence -1 answered {status_name(e.status)}, expected "
                           "INVALID_ARGUMENT") from None
            return
        raise Fail("execute_fenced accepted wait_for = [-1] (not a sync fence)")


# --- through the public API ---------------------------------------------------------------------------------
def runtime_memory_kinds(kit: Kit, kind: str) -> None:
    """CTS: a constant in `kind` memory and execution I/O through set_input/output_from_memory of that kind."""
    memory, model = kit.memo(("constant-model", kind), lambda: _constant_case(kit, kind))
    kit.supports(model.to_hal(), f"ADD with a constant in {kind} memory")
    try:
        compilation = Compilation(model, devices=[kit.device])
        kit.call("Compilation.finish", compilation.finish)
        io = _memory(kit, kind, 64, f"io-{kind}")
        io.array(np.float32, (4,))[:] = [10, 20, 30, 40]
        e = Execution(compilation)
        e.set_input_from_memory(0, io, 0, 16)
        e.set_output_from_memory(0, io, 32, 16)
        kit.call("Execution.compute", e.compute)
    except NnError as e:
        raise Fail(f"compiling and running with {kind} memory through the runtime failed: {e}") from None
    got = io.array(np.float32, (4,), offset=32).tolist()
    if got != [11, 22, 33, 44]:
        raise Fail(f"the runtime execution with {kind} memory computed {got}, expected [11, 22, 33, 44]")


def checks(kit: Kit) -> Iterator[Check]:
    for kind in MANDATORY:
        yield make(SUITE, f"constant-pool[{kind}]", "§2.1 memory kinds: model constants (M1, M4)", constant_pool,
                   kind)
    yield make(SUITE, "constant-non-blob-rejected", "§2.1 hardware_buffer (non-BLOB): no model constants",
               constant_non_blob)
    for kind in (*MANDATORY, "pointer"):
        for executor in EXECUTORS:
            yield make(SUITE, f"io-pool[{kind}][{executor}]", "§2.1 memory kinds: request I/O (M2, M4)", io_pool,
                       kind, executor)
    for executor in EXECUTORS:
        yield make(SUITE, f"io-non-blob-buffer[{executor}]", "§2.1 hardware_buffer (non-BLOB): I/O used whole",
                   io_non_blob, executor)
        yield make(SUITE, f"io-unmappable-handle[{executor}]", "§2.1 / M5: an undecodable handle fails the execution",
                   io_unmappable, executor)
    rules = [
        ("request-argument-counts", "§2.2 rule 1 (validateRequest removeInput/removeOutput)", argument_counts),
        ("request-no-value-location", "§2.2 rule 2: has_no_value needs an empty location", no_value_location),
        ("request-region-out-of-bounds", "§2.2 rule 3: offset + length within the pool (64-bit)",
         region_out_of_bounds),
        ("request-token-pool-length", "§2.2 rule 3: token pools have size 0", token_pool_length),
        ("request-unspecified-dimensions", "§2.2 rule 4: unspecified dimensions", unspecified_dimensions),
        ("request-mismatched-dimensions", "§2.2 rule 5: request dimensions agree with the model",
         mismatched_dimensions),
        ("request-bad-pools", "§2.2 rule 6: every pool passes validatePool", bad_pools),
        ("request-read-only-output", "§2.2 rule 8: outputs are written only where they may be", read_only_output),
        ("request-read-only-input", "§2.2 rule 8: the driver does not write to inputs", read_only_input),
        ("fenced-zero-sized-output", "§2.2 rule 7: fenced outputs are fully specified, not zero-sized",
         fenced_zero_sized_output),
        ("fenced-bad-wait-fence", "§2.2 rule 7 (VtsHalNeuralnetworks validateExecuteFenced)", fenced_bad_wait_fence),
    ]
    for name, behaviour, fn in rules:   # (a bad wait fence is refused by a service before the driver sees it)
        yield make(SUITE, name, behaviour, fn, inside=name == "fenced-bad-wait-fence")
    for kind in MANDATORY:
        yield make(SUITE, f"runtime-memory[{kind}]", "§2.3 CTS: constants and execution I/O from memory",
                   runtime_memory_kinds, kind)
