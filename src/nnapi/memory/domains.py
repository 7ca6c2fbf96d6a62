"""Memory domains on the driver side (M6-M12): driver-managed buffers any driver can reuse.

The pieces, shaped like Android's `BufferTracker` / `ManagedBuffer` / sample-driver `IBuffer`:

- `validate_allocation` checks an `IDevice.allocate` call (VTS-BEHAVIOURS 3.1) and returns the
  buffer's operand metadata, dimensions and role set;
- `ManagedBuffer` holds the bytes, the roles, the dimensions (initial and last written) and
  the initialized flag;
- `BufferTracker` hands out tokens: > 0, unique among live buffers, owned by the allocating
  client (uid, pid); a token used by another client, unknown or freed is INVALID_ARGUMENT;
- `DriverBuffer` is the `IBuffer` (`copy_to` / `copy_from` with the rules of 3.3); its token
  lives as long as the object;
- `RequestBuffers` checks every use of a buffer in a request against the declared roles
  (Android's `validateRequest`), gives inputs as zero-copy arrays and stores outputs.

Concurrency (M12): each buffer has a lock held only for short metadata/data swaps, never while
another lock is held and never while a model runs, so nothing can deadlock. Writers build the
new content and swap it in (copy-on-write), so a concurrent reader sees either the old or the
new content, never a torn or freed one.

Client identity (`nnapi.hal.identity`): a driver serving several processes sets the caller with
`calling_client`; in-process callers are (os.getuid(), os.getpid()).
"""
from __future__ import annotations

import numbers
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..hal import (BufferDesc, BufferRole, ErrorStatus, IBuffer, MemoryHandle, NnError, Operand, OperandType,
                   Request, SymmPerChannelQuantParams, byte_size, combine_dims, is_fully_specified, is_int,
                   numpy_dtype)
# Re-exported: driver authors and the kit take the caller's identity from here too.
from ..hal.identity import calling_client, current_client  # noqa: F401
from .pool_checks import check_pool
from .pools import map_handle

INPUT, OUTPUT = "input", "output"
#: Largest buffer a driver built on this toolkit allocates by default (M11: it may refuse more).
DEFAULT_MAX_BUFFER_BYTES = 2**31


def _invalid(message: str) -> NnError:
    return NnError(ErrorStatus.INVALID_ARGUMENT, message)


def _failure(message: str) -> NnError:
    return NnError(ErrorStatus.GENERAL_FAILURE, message)


# --- allocation ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BufferOperand:
    """What every role of a buffer must agree on: type, quantization and extra parameters."""

    type: OperandType
    scale: float
    zero_point: int
    channel_quant: SymmPerChannelQuantParams | None

    @classmethod
    def of(cls, operand: Operand) -> "BufferOperand":
        return cls(OperandType(operand.type), float(operand.scale), int(operand.zero_point), operand.channel_quant)


#: For a prepared model: (input operands, output operands) of its main graph, or None when the
#: object is not a prepared model of this driver.
IoOperands = Callable[[object], "tuple[Sequence[Operand], Sequence[Operand]] | None"]


@dataclass
class Allocation:
    """A validated `allocate` call."""

    operand: BufferOperand
    dimensions: tuple[int, ...]
    roles: set  # {(weakref to prepared model, INPUT | OUTPUT, io index)}


def validate_allocation(desc: BufferDesc, prepared_models: Sequence[object], input_roles: Sequence[BufferRole],
                        output_roles: Sequence[BufferRole], io_operands: IoOperands, *,
                        max_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> Allocation:
    """Android's validateMemoryDesc plus the driver's own limits.

    INVALID_ARGUMENT for a malformed call (VTS-BEHAVIOURS 3.1), GENERAL_FAILURE for a valid
    call this toolkit does not support (OEM operand types, more than `max_bytes`).
    """
    if not isinstance(desc, BufferDesc):
        raise _invalid(f"allocate: expected a BufferDesc, got {type(desc).__name__}")
    dims = desc.dimensions
    if not isinstance(dims, (tuple, list)) or not all(is_int(d) and 0 <= d < 2**32 for d in dims):
        raise _invalid(f"allocate: desc dimensions must be 32-bit unsigned integers, got {dims!r}")
    for name, seq in (("prepared_models", prepared_models), ("input_roles", input_roles),
                      ("output_roles", output_roles)):
        if not isinstance(seq, (tuple, list)):
            raise _invalid(f"allocate: {name} must be a list")
    if not prepared_models:
        raise _invalid("allocate: no prepared models given")
    if not input_roles and not output_roles:
        raise _invalid("allocate: no roles given")
    io_cache: dict[int, tuple[Sequence[Operand], Sequence[Operand]]] = {}
    seen: set[tuple[int, str, int]] = set()
    roles: set = set()
    operand: BufferOperand | None = None
    combined: tuple[int, ...] = tuple(int(d) for d in dims)
    for io, role_list in ((INPUT, input_roles), (OUTPUT, output_roles)):
        for r, role in enumerate(role_list):
            label = f"allocate: {io} role {r}"
            if not isinstance(role, BufferRole):
                raise _invalid(f"{label}: expected a BufferRole, got {type(role).__name__}")
            if not is_int(role.model_index) or not 0 <= role.model_index < len(prepared_models):
                raise _invalid(f"{label}: model_index {role.model_index!r} out of range "
                               f"({len(prepared_models)} prepared models)")
            pm = prepared_models[role.model_index]
            if pm is None:
                raise _invalid(f"{label}: prepared model {role.model_index} is null")
            if id(pm) not in io_cache:
                ios = io_operands(pm)
                if ios is None:
                    raise _invalid(f"{label}: prepared model {role.model_index} was not prepared by this driver")
                io_cache[id(pm)] = ios
            operands = io_cache[id(pm)][0 if io == INPUT else 1]
            if not is_int(role.io_index) or not 0 <= role.io_index < len(operands):
                raise _invalid(f"{label}: io_index {role.io_index!r} out of range (the model has "
                               f"{len(operands)} {io}s)")
            freq = role.frequency
            if not isinstance(freq, numbers.Real) or isinstance(freq, bool) or not 0.0 < float(freq) <= 1.0:
                raise _invalid(f"{label}: frequency {freq!r} must be in (0, 1]")
            key = (id(pm), io, int(role.io_index))
            if key in seen:
                raise _invalid(f"{label}: {io} {role.io_index} of prepared model {role.model_index} is "
                               "given twice")
            seen.add(key)
            roles.add((weakref.ref(pm), io, int(role.io_index)))
            op = operands[role.io_index]
            this = BufferOperand.of(op)
            if operand is None:
                operand = this
            elif this != operand:
                raise _invalid(f"{label}: operand {this.type.name} (scale {this.scale}, zero point "
                               f"{this.zero_point}) conflicts with the other roles' {operand.type.name} (scale "
                               f"{operand.scale}, zero point {operand.zero_point})")
            if this.type.is_scalar:
                if combined or op.dimensions:
                    raise _invalid(f"{label}: a scalar {this.type.name} buffer cannot have dimensions "
                                   f"{list(combined or op.dimensions)}")
                continue
            merged = combine_dims(combined, tuple(op.dimensions))
            if merged is None:
                raise _invalid(f"{label}: dimensions {list(op.dimensions)} are incompatible with "
                               f"{list(combined)}")
            combined = merged
    assert operand is not None
    if operand.type in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE, OperandType.SUBGRAPH):
        raise _failure(f"allocate: operand type {operand.type.name} is not supported")
    size = byte_size(operand.type, combined)
    if size > max_bytes:
        raise _failure(f"allocate: {size} bytes is more than this driver's limit of {max_bytes}")
    return Allocation(operand, combined, roles)


# --- buffers ----------------------------------------------------------------------------------------
class ManagedBuffer:
    """One driver-managed buffer: bytes, roles, dimensions and the initialized flag."""

    def __init__(self, allocation: Allocation, owner: tuple[int, int], max_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> None:
        self.operand = allocation.operand
        self.initial_dims = allocation.dimensions
        self.roles = allocation.roles
        self.owner = owner
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.dims = allocation.dimensions           # the last written dimensions
        self.initialized = False
        size = byte_size(self.operand.type, self.dims)
        self.data = np.zeros(size, np.uint8) if self.fully_specified else None  # 1-D bytes
        #: Content a driver keeps on its device (e.g. a jax.Array), with no host copy until one is
        #: needed (`copy_to`, a host-side reader); `data` is None while only the device has it.
        self.device = None

    @property
    def fully_specified(self) -> bool:
        """True when the dimensions were known at allocation (a static buffer)."""
        return is_fully_specified(self.operand.type, self.initial_dims)

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.operand.type)

    def has_role(self, prepared_model: object, io: str, index: int) -> bool:
        try:
            return (weakref.ref(prepared_model), io, index) in self.roles
        except TypeError:
            return False

    def snapshot(self) -> tuple[np.ndarray | None, tuple[int, ...], bool]:
        """(data, dimensions, initialized), consistent with each other; device-resident content is
        copied to the host once (and kept beside the device copy)."""
        with self.lock:
            self._to_host()
            return self.data, self.dims, self.initialized

    def device_snapshot(self) -> tuple[object | None, tuple[int, ...], bool]:
        """(device content or None, dimensions, initialized): no host copy."""
        with self.lock:
            return self.device, self.dims, self.initialized

    def _to_host(self) -> None:
        if self.data is None and self.device is not None:
            self.data = np.array(self.device, dtype=self.dtype, order="C").reshape(-1).view(np.uint8)

    def set_initialized(self, value: bool) -> None:
        with self.lock:
            self.initialized = value

    def size_of(self, dims: Sequence[int]) -> int:
        return byte_size(self.operand.type, dims)

    # copy_from / copy_to (VTS-BEHAVIOURS 3.3)
    def target_dims(self, dims: Sequence[int]) -> tuple[int, ...]:
        """The dimensions a copy_from with `dims` gives the buffer; INVALID_ARGUMENT if they do not fit."""
        dims = tuple(dims)
        if not all(is_int(d) and 0 <= d < 2**32 for d in dims):
            raise _invalid(f"copy_from: dimensions must be 32-bit unsigned integers, got {dims!r}")
        if self.operand.type.is_scalar:
            if dims:
                raise _invalid(f"copy_from: a scalar buffer takes no dimensions, got {list(dims)}")
            return ()
        if not dims:
            if not self.fully_specified:
                raise _invalid(f"copy_from: the buffer's dimensions {list(self.initial_dims)} are not fully "
                               "specified, so copy_from needs fully specified dimensions")
            return self.initial_dims
        if not all(dims):
            raise _invalid(f"copy_from: dimensions {list(dims)} are not fully specified")
        if combine_dims(dims, self.initial_dims) is None:
            raise _invalid(f"copy_from: dimensions {list(dims)} are incompatible with the buffer's "
                           f"{list(self.initial_dims)}")
        return tuple(int(d) for d in dims)

    def copy_from(self, src: memoryview, dims: Sequence[int]) -> None:
        """Fill from `src` (exactly the size of `dims`); any failure leaves the buffer uninitialized."""
        try:
            target = self.target_dims(dims)
            need = self.size_of(target)
            if src.nbytes != need:
                raise _invalid(f"copy_from: the memory holds {src.nbytes} bytes, the buffer of "
                               f"{list(target)} needs {need}")
            if need > self.max_bytes:
                raise _failure(f"copy_from: {need} bytes is more than this driver's limit of {self.max_bytes}")
            data = np.frombuffer(src, np.uint8).copy()
        except BaseException:
            self.set_initialized(False)
            raise
        with self.lock:
            self.data, self.device, self.dims, self.initialized = data, None, target, True

    def copy_to(self) -> tuple[np.ndarray, tuple[int, ...]]:
        """The content to copy out: GENERAL_FAILURE when uninitialized."""
        data, dims, initialized = self.snapshot()
        if not initialized or data is None:
            raise _failure("copy_to: the buffer is not initialized")
        return data, dims

    def store(self, value: np.ndarray, adopt: bool) -> None:
        """Keep an execution's output (copy-on-write). `adopt`: take `value` without copying."""
        value = np.asarray(value)
        flat = value.reshape(-1) if adopt else np.array(value, copy=True, order="C").reshape(-1)
        data = flat.view(np.uint8)
        with self.lock:
            self.data, self.device, self.dims, self.initialized = data, None, tuple(value.shape), True

    def store_device(self, value) -> None:
        """Keep an execution's output as the device array it is (immutable, so no copy)."""
        with self.lock:
            self.data, self.device, self.dims, self.initialized = None, value, tuple(value.shape), True


class BufferTracker:
    """Tokens of live buffers: > 0, unique among live buffers, each owned by its allocating client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffers: dict[int, ManagedBuffer] = {}
        self._next = 1

    def add(self, buffer: ManagedBuffer) -> int:
        with self._lock:
            if len(self._buffers) >= 2**32 - 2:
                raise _failure("allocate: no free token")
            while self._next in self._buffers or self._next == 0:
                self._next = self._next % (2**32 - 1) + 1
            token = self._next
            self._next = self._next % (2**32 - 1) + 1
            self._buffers[token] = buffer
            return token

    def free(self, token: int) -> None:
        with self._lock:
            self._buffers.pop(token, None)

    def get(self, token: int, client: tuple[int, int] | None = None) -> ManagedBuffer:
        """The live buffer of `token` for this client; INVALID_ARGUMENT for an unknown or foreign token."""
        with self._lock:
            buffer = self._buffers.get(token) if is_int(token) else None
        if buffer is None:
            raise _invalid(f"token {token!r} does not name a live driver-managed buffer")
        if buffer.owner != (client or current_client()):
            raise _invalid(f"token {token} belongs to another client")
        return buffer

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)


class DriverBuffer(IBuffer):
    """The `IBuffer` of a managed buffer; the token is freed when this object goes away (or `release`)."""

    def __init__(self, tracker: BufferTracker, buffer: ManagedBuffer) -> None:
        self._tracker = tracker
        self._buffer = buffer
        self.token = tracker.add(buffer)
        self._finalizer = weakref.finalize(self, tracker.free, self.token)

    def _own(self) -> ManagedBuffer:
        if not self._finalizer.alive:
            raise _invalid("the buffer was released")
        if self._buffer.owner != current_client():
            raise _invalid(f"buffer {self.token} belongs to another client")
        return self._buffer

    @staticmethod
    def _map(handle: MemoryHandle, what: str):
        from ..hal import MemoryPool
        if not isinstance(handle, MemoryHandle):
            raise _invalid(f"{what}: expected a MemoryHandle, got {type(handle).__name__}")
        if handle.name not in ("ashmem", "mmap_fd", "hardware_buffer_blob"):
            raise _invalid(f"{what}: memory of kind {handle.name!r} cannot be copied (ashmem, mmap_fd or "
                           "hardware_buffer_blob)")
        check_pool(MemoryPool(handle=handle), what, request=True)
        try:
            return map_handle(handle)
        except NnError as e:
            raise _invalid(f"{what}: {e.message}") from None

    def copy_to(self, dst: MemoryHandle) -> None:
        buffer = self._own()
        data, dims = buffer.copy_to()
        mapped = self._map(dst, "copy_to")
        if mapped.size != data.nbytes:
            raise _invalid(f"copy_to: the memory holds {mapped.size} bytes, the buffer of {list(dims)} has "
                           f"{data.nbytes}")
        mapped.write_bytes(0, data)

    def copy_from(self, src: MemoryHandle, dimensions: Sequence[int]) -> None:
        buffer = self._own()
        try:
            if not isinstance(dimensions, (tuple, list)):
                raise _invalid(f"copy_from: dimensions must be a list, got {type(dimensions).__name__}")
            mapped = self._map(src, "copy_from")
        except BaseException:
            buffer.set_initialized(False)
            raise
        buffer.copy_from(mapped.view(0, mapped.size), dimensions)

    def release(self) -> None:
        """Free the token now (it is freed anyway when the object is garbage-collected)."""
        self._finalizer()

    @property
    def dimensions(self) -> tuple[int, ...]:
        return self._buffer.device_snapshot()[1]


def allocate(tracker: BufferTracker, desc: BufferDesc, prepared_models: Sequence[object],
             input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole], io_operands: IoOperands, *,
             max_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> tuple[DriverBuffer, int]:
    """`IDevice.allocate` for a driver built on this toolkit: the IBuffer and its token."""
    allocation = validate_allocation(desc, prepared_models, input_roles, output_roles, io_operands,
                                     max_bytes=max_bytes)
    buffer = DriverBuffer(tracker, ManagedBuffer(allocation, current_client(), max_bytes))
    return buffer, buffer.token


# --- requests --------------------------------------------------------------------------------------
class RequestBuffers:
    """The driver-managed buffers of one request, checked against the prepared model's roles.

    `resolve` is Android's BufferTracker validateRequest: INVALID_ARGUMENT for an unknown or
    foreign token, an undeclared role, incompatible dimensions or a buffer that is an output
    and anything else in the same request; then GENERAL_FAILURE for an uninitialized input.
    """

    def __init__(self) -> None:
        self.pools: dict[int, ManagedBuffer] = {}
        self.inputs: dict[int, tuple[ManagedBuffer, tuple[int, ...]]] = {}
        self.outputs: dict[int, ManagedBuffer] = {}

    @classmethod
    def resolve(cls, tracker: BufferTracker, request: Request, prepared_model: object,
                input_operands: Sequence[Operand], output_operands: Sequence[Operand]) -> "RequestBuffers":
        if all(pool.token is None for pool in request.pools):
            return NO_BUFFERS  # (never changed: nothing is stored for a request without driver buffers)
        self = cls()
        client = None
        for i, pool in enumerate(request.pools):
            if pool.token is not None:
                if client is None:
                    client = current_client()
                self.pools[i] = tracker.get(pool.token, client)
        if not self.pools:
            return self
        as_input: set[int] = set()
        uninitialized: list[int] = []
        for k, arg in enumerate(request.inputs):
            buffer = None if arg.has_no_value else self.pools.get(arg.location.pool_index)
            if buffer is None:
                continue
            if not buffer.has_role(prepared_model, INPUT, k):
                raise _invalid(f"request input {k}: buffer {request.pools[arg.location.pool_index].token} was not "
                               f"allocated for input {k} of this prepared model")
            _, dims, initialized = buffer.device_snapshot()
            if not initialized:
                uninitialized.append(k)
            elif combine_dims(arg.dimensions, dims) is None or combine_dims(input_operands[k].dimensions, dims) is None:
                raise _invalid(f"request input {k}: dimensions {list(arg.dimensions or input_operands[k].dimensions)} "
                               f"do not match the buffer's {list(dims)}")
            as_input.add(arg.location.pool_index)
            self.inputs[k] = (buffer, dims)
        as_output: set[int] = set()
        for k, arg in enumerate(request.outputs):
            pool = arg.location.pool_index
            buffer = None if arg.has_no_value else self.pools.get(pool)
            if buffer is None:
                continue
            token = request.pools[pool].token
            if pool in as_input or pool in as_output:
                raise _invalid(f"request output {k}: buffer {token} is used as an output and also as another "
                               "input or output of the same request")
            as_output.add(pool)
            if not buffer.has_role(prepared_model, OUTPUT, k):
                raise _invalid(f"request output {k}: buffer {token} was not allocated for output {k} of this "
                               "prepared model")
            if combine_dims(arg.dimensions, buffer.initial_dims) is None:
                raise _invalid(f"request output {k}: dimensions {list(arg.dimensions)} are incompatible with the "
                               f"buffer's {list(buffer.initial_dims)}")
            self.outputs[k] = buffer
        if uninitialized:
            raise _failure(f"request input {uninitialized[0]}: the driver-managed buffer is not initialized")
        return self

    def device_input(self, k: int, dims: Sequence[int]):
        """Input `k` as the device array its buffer holds (None when its content is on the host)."""
        value, held, _ = self.inputs[k][0].device_snapshot()
        if value is None or (dims and tuple(dims) != tuple(held)):
            return None
        return value

    def input_value(self, k: int, dtype: np.dtype, dims: Sequence[int]) -> np.ndarray:
        """Input `k` as a read-only zero-copy array of `dims`."""
        buffer, current = self.inputs[k]
        data = buffer.snapshot()[0]
        dims = tuple(dims) if dims else current
        need = buffer.size_of(dims)
        if data is None or data.nbytes != need:
            raise _invalid(f"request input {k}: dimensions {list(dims)} need {need} bytes, the buffer holds "
                           f"{0 if data is None else data.nbytes}")
        value = data.view(dtype).reshape(dims)
        value.flags.writeable = False
        return value

    def check_output(self, k: int, shape: Sequence[int]) -> None:
        """An output shape the buffer cannot take is GENERAL_FAILURE (not OUTPUT_INSUFFICIENT_SIZE)."""
        buffer = self.outputs[k]
        shape = tuple(shape)
        if buffer.fully_specified:
            ok = shape == tuple(buffer.initial_dims)
        else:
            ok = combine_dims(shape, buffer.initial_dims) is not None
        if not ok:
            raise _failure(f"request output {k}: shape {list(shape)} does not fit the driver-managed buffer of "
                           f"{list(buffer.initial_dims)}")
        if buffer.size_of(shape) > buffer.max_bytes:
            raise _failure(f"request output {k}: {buffer.size_of(shape)} bytes is more than the driver's limit")

    def store_outputs(self, values: dict[int, np.ndarray]) -> None:
        """Keep each buffer output (adopting freshly computed arrays without a copy; a driver's device
        array stays on its device); marks them initialized."""
        seen: set[int] = set()
        for k, value in values.items():
            buffer = self.outputs[k]
            if not isinstance(value, np.ndarray) and hasattr(value, "__array__") and hasattr(value, "shape"):
                buffer.store_device(value)
                continue
            value = np.asarray(value)
            adopt = (value.base is None and value.flags.c_contiguous and value.flags.writeable
                     and value.dtype == buffer.dtype and id(value) not in seen)
            seen.add(id(value))
            buffer.store(value, adopt)

    def fail_outputs(self) -> None:
        """A failed execution leaves every buffer it was writing uninitialized."""
        for buffer in self.outputs.values():
            buffer.set_initialized(False)


#: The buffers of every request without driver-managed memory (empty, never changed).
NO_BUFFERS = RequestBuffers()


class DriverDomain:
    """One driver's memory domain: its token tracker plus `allocate` / `resolve` for its own prepared
    models: instances of `prepared_class` (given lazily to avoid import cycles), or, with `owns`,
    the objects it accepts; other objects are foreign."""

    def __init__(self, prepared_class: Callable[[], type] | None = None, *,
                 owns: Callable[[object], bool] | None = None) -> None:
        self.tracker = BufferTracker()
        self._owns = owns if owns is not None else (lambda model: isinstance(model, prepared_class()))

    def _io_operands(self, prepared_model: object):
        if not self._owns(prepared_model):
            return None  # a foreign object, or another driver's prepared model
        main = prepared_model.model.main
        return [main.operands[i] for i in main.input_indexes], [main.operands[i] for i in main.output_indexes]

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[object], input_roles: Sequence[BufferRole],
                 output_roles: Sequence[BufferRole]) -> "tuple[DriverBuffer, int]":
        """`IDevice.allocate`: any operand type but OEM, static or dynamic dimensions, up to 2 GiB."""
        return allocate(self.tracker, desc, prepared_models, input_roles, output_roles, self._io_operands)

    def resolve(self, request: Request, prepared_model: object) -> "RequestBuffers":
        """The request's token pools, checked against this prepared model's roles."""
        ios = self._io_operands(prepared_model)
        assert ios is not None
        return RequestBuffers.resolve(self.tracker, request, prepared_model, *ios)
