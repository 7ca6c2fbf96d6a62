"""`.tflite` → `nnapi.Model`: TFLite flatbuffers mapped to NNAPI operations the way TFLite's NNAPI delegate does.

    imported = nnapi.importers.load_tflite("model.tflite")
    compilation = nnapi.Compilation(imported.model, cache_dir=..., token=imported.token()).finish()

What the importer does:
- tensors become operands with their quantization: per-tensor uint8/int8/int16, per-channel int8
  weights (TENSOR_QUANT8_SYMM_PER_CHANNEL), int32 biases scaled input scale × filter scale; rank-0
  tensors become shape [1], as NNAPI has no rank-0 tensors;
- weights are CONSTANT_REFERENCE regions of one read-only memory mapping of the `.tflite` file
  (`Memory.from_fd`): nothing is copied, except values of at most 128 bytes (CONSTANT_COPY, as
  NNAPI does) and constants the importer computes (see below);
- builtin operators map to NNAPI operations with their fused activations, padding schemes and
  layouts (`_tflite_ops.py`); DEQUANTIZE of constant float16 (or int8) weights is folded into
  float32 constants and DENSIFY of sparse weights is done at import; WHILE and IF bodies become
  referenced models;
- operators NNAPI 1.3 lacks are decomposed (SQUARED_DIFFERENCE, GELU, LEAKY_RELU, quantized
  operations NNAPI only has in float through DEQUANTIZE → float → QUANTIZE, FULLY_CONNECTED with
  per-channel weights as a 1×1 CONV_2D, the full-integer UNIDIRECTIONAL_SEQUENCE_LSTM as one
  QUANTIZED_LSTM per time step) or mapped to the later NNAPI operation (BATCH_MATMUL); MediaPipe's
  custom Convolution2DTransposeBias is TRANSPOSE_CONV_2D with its bias;
- a model with operators that cannot be mapped raises one `UnsupportedOperatorsError` naming
  every such operator with its subgraph, index and inputs;
- the file is read through a validating layer (`_flatbuffer.py`, `_tflite_schema.py`): whatever is
  malformed (an offset, a length, an index, an enum, an options table, a shape, quantization arrays,
  sparsity metadata, a control-flow reference, a signature) is one `NnError(BAD_DATA)` naming the
  tensor, operator or field at fault, raised before anything is allocated from it;
- inputs and outputs keep their tensor names (`TensorInfo.name`) and, where the file has a
  SignatureDef for the main subgraph ("serving_default" first), the names it gives them
  (`TensorInfo.signature_name`, e.g. "image", "output_0"); `ImportedModel.input_names` /
  `output_names` prefer the signature names.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .. import tracing
from .._version import __version__
from ..hal import NnError, OperandType as T, OperationType as Op, ResultCode
from ..runtime import Memory, Model
from ._flatbuffer import BadModel
from ._tflite_schema import FlatModel, FlatOperator, FlatSubgraph, FlatTensor, load_flat_model

#: Bumped when the mapping changes, so cache tokens derived from a file change too.
IMPORTER_VERSION = "2"
_COPY_LIMIT = 128  # NNAPI copies values of at most this many bytes (CONSTANT_COPY)
#: Constants the importer computes rather than references (zero states and biases, densified and
#: dequantized weights) are bounded by this many bytes, or 16 times the file size if larger, so a
#: corrupt shape is refused before it is allocated.
_COMPUTED_FLOOR = 64 << 20
#: WHILE / IF bodies may nest this deep.
_MAX_NESTING = 32
#: Marks an error no validation foresaw (the importer's last guard; the fuzz tests fail on it).
INTERNAL_ERROR = "an importer defect, please report it"


class Unsupported(Exception):
    """One operator (or tensor) that cannot be mapped; caught per operator and collected."""


@dataclass(frozen=True)
class Problem:
    """An operator the importer cannot map."""

    subgraph: int
    index: int
    operator: str
    inputs: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        where = f"operator {self.index}" if self.subgraph == 0 else f"subgraph {self.subgraph} operator {self.index}"
        inputs = "; ".join(self.inputs) if self.inputs else "none"
        return f"{where} {self.operator}: {self.reason} (inputs: {inputs})"


class UnsupportedOperatorsError(NnError):
    """The model has operators that cannot be mapped to NNAPI; `problems` lists every one."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        names = sorted({p.operator for p in problems})
        lines = [f"{os.path.basename(path)}: {len(problems)} operator{'s' if len(problems) != 1 else ''} cannot be "
                 f"mapped to NNAPI ({', '.join(names)}):"]
        lines += [f"  {p}" for p in problems]
        super().__init__(ResultCode.BAD_DATA, "\n".join(lines))
        self.problems = problems


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as the app sees it: `name` is the TFLite tensor name, `signature_name`
    the name the model's signature gives it (LiteRT's key, e.g. "image"), None without one."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float = 0.0
    zero_point: int = 0
    signature_name: str | None = None

    @property
    def label(self) -> str:
        """The name for messages, with the signature name where there is one: "x:0 (signature: image)"."""
        return f"{self.name} (signature: {self.signature_name})" if self.signature_name else self.name

    def __str__(self) -> str:
        q = f" q({self.scale:g}, {self.zero_point})" if self.scale else ""
        return f"{self.label} {self.dtype}{list(self.shape)}{q}"


@dataclass
class ImportedModel:
    """A finished `nnapi.Model` imported from a `.tflite` file, with what an app needs to feed it."""

    model: Model
    path: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    #: The read-only mapping of the file that the weights reference (kept alive with the model).
    memory: Memory
    #: Bytes of weights referenced in the file mapping, and bytes the importer copied or computed.
    referenced_bytes: int = 0
    copied_bytes: int = 0
    #: TFLite operators of every subgraph, and the NNAPI operations they became.
    operators: Counter = field(default_factory=Counter)
    operations: Counter = field(default_factory=Counter)
    _flat: FlatModel | None = None
    _token: bytes | None = None
    #: The key of the signature the names come from ("serving_default"), None when the file has none
    #: for the main subgraph.
    signature_key: str | None = None

    @property
    def input_names(self) -> list[str]:
        """Each input's name, in input order: the name the file's signature gives it where it has a
        signature for the main subgraph (LiteRT's `get_signature_runner` keys, e.g. "image"; of
        "serving_default" when several), else its tensor name (`inputs[k].name`). `nnapi.load`'s `run`
        takes these, the tensor names and `input_0`, `input_1`, ... alike."""
        return [i.signature_name or i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Each output's name, in output order: its signature name (e.g. "output_0", "probs") where the
        file has a signature for the main subgraph, else its tensor name (see `input_names`)."""
        return [o.signature_name or o.name for o in self.outputs]

    def token(self) -> bytes:
        """A 32-byte cache token: SHA-256 of the file (read through the mapping), nnapi and importer versions."""
        if self._token is None:
            h = hashlib.sha256(b"nnapi-tflite")
            h.update(f"{__version__}/{IMPORTER_VERSION}".encode())
            if self._flat is not None:
                h.update(self._flat.mapping)
            self._token = h.digest()
        return self._token


def load_tflite(path: str | os.PathLike, outputs: list[int | str] | None = None, *,
                relaxed: bool = False) -> ImportedModel:
    """Import a `.tflite` file as a finished `nnapi.Model` (see the module docstring).

    `outputs` picks the model outputs among the main subgraph's tensors (indexes or names), e.g.
    intermediate tensors to debug a model; by default they are the subgraph's outputs. `relaxed` lets
    float32 be computed with float16's range and precision (`relax_computation_float32_to_float16`).
    A file that cannot be read or is not a well-formed model raises `NnError(BAD_DATA)` naming the
    tensor, operator or field at fault; operators that cannot be mapped raise
    `UnsupportedOperatorsError` (an `NnError` too).
    """
    with tracing.span("import", "import", path=os.fspath(path)):
        return _load(path, outputs, relaxed)


def _load(path: str | os.PathLike, outputs: list[int | str] | None, relaxed: bool = False) -> "ImportedModel":
    flat = load_flat_model(path)
    try:
        try:
            memory = Memory.from_fd(flat.fd, 0, flat.size, prot=mmap.PROT_READ)
        finally:
            flat.close_fd()
        if outputs is not None and flat.subgraphs:
            main = flat.subgraphs[0]
            by_name = {t.name: t.index for t in main.tensors}
            picked = []
            for o in outputs:
                if isinstance(o, str):
                    if o not in by_name:
                        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: no tensor named {o!r}")
                    o = by_name[o]
                if not 0 <= int(o) < len(main.tensors):
                    raise NnError(ResultCode.BAD_DATA, f"{flat.path}: tensor index {o} out of range")
                picked.append(int(o))
            main.outputs = tuple(picked)
        return _Converter(flat, memory, relaxed).run()
    except NnError:
        raise
    except RecursionError:
        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: the model nests too deeply to import") from None
    except Exception as e:  # the last guard: every known failure is validated before it can happen
        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: cannot import the model ({type(e).__name__}: {e}); "
                                           f"{INTERNAL_ERROR}") from e


# --- operand specifications ------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """What an NNAPI operand is: type, dimensions and quantization."""

    type: T
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    #: Per-channel scales and channel dimension (TENSOR_QUANT8_SYMM_PER_CHANNEL).
    channel: tuple[tuple[float, ...], int] | None = None

    def with_dims(self, dims) -> "Spec":
        return Spec(self.type, tuple(int(d) for d in dims), self.scale, self.zero_point, self.channel)

    def with_type(self, type: T, scale: float = 0.0, zero_point: int = 0) -> "Spec":
        return Spec(type, self.dims, scale, zero_point, None)

    @property
    def quantized(self) -> bool:
        return self.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                             T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM)

    @property
    def is_float(self) -> bool:
        return self.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _f32(x: float) -> float:
    return float(np.float32(x))


_QUANT_RANGES = {"UINT8": (0, 255), "INT8": (-128, 127), "INT16": (-32768, 32767)}

_NUMPY_OF = {T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16, T.TENSOR_INT32: np.int32,
             T.TENSOR_BOOL8: np.bool_, T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
             T.TENSOR_QUANT8_SYMM: np.int8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8,
             T.TENSOR_QUANT16_SYMM: np.int16, T.TENSOR_QUANT16_ASYMM: np.uint16}


class _Converter:
    """Converts every subgraph that the main one needs; collects problems across them."""

    def __init__(self, flat: FlatModel, memory: Memory, relaxed: bool = False) -> None:
        self.flat = flat
        self.memory = memory
        self.relaxed = relaxed
        self.problems: list[Problem] = []
        self.referenced_regions: set[tuple[int, int]] = set()
        self.copied_bytes = 0
        self.operators: Counter = Counter()
        self.operations: Counter = Counter()
        self._submodels: dict[tuple, Model | None] = {}
        self._active: list[int] = [0]                  # subgraphs being converted, outermost first
        self.computed_limit = max(_COMPUTED_FLOOR, 16 * flat.size)

    def run(self) -> ImportedModel:
        flat = self.flat
        if not flat.subgraphs:
            raise NnError(ResultCode.BAD_DATA, f"{flat.path}: the model has no subgraphs")
        main = flat.subgraphs[0]
        graph = _graph_class()(self, main, list(range(len(main.inputs))), list(range(len(main.outputs))))
        graph.convert()
        if self.problems:
            raise UnsupportedOperatorsError(flat.path, self.problems)
        graph.finish()
        signature = flat.signature(0)
        in_names = dict((t, n) for n, t in signature.inputs) if signature else {}
        out_names = dict((t, n) for n, t in signature.outputs) if signature else {}
        inputs = [_info(main.tensors[t], in_names.get(t)) for t in main.inputs]
        outputs = [_info(main.tensors[t], out_names.get(t)) for t in main.outputs]
        return ImportedModel(graph.m, flat.path, inputs, outputs, self.memory,
                             sum(length for _, length in self.referenced_regions), self.copied_bytes,
                             self.operators, self.operations, flat,
                             signature_key=signature.key if signature else None)

    def submodel(self, index: int, input_order: list[int], output_order: list[int]) -> Model | None:
        """A finished model of subgraph `index` with its inputs / outputs in the given order (None on problems).
        A subgraph that is not a valid body (the main one, out of range, one of its own callers) is BAD_DATA."""
        if not 0 < index < len(self.flat.subgraphs):
            raise BadModel(f"subgraph index {index} out of range (the model has {len(self.flat.subgraphs)} "
                           "subgraphs; 0 is the main one)")
        if index in self._active:
            raise BadModel(f"subgraph {index} calls itself (through subgraphs {self._active})")
        if len(self._active) > _MAX_NESTING:
            raise BadModel(f"control flow nests more than {_MAX_NESTING} subgraphs deep")
        key = (index, tuple(input_order), tuple(output_order))
        if key not in self._submodels:
            sub = self.flat.subgraphs[index]
            for k in input_order:
                if not 0 <= k < len(sub.inputs):
                    raise BadModel(f"subgraph {index} has {len(sub.inputs)} inputs, input {k} is needed")
            for k in output_order:
                if not 0 <= k < len(sub.outputs):
                    raise BadModel(f"subgraph {index} has {len(sub.outputs)} outputs, output {k} is needed")
            self._submodels[key] = None
            before = len(self.problems)
            graph = _graph_class()(self, sub, input_order, output_order)
            self._active.append(index)
            try:
                graph.convert()
            finally:
                self._active.pop()
            if len(self.problems) == before:
                graph.finish()
                self._submodels[key] = graph.m
        return self._submodels[key]


def _info(t: FlatTensor, signature_name: str | None = None) -> TensorInfo:
    q = t.quant
    dtype = t.dtype if t.dtype is not None else np.dtype(np.float32)
    if dtype == np.int64:
        dtype = np.dtype(np.int32)
    return TensorInfo(t.name, t.shape or (1,), dtype, q.scale if q and not q.per_channel else 0.0,
                      q.zero_point if q and not q.per_channel else 0, signature_name)


def _graph_class():
    from ._tflite_ops import OperatorMappings
    return type("_MappedGraph", (OperatorMappings, Graph), {})


class Graph:
    """One TFLite subgraph being turned into one `nnapi.Model`."""

    def __init__(self, conv: _Converter, sub: FlatSubgraph, input_order: list[int], output_order: list[int]) -> None:
        self.conv = conv
        self.flat = conv.flat
        self.sub = sub
        self.input_order = input_order
        self.output_order = output_order
        self.m = Model()
        self.specs: list[Spec] = []
        self.values: dict[int, int] = {}          # TFLite tensor -> operand holding its value
        self.folded: dict[int, np.ndarray] = {}   # TFLite tensor -> value computed at import
        self._constants: dict[tuple, int] = {}
        self._scalars: dict[tuple, int] = {}
        self._produced: set[int] = set()          # operands written by an operation
        self._unmapped: set[int] = set()          # TFLite tensors written by operators that could not be mapped
        self.origin: list[tuple[int, str]] = []   # per NNAPI operation: (TFLite operator index, name)
        self._current: FlatOperator | None = None

    # --- operands -----------------------------------------------------------------------------
    def add(self, spec: Spec) -> int:
        index = self.m.add_operand(spec.type, spec.dims, spec.scale, spec.zero_point)
        if spec.channel is not None:
            self.m.set_operand_symm_per_channel_quant_params(index, spec.channel[0], spec.channel[1])
        self.specs.append(spec)
        return index

    def tensor(self, t: int) -> FlatTensor:
        """TFLite tensor `t` of this subgraph (indexes were checked when the file was read; -1, an
        omitted optional input, is refused where a tensor is needed)."""
        if not 0 <= t < len(self.sub.tensors):
            raise BadModel(f"a required tensor is omitted (index {t})" if t == -1 else
                           f"tensor index {t} out of range")
        return self.sub.tensors[t]

    def dims(self, t: int, rank: int | tuple[int, ...], what: str) -> tuple[int, ...]:
        """The (NNAPI) dimensions of tensor `t`, which must have rank `rank` (or one of them) as the
        operator needs: BAD_DATA naming `what` and the tensor otherwise."""
        dims = self.spec_of(t).dims
        ranks = (rank,) if isinstance(rank, int) else rank
        if len(dims) not in ranks:
            raise BadModel(f"{what} (tensor {self.tensor(t).describe()}) has rank {len(dims)}, the operator needs "
                           f"{' or '.join(map(str, ranks))}")
        return dims

    def check_computed(self, dims, itemsize: int, what: str) -> None:
        """Refuse, before allocating, a constant of `dims` the importer would compute that is larger
        than the file justifies."""
        size = int(np.prod([int(d) for d in dims], dtype=object)) * itemsize
        if size > self.conv.computed_limit:
            raise BadModel(f"{what}: a computed constant of shape {list(dims)} ({size} bytes) is larger than "
                           f"this file can justify ({self.conv.computed_limit} bytes)")

    def zeros(self, spec: Spec, value: int | float = 0) -> int:
        """A constant operand of `spec` filled with `value` (size checked before allocating)."""
        np_type = _NUMPY_OF[spec.type]
        self.check_computed(spec.dims, np.dtype(np_type).itemsize, f"{spec.type.name} constant")
        return self.const(np.full(spec.dims, value, np_type), spec)

    def spec_of(self, t: int) -> Spec:
        """The NNAPI operand a TFLite tensor becomes (its quantization checked: BAD_DATA when invalid)."""
        tensor = self.tensor(t)
        dims = tensor.shape or (1,)
        if any(d < 0 for d in dims):
            raise Unsupported(f"tensor {tensor.describe()} has an unknown dimension")
        q = tensor.quant
        kind = tensor.type
        if q is not None and kind in _QUANT_RANGES:
            low, high = _QUANT_RANGES[kind]
            if not np.all(q.scales > 0):
                raise BadModel(f"tensor {tensor.describe()}: quantization scale {q.scales.min()} is not positive")
            if np.any(q.zero_points < low) or np.any(q.zero_points > high):
                raise BadModel(f"tensor {tensor.describe()}: zero point outside the {kind} range [{low}, {high}]")
        if kind == "FLOAT32":
            return Spec(T.TENSOR_FLOAT32, dims)
        if kind == "FLOAT16":
            return Spec(T.TENSOR_FLOAT16, dims)
        if kind == "INT32" or (kind == "INT64" and self.is_const(t)):
            return Spec(T.TENSOR_INT32, dims, q.scale if q and not q.per_channel else 0.0)
        if kind == "BOOL":
            return Spec(T.TENSOR_BOOL8, dims)
        if kind in ("UINT8", "INT8", "INT16"):
            if q is None:
                raise Unsupported(f"tensor {tensor.describe()} is {kind} without quantization parameters")
            if q.per_channel:
                if kind != "INT8" or np.any(q.zero_points != 0):
                    raise Unsupported(f"tensor {tensor.describe()}: per-channel quantization needs int8 with "
                                      "zero points 0")
                return Spec(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, dims,
                            channel=(tuple(float(s) for s in q.scales), q.axis))
            if kind == "UINT8":
                return Spec(T.TENSOR_QUANT8_ASYMM, dims, q.scale, q.zero_point)
            if kind == "INT8":
                return Spec(T.TENSOR_QUANT8_ASYMM_SIGNED, dims, q.scale, q.zero_point)
            if q.zero_point != 0:
                raise Unsupported(f"tensor {tensor.describe()}: int16 with zero point {q.zero_point}")
            return Spec(T.TENSOR_QUANT16_SYMM, dims, q.scale, 0)
        raise Unsupported(f"tensor {tensor.describe()} has type {kind}, which NNAPI does not have")

    def is_const(self, t: int) -> bool:
        return t >= 0 and (t in self.folded or self.tensor(t).region is not None)

    def const_value(self, t: int) -> np.ndarray | None:
        """The value of a constant tensor (folded at import, or a view of the file), else None."""
        if t < 0:
            return None
        if t in self.folded:
            return self.folded[t]
        tensor = self.tensor(t)
        if tensor.region is None:
            return None
        if tensor.sparsity is not None:
            raise Unsupported(f"tensor {tensor.describe()} is sparse; only DENSIFY may read it")
        if tensor.dtype is None:
            raise Unsupported(f"tensor {tensor.describe()} has type {tensor.type}")
        return self.flat.array(tensor).reshape(tensor.shape or (1,))

    def real_value(self, t: int) -> np.ndarray | None:
        """A constant's real (dequantized) value as float32."""
        v = self.const_value(t)
        if v is None:
            return None
        q = self.tensor(t).quant
        if q is None or self.tensor(t).type in ("FLOAT32", "FLOAT16"):
            return v.astype(np.float32)
        if q.per_channel:
            shape = [1] * v.ndim
            shape[q.axis] = -1
            return ((v.astype(np.float32) - q.zero_points.reshape(shape).astype(np.float32))
                    * q.scales.reshape(shape))
        return (v.astype(np.float32) - np.float32(q.zero_point)) * np.float32(q.scale)

    def input(self, t: int, spec: Spec | None = None) -> int:
        """The operand holding TFLite tensor `t` (as `spec` when given: constants are re-declared,
        other tensors reshaped)."""
        want = spec or self.spec_of(t)
        if self.is_const(t) and t not in self.values:
            return self._constant_tensor(t, want)
        if t not in self.values:
            tensor = self.tensor(t)
            if tensor.is_variable:  # a stateful operator's state: TFLite resets int8 to the zero point, others to 0
                return self.zeros(want, want.zero_point if want.type == T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
            if t not in self._unmapped:
                raise BadModel(f"tensor {tensor.describe()} is read before any operator writes it (and is neither "
                               "a constant, a variable nor a subgraph input)")
            # Its producer could not be mapped (already reported): a placeholder keeps going.
            self.values[t] = self.add(self.spec_of(t))
        have_index = self.values[t]
        have = self.specs[have_index]
        if have == want:
            return have_index
        if have.with_dims(want.dims) == want and int(np.prod(have.dims)) == int(np.prod(want.dims)):
            return self.reshape(have_index, want.dims)
        raise Unsupported(f"tensor {self.tensor(t).describe()} is needed as {want.type.name}{list(want.dims)}, "
                          f"it is {have.type.name}{list(have.dims)}")

    def _constant_tensor(self, t: int, spec: Spec) -> int:
        key = (t, spec)
        if key in self._constants:
            return self._constants[key]
        tensor = self.tensor(t)
        np_type = _NUMPY_OF[spec.type]
        if t not in self.folded and tensor.sparsity is None and tensor.dtype == np.dtype(np_type).newbyteorder("<") \
                and tensor.region[1] == int(np.prod(spec.dims)) * np.dtype(np_type).itemsize:
            offset, length = tensor.region
            index = self.add(spec)
            if length > _COPY_LIMIT:
                self.m.set_operand_value_from_memory(index, self.conv.memory, offset, length)
                self.conv.referenced_regions.add((offset, length))
            else:
                self.m.set_operand_value(index, bytes(self.flat.data(tensor)))
            self._constants[key] = index
            return index
        value = self.const_value(t)
        if spec.type == T.TENSOR_INT32 and value.dtype == np.int64:
            if value.size and (value.max() > 2**31 - 1 or value.min() < -2**31):
                raise Unsupported(f"tensor {tensor.describe()}: int64 values out of the int32 range")
        index = self.const(np.asarray(value).astype(np_type).reshape(spec.dims), spec)
        self._constants[key] = index
        return index

    def const(self, value: np.ndarray, spec: Spec) -> int:
        """A new constant operand holding `value` (copied: the importer computed it)."""
        value = np.ascontiguousarray(np.asarray(value).astype(_NUMPY_OF[spec.type]).reshape(spec.dims))
        index = self.add(spec)
        self.m.set_operand_value(index, value)
        self.conv.copied_bytes += value.nbytes
        return index

    def const_f32(self, value) -> int:
        v = np.asarray(value, np.float32)
        return self.const(v.reshape(v.shape or (1,)), Spec(T.TENSOR_FLOAT32, v.shape or (1,)))

    def const_i32(self, value) -> int:
        v = np.asarray(value, np.int32)
        return self.const(v.reshape(v.shape or (1,)), Spec(T.TENSOR_INT32, v.shape or (1,)))

    def scalar(self, type: T, value) -> int:
        key = (type, value if type != T.FLOAT32 else _f32(value))
        if key not in self._scalars:
            index = self.m.add_operand(type)
            self.specs.append(Spec(type, ()))
            self.m.set_operand_value(index, value)
            self._scalars[key] = index
        return self._scalars[key]

    def i32(self, value: int) -> int:
        return self.scalar(T.INT32, int(value))

    def f32(self, value: float) -> int:
        return self.scalar(T.FLOAT32, float(value))

    def bool(self, value: bool) -> int:
        return self.scalar(T.BOOL, bool(value))

    def temp(self, spec: Spec) -> int:
        return self.add(spec)

    def output(self, t: int, spec: Spec | None = None) -> int:
        """A new operand for the value of TFLite tensor `t`, written by the next emitted operation."""
        index = self.add(spec or self.spec_of(t))
        self.values[t] = index
        return index

    def shaped_output(self, t: int, dims) -> tuple[int, callable]:
        """An operand of `dims` to write tensor `t` into, and a function that reshapes it to `t`'s shape
        afterwards when they differ (e.g. NNAPI FULLY_CONNECTED's 2-D output of a 3-D TFLite one)."""
        spec = self.spec_of(t)
        dims = tuple(int(d) for d in dims)
        if dims == spec.dims:
            return self.output(t), lambda: None
        tmp = self.temp(spec.with_dims(dims))

        def finish() -> None:
            self.emit(Op.RESHAPE, [tmp, self.const_i32(list(spec.dims))], [self.output(t)])
        return tmp, finish

    def reshape(self, operand: int, dims) -> int:
        out = self.temp(self.specs[operand].with_dims(dims))
        self.emit(Op.RESHAPE, [operand, self.const_i32([int(d) for d in dims])], [out])
        return out

    def emit(self, type: Op, inputs: list[int], outputs: list[int]) -> None:
        self.m.add_operation(type, inputs, outputs)
        self._produced.update(outputs)
        op = self._current
        self.origin.append((op.index, op.label) if op is not None else (-1, "(import)"))
        self.conv.operations[type.name] += 1

    # --- float islands: NNAPI operations that only exist in float -------------------------------------
    def float_input(self, t: int) -> int:
        """TFLite tensor `t` as TENSOR_FLOAT32 real values (DEQUANTIZE, CAST or a folded constant)."""
        spec = self.spec_of(t)
        if spec.type == T.TENSOR_FLOAT32:
            return self.input(t)
        if self.is_const(t):
            return self.const(self.real_value(t), Spec(T.TENSOR_FLOAT32, spec.dims))
        out = self.temp(Spec(T.TENSOR_FLOAT32, spec.dims))
        if spec.type == T.TENSOR_FLOAT16:
            self.emit(Op.CAST, [self.input(t)], [out])
        elif spec.quantized:
            self.emit(Op.DEQUANTIZE, [self.input(t)], [out])
        else:
            raise Unsupported(f"tensor {self.tensor(t).describe()} cannot be converted to float")
        return out

    def float_output(self, t: int) -> tuple[int, callable]:
        """A TENSOR_FLOAT32 operand to compute tensor `t` into, and a function that then converts it
        to `t`'s type (QUANTIZE / CAST) when `t` is not float32."""
        spec = self.spec_of(t)
        if spec.type == T.TENSOR_FLOAT32:
            return self.output(t), lambda: None
        tmp = self.temp(Spec(T.TENSOR_FLOAT32, spec.dims))

        def finish() -> None:
            if spec.quantized and spec.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
                self.emit(Op.QUANTIZE, [tmp], [self.output(t)])
            elif spec.type == T.TENSOR_FLOAT16:
                self.emit(Op.CAST, [tmp], [self.output(t)])
            else:
                raise Unsupported(f"output {self.tensor(t).describe()} cannot be produced from float")
        return tmp, finish

    # --- the subgraph -------------------------------------------------------------------------------
    def convert(self) -> None:
        sub = self.sub
        for t in sub.inputs:
            try:
                self.output(t)
            except Unsupported as e:
                self.conv.problems.append(Problem(sub.index, -1, "input", (self.tensor(t).describe(),), str(e)))
                self.values[t] = self.add(Spec(T.TENSOR_FLOAT32, (1,)))
            except BadModel as e:
                raise e if e.located else BadModel(f"{os.path.basename(self.flat.path)}: subgraph {sub.index} input: "
                                                   f"{e.message}", located=True) from None
        for op in sub.operators:
            self._current = op
            self.conv.operators[op.label] += 1
            try:
                self.map_operator(op)
            except Unsupported as e:
                self.conv.problems.append(Problem(sub.index, op.index, op.label, self._describe_inputs(op), str(e)))
                self._unmapped.update(op.outputs)
            except BadModel as e:
                raise e if e.located else BadModel(f"{os.path.basename(self.flat.path)}: {op.where}: {e.message}",
                                                   located=True) from None
            except NnError as e:
                self.conv.problems.append(Problem(sub.index, op.index, op.label, self._describe_inputs(op),
                                                  f"rejected: {e.message}"))
                self._unmapped.update(op.outputs)
        self._current = None

    def _describe_inputs(self, op: FlatOperator) -> tuple[str, ...]:
        return tuple(self.sub.tensors[t].describe() if t >= 0 else "(none)" for t in op.inputs)

    def finish(self) -> None:
        """Identify inputs and outputs (copying outputs that are not written here) and finish the model."""
        sub = self.sub
        name = os.path.basename(self.flat.path)
        inputs = [self.values[sub.inputs[k]] for k in self.input_order]
        outputs = []
        for k in self.output_order:
            t = sub.outputs[k]
            try:
                index = self.input(t)
            except Unsupported as e:
                raise UnsupportedOperatorsError(self.flat.path, [Problem(
                    sub.index, -1, "output", (self.tensor(t).describe(),), str(e))]) from None
            except BadModel as e:
                raise e if e.located else BadModel(f"{name}: subgraph {sub.index} output {k}: {e.message}",
                                                   located=True) from None
            if index not in self._produced or index in outputs or index in inputs:
                copy = self.add(self.specs[index])
                self.emit(Op.RESHAPE, [index, self.const_i32(list(self.specs[index].dims))], [copy])
                index = copy
            outputs.append(index)
        try:
            self.m.identify_inputs_and_outputs(inputs, outputs)
            if self.conv.relaxed:
                self.m.relax_computation_float32_to_float16(True)
            self.m.finish()
        except NnError as e:
            raise NnError(ResultCode.BAD_DATA, f"{name}: the imported model is not valid: "
                                               f"{self._explain(e.message)}") from None

    def _explain(self, message: str) -> str:
        """Name the TFLite operator behind an "operation N" of a validation message."""
        match = re.search(r"operation (\d+)", message)
        if match and int(match.group(1)) < len(self.origin):
            index, name = self.origin[int(match.group(1))]
            where = f"subgraph {self.sub.index} " if self.sub.index else ""
            return f"{message} [from TFLite {where}operator {index} {name}]"
        return message
