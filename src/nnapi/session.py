"""`nnapi.load`: a compiled model that runs by input name, the way LiteRT's `Interpreter` and ONNX
Runtime's `InferenceSession` feel, over the NDK-shaped runtime (`Model`, `Compilation`, `Execution`).

    model = nnapi.load("face.tflite", cache_dir="~/.cache/app")   # import, partition, compile (cached)
    model.inputs          # [TensorInfo(name, shape, dtype, scale, zero_point)], also model.outputs
    out = model.run({"input": image})                            # {output name: array}

Inputs are checked exactly against the model: an unknown or missing name, a wrong dtype or shape
is an `NnError(BAD_DATA)` naming the input, what it expects and what it was given. Conversions
(another dtype, sizes of 1 added or dropped, floats quantized with the input's scale and zero
point) happen only with `run(..., cast=True)`, and `prepare` says which it made.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from .hal import ExecutionPreference, NnError, Priority, ResultCode
from .importers import ImportedModel, TensorInfo, load_tflite
from .ops import numpy_dtype
from .runtime import Compilation, Device, Execution, Model, model_token

__all__ = ["CompiledModel", "TensorInfo", "check_inputs", "describe", "load"]

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


def _operand_infos(model: Model, io: str, names: Sequence[str] | None) -> list[TensorInfo]:
    """What each model input (or output) takes: its name, the operand's shape (None where it is known
    only at run time; None for a tensor of unknown rank), dtype and quantization."""
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
        name = names[k] if names is not None and k < len(names) and names[k] else f"{io}_{k}"
        infos.append(TensorInfo(name, shape, numpy_dtype(operand.type), float(operand.scale),
                                int(operand.zero_point)))
    return infos


def _unique(infos: list[TensorInfo]) -> list[TensorInfo]:
    """Names must identify one input (output) each: a repeated name gets its position appended."""
    seen: dict[str, int] = {}
    for info in infos:
        seen[info.name] = seen.get(info.name, 0) + 1
    return [info if seen[info.name] == 1 else TensorInfo(f"{info.name}:{k}", info.shape, info.dtype, info.scale,
                                                          info.zero_point)
            for k, info in enumerate(infos)]


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

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

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
            timeout: float | None = None) -> dict[str, np.ndarray]:
        """Run once and return {output name: array}. `inputs`: {name: array} (or a list in input
        order; a bare array for a one-input model). `timeout`: seconds for this run (None or 0: none)."""
        arrays, _ = self.prepare(inputs, cast=cast)
        values = Execution(self.compilation).run(arrays, timeout=timeout)
        return {info.name: value for info, value in zip(self.outputs, values)}


def describe(model: Model | ImportedModel) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs and outputs of a finished model as `load` names them: the importer's names for an
    imported model, `input_0`, ... / `output_0`, ... for one built in Python."""
    imported = model if isinstance(model, ImportedModel) else None
    built = imported.model if imported is not None else model
    in_names = [i.name for i in imported.inputs] if imported is not None else None
    out_names = [o.name for o in imported.outputs] if imported is not None else None
    return (_unique(_operand_infos(built, "input", in_names)), _unique(_operand_infos(built, "output", out_names)))


def _ordered(infos: list[TensorInfo], inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> list[Any]:
    """The values in input order, from a {name: value} mapping, a sequence or (one input) an array."""
    input_names = [i.name for i in infos]
    names = ", ".join(input_names) or "none"
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in input_names]
        if unknown:
            raise _bad(f"run: no input named {', '.join(repr(k) for k in unknown)}; the inputs are: {names}")
        missing = [n for n in input_names if n not in inputs]
        if missing:
            raise _bad(f"run: input {', '.join(repr(n) for n in missing)} not given; the inputs are: {names} "
                       f"(None leaves an optional input without a value)")
        return [inputs[n] for n in input_names]
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
         timeout: float | None = None) -> CompiledModel:
    """Import (a `.tflite` path), partition and compile a model; returns a `CompiledModel`.

    `devices`: a device name, a list of them, or None for all devices (partitioned). `cache_dir`:
    compilation cache folder (created when missing); without a `token` one is derived from the model
    (the file's hash for a `.tflite`, `nnapi.model_token` for a built model). `priority`: LOW /
    MEDIUM / HIGH (or "low", 90, ...). `preference`: an `ExecutionPreference` or its name
    ("sustained-speed"). `timeout`: seconds the compilation may take (None or 0: none); per-run
    timeouts go to `run(timeout=...)`. Errors are `NnError` naming what is wrong."""
    imported: ImportedModel | None = None
    if isinstance(model, (str, os.PathLike)):
        imported = load_tflite(model)  # traced as the "import" slice
        built = imported.model
    elif isinstance(model, ImportedModel):
        imported, built = model, model.model
    elif isinstance(model, Model):
        if not model.finished:
            raise NnError(ResultCode.BAD_STATE, "load: the model must be finished (call model.finish())")
        built = model
    else:
        raise _bad(f"load: expects a .tflite path, an nnapi.Model or an ImportedModel, got {type(model).__name__}")
    if isinstance(devices, (str, Device)):
        devices = [devices]
    if cache_dir is not None and token is None:
        token = imported.token() if imported is not None else model_token(built)
    compilation = Compilation(built, devices=devices, preference=_preference(preference), priority=_priority(priority),
                              cache_dir=None if cache_dir is None else os.path.expanduser(os.fspath(cache_dir)),
                              token=token, timeout=timeout).finish()
    return CompiledModel(built, compilation, imported)

