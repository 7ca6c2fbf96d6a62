"""`load_tflite`: read and validate the file, map it read-only, convert its main subgraph (and the
bodies it calls) and give the finished model with its inputs and outputs as the app sees them."""
from __future__ import annotations

import mmap
import os

import numpy as np

from ... import tracing
from ...hal import NnError, ResultCode
from ...runtime import Memory
from .context import ImportContext
from .graph import Graph
from .imported import INTERNAL_ERROR, ImportedModel, TensorInfo, UnsupportedOperatorsError
from .schema import FlatModel, FlatTensor, load_flat_model


def load_tflite(path: str | os.PathLike, outputs: list[int | str] | None = None, *,
                relaxed: bool = False) -> ImportedModel:
    """Import a `.tflite` file as a finished `nnapi.Model` (see `nnapi.importers.tflite`).

    `outputs` picks the model outputs among the main subgraph's tensors (indexes or names), e.g.
    intermediate tensors to debug a model; by default they are the subgraph's outputs. `relaxed` lets
    float32 be computed with float16's range and precision (`relax_computation_float32_to_float16`).
    A file that cannot be read or is not a well-formed model raises `NnError(BAD_DATA)` naming the
    tensor, operator or field at fault; operators that cannot be mapped raise
    `UnsupportedOperatorsError` (an `NnError` too).
    """
    with tracing.span("import", "import", path=os.fspath(path)):
        return _load(path, outputs, relaxed)


def _load(path: str | os.PathLike, outputs: list[int | str] | None, relaxed: bool = False) -> ImportedModel:
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
        return _convert(ImportContext(flat, memory, relaxed))
    except NnError:
        raise
    except RecursionError:
        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: the model nests too deeply to import") from None
    except Exception as e:  # the last guard: every known failure is validated before it can happen
        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: cannot import the model ({type(e).__name__}: {e}); "
                                           f"{INTERNAL_ERROR}") from e


def _convert(context: ImportContext) -> ImportedModel:
    """Convert the main subgraph (and the bodies it calls); every problem of every subgraph is raised
    at once, as one `UnsupportedOperatorsError`."""
    flat: FlatModel = context.flat
    if not flat.subgraphs:
        raise NnError(ResultCode.BAD_DATA, f"{flat.path}: the model has no subgraphs")
    main = flat.subgraphs[0]
    graph = Graph(context, main, list(range(len(main.inputs))), list(range(len(main.outputs))))
    graph.convert()
    if context.problems:
        raise UnsupportedOperatorsError(flat.path, context.problems)
    graph.finish()
    signature = flat.signature(0)
    in_names = dict((t, n) for n, t in signature.inputs) if signature else {}
    out_names = dict((t, n) for n, t in signature.outputs) if signature else {}
    inputs = [_info(main.tensors[t], in_names.get(t)) for t in main.inputs]
    outputs = [_info(main.tensors[t], out_names.get(t)) for t in main.outputs]
    return ImportedModel(graph.m, flat.path, inputs, outputs, context.memory, context.referenced_bytes,
                         context.copied_bytes, context.operators, context.operations, flat,
                         signature_key=signature.key if signature else None)


def _info(t: FlatTensor, signature_name: str | None = None) -> TensorInfo:
    """A main-subgraph input or output as the app sees it (int64 tensors are fed as int32)."""
    q = t.quant
    dtype = t.dtype if t.dtype is not None else np.dtype(np.float32)
    if dtype == np.int64:
        dtype = np.dtype(np.int32)
    return TensorInfo(t.name, t.shape or (1,), dtype, q.scale if q and not q.per_channel else 0.0,
                      q.zero_point if q and not q.per_channel else 0, signature_name)
