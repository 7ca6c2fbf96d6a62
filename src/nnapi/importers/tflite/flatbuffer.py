"""Bounds-checked reading of a flatbuffer: the one layer through which the importer reads a `.tflite` file.

A flatbuffer is offsets all the way down: a table starts with a signed offset to its vtable, the
vtable lists where each field lies in the table, and a field that is a string, a vector or another
table holds an unsigned offset to it. A corrupt or hostile file can make any of these point
anywhere. `Table` checks every one before it is followed: the vtable and the table's inline size
lie in the file, a field starts inside its table, an offset lands in the file, a vector's length
times its element size fits in what follows it. A violation is `BadModel` (an `NnError`,
BAD_DATA) naming the table and field, e.g. "subgraph 0 tensor 12: field 'shape' is a vector of
4294967295 int32 at offset 4096, past the end of the file (1200 bytes)".

`Table` is also a `flatbuffers.table.Table`, so the generated option classes of the `tflite`
package (Conv2DOptions, ...) read their scalar and vector fields through these same checks when
their `_tab` is a `Table` (see `options`).
"""
from __future__ import annotations

import struct

import flatbuffers
import numpy as np

from ...hal import NnError, ResultCode

_U16, _I32, _U32 = struct.Struct("<H"), struct.Struct("<i"), struct.Struct("<I")


class BadModel(NnError):
    """The file is not a well-formed model: a flatbuffer or schema violation, BAD_DATA naming the
    table, tensor, operator or field at fault. Raised by every validating layer of the importer;
    `located` once the message names the file and where in it (outer layers then pass it on)."""

    def __init__(self, message: str, located: bool = False) -> None:
        super().__init__(ResultCode.BAD_DATA, message)
        self.located = located


class Table(flatbuffers.table.Table):
    """One table of the buffer, checked on creation (vtable and inline size) and on every field read.

    `what` names the table in messages ("subgraph 0 operator 3"); fields are addressed by their
    schema index (field i has vtable slot 4 + 2 i), with a name for messages.
    """

    __slots__ = ("what", "_vtable", "_vtable_size", "_size")

    def __init__(self, buf, pos: int, what: str) -> None:
        self.Bytes = buf
        self.Pos = pos
        self.what = what
        n = len(buf)
        if not 0 <= pos <= n - 4:
            raise self._error(f"the table offset {pos} is outside the file ({n} bytes)")
        vtable = pos - _I32.unpack_from(buf, pos)[0]
        if not 0 <= vtable <= n - 4:
            raise self._error(f"the vtable offset {vtable} is outside the file ({n} bytes)")
        vtable_size, size = _U16.unpack_from(buf, vtable)[0], _U16.unpack_from(buf, vtable + 2)[0]
        if vtable_size < 4 or vtable_size % 2 or size < 4:
            raise self._error(f"the vtable at offset {vtable} is invalid (vtable size {vtable_size}, "
                              f"table size {size})")
        if vtable + vtable_size > n:
            raise self._error(f"the vtable at offset {vtable} ({vtable_size} bytes) runs past the end of the file "
                              f"({n} bytes)")
        if pos + size > n:
            raise self._error(f"the table at offset {pos} ({size} bytes) runs past the end of the file ({n} bytes)")
        self._vtable, self._vtable_size, self._size = vtable, vtable_size, size

    def _error(self, message: str) -> BadModel:
        return BadModel(f"{self.what}: {message}")

    # --- the flatbuffers.table.Table interface, checked (used by the generated classes) ------------
    def Offset(self, vtableOffset: int, name: str | None = None) -> int:
        """Where the field of vtable slot `vtableOffset` starts in the table (0: absent), checked to be
        inside the table."""
        if vtableOffset + 2 > self._vtable_size:
            return 0
        off = _U16.unpack_from(self.Bytes, self._vtable + vtableOffset)[0]
        if off and off + 1 > self._size:
            label = f"'{name}'" if name else str((vtableOffset - 4) // 2)
            raise self._error(f"field {label} lies outside its table (offset {off}, table size {self._size})")
        return off

    def Get(self, flags, off: int):
        width = flags.bytewidth
        if not 0 <= off <= len(self.Bytes) - width:
            raise self._error(f"a {width}-byte value at offset {off} lies outside the file")
        return flags.py_type(flags.packer_type.unpack_from(self.Bytes, off)[0])

    def Indirect(self, off: int) -> int:
        return self._follow(off, "offset")

    def String(self, off: int) -> bytes:
        start, length = self._vector_at(off - self.Pos, 1, "string")
        return bytes(self.Bytes[start:start + length])

    def VectorLen(self, off: int) -> int:
        return self._vector_at(off, 1, "vector", check_size=False)[1]

    def Vector(self, off: int) -> int:
        return self._vector_at(off, 1, "vector", check_size=False)[0]

    def GetVectorAsNumpy(self, flags, off: int) -> np.ndarray:
        dtype = np.dtype(flatbuffers.number_types.to_numpy_type(flags)).newbyteorder("<")
        start, length = self._vector_at(off, dtype.itemsize, "vector")
        return np.frombuffer(self.Bytes, dtype, length, start)

    def Union(self, t2, off: int) -> None:  # the generated code's unchecked union access is not used
        raise self._error("unchecked union access")

    # --- reading fields by schema index -------------------------------------------------------------
    def _slot(self, field: int, name: str) -> int:
        """Absolute position of field `field` (checked to start inside the table), 0 when absent."""
        off = self.Offset(4 + 2 * field, name)
        return self.Pos + off if off else 0

    def _follow(self, at: int, name: str) -> int:
        """The position an unsigned offset stored at `at` points to, checked to lie in the file."""
        n = len(self.Bytes)
        if not 0 <= at <= n - 4:
            raise self._error(f"field '{name}': its offset at {at} lies outside the file")
        target = at + _U32.unpack_from(self.Bytes, at)[0]
        if target > n - 4:
            raise self._error(f"field '{name}' points to offset {target}, past the end of the file ({n} bytes)")
        return target

    def _vector_at(self, off: int, itemsize: int, name: str, check_size: bool = True) -> tuple[int, int]:
        """(start, length) of the vector whose offset is stored at `off` relative to the table."""
        at = self._follow(self.Pos + off, name)
        length = _U32.unpack_from(self.Bytes, at)[0]
        start = at + 4
        if check_size and start + length * itemsize > len(self.Bytes):
            raise self._error(f"field '{name}' is a vector of {length} items of {itemsize} bytes at offset "
                              f"{start}, past the end of the file ({len(self.Bytes)} bytes)")
        return start, length

    def scalar(self, field: int, name: str, fmt: struct.Struct, default):
        """A scalar field (`fmt` a little-endian struct), or `default` when absent."""
        at = self._slot(field, name)
        if not at:
            return default
        if at + fmt.size > self.Pos + self._size:
            raise self._error(f"field '{name}' ({fmt.size} bytes at offset {at}) overruns its table")
        return fmt.unpack_from(self.Bytes, at)[0]

    def vector(self, field: int, name: str, dtype) -> np.ndarray | None:
        """A vector of scalars as a read-only numpy view of the file, None when absent."""
        at = self._slot(field, name)
        if not at:
            return None
        dtype = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)
        start, length = self._vector_at(at - self.Pos, dtype.itemsize, name)
        return np.frombuffer(self.Bytes, dtype, length, start)

    def vector_region(self, field: int, name: str) -> tuple[int, int] | None:
        """(offset, length) in the file of a [ubyte] vector field, None when absent."""
        at = self._slot(field, name)
        if not at:
            return None
        return self._vector_at(at - self.Pos, 1, name)

    def string(self, field: int, name: str) -> str | None:
        region = self.vector_region(field, name)
        if region is None:
            return None
        return bytes(self.Bytes[region[0]:region[0] + region[1]]).decode("utf-8", "replace")

    def table(self, field: int, name: str, what: str | None = None) -> Table | None:
        """The table a field points to, None when absent."""
        at = self._slot(field, name)
        if not at:
            return None
        return Table(self.Bytes, self._follow(at, name), what or f"{self.what} {name}")

    def tables(self, field: int, name: str, what: str) -> list[Table]:
        """A vector of tables; `what` is formatted with the index ("tensor {}")."""
        at = self._slot(field, name)
        if not at:
            return []
        start, length = self._vector_at(at - self.Pos, 4, name)
        return [Table(self.Bytes, self._follow(start + 4 * k, f"{name}[{k}]"), what.format(k))
                for k in range(length)]


#: An empty table (vtable of 4 bytes, inline size 4): every field reads as its schema default.
_EMPTY = bytes([4, 0, 4, 0, 4, 0, 0, 0])


def options(cls: type, table: Table | None, what: str):
    """An instance of a generated `tflite` option class reading `table` through the checks above;
    when the file has no options table, every field reads as its schema default."""
    obj = cls()
    obj._tab = table if table is not None else Table(_EMPTY, 4, what)
    return obj
