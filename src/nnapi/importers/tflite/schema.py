"""Reading a `.tflite` file into plain, validated records (`FlatModel`), through the checked flatbuffer layer.

The file is memory-mapped read-only and read in place through `flatbuffer.Table`, which checks
every offset, vtable and vector before it is followed. On top of that, this module checks what the
TFLite schema promises and the importer relies on: indexes (tensors, buffers, operator codes,
subgraph inputs and outputs), enums (tensor types, option types, sparse index types), shapes
(rank, dimensions, sizes NNAPI can address), quantization arrays (matching lengths, a valid
channel dimension, finite scales), buffers (inside the file, as many bytes as the shape needs) and
sparsity metadata, signatures (SignatureDefs: a subgraph in range, names unique, each naming an
input or output of its subgraph). Whatever is wrong is `NnError(BAD_DATA)` naming the file, and the
subgraph, tensor, operator, signature or field at fault. Options tables are read on demand
(`FlatOperator.options`), checked against the operator they belong to.
"""
from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field

import numpy as np

from .flatbuffer import BadModel, Table, options as _options
from .generated import generated  # the maintained TFLite schema bindings (flatbuffers): enums and options

BUILTIN_NAMES: dict[int, str] = {v: k for k, v in vars(generated("BuiltinOperator")).items()
                                 if not k.startswith("_") and isinstance(v, int)}
TENSOR_TYPE_NAMES: dict[int, str] = {v: k for k, v in vars(generated("TensorType")).items()
                                     if not k.startswith("_") and isinstance(v, int)}
OPTION_CODES: dict[str, int] = {k: v for k, v in vars(generated("BuiltinOptions")).items()
                                if not k.startswith("_") and isinstance(v, int)}
OPTION_NAMES: dict[int, str] = {v: k for k, v in OPTION_CODES.items()}

#: numpy dtypes of TFLite tensor types.
NUMPY_TYPES: dict[str, np.dtype] = {
    "FLOAT32": np.dtype("<f4"), "FLOAT16": np.dtype("<f2"), "FLOAT64": np.dtype("<f8"),
    "INT32": np.dtype("<i4"), "UINT32": np.dtype("<u4"), "INT64": np.dtype("<i8"), "UINT64": np.dtype("<u8"),
    "INT16": np.dtype("<i2"), "UINT16": np.dtype("<u2"), "INT8": np.dtype("i1"), "UINT8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
#: Ranks and sizes beyond these are refused before anything is allocated: NNAPI describes a
#: tensor's size in 32 bits, and no TFLite kernel handles more than 6 dimensions.
MAX_RANK = 16
MAX_TENSOR_BYTES = 2**32 - 1

_U8, _I8, _U16 = struct.Struct("<B"), struct.Struct("<b"), struct.Struct("<H")
_I32, _U32, _U64 = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<Q")
_BOOL = _U8
_DENSE, _SPARSE_CSR = generated("DimensionType").DENSE, generated("DimensionType").SPARSE_CSR
_INDEX = generated("SparseIndexVector")
_INDEX_TYPES = {_INDEX.Int32Vector: np.int32, _INDEX.Uint16Vector: np.uint16, _INDEX.Uint8Vector: np.uint8}


def _in(subgraph: int) -> str:
    """How messages place a tensor or operator: "subgraph 2 " outside the main subgraph, nothing in it."""
    return f"subgraph {subgraph} " if subgraph else ""


def _bad(message: str) -> BadModel:
    return BadModel(message)


def _quoted(text: str, limit: int = 40) -> str:
    """A name read from the file, for messages: quoted, unprintable characters as '?', at most `limit`."""
    shown = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return f"'{shown}'" + ("..." if len(text) > limit else "")


@dataclass
class Quant:
    """A tensor's quantization: per-tensor (one scale) or per-channel along `axis`."""

    scales: np.ndarray
    zero_points: np.ndarray
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scales.size > 1

    @property
    def scale(self) -> float:
        return float(self.scales[0])

    @property
    def zero_point(self) -> int:
        return int(self.zero_points[0]) if self.zero_points.size else 0


@dataclass
class SparseLevel:
    """One level of a sparse tensor's traversal: DENSE (`dense_size` indices) or SPARSE_CSR."""

    format: int
    dense_size: int = 0
    segments: np.ndarray | None = None
    indices: np.ndarray | None = None


@dataclass
class Sparsity:
    """TFLite SparsityParameters: the traversal order, the blocked dimensions, one level per entry."""

    traversal_order: list[int]
    block_map: list[int]
    levels: list[SparseLevel]


@dataclass
class FlatTensor:
    index: int
    name: str
    type: str                       # TFLite TensorType name: FLOAT32, INT8, ...
    shape: tuple[int, ...]
    buffer: int
    quant: Quant | None
    is_variable: bool
    sparsity: Sparsity | None
    #: (offset, length) of the constant data in the file, None when the tensor has no data.
    region: tuple[int, int] | None = None

    @property
    def dtype(self) -> np.dtype | None:
        return NUMPY_TYPES.get(self.type)

    @property
    def count(self) -> int:
        """Number of elements (1 for a scalar; unknown dimensions count as 0)."""
        return math.prod(max(d, 0) for d in self.shape)

    def describe(self) -> str:
        shape = "[" + ",".join(str(d) for d in self.shape) + "]"
        return f"{self.index} '{self.name}' {self.type}{shape}" + (" const" if self.region else "")


@dataclass
class FlatOperator:
    index: int
    name: str                       # builtin name (CONV_2D ...) or "CUSTOM"
    custom_code: str | None
    version: int
    inputs: tuple[int, ...]         # tensor indexes, -1 for an absent optional input
    outputs: tuple[int, ...]
    intermediates: tuple[int, ...] = ()
    #: The builtin options' type code and table (read through `options`), the custom options' region.
    options_type: int = 0
    options_table: Table | None = None
    custom_options: tuple[int, int] | None = None
    subgraph: int = 0

    @property
    def label(self) -> str:
        return f"CUSTOM:{self.custom_code}" if self.name == "CUSTOM" else self.name

    @property
    def where(self) -> str:
        return f"{_in(self.subgraph)}operator {self.index} {self.label}"

    def options(self, name: str):
        """The builtin options as the generated `tflite.<name>` class (e.g. "Conv2DOptions"), read
        through checked tables; schema defaults when the file has none; BAD_DATA when the file holds
        options of another type than the operator takes."""
        if self.options_type not in (0, OPTION_CODES[name]):
            raise _bad(f"builtin options are {OPTION_NAMES[self.options_type]}, the operator takes {name}")
        table = self.options_table if self.options_type else None
        if table is not None:  # checked when the file was read; named here as the operator's options
            table = Table(table.Bytes, table.Pos, name)
        return _options(generated(name), table, name)


@dataclass
class FlatSubgraph:
    index: int
    name: str
    tensors: list[FlatTensor]
    operators: list[FlatOperator]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass
class FlatSignature:
    """A SignatureDef: its key (e.g. "serving_default"), the subgraph it runs, and the names it gives
    that subgraph's inputs and outputs, as (name, tensor index) pairs in the file's order."""

    index: int
    key: str
    subgraph: int
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[tuple[str, int], ...]


@dataclass
class FlatModel:
    """A parsed `.tflite` file over a read-only memory mapping of it."""

    path: str
    size: int
    mapping: mmap.mmap
    subgraphs: list[FlatSubgraph] = field(default_factory=list)
    version: int = 0
    description: str = ""
    #: The file's SignatureDefs (Model field 7), checked against the subgraphs; [] when it has none.
    signatures: list[FlatSignature] = field(default_factory=list)
    #: The open file descriptor (read-only) the mapping came from; `close_fd` closes it.
    fd: int = -1

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def signature(self, subgraph: int = 0) -> FlatSignature | None:
        """The signature of `subgraph` (the main one by default): "serving_default" when several name
        it, else the first; None when none does."""
        found = [s for s in self.signatures if s.subgraph == subgraph]
        return next((s for s in found if s.key == "serving_default"), found[0] if found else None)

    def data(self, tensor: FlatTensor) -> memoryview | None:
        """The raw bytes of a constant tensor, in place in the mapping."""
        if tensor.region is None:
            return None
        offset, length = tensor.region
        return memoryview(self.mapping)[offset:offset + length]

    def bytes_at(self, region: tuple[int, int]) -> bytes:
        return bytes(self.mapping[region[0]:region[0] + region[1]])

    def array(self, tensor: FlatTensor) -> np.ndarray | None:
        """A constant tensor as a read-only numpy view of the file (dense tensors only; the parser
        checked that the region holds exactly the shape's values)."""
        raw = self.data(tensor)
        if raw is None or tensor.dtype is None:
            return None
        arr = np.frombuffer(raw, dtype=tensor.dtype)
        return arr if tensor.sparsity is not None else arr.reshape(tensor.shape)


# --- opening the file ---------------------------------------------------------------------------------
def load_flat_model(path: str | os.PathLike) -> FlatModel:
    """Map and parse a `.tflite` file; BAD_DATA naming the file when it cannot be read or is not a
    well-formed TFLite model. The returned model keeps the file open (`fd`) until `close_fd`."""
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise _bad(f"cannot open {path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _bad(f"cannot read {path}: it is a directory, not a .tflite file")
        if not stat.S_ISREG(info.st_mode):
            raise _bad(f"cannot read {path}: not a regular file")
        size = info.st_size
        if size < 8:
            raise _bad(f"{path} is not a TFLite model ({size} bytes)")
        try:
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError) as e:
            raise _bad(f"cannot map {path}: {e}") from None
        if mapping[4:8] != b"TFL3":
            raise _bad(f"{path} is not a TFLite model (no TFL3 file identifier)")
        try:
            flat = _Parser(path, size, mapping).model()
        except BadModel as e:
            raise BadModel(f"{os.path.basename(path)}: {e.message}", located=True) from None
    except BaseException:
        os.close(fd)
        raise
    flat.fd = fd
    return flat


# --- the parser -----------------------------------------------------------------------------------------
class _Parser:
    """Reads the records of one file; every method validates what it returns."""

    def __init__(self, path: str, size: int, mapping: mmap.mmap) -> None:
        self.path, self.size, self.mapping = path, size, mapping

    def model(self) -> FlatModel:
        root = Table(self.mapping, _U32.unpack_from(self.mapping, 0)[0], "model")
        flat = FlatModel(self.path, self.size, self.mapping, version=root.scalar(0, "version", _U32, 0),
                         description=root.string(3, "description") or "")
        regions = [self.buffer(b) for b in root.tables(4, "buffers", "buffer {}")]
        codes = [self.operator_code(c) for c in root.tables(1, "operator_codes", "operator code {}")]
        subgraphs = root.tables(2, "subgraphs", "subgraph {}")
        for s, g in enumerate(subgraphs):
            flat.subgraphs.append(self.subgraph(s, g, regions, codes))
        flat.signatures = [self.signature(k, sd, flat.subgraphs)
                           for k, sd in enumerate(root.tables(7, "signature_defs", "signature {}"))]
        return flat

    def signature(self, k: int, sd: Table, subgraphs: list[FlatSubgraph]) -> FlatSignature:
        """One SignatureDef: its subgraph in range, and in each of its input and output maps every name
        unique and naming a distinct input (output) of that subgraph."""
        key = sd.string(2, "signature_key") or ""
        what = f"signature {k} {_quoted(key)}"
        s = sd.scalar(4, "subgraph_index", _U32, 0)
        if s >= len(subgraphs):
            raise _bad(f"{what}: subgraph_index {s} out of range (the model has {len(subgraphs)} subgraphs)")
        sub = subgraphs[s]
        maps = []
        for field_index, io, allowed in ((0, "input", sub.inputs), (1, "output", sub.outputs)):
            pairs: list[tuple[str, int]] = []
            template = what.replace("{", "{{").replace("}", "}}") + f" {io} {{}}"
            for j, tm in enumerate(sd.tables(field_index, f"{io}s", template)):
                name = tm.string(0, "name") or ""
                t = tm.scalar(1, "tensor_index", _U32, 0)
                if t not in allowed:
                    raise _bad(f"{what}: {io} {j} {_quoted(name)} is tensor {t}, not an {io} of subgraph {s} "
                               f"(its {io}s are tensors {list(allowed)})")
                if not name:
                    raise _bad(f"{what}: {io} {j} (tensor {t}) has no name")
                for other, (n, u) in enumerate(pairs):
                    if n == name or u == t:
                        raise _bad(f"{what}: {io}s {other} and {j} both name " +
                                   (_quoted(name) if n == name else f"tensor {t}"))
                pairs.append((name, t))
            maps.append(tuple(pairs))
        return FlatSignature(k, key, s, maps[0], maps[1])

    def buffer(self, buf: Table) -> tuple[int, int] | None:
        region = buf.vector_region(0, "data")
        if region is not None and region[1] == 0:
            region = None
        offset, size = buf.scalar(1, "offset", _U64, 0), buf.scalar(2, "size", _U64, 0)
        if region is None and offset > 1:  # data stored after the flatbuffer (models > 2 GB)
            if offset + size > self.size:
                raise _bad(f"{buf.what}: offset {offset} and size {size} lie outside the file ({self.size} bytes)")
            region = (offset, size) if size else None
        return region

    def operator_code(self, oc: Table) -> tuple[str, str | None, int]:
        code = max(oc.scalar(0, "deprecated_builtin_code", _I8, 0), oc.scalar(3, "builtin_code", _I32, 0))
        custom = oc.string(1, "custom_code")
        return BUILTIN_NAMES.get(code, f"BUILTIN_{code}"), custom, oc.scalar(2, "version", _I32, 1)

    def subgraph(self, s: int, g: Table, regions: list, codes: list) -> FlatSubgraph:
        tensors = [self.tensor(s, i, t, regions) for i, t in enumerate(g.tables(0, "tensors", f"{_in(s)}tensor {{}}"))]
        n = len(tensors)
        inputs = self.indexes(g, 1, "inputs", n, f"subgraph {s}")
        outputs = self.indexes(g, 2, "outputs", n, f"subgraph {s}")
        operators = []
        for k, op in enumerate(g.tables(3, "operators", f"{_in(s)}operator {{}}")):
            operators.append(self.operator(s, k, op, n, codes))
        return FlatSubgraph(s, g.string(4, "name") or "", tensors, operators, inputs, outputs)

    def indexes(self, table: Table, field: int, name: str, n: int, what: str,
                optional: bool = False) -> tuple[int, ...]:
        """A vector of tensor indexes, each in [0, n) (or -1 for an omitted optional one)."""
        v = table.vector(field, name, np.int32)
        if v is None or not v.size:
            return ()
        low = -1 if optional else 0
        bad = (v < low) | (v >= n)
        if bad.any():
            k = int(np.argmax(bad))
            raise _bad(f"{what}: {name}[{k}] is tensor {int(v[k])}, outside the subgraph's {n} tensors")
        return tuple(int(i) for i in v)

    def tensor(self, s: int, i: int, t: Table, regions: list) -> FlatTensor:
        name = t.string(3, "name") or ""
        what = f"{_in(s)}tensor {i} '{name}'"
        type_code = t.scalar(1, "type", _I8, 0)
        if type_code not in TENSOR_TYPE_NAMES:
            raise _bad(f"{what}: type {type_code} is not a TFLite TensorType")
        kind = TENSOR_TYPE_NAMES[type_code]
        shape_v = t.vector(0, "shape", np.int32)
        shape = tuple(int(d) for d in shape_v) if shape_v is not None else ()
        if len(shape) > MAX_RANK:
            raise _bad(f"{what}: rank {len(shape)} (at most {MAX_RANK})")
        if any(d < -1 for d in shape):
            raise _bad(f"{what}: shape {list(shape)} has a negative dimension")
        dtype = NUMPY_TYPES.get(kind)
        count = math.prod(max(d, 0) for d in shape)
        if count * (dtype.itemsize if dtype is not None else 1) > MAX_TENSOR_BYTES:
            raise _bad(f"{what}: shape {list(shape)} needs {count} elements, more than NNAPI can address")
        buffer = t.scalar(2, "buffer", _U32, 0)
        if buffer >= max(len(regions), 1):
            raise _bad(f"{what}: buffer {buffer} out of range (the model has {len(regions)} buffers)")
        region = regions[buffer] if buffer < len(regions) else None
        quant = self.quant(t.table(4, "quantization"), shape, what)
        sparse_t = t.table(6, "sparsity")
        sparsity = self.sparsity(sparse_t) if sparse_t is not None else None
        if region is not None and sparsity is None and dtype is not None and region[1] != count * dtype.itemsize:
            raise _bad(f"{what}: buffer {buffer} holds {region[1]} bytes, the shape {list(shape)} of {kind} "
                       f"needs {count * dtype.itemsize}")
        if sparsity is not None and region is not None and dtype is not None and region[1] % dtype.itemsize:
            raise _bad(f"{what}: buffer {buffer} holds {region[1]} bytes, not a whole number of {kind} values")
        return FlatTensor(i, name, kind, shape, buffer, quant, bool(t.scalar(5, "is_variable", _BOOL, 0)),
                          sparsity, region)

    def quant(self, q: Table | None, shape: tuple[int, ...], what: str) -> Quant | None:
        if q is None:
            return None
        scales = q.vector(2, "scale", np.float32)
        if scales is None or scales.size == 0:
            return None
        zps = q.vector(3, "zero_point", np.int64)
        axis = q.scalar(6, "quantized_dimension", _I32, 0)
        if not np.isfinite(scales).all():
            raise _bad(f"{what}: quantization scales are not all finite")
        if zps is None or zps.size == 0:
            zps = np.zeros(scales.size, np.int64)
        if zps.size != scales.size:
            raise _bad(f"{what}: {scales.size} quantization scales but {zps.size} zero points")
        if scales.size > 1:
            if not 0 <= axis < len(shape):
                raise _bad(f"{what}: quantized_dimension {axis} is not a dimension of shape {list(shape)}")
            if shape[axis] != scales.size:
                raise _bad(f"{what}: {scales.size} per-channel scales for dimension {axis} of size {shape[axis]}")
        return Quant(np.array(scales, np.float32), np.array(zps, np.int64), int(axis))

    def sparsity(self, sp: Table) -> Sparsity:
        order = sp.vector(0, "traversal_order", np.int32)
        block_map = sp.vector(1, "block_map", np.int32)
        levels = []
        for meta in sp.tables(2, "dim_metadata", f"{sp.what} dim_metadata {{}}"):
            fmt = meta.scalar(0, "format", _I8, _DENSE)
            if fmt not in (_DENSE, _SPARSE_CSR):
                raise _bad(f"{meta.what}: format {fmt} is not a DimensionType")
            level = SparseLevel(fmt, meta.scalar(1, "dense_size", _I32, 0))
            if fmt == _SPARSE_CSR:
                level.segments = self.index_vector(meta, 2, "array_segments")
                level.indices = self.index_vector(meta, 4, "array_indices")
            levels.append(level)
        return Sparsity([int(x) for x in order] if order is not None else [],
                        [int(x) for x in block_map] if block_map is not None else [], levels)

    @staticmethod
    def index_vector(meta: Table, field: int, name: str) -> np.ndarray:
        kind = meta.scalar(field, f"{name}_type", _U8, 0)
        if kind not in _INDEX_TYPES:
            raise _bad(f"{meta.what}: {name} has index vector type {kind}, not Int32/Uint16/Uint8Vector")
        table = meta.table(field + 1, name)
        if table is None:
            raise _bad(f"{meta.what}: {name} is missing")
        values = table.vector(0, "values", _INDEX_TYPES[kind])
        return np.zeros(0, np.int64) if values is None else values.astype(np.int64)

    def operator(self, s: int, k: int, op: Table, n: int, codes: list) -> FlatOperator:
        opcode = op.scalar(0, "opcode_index", _U32, 0)
        if opcode >= len(codes):
            raise _bad(f"{_in(s)}operator {k}: opcode index {opcode} out of range "
                       f"(the model has {len(codes)} operator codes)")
        name, custom, version = codes[opcode]
        flat = FlatOperator(k, name, custom, version, (), (), subgraph=s)
        what = flat.where
        flat.inputs = self.indexes(op, 1, "inputs", n, what, optional=True)
        flat.outputs = self.indexes(op, 2, "outputs", n, what)
        flat.intermediates = self.indexes(op, 8, "intermediates", n, what)
        flat.options_type = op.scalar(3, "builtin_options_type", _U8, 0)
        if flat.options_type not in OPTION_NAMES:
            raise _bad(f"{what}: builtin_options_type {flat.options_type} is not a TFLite BuiltinOptions")
        if flat.options_type:
            flat.options_table = op.table(4, "builtin_options", f"{what} {OPTION_NAMES[flat.options_type]}")
        flat.custom_options = op.vector_region(5, "custom_options")
        large_offset, large_size = op.scalar(9, "large_custom_options_offset", _U64, 0), \
            op.scalar(10, "large_custom_options_size", _U64, 0)
        if flat.custom_options is None and large_offset > 1:
            if large_offset + large_size > self.size:
                raise _bad(f"{what}: large custom options at {large_offset} ({large_size} bytes) lie outside "
                           f"the file ({self.size} bytes)")
            flat.custom_options = (large_offset, large_size)
        return flat
