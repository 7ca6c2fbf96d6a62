"""Loading the JSON test vectors (format: shared/cts/README.md) and building them with the public API."""
from __future__ import annotations

import base64
import glob
import json
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..hal import OperandType, OperationType
from ..ops import numpy_dtype
from ..runtime import Memory, Model


@dataclass
class TestModel:
    """One registered test model of a vector file."""

    name: str
    source: str
    spec: dict

    @property
    def expect_failure(self) -> bool:
        return bool(self.spec["expect_failure"])

    @property
    def operations(self) -> list[str]:
        """Operation type names used in any subgraph, sorted, without duplicates."""
        graphs = [self.spec["main"], *self.spec["referenced"]]
        return sorted({op["type"] for g in graphs for op in g["operations"]})

    @property
    def has_float16(self) -> bool:
        graphs = [self.spec["main"], *self.spec["referenced"]]
        return any(o["type"] in ("TENSOR_FLOAT16", "FLOAT16") for g in graphs for o in g["operands"])


def load_vectors(paths: list[str], name_filter: str | None = None) -> Iterator[TestModel]:
    """Every test model under `paths` (files or folders), in file and registration order."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(sorted(glob.glob(os.path.join(path, "**", "*.json"), recursive=True)))
        else:
            files.append(path)
    for path in files:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for spec in data.get("models", []):
            if name_filter and name_filter not in spec["name"]:
                continue
            yield TestModel(spec["name"], data.get("source", path), spec)


def decode(data: dict | None, operand_type: str) -> np.ndarray | None:
    """The values of an operand's `data` field in the operand type's dtype."""
    if data is None:
        return None
    raw = np.frombuffer(base64.b64decode(data["b64"]), dtype=np.dtype(data["dtype"]).newbyteorder("<"))
    return raw.astype(numpy_dtype(OperandType[operand_type]))


def shaped(operand: dict) -> np.ndarray | None:
    value = decode(operand["data"], operand["type"])
    if value is None:
        return None
    if OperandType[operand["type"]].is_scalar:
        return value.reshape(())
    return value.reshape(operand["dimensions"])


@dataclass
class BuiltModel:
    model: Model
    inputs: list[np.ndarray | None]
    #: Per main output: expected values (None when zero-sized), operand spec.
    outputs: list[tuple[np.ndarray | None, dict]]
    memories: list[Memory]


def build(test: TestModel) -> BuiltModel:
    """Build the test's model through the public API; CONSTANT_REFERENCE values go through shared memory."""
    spec = test.spec
    memories: list[Memory] = []
    built: dict[int, Model] = {}

    def subgraph(graph: dict, is_main: bool) -> Model:
        m = Model()
        for index, o in enumerate(graph["operands"]):
            t = OperandType[o["type"]]
            m.add_operand(t, o["dimensions"] if t.is_tensor else (), o["scale"], o["zero_point"])
            if o["channel_quant"]:
                m.set_operand_symm_per_channel_quant_params(index, o["channel_quant"]["scales"],
                                                           o["channel_quant"]["channel_dim"])
        for index, o in enumerate(graph["operands"]):
            lifetime = o["lifetime"]
            if lifetime == "CONSTANT_COPY":
                m.set_operand_value(index, shaped(o) if o["data"] is not None else b"")
            elif lifetime == "CONSTANT_REFERENCE":
                value = shaped(o)
                raw = b"" if value is None else value.tobytes()
                if raw:
                    mem = Memory.ashmem(len(raw))
                    mem.mapped().view(0, len(raw))[:] = raw
                    memories.append(mem)
                    m.set_operand_value_from_memory(index, mem, 0, len(raw))
                else:
                    m.set_operand_value(index, b"")
            elif lifetime == "NO_VALUE":
                m.set_operand_value(index, None)
            elif lifetime == "SUBGRAPH":
                ref = int(decode(o["data"], "SUBGRAPH")[0])
                m.set_operand_value_from_model(index, referenced(ref))
        for op in graph["operations"]:
            m.add_operation(OperationType[op["type"]], op["inputs"], op["outputs"])
        m.identify_inputs_and_outputs(graph["inputs"], graph["outputs"])
        if spec["is_relaxed"]:
            m.relax_computation_float32_to_float16(True)
        m.finish()
        return m

    def referenced(index: int) -> Model:
        if index not in built:
            built[index] = subgraph(spec["referenced"][index], False)
        return built[index]

    main = spec["main"]
    model = subgraph(main, True)
    inputs = [shaped(main["operands"][i]) for i in main["inputs"]]
    outputs = [(shaped(main["operands"][i]), main["operands"][i]) for i in main["outputs"]]
    return BuiltModel(model, inputs, outputs, memories)
