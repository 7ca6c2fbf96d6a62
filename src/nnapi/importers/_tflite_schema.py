"""Reading a `.tflite` flatbuffer through the `tflite` schema package (generated flatbuffers bindings).

The file is memory-mapped read-only and the bindings read that mapping in place: nothing is copied.
`FlatModel` gives what the importer needs: subgraphs, tensors with their quantization, operators
with their builtin name and parsed options, and where each constant buffer lies in the file.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tflite  # the maintained TFLite schema bindings (flatbuffers)

from ..hal import NnError, ResultCode

BUILTIN_NAMES: dict[int, str] = {v: k for k, v in vars(tflite.BuiltinOperator).items()
                                 if not k.startswith("_") and isinstance(v, int)}
TENSOR_TYPE_NAMES: dict[int, str] = {v: k for k, v in vars(tflite.TensorType).items()
                                     if not k.startswith("_") and isinstance(v, int)}
_OPTION_CLASSES: dict[int, type] = {}
for _name, _code in vars(tflite.BuiltinOptions).items():
    if not _name.startswith("_") and isinstance(_code, int) and _name != "NONE" and hasattr(tflite, _name):
        _OPTION_CLASSES[_code] = getattr(tflite, _name)

#: numpy dtypes of TFLite tensor types.
NUMPY_TYPES: dict[str, np.dtype] = {
    "FLOAT32": np.dtype("<f4"), "FLOAT16": np.dtype("<f2"), "FLOAT64": np.dtype("<f8"),
    "INT32": np.dtype("<i4"), "UINT32": np.dtype("<u4"), "INT64": np.dtype("<i8"), "UINT64": np.dtype("<u8"),
    "INT16": np.dtype("<i2"), "UINT16": np.dtype("<u2"), "INT8": np.dtype("i1"), "UINT8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def _bad(message: str) -> NnError:
    return NnError(ResultCode.BAD_DATA, message)


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
class FlatTensor:
    index: int
    name: str
    type: str                       # TFLite TensorType name: FLOAT32, INT8, ...
    shape: tuple[int, ...]
    buffer: int
    quant: Quant | None
    is_variable: bool
    sparsity: Any | None            # tflite.SparsityParameters or None
    #: (offset, length) of the constant data in the file, None when the tensor has no data.
    region: tuple[int, int] | None = None

    @property
    def dtype(self) -> np.dtype | None:
        return NUMPY_TYPES.get(self.type)

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
    options: Any | None             # the parsed builtin options table, or None

    @property
    def label(self) -> str:
        return f"CUSTOM:{self.custom_code}" if self.name == "CUSTOM" else self.name


@dataclass
class FlatSubgraph:
    index: int
    name: str
    tensors: list[FlatTensor]
    operators: list[FlatOperator]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass
class FlatModel:
    """A parsed `.tflite` file over a read-only memory mapping of it."""

    path: str
    size: int
    mapping: mmap.mmap
    subgraphs: list[FlatSubgraph] = field(default_factory=list)
    version: int = 0
    description: str = ""
    #: The open file descriptor (read-only) the mapping came from; `close_fd` closes it.
    fd: int = -1

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def data(self, tensor: FlatTensor) -> memoryview | None:
        """The raw bytes of a constant tensor, in place in the mapping."""
        if tensor.region is None:
            return None
        offset, length = tensor.region
        return memoryview(self.mapping)[offset:offset + length]

    def array(self, tensor: FlatTensor) -> np.ndarray | None:
        """A constant tensor as a read-only numpy view of the file (dense tensors only)."""
        raw = self.data(tensor)
        if raw is None or tensor.dtype is None:
            return None
        arr = np.frombuffer(raw, dtype=tensor.dtype)
        if tensor.sparsity is None:
            count = int(np.prod(tensor.shape, dtype=np.int64)) if tensor.shape else 1
            if arr.size != count:
                raise _bad(f"tensor {tensor.describe()}: buffer holds {arr.size} values, the shape needs {count}")
            arr = arr.reshape(tensor.shape)
        return arr


def _vector_region(table, slot: int) -> tuple[int, int] | None:
    """(absolute offset, length) of a [ubyte] vector field of a flatbuffers table."""
    import flatbuffers
    o = flatbuffers.number_types.UOffsetTFlags.py_type(table.Offset(slot))
    if o == 0:
        return None
    return table.Vector(o), table.VectorLen(o)


def _quant(t) -> Quant | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scales = np.asarray(q.ScaleAsNumpy(), dtype=np.float32).reshape(-1)
    zps = np.asarray(q.ZeroPointAsNumpy(), dtype=np.int64).reshape(-1) if q.ZeroPointLength() else np.zeros(1, np.int64)
    return Quant(scales, zps, int(q.QuantizedDimension()))


def _options(op) -> Any | None:
    code = op.BuiltinOptionsType()
    cls = _OPTION_CLASSES.get(code)
    table = op.BuiltinOptions()
    if cls is None or table is None:
        return None
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return obj


def load_flat_model(path: str | os.PathLike) -> FlatModel:
    """Map and parse a `.tflite` file; BAD_DATA naming the file when it is not a TFLite model.
    The returned model keeps the file open (`fd`) until `close_fd`."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise _bad(f"cannot open {path}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if size < 8:
            raise _bad(f"{path} is not a TFLite model ({size} bytes)")
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        if mapping[4:8] != b"TFL3":
            raise _bad(f"{path} is not a TFLite model (no TFL3 file identifier)")
        try:
            flat = _parse(path, size, mapping)
        except NnError:
            raise
        except Exception as e:  # a truncated or corrupt flatbuffer
            raise _bad(f"{path}: malformed TFLite flatbuffer ({type(e).__name__}: {e})") from None
    except BaseException:
        os.close(fd)
        raise
    flat.fd = fd
    return flat


def _parse(path: str, size: int, mapping: mmap.mmap) -> FlatModel:
    model = tflite.Model.GetRootAs(mapping, 0)
    flat = FlatModel(path, size, mapping, version=model.Version(),
                     description=(model.Description() or b"").decode("utf-8", "replace"))
    regions: list[tuple[int, int] | None] = []
    for b in range(model.BuffersLength()):
        buf = model.Buffers(b)
        region = _vector_region(buf._tab, 4)
        if region is not None and region[1] == 0:
            region = None
        if region is None and buf.Offset() > 1:  # data stored after the flatbuffer (models > 2 GB)
            offset, length = int(buf.Offset()), int(buf.Size())
            if offset + length > size:
                raise _bad(f"{path}: buffer {b} lies outside the file")
            region = (offset, length)
        regions.append(region)
    codes = []
    for c in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(c)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        custom = oc.CustomCode()
        codes.append((BUILTIN_NAMES.get(code, f"BUILTIN_{code}"), custom.decode() if custom else None, oc.Version()))
    for s in range(model.SubgraphsLength()):
        g = model.Subgraphs(s)
        tensors = []
        for i in range(g.TensorsLength()):
            t = g.Tensors(i)
            shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
            buffer = t.Buffer()
            tensors.append(FlatTensor(
                i, (t.Name() or b"").decode("utf-8", "replace"), TENSOR_TYPE_NAMES.get(t.Type(), f"TYPE_{t.Type()}"),
                shape, buffer, _quant(t), bool(t.IsVariable()), t.Sparsity(),
                regions[buffer] if 0 <= buffer < len(regions) else None))
        operators = []
        for k in range(g.OperatorsLength()):
            op = g.Operators(k)
            if not 0 <= op.OpcodeIndex() < len(codes):
                raise _bad(f"{path}: subgraph {s} operator {k} has opcode index {op.OpcodeIndex()} out of range")
            name, custom, version = codes[op.OpcodeIndex()]
            operators.append(FlatOperator(
                k, name, custom, version,
                tuple(int(i) for i in op.InputsAsNumpy()) if op.InputsLength() else (),
                tuple(int(i) for i in op.OutputsAsNumpy()) if op.OutputsLength() else (),
                _options(op)))
        flat.subgraphs.append(FlatSubgraph(
            s, (g.Name() or b"").decode("utf-8", "replace"), tensors, operators,
            tuple(int(i) for i in g.InputsAsNumpy()) if g.InputsLength() else (),
            tuple(int(i) for i in g.OutputsAsNumpy()) if g.OutputsLength() else ()))
    return flat
