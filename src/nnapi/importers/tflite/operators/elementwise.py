"""Element-wise operators: unary, binary (with fused activations), comparisons, logical, SELECT, CAST,
and the decompositions of those NNAPI 1.3 lacks (SQUARED_DIFFERENCE, GELU, LEAKY_RELU)."""
from __future__ import annotations

import math

from ....hal import OperandType as T, OperationType as Op
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from ..spec import Spec, f32
from .common import QUANT8, fused, need, simple, via_float, with_activation

#: Unary operators NNAPI 1.3 has in float only (int32 too for ABS / NEG): quantized ones run in float.
_FLOAT_UNARY = {"ABS": Op.ABS, "NEG": Op.NEG, "EXP": Op.EXP, "LOG": Op.LOG, "SQRT": Op.SQRT, "RSQRT": Op.RSQRT,
                "SIN": Op.SIN, "FLOOR": Op.FLOOR, "ELU": Op.ELU}
#: Unary operators NNAPI has for float and quant8 (same or fixed output quantization).
_UNARY = {"LOGISTIC": Op.LOGISTIC, "TANH": Op.TANH, "RELU": Op.RELU, "RELU6": Op.RELU6, "RELU_N1_TO_1": Op.RELU1,
          "HARD_SWISH": Op.HARD_SWISH}
#: Operators that are the NNAPI operation of the same inputs: (operation, input count).
_DIRECT = {"LESS": (Op.LESS, 2), "LESS_EQUAL": (Op.LESS_EQUAL, 2), "GREATER": (Op.GREATER, 2),
           "GREATER_EQUAL": (Op.GREATER_EQUAL, 2), "EQUAL": (Op.EQUAL, 2), "NOT_EQUAL": (Op.NOT_EQUAL, 2),
           "MAXIMUM": (Op.MAXIMUM, 2), "MINIMUM": (Op.MINIMUM, 2), "PRELU": (Op.PRELU, 2),
           "LOGICAL_AND": (Op.LOGICAL_AND, 2), "LOGICAL_OR": (Op.LOGICAL_OR, 2), "LOGICAL_NOT": (Op.LOGICAL_NOT, 1)}
#: Binary operators with a fused activation: (operation, options table, quantized in NNAPI too).
_BINARY = {"ADD": (Op.ADD, "AddOptions", True), "SUB": (Op.SUB, "SubOptions", True),
           "MUL": (Op.MUL, "MulOptions", True), "DIV": (Op.DIV, "DivOptions", False)}
#: Output quantization NNAPI fixes for quant8 LOGISTIC and TANH: (scale, zero point by type).
_FIXED_QUANT = {Op.LOGISTIC: (1 / 256, {T.TENSOR_QUANT8_ASYMM: 0, T.TENSOR_QUANT8_ASYMM_SIGNED: -128}),
                Op.TANH: (1 / 128, {T.TENSOR_QUANT8_ASYMM: 128, T.TENSOR_QUANT8_ASYMM_SIGNED: 0})}

# GELU(x) = x * Phi(x) = 0.5 * (x + |x| * erf(|x| / sqrt 2)), erf by Abramowitz & Stegun 7.1.26
# (|error| <= 1.5e-7): erf(a) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-a^2), t = 1 / (1 + p a).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@register(*_FLOAT_UNARY)
def map_float_unary(graph: Graph, op: FlatOperator) -> None:
    """Float (and int32 ABS / NEG) as is; quantized tensors through float."""
    nnapi = _FLOAT_UNARY[op.name]
    need(op, 1)
    spec = graph.spec_of(op.inputs[0])
    if spec.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) or (
            spec.type == T.TENSOR_INT32 and nnapi in (Op.ABS, Op.NEG)):
        return simple(graph, op, nnapi, [op.inputs[0]])
    if spec.quantized:
        return via_float(graph, op, lambda ins, out: graph.emit(nnapi, ins, [out]))
    raise Unsupported(f"input type {spec.type.name} is not supported by NNAPI {nnapi.name}")


@register(*_UNARY)
def map_unary(graph: Graph, op: FlatOperator) -> None:
    """Quant8 as is where NNAPI's output quantization matches TFLite's, else through float."""
    nnapi = _UNARY[op.name]
    need(op, 1)
    x, y = graph.spec_of(op.inputs[0]), graph.spec_of(op.outputs[0])
    if x.type in QUANT8:
        if nnapi in _FIXED_QUANT:
            scale, zps = _FIXED_QUANT[nnapi]
            ok = f32(y.scale) == f32(scale) and y.zero_point == zps[x.type]
        elif nnapi == Op.HARD_SWISH:
            ok = True
        else:
            ok = (x.scale, x.zero_point) == (y.scale, y.zero_point)
        if not ok:
            return via_float(graph, op, lambda ins, out: graph.emit(nnapi, ins, [out]))
    elif x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        raise Unsupported(f"input type {x.type.name} is not supported by NNAPI {nnapi.name}")
    simple(graph, op, nnapi, [op.inputs[0]])


@register(*_DIRECT)
def map_direct(graph: Graph, op: FlatOperator) -> None:
    """The NNAPI operation of the same name on the same inputs."""
    nnapi, n_in = _DIRECT[op.name]
    need(op, n_in)
    simple(graph, op, nnapi, list(op.inputs))


@register(*_BINARY)
def map_binary(graph: Graph, op: FlatOperator) -> None:
    """ADD, SUB, MUL, DIV with their fused activation; through float where NNAPI lacks the type."""
    nnapi, options, quant_ok = _BINARY[op.name]
    need(op, 2)
    act = op.options(options).FusedActivationFunction()
    a, b = graph.spec_of(op.inputs[0]), graph.spec_of(op.inputs[1])
    if a.type != b.type:
        raise Unsupported(f"inputs have different types {a.type.name} and {b.type.name}")
    if (a.quantized and not quant_ok) or a.type == T.TENSOR_QUANT16_SYMM:
        code, post = fused(act)

        def build(ins: list[int], out: int) -> None:
            if post is None:
                graph.emit(nnapi, ins + [graph.i32(code)], [out])
            else:
                tmp = graph.temp(graph.specs[out])
                graph.emit(nnapi, ins + [graph.i32(code)], [tmp])
                graph.emit(post, [tmp], [out])
        return via_float(graph, op, build)
    if a.type == T.TENSOR_INT32 and act != 0:
        raise Unsupported(f"int32 {op.name} with fused activation {act}")
    if a.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32) + QUANT8:
        raise Unsupported(f"input type {a.type.name} is not supported by NNAPI {nnapi.name}")
    code, out, finish = with_activation(graph, op.outputs[0], act)
    graph.emit(nnapi, [graph.input(op.inputs[0]), graph.input(op.inputs[1]), code], [out])
    finish()


@register("POW")
def map_pow(graph: Graph, op: FlatOperator) -> None:
    """NNAPI POW, float32 only."""
    need(op, 2)
    if graph.spec_of(op.inputs[0]).type != T.TENSOR_FLOAT32:
        raise Unsupported("NNAPI POW is float only")
    simple(graph, op, Op.POW, list(op.inputs))


@register("SQUARED_DIFFERENCE")
def map_squared_difference(graph: Graph, op: FlatOperator) -> None:
    """(a - b)^2 as SUB then MUL (in float for quantized tensors)."""
    need(op, 2)
    a = graph.spec_of(op.inputs[0])
    out_dims = graph.spec_of(op.outputs[0]).dims
    if a.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32):
        d = graph.temp(Spec(a.type, out_dims))
        graph.emit(Op.SUB, [graph.input(op.inputs[0]), graph.input(op.inputs[1]), graph.i32(0)], [d])
        graph.emit(Op.MUL, [d, d, graph.i32(0)], [graph.output(op.outputs[0])])
        return

    def build(ins: list[int], out: int) -> None:
        d = graph.temp(Spec(T.TENSOR_FLOAT32, out_dims))
        graph.emit(Op.SUB, ins + [graph.i32(0)], [d])
        graph.emit(Op.MUL, [d, d, graph.i32(0)], [out])
    via_float(graph, op, build)


def _gelu(graph: Graph, x: int, out: int, dims: tuple[int, ...], approximate: bool) -> None:
    """Emit GELU of float operand `x` into `out` from MUL, ADD, TANH (approximate) or ABS, DIV, EXP."""
    f = Spec(T.TENSOR_FLOAT32, dims)
    one = graph.const_f32([1.0])

    def mul(a: int, b: int) -> int:
        o = graph.temp(f)
        graph.emit(Op.MUL, [a, b, graph.i32(0)], [o])
        return o

    def add(a: int, b: int) -> int:
        o = graph.temp(f)
        graph.emit(Op.ADD, [a, b, graph.i32(0)], [o])
        return o

    if approximate:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = mul(mul(x, x), x)
        inner = mul(add(x, mul(x3, graph.const_f32([0.044715]))), graph.const_f32([math.sqrt(2 / math.pi)]))
        th = graph.temp(f)
        graph.emit(Op.TANH, [inner], [th])
        graph.emit(Op.MUL, [mul(x, add(th, one)), graph.const_f32([0.5]), graph.i32(0)], [out])
        return
    a = graph.temp(f)
    graph.emit(Op.ABS, [x], [a])
    t = graph.temp(f)
    graph.emit(Op.DIV, [one, add(mul(a, graph.const_f32([_ERF_P / math.sqrt(2)])), one), graph.i32(0)], [t])
    poly = mul(t, graph.const_f32([_ERF_A[4]]))
    for coefficient in reversed(_ERF_A[:4]):
        poly = mul(add(poly, graph.const_f32([coefficient])), t)
    e = graph.temp(f)
    graph.emit(Op.EXP, [mul(mul(x, x), graph.const_f32([-0.5]))], [e])
    erf = graph.temp(f)
    graph.emit(Op.SUB, [one, mul(poly, e), graph.i32(0)], [erf])      # erf(|x| / sqrt 2)
    graph.emit(Op.MUL, [add(x, mul(a, erf)), graph.const_f32([0.5]), graph.i32(0)], [out])


@register("GELU")
def map_gelu(graph: Graph, op: FlatOperator) -> None:
    """x Phi(x): exact (erf) or tanh form, built from NNAPI 1.3 element-wise operations."""
    need(op, 1)
    approximate = bool(op.options("GeluOptions").Approximate())
    dims = graph.spec_of(op.outputs[0]).dims
    via_float(graph, op, lambda ins, out: _gelu(graph, ins[0], out, dims, approximate))


@register("LEAKY_RELU")
def map_leaky_relu(graph: Graph, op: FlatOperator) -> None:
    """PRELU with a constant alpha (in float for quantized tensors)."""
    need(op, 1)
    alpha = float(op.options("LeakyReluOptions").Alpha())
    if graph.spec_of(op.inputs[0]).type == T.TENSOR_FLOAT32:
        return simple(graph, op, Op.PRELU, [op.inputs[0]], [graph.const_f32([alpha])])
    via_float(graph, op, lambda ins, out: graph.emit(Op.PRELU, [ins[0], graph.const_f32([alpha])], [out]))


@register("SELECT", "SELECT_V2")
def map_select(graph: Graph, op: FlatOperator) -> None:
    """NNAPI SELECT, which does not broadcast: inputs of one shape only."""
    need(op, 3)
    dims = [graph.spec_of(t).dims for t in op.inputs]
    if len(set(dims)) != 1:
        raise Unsupported(f"SELECT with broadcasting ({[list(d) for d in dims]}); NNAPI SELECT does not broadcast")
    simple(graph, op, Op.SELECT, list(op.inputs))


@register("CAST")
def map_cast(graph: Graph, op: FlatOperator) -> None:
    """NNAPI CAST between the types it converts (float32, float16, int32, uint8)."""
    need(op, 1)
    ok = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
    for t in (op.inputs[0], op.outputs[0]):
        if graph.spec_of(t).type not in ok:
            raise Unsupported(f"NNAPI CAST does not convert {graph.tensor(t).type}")
    simple(graph, op, Op.CAST, [op.inputs[0]])
