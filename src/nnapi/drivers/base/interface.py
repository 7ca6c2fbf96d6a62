"""A prepared model's interface: its inputs and outputs alone, as plain data a cache format can hold
(`io_of`), and back as the model the base checks and binds requests against (`interface_model`). A driver
whose cache holds its own program, not the NNAPI model, rebuilds that model in `load()` from it.

An entry is `(operand type, dimensions)` or `(operand type, dimensions, scale, zero point)`: ints, a tuple
and a float, so it round-trips through JSON or msgpack as lists.
"""
from __future__ import annotations

from typing import Sequence

from ...hal import Model, Operand, OperandLifeTime as L, OperandType, Subgraph

IoSpec = tuple  # (type, dims) or (type, dims, scale, zero_point)


def io_of(model: Model) -> tuple[list[IoSpec], list[IoSpec]]:
    """(inputs, outputs) of the model's main graph, each `(type, dims, scale, zero point)`."""
    main = model.main

    def spec(i: int) -> IoSpec:
        o = main.operands[i]
        return int(o.type), tuple(int(d) for d in o.dimensions), float(o.scale), int(o.zero_point)
    return [spec(i) for i in main.input_indexes], [spec(i) for i in main.output_indexes]


def interface_model(inputs: Sequence[IoSpec], outputs: Sequence[IoSpec]) -> Model:
    """A model of these inputs and outputs and no operations: what `DriverPreparedModel` validates
    requests against and binds them with, for a program loaded from a cache."""
    def operand(entry: IoSpec, lifetime: L) -> Operand:
        t, dims, *quant = entry
        scale, zero_point = (float(quant[0]), int(quant[1])) if quant else (0.0, 0)
        return Operand(OperandType(int(t)), tuple(int(d) for d in dims), scale=scale, zero_point=zero_point,
                       lifetime=lifetime)
    operands = [*(operand(e, L.SUBGRAPH_INPUT) for e in inputs), *(operand(e, L.SUBGRAPH_OUTPUT) for e in outputs)]
    n = len(inputs)
    return Model(Subgraph(operands, [], tuple(range(n)), tuple(range(n, len(operands)))))


__all__ = ["IoSpec", "interface_model", "io_of"]
