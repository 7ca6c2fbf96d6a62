"""Quantization and constants: QUANTIZE and DEQUANTIZE (constant float16 or int8 weights folded into
float32 constants, as TFLite's NNAPI delegate does), and DENSIFY of sparse weights at import."""
from __future__ import annotations

import math

import numpy as np

from ....hal import OperandType as T, OperationType as Op
from ..densify import densify
from ..flatbuffer import BadModel
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from .common import QUANT8, need, simple


@register("DEQUANTIZE")
def map_dequantize(graph: Graph, op: FlatOperator) -> None:
    """Constant input (float16 or int8 weights): folded into a float32 constant, as the delegate does."""
    need(op, 1)
    x_t, y_t = op.inputs[0], op.outputs[0]
    if graph.is_const(x_t):
        y_dims = graph.spec_of(y_t).dims
        value = graph.real_value(x_t)
        if value.size != math.prod(y_dims):
            raise BadModel(f"input {graph.tensor(x_t).describe()} and output {graph.tensor(y_t).describe()} "
                           "differ in size")
        graph.check_computed(y_dims, 4, f"output {graph.tensor(y_t).describe()}")
        graph.folded[y_t] = value.astype(np.float32).reshape(y_dims)
        return
    x = graph.spec_of(x_t)
    if x.type == T.TENSOR_FLOAT16:
        return simple(graph, op, Op.CAST, [x_t])
    simple(graph, op, Op.DEQUANTIZE, [x_t])


@register("QUANTIZE")
def map_quantize(graph: Graph, op: FlatOperator) -> None:
    """QUANTIZE from float; a requantization (quantized input) through float."""
    need(op, 1)
    x, y = graph.spec_of(op.inputs[0]), graph.spec_of(op.outputs[0])
    if y.type not in QUANT8:
        raise Unsupported(f"output type {y.type.name}")
    if x.type == T.TENSOR_FLOAT32 or x.type == T.TENSOR_FLOAT16:
        return simple(graph, op, Op.QUANTIZE, [op.inputs[0]])
    # Requantization (quantized input): DEQUANTIZE, then QUANTIZE.
    graph.emit(Op.QUANTIZE, [graph.float_input(op.inputs[0])], [graph.output(op.outputs[0])])


@register("DENSIFY")
def map_densify(graph: Graph, op: FlatOperator) -> None:
    """Sparse constant weights are densified at import (a folded constant)."""
    need(op, 1)
    tensor = graph.tensor(op.inputs[0])
    out = graph.tensor(op.outputs[0])
    if tensor.sparsity is None or tensor.region is None or tensor.dtype is None:
        raise Unsupported("DENSIFY needs a constant sparse input")
    if out.shape != tensor.shape:
        raise BadModel(f"output {out.describe()} and input {tensor.describe()} differ in shape")
    values = np.frombuffer(graph.flat.data(tensor), dtype=tensor.dtype)
    graph.folded[op.outputs[0]] = densify(values, tensor.shape, tensor.sparsity, f"tensor {tensor.describe()}",
                                          graph.context.computed_limit)
