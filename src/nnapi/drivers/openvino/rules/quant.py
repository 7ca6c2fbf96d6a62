"""QUANTIZE and DEQUANTIZE. Quantized operands are held as their real values, so both pass the value
on: the graph builder's FakeQuantize puts QUANTIZE's output on its grid, and DEQUANTIZE's input
already holds the real values."""
from __future__ import annotations

from ....hal import OperationType as Op
from ....ops import OpContext
from ..lowering import FLOAT, Q8A, Q8AS, Q8PC, Q8S, lowers


@lowers(Op.QUANTIZE, types=FLOAT)
def quantize(ctx: OpContext, xs):
    return [xs[0]]


@lowers(Op.DEQUANTIZE, types=(Q8A, Q8AS, Q8S, Q8PC))
def dequantize(ctx: OpContext, xs):
    return [xs[0]]
