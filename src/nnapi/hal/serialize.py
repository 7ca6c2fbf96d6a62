"""A compact, versioned binary form of `Model` for cache files and hashing (struct-based, no pickle).

Loading runs no code, checks every count against the bytes left before allocating, and raises
only `NnError(INVALID_ARGUMENT)`. Pools of kind `pointer` (in-process buffers) cannot be
serialized; shared-memory pools keep their handle's name, fds, ints and size.

Layout, little-endian:
    magic b"NNMODEL\\0", u16 version, u16 flags (bit 0: relax float32 to float16)
    u32 subgraph count (main first), then each subgraph:
        u32 n, n operands:   u32 type, u8 lifetime, u32 rank, rank*u32 dims, u32 consumers,
                             f64 scale, i64 zero point, u64 pool index, u64 offset, u64 length,
                             u8 has per-channel params [u32 channel dim, u32 n, n*f64 scales]
        u32 n, n operations: u32 type, u32 n, n*u32 inputs, u32 n, n*u32 outputs
        u32 n, n*u32 input indexes; u32 n, n*u32 output indexes
    u64 n, n bytes of operand values
    u32 pool count, then each pool: u8 kind (0 handle: u16 n + UTF-8 name, u32 n + n*i64 fds,
                                     u32 n + n*i64 ints, u64 size; 1 token: u64 token)
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from .enums import ErrorStatus, OperandLifeTime, OperandType, OperationType
from .errors import NnError
from .types import (DataLocation, MemoryHandle, MemoryPool, Model, Operand, Operation, Subgraph,
                    SymmPerChannelQuantParams)

MAGIC = b"NNMODEL\0"
VERSION = 1
_FLAG_RELAXED = 1
_POOL_HANDLE, _POOL_TOKEN = 0, 1
_U8, _U16, _U32, _U64 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_I64, _F64 = struct.Struct("<q"), struct.Struct("<d")
#: Smallest encoded sizes, used to bound counts by the bytes left.
_MIN_OPERAND = 4 + 1 + 4 + 4 + 8 + 8 + 24 + 1
_MIN_OPERATION = 12
_MIN_SUBGRAPH = 16
_MIN_POOL = 1 + 8


def _invalid(message: str) -> NnError:
    return NnError(ErrorStatus.INVALID_ARGUMENT, message)


def model_to_bytes(model: Model) -> bytes:
    """Serialize `model`; NnError(INVALID_ARGUMENT) when a field cannot be encoded (e.g. a pointer pool)."""
    try:
        return _encode(model)
    except (AttributeError, TypeError, ValueError) as e:
        raise _invalid(f"cannot serialize model: {type(e).__name__}: {e}") from None


def _encode(model: Model) -> bytes:
    out: list[bytes] = [MAGIC, _U16.pack(VERSION),
                        _U16.pack(_FLAG_RELAXED if model.relax_computation_float32_to_float16 else 0)]
    subgraphs = [model.main, *model.referenced]
    _put(out, _U32, len(subgraphs), "subgraph count")
    for s, subgraph in enumerate(subgraphs):
        _write_subgraph(out, subgraph, f"subgraph {s}")
    values = bytes(model.operand_values)
    _put(out, _U64, len(values), "operand_values length")
    out.append(values)
    _put(out, _U32, len(model.pools), "pool count")
    for p, pool in enumerate(model.pools):
        _write_pool(out, pool, f"pool {p}")
    return b"".join(out)


def model_from_bytes(data: bytes) -> Model:
    """Rebuild a Model from `model_to_bytes` output; malformed data raises NnError(INVALID_ARGUMENT)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _invalid(f"serialized model must be bytes, got {type(data).__name__}")
    r = _Reader(memoryview(data).cast("B"))
    if r.take(len(MAGIC)) != MAGIC:
        raise _invalid("serialized model: bad magic")
    version = r.read(_U16)
    if version != VERSION:
        raise _invalid(f"serialized model: unsupported version {version} (expected {VERSION})")
    flags = r.read(_U16)
    if flags & ~_FLAG_RELAXED:
        raise _invalid(f"serialized model: unknown flags {flags:#x}")
    count = r.count("subgraph", _MIN_SUBGRAPH)
    if count == 0:
        raise _invalid("serialized model: no main subgraph")
    subgraphs = [_read_subgraph(r, f"subgraph {s}") for s in range(count)]
    length = r.read(_U64)
    if length > r.left:
        raise _invalid(f"serialized model: operand_values length {length} exceeds the {r.left} bytes left")
    values = bytes(r.take(length))
    pools = [_read_pool(r, f"pool {p}") for p in range(r.count("pool", _MIN_POOL))]
    if r.left:
        raise _invalid(f"serialized model: {r.left} unexpected trailing bytes")
    return Model(subgraphs[0], subgraphs[1:], values, pools, bool(flags & _FLAG_RELAXED))


# --- writing -----------------------------------------------------------------------------------
def _put(out: list[bytes], fmt: struct.Struct, value: Any, what: str) -> None:
    try:
        out.append(fmt.pack(value))
    except (struct.error, TypeError, OverflowError):
        raise _invalid(f"cannot serialize model: {what} {value!r} does not fit {fmt.format}") from None


def _put_list(out: list[bytes], fmt: struct.Struct, values: Any, what: str) -> None:
    values = list(values)
    _put(out, _U32, len(values), f"{what} count")
    for v in values:
        _put(out, fmt, v, what)


_OPERAND_HEAD = struct.Struct("<IBI")        # type, lifetime, rank
_OPERAND_TAIL = struct.Struct("<IdqQQQB")    # consumers, scale, zero point, pool, offset, length, cq flag
_DIMS: dict[int, struct.Struct] = {}


def _dims_struct(rank: int) -> struct.Struct:
    fmt = _DIMS.get(rank)
    if fmt is None:
        fmt = _DIMS[rank] = struct.Struct(f"<{rank}I")
    return fmt


def _write_operand_fast(out: list[bytes], o: Operand) -> bool:
    """One operand in three pack calls; False (nothing written) when a field needs the checked path."""
    if o.channel_quant is not None:
        return False
    loc = o.location
    dims = o.dimensions
    try:
        out.append(_OPERAND_HEAD.pack(o.type, o.lifetime, len(dims)) + _dims_struct(len(dims)).pack(*dims)
                   + _OPERAND_TAIL.pack(o.number_of_consumers, o.scale, o.zero_point, loc.pool_index, loc.offset,
                                        loc.length, 0))
    except (struct.error, TypeError, OverflowError, AttributeError):
        return False
    return True


def _write_subgraph(out: list[bytes], subgraph: Subgraph, label: str) -> None:
    _put(out, _U32, len(subgraph.operands), f"{label} operand count")
    for j, o in enumerate(subgraph.operands):
        if _write_operand_fast(out, o):
            continue
        what = f"{label} operand {j}"
        _put(out, _U32, o.type, f"{what} type")
        _put(out, _U8, o.lifetime, f"{what} lifetime")
        _put_list(out, _U32, o.dimensions, f"{what} dimension")
        _put(out, _U32, o.number_of_consumers, f"{what} number_of_consumers")
        _put(out, _F64, o.scale, f"{what} scale")
        _put(out, _I64, o.zero_point, f"{what} zero_point")
        for field in ("pool_index", "offset", "length"):
            _put(out, _U64, getattr(o.location, field), f"{what} location {field}")
        cq = o.channel_quant
        _put(out, _U8, 0 if cq is None else 1, f"{what} channel_quant flag")
        if cq is not None:
            _put(out, _U32, cq.channel_dim, f"{what} channel_dim")
            _put_list(out, _F64, cq.scales, f"{what} channel scale")
    _put(out, _U32, len(subgraph.operations), f"{label} operation count")
    for i, op in enumerate(subgraph.operations):
        _put(out, _U32, op.type, f"{label} operation {i} type")
        _put_list(out, _U32, op.inputs, f"{label} operation {i} input")
        _put_list(out, _U32, op.outputs, f"{label} operation {i} output")
    _put_list(out, _U32, subgraph.input_indexes, f"{label} input index")
    _put_list(out, _U32, subgraph.output_indexes, f"{label} output index")


def _write_pool(out: list[bytes], pool: MemoryPool, label: str) -> None:
    if pool.pointer is not None or (pool.handle is None) == (pool.token is None):
        raise _invalid(f"cannot serialize model: {label} must be exactly one shared-memory handle or token "
                       f"(pointer pools are in-process only)")
    if pool.token is not None:
        _put(out, _U8, _POOL_TOKEN, label)
        _put(out, _U64, pool.token, f"{label} token")
        return
    h = pool.handle
    try:
        name = h.name.encode("utf-8")
    except (AttributeError, UnicodeEncodeError):
        raise _invalid(f"cannot serialize model: {label} has an invalid name {h.name!r}") from None
    _put(out, _U8, _POOL_HANDLE, label)
    _put(out, _U16, len(name), f"{label} name length")
    out.append(name)
    _put_list(out, _I64, h.fds, f"{label} fd")
    _put_list(out, _I64, h.ints, f"{label} int")
    _put(out, _U64, h.size, f"{label} size")


# --- reading -----------------------------------------------------------------------------------
class _Reader:
    """Bounds-checked cursor over the serialized bytes."""

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> memoryview:
        if n > self.left:
            raise _invalid(f"serialized model truncated at byte {self.pos}: need {n} bytes, {self.left} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def read(self, fmt: struct.Struct) -> Any:
        return fmt.unpack(self.take(fmt.size))[0]

    def read_struct(self, fmt: struct.Struct) -> tuple:
        """Every field of one struct."""
        if fmt.size > self.left:
            raise _invalid(f"serialized model truncated at byte {self.pos}: need {fmt.size} bytes, {self.left} left")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def count(self, what: str, item_size: int) -> int:
        """A u32 item count, rejected when that many items cannot fit in the bytes left."""
        n = self.read(_U32)
        if n * item_size > self.left:
            raise _invalid(f"serialized model: {what} count {n} exceeds the {self.left} bytes left")
        return n

    def values(self, fmt: struct.Struct, what: str) -> tuple:
        n = self.count(what, fmt.size)
        chunk = self.take(n * fmt.size)
        return tuple(v for (v,) in fmt.iter_unpack(chunk))


def _enum(cls: Callable[[int], Any], value: int, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise _invalid(f"serialized model: {what} has unknown code {value}") from None


def _read_subgraph(r: _Reader, label: str) -> Subgraph:
    operands = []
    for j in range(r.count(f"{label} operand", _MIN_OPERAND)):
        what = f"{label} operand {j}"
        code, life, rank = r.read_struct(_OPERAND_HEAD)
        op_type = _enum(OperandType, code, f"{what} type")
        lifetime = _enum(OperandLifeTime, life, f"{what} lifetime")
        if rank * 4 > r.left:
            raise _invalid(f"serialized model: {what} dimension count {rank} exceeds the {r.left} bytes left")
        dims = r.read_struct(_dims_struct(rank))
        consumers, scale, zero_point, pool, offset, length, flag = r.read_struct(_OPERAND_TAIL)
        location = DataLocation(pool, offset, length)
        if flag > 1:
            raise _invalid(f"serialized model: {what} has a bad channel_quant flag {flag}")
        cq = None
        if flag:
            channel_dim = r.read(_U32)
            cq = SymmPerChannelQuantParams(r.values(_F64, f"{what} channel scale"), channel_dim)
        operands.append(Operand(op_type, dims, consumers, scale, zero_point, lifetime, location, cq))
    operations = []
    for i in range(r.count(f"{label} operation", _MIN_OPERATION)):
        op_type = _enum(OperationType, r.read(_U32), f"{label} operation {i} type")
        inputs = r.values(_U32, f"{label} operation {i} input")
        outputs = r.values(_U32, f"{label} operation {i} output")
        operations.append(Operation(op_type, inputs, outputs))
    inputs = r.values(_U32, f"{label} input index")
    outputs = r.values(_U32, f"{label} output index")
    return Subgraph(operands, operations, inputs, outputs)


def _read_pool(r: _Reader, label: str) -> MemoryPool:
    kind = r.read(_U8)
    if kind == _POOL_TOKEN:
        return MemoryPool(token=r.read(_U64))
    if kind != _POOL_HANDLE:
        raise _invalid(f"serialized model: {label} has unknown kind {kind}")
    try:
        name = bytes(r.take(r.read(_U16))).decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(f"serialized model: {label} name is not UTF-8") from None
    fds = r.values(_I64, f"{label} fd")
    ints = r.values(_I64, f"{label} int")
    return MemoryPool(handle=MemoryHandle(name, fds, ints, r.read(_U64)))
