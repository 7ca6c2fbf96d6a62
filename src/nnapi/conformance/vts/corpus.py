"""The test-vector corpus (`nnapi cts`'s JSON vectors) as the kit uses it: where it is, which models a
quick run takes (a stratified sample: every operation type, spread over the operand types), and one
model built for the HAL with its inputs and golden outputs."""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...hal import ErrorStatus, Model, OperandType
from ...ops import numpy_dtype
from ..runner import compare
from ..vectors import BuiltModel, TestModel, build, load_vectors
from .core import Fail, Kit, Skip

#: Environment variable naming the corpus folder when `--vectors` is not given.
ENV = "NNAPI_CTS_DIR"


def find_corpus(path: str | os.PathLike | None = None) -> Path | None:
    """The corpus folder: `path`, else $NNAPI_CTS_DIR, else `shared/cts` next to the working directory or
    next to this checkout; None when there is none."""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"no test vectors at {p}")
        return p
    candidates = []
    if os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]))
    here = Path(__file__).resolve()
    candidates += [Path.cwd() / "shared" / "cts", Path.cwd().parent / "shared" / "cts",
                   here.parents[4].parent / "shared" / "cts"]
    for p in candidates:
        if p.is_dir():
            return p
    return None


def corpus(kit: Kit) -> list[TestModel]:
    """Every test model of the corpus (loaded once per run); a Skip when there is no corpus."""
    if kit.options.vectors is None:
        raise Skip(f"no test-vector corpus (pass --vectors PATH or set {ENV})")
    return kit.memo("corpus", lambda: list(load_vectors([str(kit.options.vectors)])))


def _input_type(test: TestModel) -> str:
    main = test.spec["main"]
    for op in main["operations"]:
        if op["inputs"]:
            return main["operands"][op["inputs"][0]]["type"]
    return ""


def _plain(test: TestModel) -> bool:
    return "all_inputs_as_internal" not in test.name and "all_tensors_as_inputs" not in test.name


def stratified(tests: list[TestModel], per_operation: int = 2,
               claimed: Callable[[TestModel], bool] | None = None) -> list[TestModel]:
    """Up to `per_operation` valid models per operation type, each of another operand type, choosing among
    the candidates the operand type the sample has used least so far (fewest operations first); then one
    model expected to fail per source file. Deterministic, whatever the device. With `claimed` (does the
    driver support every operation of a model?), an operation type none of whose picks the driver
    supports also gets the first candidate it does, trying one candidate of each other operand type: a
    driver of a few operand types is sure to meet corpus vectors of what it claims."""
    by_op: dict[str, list[TestModel]] = {}
    op_types: dict[str, set[str]] = {}  # (each model's operation types, by name)
    for t in tests:
        if t.expect_failure or not _plain(t):
            continue
        op_types[t.name] = {o["type"] for o in t.spec["main"]["operations"]}
        for op in op_types[t.name]:
            by_op.setdefault(op, []).append(t)
    chosen: dict[str, TestModel] = {}
    used: Counter = Counter()
    for op in sorted(by_op):
        types_taken = {_input_type(t) for t in chosen.values() if op in op_types[t.name]}
        candidates = sorted(by_op[op], key=lambda t: (used[_input_type(t)], len(t.spec["main"]["operations"]),
                                                      t.name))
        for pick in candidates:
            if len(types_taken) >= per_operation:
                break
            if _input_type(pick) in types_taken:
                continue
            chosen[pick.name] = pick
            used[_input_type(pick)] += 1
            types_taken.add(_input_type(pick))
    if claimed is not None:
        for op in sorted(by_op):
            if any(claimed(t) for t in chosen.values() if op in op_types[t.name]):
                continue
            tried = {_input_type(t) for t in chosen.values() if op in op_types[t.name]}
            for pick in sorted(by_op[op], key=lambda t: (len(t.spec["main"]["operations"]), t.name)):
                if _input_type(pick) in tried:
                    continue
                tried.add(_input_type(pick))
                if claimed(pick):
                    chosen[pick.name] = pick
                    break
    failing_sources: set[str] = set()
    for t in tests:
        if t.expect_failure and t.source not in failing_sources:
            failing_sources.add(t.source)
            chosen[t.name] = t
    order = {t.name: k for k, t in enumerate(tests)}
    return sorted(chosen.values(), key=lambda t: order[t.name])


def selection(kit: Kit) -> list[TestModel]:
    """The models a suite runs: all of them, or with --quick the stratified sample."""
    tests = corpus(kit)
    if not kit.quick:
        return tests
    return kit.memo("corpus-sample", lambda: stratified(tests, claimed=lambda t: _claimed(kit, t)))


def _claimed(kit: Kit, test: TestModel) -> bool:
    """Whether the driver says it supports every operation of a corpus model (answered once per model; a
    model that cannot be built, a refusal or a failure of the driver: no)."""
    def ask() -> bool:
        try:
            model = case(test).model
            status, flags, _ = kit.attempt("get_supported_operations", kit.driver.get_supported_operations, model)
        except Exception:  # (the check that runs the model reports what is wrong with it)
            return False
        return status == ErrorStatus.NONE and isinstance(flags, (list, tuple)) and len(flags) == \
            len(model.main.operations) and all(f is True for f in flags)
    return kit.memo(f"claimed:{test.name}", ask)


@dataclass
class Case:
    """One corpus model built for the HAL: the model, inputs (None: no value), golden outputs."""

    test: TestModel
    built: BuiltModel
    model: Model

    @property
    def name(self) -> str:
        return self.test.name

    @property
    def inputs(self) -> list[np.ndarray | None]:
        return self.built.inputs

    def output_dims(self) -> list[tuple[int, ...]]:
        return [tuple(spec["dimensions"]) for _, spec in self.built.outputs]

    def output_types(self) -> list[OperandType]:
        return [OperandType[spec["type"]] for _, spec in self.built.outputs]

    def output_nbytes(self) -> list[int]:
        """Golden output sizes; a zero-sized output gets a 1-byte buffer (VTS createRequest)."""
        sizes = []
        for dims, t in zip(self.output_dims(), self.output_types()):
            n = (math.prod(dims) if dims else 1) * t.element_size
            sizes.append(n)
        return sizes

    def read_outputs(self, io: Any) -> list[np.ndarray]:
        outs = []
        for k, (dims, t) in enumerate(zip(self.output_dims(), self.output_types())):
            count = math.prod(dims) if dims else 1
            if count == 0:
                outs.append(np.zeros(0, numpy_dtype(t)))
                continue
            outs.append(io.output_array(k, numpy_dtype(t), (count,)).copy())
        return outs

    def problem(self, outputs: list[np.ndarray]) -> str | None:
        return compare(self.test, self.built, outputs)

    @property
    def has_zero_sized_output(self) -> bool:
        return any(0 in dims for dims in self.output_dims())

    @property
    def has_scalar_outputs(self) -> bool:
        """VTS hasScalarOutputs: any RANK, IF or WHILE operation (their outputs cannot be made dynamic)."""
        graphs = [self.test.spec["main"], *self.test.spec["referenced"]]
        return any(op["type"] in ("RANK", "IF", "WHILE") for g in graphs for op in g["operations"])


def case(test: TestModel) -> Case:
    """Build one corpus model; a model that cannot be built fails the check (the kit's corpus is wrong)."""
    from ...hal import NnError
    try:
        built = build(test)
    except NnError as e:
        raise Fail(f"the vector {test.name} cannot be built with the public API: {e}") from None
    return Case(test, built, built.model.to_hal())


def raw_model(test: TestModel) -> tuple[Model, list[np.ndarray | None], Any] | None:
    """A main-graph-only vector as a HAL model built field by field, without the runtime's validation
    (the VTS sends the models expected to fail straight to the driver). Returns the model, its inputs
    and what keeps its constant pool alive; None for vectors with referenced subgraphs."""
    from ...hal import (DataLocation, MemoryPool, Operand, OperandLifeTime, OperationType, Subgraph,
                        SymmPerChannelQuantParams, Operation)
    from ...memory import allocate_ashmem, map_handle
    from ..vectors import shaped
    spec = test.spec
    if spec["referenced"]:
        return None
    main = spec["main"]
    values = bytearray()
    large: list[tuple[int, bytes]] = []
    operands = []
    for index, o in enumerate(main["operands"]):
        t = OperandType[o["type"]]
        lifetime = OperandLifeTime[o["lifetime"]]
        data = shaped(o)
        raw = b"" if data is None else np.ascontiguousarray(data).tobytes()
        location = DataLocation()
        if lifetime == OperandLifeTime.CONSTANT_COPY:
            values.extend(b"\0" * (-len(values) % 4))
            location = DataLocation(0, len(values), len(raw))
            values.extend(raw)
        elif lifetime == OperandLifeTime.CONSTANT_REFERENCE:
            large.append((index, raw))
        cq = o["channel_quant"]
        operands.append(Operand(t, tuple(o["dimensions"]) if t.is_tensor else (), int(o["consumers"]),
                                float(o["scale"]), int(o["zero_point"]), lifetime, location,
                                SymmPerChannelQuantParams(tuple(cq["scales"]), cq["channel_dim"]) if cq else None))
    pools = []
    handle = None
    if large:
        offsets, total = [], 0
        for _, raw in large:
            offsets.append(total)
            total += len(raw) + (-len(raw) % 64)
        handle = allocate_ashmem(max(total, 1), "nnapi-vts-constants")
        mapped = map_handle(handle)
        for (index, raw), offset in zip(large, offsets):
            mapped.buffer[offset:offset + len(raw)] = raw
            operands[index].location = DataLocation(0, offset, len(raw))
        pools.append(MemoryPool(handle=handle))
    operations = [Operation(OperationType[op["type"]], tuple(op["inputs"]), tuple(op["outputs"]))
                  for op in main["operations"]]
    model = Model(Subgraph(operands, operations, tuple(main["inputs"]), tuple(main["outputs"])), [], bytes(values),
                  pools, bool(spec["is_relaxed"]))
    inputs = [shaped(main["operands"][i]) for i in main["inputs"]]
    return model, inputs, handle


def find(kit: Kit, name: str) -> TestModel:
    for t in corpus(kit):
        if t.name == name:
            return t
    raise Skip(f"the corpus has no model named {name}")
