"""Messages of the service protocol and the HAL's plain data in them (msgpack, never pickle).

A message is one msgpack array:

    [CALL,  request id, method, target object id, args]      client -> service
    [REPLY, request id, result]                              service -> client
    [ERROR, request id, status, message, output shapes|nil]  service -> client
    [EVENT, request id, payload]                             service -> client (asynchronous completions)

A file descriptor inside a message is the extension type EXT_FD holding its index (u32) among the
frame's descriptors; each of them is referred to exactly once. EXT_BAD_FD stands for a descriptor
the sender did not have open (a negative or closed one): the receiver sees -1, so the driver
reports the bad handle itself. Requests carry pools as [handle|nil, token|nil], handles as
[kind, [fds], [ints], size]; a model is its `hal.serialize` bytes without pools (inline, or in a
sealed memfd when large) plus its pools. Decoding checks every type and bound and raises only
`NnError(INVALID_ARGUMENT)` naming the field at fault. The HAL's plain values and the checks are in
`values` (and importable from here); which call carries what is declared in `protocol`.
"""
from __future__ import annotations

import dataclasses
import fcntl
import numbers
import os
import struct
from typing import Any, Iterable, Sequence

import msgpack

from ..hal import (CacheHandles, DataLocation, ErrorStatus, MemoryHandle, MemoryPool, Model, NnError, Request,
                   RequestArgument, invalid)
from ..hal.serialize import model_from_bytes, model_to_bytes
from ..memory import FileCopy, max_tensor_bytes, read_region, stable_handle
from .values import (I64_MIN, MAX_ITEMS, MAX_RANK, U64_MAX, check_bool, check_bytes, check_float, check_int,
                     check_list, check_opt_int, check_str, decode_capabilities, decode_desc, decode_info,
                     decode_role, decode_shapes, decode_timing, encode_capabilities, encode_desc, encode_info,
                     encode_role, encode_shapes, encode_timing, plain)
from .wire import close_fds

__all__ = ["BAD_FD", "CALL", "Decoder", "ERROR", "EVENT", "EXT_BAD_FD", "EXT_FD", "Encoder", "FdRef",
           "INLINE_MODEL_BYTES", "MAX_ITEMS", "MAX_MODEL_BYTES", "MAX_RANK", "PROTOCOL_VERSION", "REPLY",
           "check_bool", "check_bytes", "check_float", "check_int", "check_list", "check_opt_int", "check_str",
           "decode_capabilities", "decode_desc", "decode_error", "decode_info", "decode_role", "decode_shapes",
           "decode_timing", "encode_capabilities", "encode_desc", "encode_info", "encode_role", "encode_shapes",
           "encode_timing", "error_message", "fd_open", "pack", "plain", "read_call", "unpack", "write_back"]

#: The protocol version both sides must speak (the first call of a connection is `hello`).
PROTOCOL_VERSION = 2  # (2: reusable executions)
CALL, REPLY, ERROR, EVENT = 0, 1, 2, 3
EXT_FD, EXT_BAD_FD = 1, 2
_U32 = struct.Struct("<I")
#: Serialized models larger than this travel in a sealed memfd rather than in the frame.
INLINE_MODEL_BYTES = 64 << 10
MAX_MODEL_BYTES = 1 << 34


class FdRef:
    """A descriptor in a decoded message: its index among the frame's descriptors (-1: a bad one)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"FdRef({self.index})"


BAD_FD = FdRef(-1)


def fd_open(fd: Any) -> bool:
    """Whether `fd` is a descriptor open in this process."""
    if isinstance(fd, bool) or not isinstance(fd, numbers.Integral) or fd < 0:
        return False
    try:
        fcntl.fcntl(int(fd), fcntl.F_GETFD)
        return True
    except OSError:
        return False


# --- encoding -------------------------------------------------------------------------------------
class Encoder:
    """Builds one outgoing message: the descriptors it refers to, in order, and descriptors it
    created itself (closed by `close` once the frame is sent)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.owned: list[int] = []

    def fd(self, fd: Any) -> msgpack.ExtType:
        if not fd_open(fd):
            return msgpack.ExtType(EXT_BAD_FD, b"")
        self.fds.append(int(fd))
        return msgpack.ExtType(EXT_FD, _U32.pack(len(self.fds) - 1))

    def close(self) -> None:
        owned, self.owned = self.owned, []
        close_fds(owned)

    # --- HAL values ----------------------------------------------------------------------------
    def handle(self, h: MemoryHandle) -> list:
        return [h.name, [self.fd(fd) for fd in h.fds], [plain(i) for i in h.ints], plain(h.size)]

    def pool(self, p: MemoryPool) -> list:
        if p.pointer is not None:
            raise invalid("a pointer pool cannot cross a process boundary (stage it in shared memory)")
        return [None if p.handle is None else self.handle(p.handle), plain(p.token)]

    def request(self, r: Request) -> list:
        return [[self.argument(a) for a in r.inputs], [self.argument(a) for a in r.outputs],
                [self.pool(p) for p in r.pools]]

    @staticmethod
    def argument(a: RequestArgument) -> list:
        loc = a.location
        return [a.has_no_value, plain(loc.pool_index), plain(loc.offset), plain(loc.length),
                [d if type(d) is int else plain(d) for d in a.dimensions]]

    def model(self, m: Model) -> list:
        blob = model_to_bytes(dataclasses.replace(m, pools=[]))
        pools = [self.pool(p) for p in m.pools]
        if len(blob) <= INLINE_MODEL_BYTES:
            return [blob, len(blob), pools]
        fd = os.memfd_create("nnapi-model", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self.owned.append(fd)
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_SEAL)
        return [self.fd(fd), len(blob), pools]

    def cache(self, c: CacheHandles | None) -> list | None:
        if c is None:
            return None
        return [[self.fd(fd) for fd in c.model_cache], [self.fd(fd) for fd in c.data_cache]]


def pack(message: list) -> bytes:
    """The msgpack body of a message; NnError(INVALID_ARGUMENT) when a value cannot be sent."""
    try:
        return msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise invalid(f"cannot send the call's arguments: {e}") from None


# --- decoding -------------------------------------------------------------------------------------
def unpack(body: bytes, n_fds: int) -> Any:
    """Decode a message body; every descriptor of the frame must be referred to exactly once.
    NnError(INVALID_ARGUMENT) for anything malformed."""
    refs: list[int] = []

    def ext_hook(code: int, data: bytes) -> FdRef:
        if code == EXT_FD and len(data) == _U32.size:
            (index,) = _U32.unpack(data)
            refs.append(index)
            return FdRef(index)
        if code == EXT_BAD_FD and not data:
            return BAD_FD
        raise ValueError(f"unknown extension type {code} ({len(data)} bytes)")

    try:
        message = msgpack.unpackb(body, ext_hook=ext_hook, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises many kinds (ExtraData, FormatError, ValueError, ...)
        raise invalid(f"malformed message: {type(e).__name__}: {e}") from None
    if sorted(refs) != list(range(n_fds)):
        raise invalid(f"the frame carries {n_fds} descriptors but the message refers to {len(refs)} "
                      f"(indexes {sorted(refs)[:8]})")
    return message


def read_call(body: bytes, n_fds: int) -> tuple[int, Any, Any, Any]:
    """(request id, method, target, args) of a call frame; INVALID_ARGUMENT naming what is wrong."""
    message = unpack(body, n_fds)
    if type(message) is not list or len(message) != 5 or message[0] != CALL:
        raise invalid("a call must be [0, request id, method, target, args]")
    _, rid, method, target, args = message
    return check_int(rid, "request id", 0, 2**63 - 1), method, target, args


def _well_formed_argument(v: Any) -> RequestArgument | None:
    """A well-formed request argument read at once (None: let `Decoder.argument` check it field by
    field and say what is wrong): one execution's arguments are read on every call."""
    if type(v) is not list or len(v) != 5:
        return None
    no_value, pool, offset, length, dims = v
    if (type(no_value) is not bool or type(pool) is not int or type(offset) is not int or type(length) is not int
            or type(dims) is not list or len(dims) > MAX_RANK):
        return None
    for x in (pool, offset, length, *dims):
        if type(x) is not int or not I64_MIN <= x <= U64_MAX:
            return None
    return RequestArgument(no_value, DataLocation(pool, offset, length), tuple(dims))


class Decoder:
    """Builds HAL values from one incoming message, handing out the frame's descriptors. Descriptors
    not `adopt`ed by the end of the call are closed by `close`.

    With `stable` (the service, decoding an app's calls) every memory handle is made safe to map
    (`memory.stable_handle`: the app cannot shrink it under a mapping, which would kill the service);
    what is copied for that and written by the call goes back with `write_back`."""

    def __init__(self, fds: Sequence[int], stable: bool = False) -> None:
        self.fds = list(fds)
        self._adopted: set[int] = set()
        self._stable = stable
        self._copies: dict[int, FileCopy] = {}  # a copy's descriptor -> the copy
        self._copied = 0

    def fd(self, v: Any, what: str) -> int:
        if not isinstance(v, FdRef):
            raise invalid(f"{what}: expected a file descriptor, got {type(v).__name__}")
        return -1 if v.index < 0 else self.fds[v.index]

    def adopt(self, fd: int) -> int:
        """Keep `fd` open past the call (the caller now closes it)."""
        if fd >= 0:
            self._adopted.add(fd)
        return fd

    def adopt_all(self) -> list[int]:
        """Keep every descriptor of the frame not adopted already; returns them (for the caller to close:
        one adopted before, such as a channel's, has its owner)."""
        mine = [fd for fd in self.fds if fd not in self._adopted]
        self._adopted.update(mine)
        return mine

    def close(self) -> None:
        close_fds([fd for fd in self.fds if fd not in self._adopted])
        self.fds = []

    # --- HAL values ----------------------------------------------------------------------------
    def handle(self, v: Any, what: str) -> MemoryHandle:
        name, fds, ints, size = check_list(v, what, length=4)
        fds = check_list(fds, f"{what} fds", 64)
        ints = check_list(ints, f"{what} ints", 64)
        handle = MemoryHandle(check_str(name, f"{what} kind"), tuple(self.fd(fd, f"{what} fd") for fd in fds),
                              tuple(check_int(i, f"{what} int") for i in ints), check_int(size, f"{what} size"))
        if not self._stable:
            return handle
        try:  # (the copies of one message together stay within what one tensor may take)
            stable, copy = stable_handle(handle, max_tensor_bytes() - self._copied)
        except NnError as e:
            raise NnError(e.status, f"{what}: {e.message}") from None
        if copy is not None:
            self.fds.append(copy.copy)  # (closed, or adopted, with the frame's own)
            self._copies[copy.copy] = copy
            self._copied += copy.end - copy.first
        return stable

    def write_back(self) -> None:
        """Write what the call wrote into copies of the app's files back into them (GENERAL_FAILURE when
        a file cannot take it)."""
        write_back(self._copies.values())

    def copied_files(self) -> set[tuple[int, int]]:
        """The (st_dev, st_ino) of the app's files this message's handles were copied from."""
        return {ident for ident in (copy.source_identity() for copy in self._copies.values()) if ident is not None}

    @property
    def writes_back(self) -> bool:
        return any(copy.writable for copy in self._copies.values())

    def copy_of(self, handle: MemoryHandle | None) -> FileCopy | None:
        """The copy one decoded handle maps, if one was made (a burst keeps it with the slot, and the
        app's descriptor open with it)."""
        return self._copies.get(handle.fds[0]) if handle is not None and handle.fds else None

    def pool(self, v: Any, what: str) -> MemoryPool:
        handle, token = check_list(v, what, length=2)
        return MemoryPool(handle=None if handle is None else self.handle(handle, f"{what} handle"),
                          token=check_opt_int(token, f"{what} token"))

    def argument(self, v: Any, what: str) -> RequestArgument:
        no_value, pool, offset, length, dims = check_list(v, what, length=5)
        dims = check_list(dims, f"{what} dimensions", MAX_RANK)
        return RequestArgument(check_bool(no_value, f"{what} has_no_value"),
                               DataLocation(check_int(pool, f"{what} pool index"), check_int(offset, f"{what} offset"),
                                            check_int(length, f"{what} length")),
                               tuple(check_int(d, f"{what} dimension") for d in dims))

    def request(self, v: Any, what: str = "request") -> Request:
        inputs, outputs, pools = check_list(v, what, length=3)
        return Request([_well_formed_argument(a) or self.argument(a, f"{what} input {k}")
                        for k, a in enumerate(check_list(inputs, f"{what} inputs"))],
                       [_well_formed_argument(a) or self.argument(a, f"{what} output {k}")
                        for k, a in enumerate(check_list(outputs, f"{what} outputs"))],
                       [self.pool(p, f"{what} pool {k}") for k, p in enumerate(check_list(pools, f"{what} pools"))])

    def model(self, v: Any, what: str = "model") -> Model:
        blob, length, pools = check_list(v, what, length=3)
        length = check_int(length, f"{what} length", 0, MAX_MODEL_BYTES)
        if isinstance(blob, FdRef):
            blob = _read_memfd(self.fd(blob, f"{what} memfd"), length, what)
        else:
            blob = check_bytes(blob, f"{what} bytes")
            if len(blob) != length:
                raise invalid(f"{what}: {len(blob)} bytes, the message says {length}")
        model = model_from_bytes(blob)
        model.pools = [self.pool(p, f"{what} pool {k}") for k, p in enumerate(check_list(pools, f"{what} pools"))]
        return model

    def cache(self, v: Any, what: str = "cache") -> CacheHandles | None:
        if v is None:
            return None
        model, data = check_list(v, what, length=2)
        return CacheHandles(tuple(self.fd(fd, f"{what} model file") for fd in check_list(model, f"{what} model", 64)),
                            tuple(self.fd(fd, f"{what} data file") for fd in check_list(data, f"{what} data", 64)))


def _read_memfd(fd: int, length: int, what: str) -> bytes:
    """The serialized model from its memfd: bounded by what one tensor may take before anything is
    allocated, and read, never mapped (`memory.read_region`: a sender shrinking it cannot fault us)."""
    if fd < 0:
        raise invalid(f"{what}: the serialized model's memfd is not a valid descriptor")
    if length > max_tensor_bytes():
        raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, f"{what}: a serialized model of {length} "
                                                                 f"bytes is over the {max_tensor_bytes()} allowed")
    return read_region(fd, length, f"{what} memfd")


def error_message(rid: int, error: NnError) -> list:
    return [ERROR, rid, int(error.status), error.message, encode_shapes(error.output_shapes)]


def decode_error(status: Any, message: Any, shapes: Any) -> NnError:
    try:
        status = ErrorStatus(check_int(status, "error status"))
    except ValueError:
        status = ErrorStatus.GENERAL_FAILURE
    return NnError(status, message if isinstance(message, str) else repr(message),
                   output_shapes=decode_shapes(shapes))


def write_back(copies: Iterable[FileCopy]) -> None:
    """`FileCopy.write_back` of each; GENERAL_FAILURE naming the file's trouble."""
    for copy in copies:
        try:
            copy.write_back()
        except OSError as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"could not write the results back into the app's "
                                                       f"mmap_fd file: {e.strerror or e}") from None
