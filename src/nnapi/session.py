"""`nnapi.load`: a compiled model that runs by input name, the way LiteRT's `Interpreter` and ONNX
Runtime's `InferenceSession` feel, over the NDK-shaped runtime (`Model`, `Compilation`, `Execution`).

    model = nnapi.load("face.tflite", cache_dir="~/.cache/app")   # import, partition, compile (cached)
    model.inputs          # [TensorInfo(name, shape, dtype, scale, zero_point, signature_name)], also outputs
    out = model.run({"input": image})                            # {output name: array}

An input is named by its tensor name, by its signature name where the `.tflite` has a SignatureDef
(LiteRT's keys: "image", "tokens") or by its position (`input_0`, `input_1`, ...); a list or tuple
gives the inputs in order. `run` returns an `Outputs`: {tensor name: array} in output order that
also answers to each output's signature name ("output_0", "probs") and `output_0`, `output_1`, ....
Inputs are checked exactly against the model: an unknown or missing name, a wrong dtype or shape
is an `NnError(BAD_DATA)` naming the input, what it expects and what it was given. Conversions
(another dtype, sizes of 1 added or dropped, floats quantized with the input's scale and zero
point) happen only with `run(..., cast=True)`, and `prepare` says which it made.

Feeds that repeat are checked and bound once: a feed given the same way as one before (the same dict
keys in the same order, or a list of the inputs) whose values are numpy arrays of the dtypes and
shapes already accepted skips the checks above, and the compilation's request for arrays of those
shapes is reused (`runtime.feeds.FeedRunner`); the results are the same as a first run's.
"""
from __future__ import annotations

import dataclasses
import os
from collections import deque
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import tracing
from .hal import ExecutionPreference, NnError, Priority, ResultCode, numpy_dtype
from .importers import ImportedModel, TensorInfo
from .runtime import Compilation, Device, Event, Execution, Model, model_token
from .runtime.feeds import FeedRunner

__all__ = ["CompiledModel", "Outputs", "TensorInfo", "check_inputs", "describe", "load"]

#: Executions `run_batch` / `stream` keep in flight unless told: two keep a device busy while the next
#: feed is checked and bound, and the last one's outputs are read (more only queue on 2 CPUs).
IN_FLIGHT = 2

_PRIORITY_NAMES = {"low": Priority.LOW, "medium": Priority.MEDIUM, "high": Priority.HIGH}


def _bad(message: str) -> NnError:
    return NnError(ResultCode.BAD_DATA, message)


def _priority(value: Priority | int | str) -> Priority | int:
    """A priority given as the enum, the NDK number (90/100/110) or its name ("low", "medium", "high")."""
    if isinstance(value, str):
        key = value.strip().lower()
        if key not in _PRIORITY_NAMES:
            raise _bad(f"load: priority must be low, medium or high (or 90/100/110), got {value!r}")
        return _PRIORITY_NAMES[key]
    return value


def _preference(value: ExecutionPreference | int | str) -> ExecutionPreference | int:
    """A preference given as the enum, its number or its name ("sustained-speed", "LOW_POWER", ...)."""
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        if key not in ExecutionPreference.__members__:
            names = ", ".join(p.name.lower().replace("_", "-") for p in ExecutionPreference)
            raise _bad(f"load: preference must be one of {names}, got {value!r}")
        return ExecutionPreference[key]
    return value


def _operand_infos(model: Model, io: str, importer: Sequence[TensorInfo] | None) -> list[TensorInfo]:
    """What each model input (or output) takes: its name (and signature name) from the importer, the
    operand's shape (None where it is known only at run time; None for a tensor of unknown rank), dtype
    and quantization."""
    main = model.to_hal().main
    indexes = main.input_indexes if io == "input" else main.output_indexes
    infos = []
    for k, index in enumerate(indexes):
        operand = main.operands[index]
        if operand.type.is_scalar:
            shape: tuple | None = ()
        elif not operand.dimensions:
            shape = None
        else:
            shape = tuple(int(d) if d else None for d in operand.dimensions)
        given = importer[k] if importer is not None and k < len(importer) else None
        infos.append(TensorInfo(given.name if given is not None and given.name else f"{io}_{k}", shape,
                                numpy_dtype(operand.type), float(operand.scale), int(operand.zero_point),
                                given.signature_name if given is not None else None))
    return infos


def _unique(infos: list[TensorInfo]) -> list[TensorInfo]:
    """Names must identify one input (output) each: a repeated name gets its position appended."""
    seen: dict[str, int] = {}
    for info in infos:
        seen[info.name] = seen.get(info.name, 0) + 1
    return [info if seen[info.name] == 1 else dataclasses.replace(info, name=f"{info.name}:{k}")
            for k, info in enumerate(infos)]


def _names(infos: Sequence[TensorInfo], io: str) -> dict[str, list[int]]:
    """{name: the inputs (outputs) it may mean}: each one's tensor name and signature name, then its
    position (`input_0`, ...) unless that is already some input's name (a name wins over a position)."""
    named: dict[str, list[int]] = {}
    for k, info in enumerate(infos):
        for name in dict.fromkeys(n for n in (info.name, info.signature_name) if n):
            named.setdefault(name, []).append(k)
    for k in range(len(infos)):
        named.setdefault(f"{io}_{k}", [k])
    return named


def _accepted(infos: Sequence[TensorInfo], io: str) -> str:
    """Every name an input (output) takes, for messages: "image (or serving_default_image:0, input_0)"."""
    rows = []
    for k, info in enumerate(infos):
        others = [n for n in dict.fromkeys((info.name, f"{io}_{k}")) if n != (info.signature_name or info.name)]
        rows.append(f"{info.signature_name or info.name}" + (f" (or {', '.join(others)})" if others else ""))
    return "; ".join(rows) or "none"


class Outputs(dict):
    """What `CompiledModel.run` returns: {output tensor name: array} in output order (iteration, `keys`,
    `values`, `items`, `len` see those names only), whose lookups (`[]`, `get`, `in`) also take each
    output's signature name ("output_0", "probs") and its position `output_0`, `output_1`, ...; an
    unknown name is a `KeyError` listing the accepted ones."""

    __slots__ = ("_infos", "_named")

    def __init__(self, infos: Sequence[TensorInfo], values: Sequence[np.ndarray],
                 naming: tuple[list[str], dict[str, list[int]]] | None = None) -> None:
        """`naming`: the tensor names and `_names` of `infos`, when worked out already (a session's)."""
        self._infos = infos if type(infos) is list else list(infos)
        if naming is None:
            naming = [info.name for info in self._infos], _names(self._infos, "output")
        super().__init__(zip(naming[0], values))
        self._named = naming[1]

    def _resolve(self, key: Any) -> Any:
        if dict.__contains__(self, key) or not isinstance(key, str) or key not in self._named:
            return key
        meant = self._named[key]
        if len(meant) > 1:
            raise KeyError(f"{key!r} names outputs {', '.join(str(k) for k in meant)}: use a tensor name "
                           f"({', '.join(self._infos[k].name for k in meant)})")
        return self._infos[meant[0]].name

    def __missing__(self, key: Any) -> np.ndarray:
        name = self._resolve(key)
        if name is key:
            raise KeyError(f"no output named {key!r}; the outputs are: {_accepted(self._infos, 'output')}")
        return dict.__getitem__(self, name)

    def __contains__(self, key: object) -> bool:
        try:
            return dict.__contains__(self, self._resolve(key))
        except KeyError:
            return False

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __reduce__(self):
        return (Outputs, (self._infos, list(self.values())))


def _shape_text(shape: tuple | None) -> str:
    return "any shape" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _shape_fits(shape: tuple[int, ...], expected: tuple | None) -> bool:
    if expected is None:
        return True
    return len(shape) == len(expected) and all(e is None or d == e for d, e in zip(shape, expected))


class CompiledModel:
    """A model compiled for its devices, with named inputs and outputs (what `nnapi.load` returns).

    `inputs` / `outputs` list a `TensorInfo` (name, shape, dtype, scale, zero_point) each; a shape
    holds None where the size is known only at run time. `compilation` is the underlying
    `nnapi.Compilation` (steps, cache outcomes), `model` the `nnapi.Model` and `imported` the importer's
    result when the model came from a file."""

    def __init__(self, model: Model, compilation: Compilation, imported: ImportedModel | None = None) -> None:
        self.model = model
        self.compilation = compilation
        self.imported = imported
        self.inputs, self.outputs = describe(imported if imported is not None else model)
        self._output_names = [o.name for o in self.outputs], _names(self.outputs, "output")
        self._feeds = _FeedForms(self.inputs)
        self._runner = FeedRunner(compilation)

    @property
    def input_names(self) -> list[str]:
        """Each input's name: its signature name where the `.tflite` has one, else its tensor name
        (`input_0`, ... for a model built in Python). `run` also takes the tensor names and `input_N`."""
        return [i.signature_name or i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Each output's name: its signature name where the `.tflite` has one, else its tensor name
        (`output_0`, ...). `run`'s result answers to these, the tensor names and `output_N`."""
        return [o.signature_name or o.name for o in self.outputs]

    @property
    def cache_outcomes(self) -> list:
        """Per partition: device, outcome (hit, miss, disabled, rejected) and why."""
        return self.compilation.cache_outcomes

    @property
    def devices(self) -> list[str]:
        """The device of each partition, in execution order."""
        return [step.device.name for step in self.compilation.steps]

    def __repr__(self) -> str:
        ins = ", ".join(str(i) for i in self.inputs)
        outs = ", ".join(str(o) for o in self.outputs)
        return f"<nnapi.CompiledModel on {'+'.join(dict.fromkeys(self.devices))}: ({ins}) -> ({outs})>"

    def prepare(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray,
                cast: bool = False) -> tuple[list[np.ndarray | None], dict[str, str]]:
        """Check `inputs` against the model and return them in input order, plus {input name: the
        conversion made} (only with `cast=True`; without it any mismatch is an error)."""
        return check_inputs(self.inputs, inputs, cast)

    # --- running ------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray, *, cast: bool = False,
            timeout: float | None = None) -> Outputs:
        """Run once and return {output tensor name: array} (an `Outputs`, which also answers to the
        signature names and `output_N`). `inputs`: {name: array}, a name being an input's tensor name,
        signature name or `input_N` (or a list or tuple in input order; a bare array for a one-input
        model). `timeout`: seconds for this run (None or 0: none)."""
        arrays = self._feeds.match(inputs)  # (a feed like one accepted before: no checks again)
        if arrays is None:
            arrays, _ = self.prepare(inputs, cast=cast)
            self._feeds.accepted(inputs)
        # (the request made for arrays of these shapes, when the compilation has one: `FeedRunner`)
        return Outputs(self.outputs, self._runner.run(arrays, timeout=timeout), self._output_names)

    def run_batch(self, feeds: Iterable[Mapping[str, Any] | Sequence[Any] | np.ndarray], *, cast: bool = False,
                  timeout: float | None = None, in_flight: int = IN_FLIGHT) -> list[Outputs]:
        """Run every feed (each what `run` takes) and return their outputs in feed order, the same as
        running them one by one, with up to `in_flight` executions running at once (the runtime's
        asynchronous executions) so the device stays busy. An error is an NnError naming the feed index."""
        return list(self.stream(feeds, cast=cast, timeout=timeout, in_flight=in_flight))

    def stream(self, feeds: Iterable[Mapping[str, Any] | Sequence[Any] | np.ndarray], *, cast: bool = False,
               timeout: float | None = None, in_flight: int = IN_FLIGHT) -> Iterator[Outputs]:
        """`run_batch` as an iterator: yields each feed's outputs in feed order while later feeds run,
        taking feeds from `feeds` (any iterable, e.g. a generator reading files) as it goes."""
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise _bad(f"run_batch: in_flight must be a whole number of at least 1, got {in_flight!r}")
        shapes = [o.shape for o in self.outputs]
        asynchronous = all(s is not None and None not in s for s in shapes)  # (else sizes come from the run)
        pending: deque[tuple[int, list[np.ndarray | None], Event | None, list[np.ndarray]]] = deque()
        try:
            for index, feed in enumerate(feeds):
                arrays = self._feed(index, feed, cast)
                if not asynchronous:
                    yield self._outputs_of(index, arrays, None, [], timeout)
                    continue
                while len(pending) >= in_flight:
                    yield self._outputs_of(*pending.popleft(), timeout)
                event, buffers = self._start(index, arrays, shapes, timeout)
                pending.append((index, arrays, event, buffers))
            while pending:
                yield self._outputs_of(*pending.popleft(), timeout)
        finally:
            for _, _, event, _ in pending:  # (an error or a consumer that stopped early: let them end)
                if event is not None:
                    try:
                        event.wait()
                    except NnError:
                        pass  # (a feed after the one reported)

    def _feed(self, index: int, feed: Any, cast: bool) -> list[np.ndarray | None]:
        """Feed `index` checked against the model, in input order (errors name the feed)."""
        try:
            return self.prepare(feed, cast=cast)[0]
        except NnError as e:
            raise _at_feed(index, e) from None

    def _start(self, index: int, arrays: list[np.ndarray | None], shapes: list[tuple],
               timeout: float | None) -> tuple[Event | None, list[np.ndarray]]:
        """An asynchronous execution of feed `index` into fresh output buffers (None: it could not start,
        and the run is done synchronously when its turn comes)."""
        execution = Execution(self.compilation)
        buffers = [np.empty(shape, np.dtype(o.dtype)) for shape, o in zip(shapes, self.outputs)]
        try:
            for k, array in enumerate(arrays):
                execution.set_input(k, array)
            for k, buffer in enumerate(buffers):
                execution.set_output(k, buffer)
            return execution.start_compute(timeout=timeout or None), buffers
        except NnError:
            return None, []  # (the synchronous run reports it, naming the feed)

    def _outputs_of(self, index: int, arrays: list[np.ndarray | None], event: Event | None,
                    buffers: list[np.ndarray], timeout: float | None) -> Outputs:
        """Feed `index`'s outputs: its asynchronous execution's buffers once `event` is done, else (no
        event, or output sizes that grew) a synchronous run; an error names the feed."""
        try:
            if event is not None:
                try:
                    event.wait()
                    return Outputs(self.outputs, buffers, self._output_names)
                except NnError as e:
                    if e.code != ResultCode.OUTPUT_INSUFFICIENT_SIZE:
                        raise
            return Outputs(self.outputs, self._runner.run(arrays, timeout=timeout), self._output_names)
        except NnError as e:
            raise _at_feed(index, e) from None


class _FeedForms:
    """The ways a session's feeds came that were accepted, so one that comes again the same way is not
    checked again (`CompiledModel.run`): per form (a dict's keys in their order; a list or tuple; a bare
    array) the value of each input, and per input the last shape accepted. A feed matches when it has a
    known form and each value is None or a numpy array (not a subclass) of the input's dtype, of the shape
    last accepted or one that fits: exactly what `check_inputs` passes through unconverted."""

    def __init__(self, infos: list[TensorInfo]) -> None:
        self._infos = infos
        self._dtypes = [np.dtype(i.dtype) for i in infos]
        self._shapes: list[tuple | None] = [None] * len(infos)
        self._keys: dict[tuple, list[Any]] = {}  # a dict's keys -> the key of each input (16 forms at most)
        self._sequence = False  # a list or tuple in input order came
        self._array = False  # a bare array (one input) came

    def match(self, inputs: Any) -> list[np.ndarray | None] | None:
        """The values in input order when `inputs` matches (see the class doc), else None."""
        kind = type(inputs)
        if kind is dict:
            keys = self._keys.get(tuple(inputs))
            if keys is None:
                return None
            values = [inputs[k] for k in keys]
        elif kind is list or kind is tuple:
            if not self._sequence or len(inputs) != len(self._infos):
                return None
            values = list(inputs)
        elif kind is np.ndarray and self._array:
            values = [inputs]
        else:
            return None
        dtypes = self._dtypes
        for k, v in enumerate(values):
            if v is None:
                continue
            if type(v) is not np.ndarray or (v.dtype is not dtypes[k] and v.dtype != dtypes[k]):
                return None
            if v.shape != self._shapes[k]:
                if not _shape_fits(v.shape, self._infos[k].shape):
                    return None
                self._shapes[k] = v.shape
        return values

    def accepted(self, inputs: Any) -> None:
        """`inputs` passed `check_inputs`: remember its form (which input each dict key gives)."""
        kind = type(inputs)
        if kind is dict:
            if len(self._keys) < 16:
                named = _names(self._infos, "input")
                order = {named[key][0]: key for key in inputs}
                self._keys[tuple(inputs)] = [order.get(k) for k in range(len(self._infos))]
        elif kind is np.ndarray:
            self._array = len(self._infos) == 1
        elif kind is list or kind is tuple:
            self._sequence = True


def _at_feed(index: int, error: NnError) -> NnError:
    """`error` (same status and code) with a message naming the feed of `run_batch` it came from."""
    message = f"run_batch: feed {index}: {error.message}"
    by_code = str(error).startswith(f"{error.code.name}:")  # (as it was raised: a ResultCode or a HAL status)
    return NnError(error.code if by_code else error.status, message, output_shapes=error.output_shapes)


def describe(model: Model | ImportedModel) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs and outputs of a finished model as `load` names them: the importer's names for an
    imported model, `input_0`, ... / `output_0`, ... for one built in Python."""
    imported = model if isinstance(model, ImportedModel) else None
    built = imported.model if imported is not None else model
    return (_unique(_operand_infos(built, "input", imported.inputs if imported is not None else None)),
            _unique(_operand_infos(built, "output", imported.outputs if imported is not None else None)))


def _ordered(infos: list[TensorInfo], inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> list[Any]:
    """The values in input order, from a {name: value} mapping (see `_names`), a sequence or (one input)
    an array."""
    names = ", ".join(i.signature_name or i.name for i in infos) or "none"
    if isinstance(inputs, Mapping):
        named = _names(infos, "input")
        unknown = [k for k in inputs if not isinstance(k, str) or k not in named]
        if unknown:
            raise _bad(f"run: no input named {', '.join(repr(k) for k in unknown)}; the inputs are: "
                       f"{_accepted(infos, 'input')}")
        keys: dict[int, str] = {}
        for key in inputs:
            meant = named[key]
            if len(meant) > 1:
                raise _bad(f"run: key {key!r} names inputs {', '.join(str(k) for k in meant)} "
                           f"({', '.join(infos[k].name for k in meant)}): use their tensor names")
            if meant[0] in keys:
                raise _bad(f"run: keys {keys[meant[0]]!r} and {key!r} both give input {meant[0]} "
                           f"({infos[meant[0]].signature_name or infos[meant[0]].name})")
            keys[meant[0]] = key
        missing = [i.signature_name or i.name for k, i in enumerate(infos) if k not in keys]
        if missing:
            raise _bad(f"run: input {', '.join(repr(n) for n in missing)} not given; the inputs are: "
                       f"{_accepted(infos, 'input')} (None leaves an optional input without a value)")
        return [inputs[keys[k]] for k in range(len(infos))]
    if isinstance(inputs, np.ndarray):
        if len(infos) != 1:
            raise _bad(f"run: the model has {len(infos)} inputs ({names}): give a {{name: array}} dict "
                       f"or a list in that order")
        return [inputs]
    if isinstance(inputs, (list, tuple)):
        if len(inputs) != len(infos):
            raise _bad(f"run: {len(inputs)} inputs given, the model has {len(infos)} ({names})")
        return list(inputs)
    raise _bad(f"run: inputs must be a {{name: array}} dict or a list in input order, got {type(inputs).__name__}")


def check_inputs(infos: list[TensorInfo], inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray,
                 cast: bool = False) -> tuple[list[np.ndarray | None], dict[str, str]]:
    """`inputs` checked against `infos` (see `describe`), in input order, plus {input name: the
    conversion made, e.g. "float64 -> float32"} (only with `cast=True`; without it any mismatch is an
    error naming the input, what it expects and what it was given)."""
    arrays: list[np.ndarray | None] = []
    notes: dict[str, str] = {}
    for info, value in zip(infos, _ordered(infos, inputs)):
        if value is None:
            arrays.append(None)
            continue
        array, note = _check_input(info, value, cast)
        arrays.append(array)
        if note:
            notes[info.name] = note
    return arrays, notes


def _check_input(info: TensorInfo, value: Any, cast: bool) -> tuple[np.ndarray, str]:
    """The array to bind for `info` and a note of the conversion made ("" when none)."""
    given = value if isinstance(value, np.ndarray) else np.asarray(value)
    expected_dtype = np.dtype(info.dtype)
    hint = "; pass cast=True to convert" if not cast else ""
    shape_ok = _shape_fits(given.shape, info.shape)
    if given.dtype == expected_dtype and shape_ok:
        return given, ""
    if not cast:
        if given.dtype != expected_dtype:
            raise _bad(f"run: input {info.name!r} expects {expected_dtype} {_shape_text(info.shape)}, "
                       f"got {given.dtype} {list(given.shape)}{hint}")
        raise _bad(f"run: input {info.name!r} expects shape {_shape_text(info.shape)}, got {list(given.shape)}{hint}")
    notes = []
    array = given
    if not shape_ok:
        target = info.shape
        if target is None or None in target or [d for d in given.shape if d != 1] != [d for d in target if d != 1]:
            raise _bad(f"run: input {info.name!r} expects shape {_shape_text(info.shape)}, got {list(given.shape)} "
                       f"(cast=True only adds or drops sizes of 1)")
        array = array.reshape(target)
        notes.append(f"shape {list(given.shape)} -> {list(target)}")
    if array.dtype != expected_dtype:
        array, note = _convert(info, array)
        notes.append(note)
    return np.ascontiguousarray(array), "; ".join(notes)


def _convert(info: TensorInfo, array: np.ndarray) -> tuple[np.ndarray, str]:
    """`array` in the input's dtype: floats quantized with the input's scale and zero point, integers
    checked to fit, whole-number floats to integers; BAD_DATA when values would change."""
    target = np.dtype(info.dtype)
    source = array.dtype
    if target.kind == "f":
        if source.kind not in "biuf":
            raise _bad(f"run: input {info.name!r}: cannot convert {source} to {target}")
        return array.astype(target), f"{source} -> {target}"
    if target.kind == "b":
        if source.kind not in "biu" or (array.size and not np.isin(array, (0, 1)).all()):
            raise _bad(f"run: input {info.name!r} expects bool: {source} values other than 0 and 1 given")
        return array.astype(target), f"{source} -> bool"
    limits = np.iinfo(target)
    if source.kind == "f" and info.scale:
        q = np.rint(array.astype(np.float64) / info.scale) + info.zero_point
        return (np.clip(q, limits.min, limits.max).astype(target),
                f"{source} quantized to {target} (scale {info.scale:g}, zero point {info.zero_point})")
    if source.kind == "f":
        if array.size and (not np.isfinite(array).all() or (array != np.rint(array)).any()):
            raise _bad(f"run: input {info.name!r} expects {target}: {source} values that are not whole numbers "
                       f"given")
    elif source.kind not in "biu":
        raise _bad(f"run: input {info.name!r}: cannot convert {source} to {target}")
    if array.size and (array.min() < limits.min or array.max() > limits.max):
        raise _bad(f"run: input {info.name!r} expects {target}: values from {array.min()} to {array.max()} do "
                   f"not fit")
    return array.astype(target), f"{source} -> {target}"


def load(model: str | os.PathLike | Model | ImportedModel,
         devices: Sequence[Device | str] | Device | str | None = None, *, cache_dir: str | os.PathLike | None = None,
         token: bytes | None = None, priority: Priority | int | str = Priority.MEDIUM,
         preference: ExecutionPreference | int | str = ExecutionPreference.FAST_SINGLE_ANSWER,
         timeout: float | None = None, relaxed: bool = False) -> CompiledModel:
    """Import (a `.tflite` path), partition and compile a model; returns a `CompiledModel`.

    `devices`: a device name, a list of them, or None for all devices (partitioned). `cache_dir`:
    compilation cache folder (created when missing); without a `token` one is derived from the model
    (the file's hash for a `.tflite`, `nnapi.model_token` for a built model). `priority`: LOW /
    MEDIUM / HIGH (or "low", 90, ...). `preference`: an `ExecutionPreference` or its name
    ("sustained-speed"). `timeout`: seconds the compilation may take (None or 0: none); per-run
    timeouts go to `run(timeout=...)`. `relaxed`: float32 may be computed in float16 (Android's
    `relax_computation_float32_to_float16`; drivers that gain by it, do: openvino on a CPU with
    float16 matrix units, AMX-FP16); a built model sets it itself before `finish`. Errors are `NnError` naming what is wrong."""
    imported: ImportedModel | None = None
    folder = None if cache_dir is None else os.path.expanduser(os.fspath(cache_dir))
    remembered = False
    if isinstance(model, (str, os.PathLike)):
        if folder is not None:  # (a cached start reads no flatbuffers: the import memo)
            from .importers.tflite import remembered as memo
            with tracing.span("import", "import", path=os.fspath(model), memo=True):
                imported = memo.recall(model, folder, relaxed)
            remembered = imported is not None
        if imported is None:
            from .importers import load_tflite  # (the reader is imported with the first .tflite)
            imported = load_tflite(model, relaxed=relaxed)  # traced as the "import" slice
        built = imported.model
    elif isinstance(model, ImportedModel):
        imported, built = model, model.model
    elif isinstance(model, Model):
        if not model.finished:
            raise NnError(ResultCode.BAD_STATE, "load: the model must be finished (call model.finish())")
        built = model
    else:
        raise _bad(f"load: expects a .tflite path, an nnapi.Model or an ImportedModel, got {type(model).__name__}")
    if relaxed and not built.to_hal().relax_computation_float32_to_float16:
        raise _bad("load: relaxed=True needs a .tflite path, or a model that called "
                   "relax_computation_float32_to_float16(True) before finish()")
    if isinstance(devices, (str, Device)):
        devices = [devices]
    if cache_dir is not None and token is None:
        token = imported.token() if imported is not None else model_token(built)
    compilation = Compilation(built, devices=devices, preference=_preference(preference), priority=_priority(priority),
                              cache_dir=folder, token=token, timeout=timeout).finish()
    if folder is not None and imported is not None and not remembered and isinstance(model, (str, os.PathLike)):
        from .importers.tflite import remembered as memo
        memo.remember(imported, folder, relaxed)
    return CompiledModel(built, compilation, imported)

