"""Laying a model's CONSTANT_REFERENCE values out in one blob: what drivers write to a data cache."""
from __future__ import annotations

import dataclasses

from ..hal import DataLocation, Model, OperandLifeTime
from ..memory import map_pool


def relocate_constants(model: Model, align: int = 16) -> tuple[Model, bytes]:
    """(the model with every CONSTANT_REFERENCE pointing into pool 0 of the blob and no pools, the blob);
    each value starts `align`-byte aligned so it can be read in place."""
    pools = [map_pool(p) for p in model.pools]
    data = bytearray()
    subgraphs = []
    for sub in model.all_subgraphs():
        operands = []
        for operand in sub.operands:
            if operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
                loc = operand.location
                data.extend(b"\0" * (-len(data) % align))
                offset = len(data)
                data.extend(pools[loc.pool_index].view(loc.offset, loc.length))
                operand = dataclasses.replace(operand, location=DataLocation(0, offset, loc.length))
            operands.append(operand)
        subgraphs.append(dataclasses.replace(sub, operands=operands))
    return dataclasses.replace(model, main=subgraphs[0], referenced=subgraphs[1:], pools=[]), bytes(data)
