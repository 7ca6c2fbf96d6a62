"""Recurrent operators: UNIDIRECTIONAL_SEQUENCE_LSTM, float as NNAPI's sequence LSTM and full-integer
unrolled into NNAPI QUANTIZED_LSTM steps."""
from __future__ import annotations

import numpy as np

from ....hal import OperandType as T, OperationType as Op
from ..flatbuffer import BadModel
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from ..spec import Spec
from .common import ACTIVATION_NAMES, const_ints, fused

#: A full-integer sequence LSTM becomes one QUANTIZED_LSTM per time step, up to this many.
_MAX_UNROLLED_STEPS = 4096


@register("UNIDIRECTIONAL_SEQUENCE_LSTM")
def map_unidirectional_sequence_lstm(graph: Graph, op: FlatOperator) -> None:
    """Float as NNAPI UNIDIRECTIONAL_SEQUENCE_LSTM (hybrid weights dequantized at import); full
    integer as one QUANTIZED_LSTM per time step."""
    o = op.options("UnidirectionalSequenceLSTMOptions")
    if len(op.inputs) not in (20, 24) or len(op.outputs) != 1:
        raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs (20 or 24 inputs, 1 output)")
    x = graph.spec_of(op.inputs[0])
    graph.dims(op.inputs[0], 3, "input")
    if x.type == T.TENSOR_QUANT8_ASYMM_SIGNED:
        return _lstm_int8(graph, op, o)
    if x.type != T.TENSOR_FLOAT32:
        raise Unsupported(f"{graph.tensor(op.inputs[0]).type} input: NNAPI UNIDIRECTIONAL_SEQUENCE_LSTM is float "
                          "only (int8 is imported as QUANTIZED_LSTM steps)")
    for t in op.inputs[1:]:
        if t >= 0 and graph.spec_of(t).type not in (T.TENSOR_FLOAT32,):
            if not graph.is_const(t):
                raise Unsupported(f"hybrid LSTM weight {graph.tensor(t).describe()}")
    ins = []
    for k, t in enumerate(op.inputs[:20]):
        if t < 0:
            ins.append(graph.omitted(T.TENSOR_FLOAT32))
        elif k > 0 and graph.spec_of(t).type != T.TENSOR_FLOAT32:
            ins.append(graph.const(graph.real_value(t), Spec(T.TENSOR_FLOAT32, graph.spec_of(t).dims)))
        else:
            ins.append(graph.input(t))
    act = o.FusedActivationFunction()
    fused(act)
    if act not in (0, 1, 3, 4):
        raise Unsupported(f"activation {ACTIVATION_NAMES[act]}")
    ins += [graph.i32(act), graph.f32(o.CellClip()), graph.f32(o.ProjClip()), graph.bool(bool(o.TimeMajor()))]
    for t in (op.inputs[20:24] if len(op.inputs) == 24 else ()):
        ins.append(graph.omitted(T.TENSOR_FLOAT32) if t < 0 else graph.input(t))
    if len(op.inputs) == 20:
        ins += [graph.omitted(T.TENSOR_FLOAT32) for _ in range(4)]
    graph.emit(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [graph.output(op.outputs[0])])


def _lstm_int8(graph: Graph, op: FlatOperator, o) -> None:
    """A full-integer sequence LSTM (TFLite's 8x8_16 kernel: int8 activations and weights, int16 cell
    state) unrolled over its time steps as NNAPI QUANTIZED_LSTM, the one-step operation ported
    from that kernel.

    One difference is bridged: without layer normalization TFLite adds each gate bias into the
    input matmul's int32 accumulator, while Android's QUANTIZED_LSTM uses gate biases only in the
    layer normalization. The bias is exactly (v - zero point) * w summed over a few extra input
    columns holding constants v, with int8 weight columns w appended to the input-to-gate
    weights; the operation's own bias operands are then zeros, so either reading of them gives
    the same result."""
    ins = list(op.inputs) + [-1] * (24 - len(op.inputs))
    x_t = ins[0]
    time_major = bool(o.TimeMajor())
    x = graph.spec_of(x_t)
    first, second, n_input = graph.dims(x_t, 3, "input")
    steps, batch = (first, second) if time_major else (second, first)
    if not 0 < steps <= _MAX_UNROLLED_STEPS:
        raise Unsupported(f"{steps} time steps (unrolled into one QUANTIZED_LSTM each: 1 to "
                          f"{_MAX_UNROLLED_STEPS})")
    cifg = ins[1] < 0
    for k in (2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19):
        if ins[k] < 0:
            raise BadModel(f"required LSTM input {k} is omitted")
    if cifg != (ins[5] < 0) or cifg != (ins[12] < 0):
        raise BadModel("input-gate weights and bias (inputs 1, 5 and 12) must be all present or all omitted")
    n_units, _ = graph.dims(ins[4], 2, "input-to-output weights")
    n_output = graph.dims(ins[8], 2, "recurrent-to-output weights")[1]
    layer_norm = ins[21] >= 0
    if o.ProjClip() > 0 and ins[16] >= 0:
        raise Unsupported("projection clipping (TFLite and NNAPI quantize the clip differently)")
    if any(ins[k] >= 0 for k in (9, 10, 11)) and n_output != n_units:
        raise Unsupported("peephole weights with a projection to another size (LiteRT's integer kernel applies "
                          "them over output_size values, QUANTIZED_LSTM over num_units)")
    act = o.FusedActivationFunction()
    fused(act)
    if act != 4:
        raise Unsupported(f"activation {ACTIVATION_NAMES[act]} (the integer kernel computes tanh)")
    if len(op.intermediates) < 5:
        raise Unsupported("the gate and hidden-state scales (5 intermediate tensors) are missing")
    hidden = graph.tensor(op.intermediates[4]).quant
    if hidden is None or not hidden.scale > 0:
        raise BadModel(f"hidden-state intermediate {graph.tensor(op.intermediates[4]).describe()} has no scale")
    if not -128 < hidden.zero_point <= 127:
        raise Unsupported(f"hidden-state zero point {hidden.zero_point} (QUANTIZED_LSTM takes its negation "
                          "as an int8)")
    gate_scales = []
    for k in range(4):
        q = graph.tensor(op.intermediates[k]).quant
        if layer_norm and (q is None or not q.scale > 0):
            raise BadModel(f"gate intermediate {graph.tensor(op.intermediates[k]).describe()} has no scale")
        gate_scales.append(q.scale if layer_norm else 2.0 ** -12)   # Q3.12 without layer norm
    state = graph.spec_of(ins[18])
    cell = graph.spec_of(ins[19])
    y = graph.spec_of(op.outputs[0])
    if state.type != T.TENSOR_QUANT8_ASYMM_SIGNED or cell.type != T.TENSOR_QUANT16_SYMM:
        raise Unsupported(f"states of types {state.type.name} and {cell.type.name} (int8 and int16 expected)")
    if (y.type, y.scale, y.zero_point) != (state.type, state.scale, state.zero_point):
        raise Unsupported("the output's quantization differs from the output state's")
    want_y = (steps, batch, n_output) if time_major else (batch, steps, n_output)
    if y.dims != want_y:
        raise BadModel(f"output {graph.tensor(op.outputs[0]).describe()} should have shape {list(want_y)}")

    # Constant operands shared by every step.
    gates = [g for g in range(4) if not (cifg and g == 0)]
    columns, extra = _bias_columns(graph, op, ins, gates, x, n_units, layer_norm)
    q8 = {}
    for g in gates:
        w_t = ins[1 + g]
        w_spec = _lstm_weight(graph, w_t, (n_units, n_input))
        if extra:
            w = np.concatenate([graph.const_value(w_t).astype(np.int8).reshape(n_units, n_input), columns[g]], 1)
            q8[1 + g] = graph.const(w, w_spec.with_dims((n_units, n_input + extra)))
        else:
            q8[1 + g] = graph.input(w_t, w_spec)
        q8[5 + g] = graph.input(ins[5 + g], _lstm_weight(graph, ins[5 + g], (n_units, n_output)))
    if ins[16] >= 0:
        q8[16] = graph.input(ins[16], _lstm_weight(graph, ins[16], (n_output, n_units)))
    fixed = [None] * 32
    for k, operand in q8.items():
        fixed[k] = operand
    for k in (9, 10, 11, 20, 21, 22, 23):
        if ins[k] >= 0:
            spec = graph.spec_of(ins[k])
            if spec.type != T.TENSOR_QUANT16_SYMM:
                raise Unsupported(f"LSTM input {k} of type {spec.type.name} (int16 expected)")
            fixed[k] = graph.input(ins[k], spec.with_dims((n_units,)))
    for g in gates:
        bias_spec = Spec(T.TENSOR_INT32, (n_units,))
        fixed[12 + g] = graph.input(ins[12 + g], bias_spec) if layer_norm else graph.zeros(bias_spec)
    if ins[17] >= 0:
        fixed[17] = graph.input(ins[17], Spec(T.TENSOR_INT32, (n_output,)))
    omitted = {1: T.TENSOR_QUANT8_SYMM, 5: T.TENSOR_QUANT8_SYMM, 9: T.TENSOR_QUANT16_SYMM,
               10: T.TENSOR_QUANT16_SYMM, 11: T.TENSOR_QUANT16_SYMM, 12: T.TENSOR_INT32,
               16: T.TENSOR_QUANT8_SYMM, 17: T.TENSOR_INT32, 20: T.TENSOR_QUANT16_SYMM,
               21: T.TENSOR_QUANT16_SYMM, 22: T.TENSOR_QUANT16_SYMM, 23: T.TENSOR_QUANT16_SYMM}
    for k, kind in omitted.items():
        if fixed[k] is None:
            fixed[k] = graph.omitted(kind)
    fixed[24] = graph.f32(max(float(o.CellClip()), 0.0))
    fixed[25] = graph.f32(0.0)
    for g in range(4):
        fixed[26 + g] = graph.f32(gate_scales[g])
    # TFLite's kernel adds the hidden zero point where Android's QUANTIZED_LSTM subtracts its operand
    # (and adds it back in the projection bias): the operand is the negated zero point.
    fixed[30] = graph.i32(-hidden.zero_point)
    fixed[31] = graph.f32(hidden.scale)
    # The steps. Rows of [batch * steps, n_input] (batch-major) or [steps * batch, n_input]
    # (time-major) take the bias columns at once; viewed as [batch, steps * width] or
    # [steps * batch, width], one SPLIT gives every step's [batch, width] input; the step outputs,
    # concatenated along that same axis, are the output sequence in TFLite's layout.
    width = n_input + extra
    x_rows = graph.reshape(graph.input(x_t), (batch * steps, n_input))
    if extra:
        graph.check_computed((batch * steps, extra), 1, "LSTM bias columns")
        joined = graph.temp(x.with_dims((batch * steps, width)))
        graph.emit(Op.CONCATENATION, [x_rows, graph.const(np.tile(columns["values"], (batch * steps, 1)),
                                                          x.with_dims((batch * steps, extra))), graph.i32(1)],
                   [joined])
        x_rows = joined
    axis = 0 if time_major else 1
    pieces = [x_rows]
    if steps > 1:
        pieces = [graph.temp(x.with_dims((batch, width))) for _ in range(steps)]
        sequence = x_rows if time_major else graph.reshape(x_rows, (batch, steps * width))
        graph.emit(Op.SPLIT, [sequence, graph.i32(axis), graph.i32(steps)], pieces)
    h = graph.input(ins[18], state.with_dims((batch, n_output)))
    c = graph.input(ins[19], cell.with_dims((batch, n_units)))
    outputs = []
    for piece in pieces:
        step = list(fixed)
        step[0], step[18], step[19] = piece, h, c
        h = graph.temp(state.with_dims((batch, n_output)))
        c = graph.temp(cell.with_dims((batch, n_units)))
        out = graph.temp(state.with_dims((batch, n_output)))
        graph.emit(Op.QUANTIZED_LSTM, step, [h, c, out])
        outputs.append(out)
    if len(outputs) > 1:
        joined = graph.temp(state.with_dims((steps * batch, n_output) if time_major else (batch, steps * n_output)))
        graph.emit(Op.CONCATENATION, outputs + [graph.i32(axis)], [joined])
        outputs = [joined]
    graph.emit(Op.RESHAPE, [outputs[0], graph.const_i32(list(want_y))], [graph.output(op.outputs[0])])


def _lstm_weight(graph: Graph, t: int, dims: tuple[int, int]) -> Spec:
    """The QUANT8_SYMM spec of an int8 LSTM weight matrix of `dims` (per-tensor, zero point 0)."""
    spec = graph.spec_of(t)
    if spec.type != T.TENSOR_QUANT8_ASYMM_SIGNED or spec.zero_point != 0:
        raise Unsupported(f"LSTM weights {graph.tensor(t).describe()}: int8 with zero point 0 expected")
    if spec.dims != dims:
        raise BadModel(f"LSTM weights {graph.tensor(t).describe()} should have shape {list(dims)}")
    if not graph.is_const(t):
        raise Unsupported(f"LSTM weights {graph.tensor(t).describe()} must be constant")
    return Spec(T.TENSOR_QUANT8_SYMM, dims, spec.scale, 0)


def _bias_columns(graph: Graph, op: FlatOperator, ins: list[int], gates: list[int], x: Spec, n_units: int,
                  layer_norm: bool) -> tuple[dict, int]:
    """Extra input columns that add each gate's int32 bias to its input matmul accumulator:
    ({gate: int8 weight columns [n_units, m], "values": the m int8 column inputs}, m)."""
    if layer_norm:
        return {}, 0
    biases = {}
    for g in gates:
        b = const_ints(graph, ins[12 + g], f"gate {g} bias", n_units) if graph.is_const(ins[12 + g]) else None
        if b is None:
            raise Unsupported(f"gate bias {graph.tensor(ins[12 + g]).describe()} must be constant")
        biases[g] = np.asarray(b, np.int64)
    if not any(b.any() for b in biases.values()):
        return {}, 0
    zp = x.zero_point
    big = (127 if zp <= 0 else -128) - zp          # |big| in [127, 255]
    one = 1 if zp < 127 else -1
    quotient = {g: np.rint(b / big).astype(np.int64) for g, b in biases.items()}
    remainder = {g: biases[g] - quotient[g] * big for g in biases}       # |remainder| <= 127
    n_big = max(int(np.ceil(np.abs(q).max() / 127)) for q in quotient.values())
    if n_big > 256:
        raise Unsupported("gate biases too large to fold into extra input columns")
    m = n_big + 1
    columns: dict = {"values": np.array([zp + big] * n_big + [zp + one], np.int8)}
    for g in gates:
        w = np.zeros((n_units, m), np.int8)
        rest = quotient[g].copy()
        for k in range(n_big):
            part = np.clip(rest, -127, 127)
            w[:, k] = part
            rest -= part
        w[:, n_big] = remainder[g] * one
        columns[g] = w
    for g in (0, 1, 2, 3):
        columns.setdefault(g, np.zeros((n_units, m), np.int8))
    return columns, m
