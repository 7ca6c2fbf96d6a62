"""Reductions and normalisation: MEAN and REDUCE_*, SOFTMAX, LOG_SOFTMAX, L2 and local response
normalization, ARG_MAX / ARG_MIN."""
from __future__ import annotations

from ....hal import OperandType as T, OperationType as Op
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from .common import QUANT8, const_ints, need, separate_activation, simple, via_float

_REDUCERS = {"SUM": Op.REDUCE_SUM, "REDUCE_MAX": Op.REDUCE_MAX, "REDUCE_MIN": Op.REDUCE_MIN,
             "REDUCE_PROD": Op.REDUCE_PROD, "REDUCE_ANY": Op.REDUCE_ANY}
_ARGS = {"ARG_MAX": (Op.ARGMAX, "ArgMaxOptions"), "ARG_MIN": (Op.ARGMIN, "ArgMinOptions")}


def _axes(graph: Graph, op: FlatOperator) -> int:
    """The constant axes operand (input 1), each made non-negative."""
    rank = len(graph.spec_of(op.inputs[0]).dims)
    return graph.const_i32([a % rank for a in const_ints(graph, op.inputs[1], "axes")])


@register("MEAN")
def map_mean(graph: Graph, op: FlatOperator) -> None:
    """MEAN keeping the input quantization; through float when the output's quantization differs."""
    need(op, 2)
    keep = bool(op.options("ReducerOptions").KeepDims())
    x, y = graph.spec_of(op.inputs[0]), graph.spec_of(op.outputs[0])
    axes = _axes(graph, op)
    if x.type in QUANT8 and (x.scale, x.zero_point) != (y.scale, y.zero_point):
        # NNAPI MEAN keeps the input quantization: compute in float and quantize once.
        return via_float(graph, op, lambda ins, out: graph.emit(Op.MEAN, [ins[0], axes, graph.i32(int(keep))],
                                                                [out]))
    if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + QUANT8:
        raise Unsupported(f"input type {x.type.name}")
    out, finish = graph.shaped_output(op.outputs[0], y.dims)
    graph.emit(Op.MEAN, [graph.input(op.inputs[0]), axes, graph.i32(int(keep))], [out])
    finish()


@register(*_REDUCERS)
def map_reduce(graph: Graph, op: FlatOperator) -> None:
    """REDUCE_* keeping the input quantization, else (and always for SUM, PROD) through float."""
    nnapi = _REDUCERS[op.name]
    need(op, 2)
    keep = bool(op.options("ReducerOptions").KeepDims())
    x, y = graph.spec_of(op.inputs[0]), graph.spec_of(op.outputs[0])
    axes = _axes(graph, op)
    float_only = nnapi in (Op.REDUCE_SUM, Op.REDUCE_PROD)
    if x.quantized and (float_only or (x.scale, x.zero_point) != (y.scale, y.zero_point)):
        return via_float(graph, op, lambda ins, out: graph.emit(nnapi, [ins[0], axes, graph.bool(keep)], [out]))
    simple(graph, op, nnapi, [op.inputs[0]], [axes, graph.bool(keep)])


@register("SOFTMAX")
def map_softmax(graph: Graph, op: FlatOperator) -> None:
    """SOFTMAX with its beta (a FLOAT16 scalar for float16 inputs)."""
    need(op, 1)
    beta = float(op.options("SoftmaxOptions").Beta())
    x = graph.spec_of(op.inputs[0])
    param = graph.scalar(T.FLOAT16, beta) if x.type == T.TENSOR_FLOAT16 else graph.f32(beta)
    simple(graph, op, Op.SOFTMAX, [op.inputs[0]], [param])


@register("LOG_SOFTMAX")
def map_log_softmax(graph: Graph, op: FlatOperator) -> None:
    """LOG_SOFTMAX over the last axis (TFLite has no beta or axis)."""
    need(op, 1)
    simple(graph, op, Op.LOG_SOFTMAX, [op.inputs[0]], [graph.f32(1.0), graph.i32(-1)])


@register("L2_NORMALIZATION")
def map_l2_normalization(graph: Graph, op: FlatOperator) -> None:
    """L2_NORMALIZATION, its fused activation as a separate operation."""
    need(op, 1)
    act = op.options("L2NormOptions").FusedActivationFunction()
    out, finish = separate_activation(graph, op.outputs[0], act)
    graph.emit(Op.L2_NORMALIZATION, [graph.input(op.inputs[0])], [out])
    finish()


@register("LOCAL_RESPONSE_NORMALIZATION")
def map_local_response_normalization(graph: Graph, op: FlatOperator) -> None:
    """LOCAL_RESPONSE_NORMALIZATION with its radius, bias, alpha and beta."""
    need(op, 1)
    o = op.options("LocalResponseNormalizationOptions")
    simple(graph, op, Op.LOCAL_RESPONSE_NORMALIZATION, [op.inputs[0]],
           [graph.i32(o.Radius()), graph.f32(o.Bias()), graph.f32(o.Alpha()), graph.f32(o.Beta())])


@register(*_ARGS)
def map_arg(graph: Graph, op: FlatOperator) -> None:
    """ARG_MAX and ARG_MIN along one constant axis, into int32."""
    nnapi, options = _ARGS[op.name]
    need(op, 2)
    op.options(options)
    if graph.tensor(op.outputs[0]).type != "INT32":
        raise Unsupported(f"output type {graph.tensor(op.outputs[0]).type}; NNAPI {nnapi.name} gives int32")
    rank = len(graph.spec_of(op.inputs[0]).dims)
    axis = const_ints(graph, op.inputs[1], "axis", 1)[0] % rank
    simple(graph, op, nnapi, [op.inputs[0]], [graph.i32(axis)])
