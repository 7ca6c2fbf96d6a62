"""TFLite builtin operators → NNAPI operations, one method per operator (as TFLite's NNAPI delegate maps them).

Each `op_<NAME>` (or `custom_<name>` for a custom operator) reads the operator's inputs, outputs
and options and emits NNAPI operations on the graph. It raises `Unsupported` with the reason when
the operator (or this use of it) has no mapping, and `BadModel` (BAD_DATA) when the model itself is
wrong: options of another operator's type, an enum value outside its range, a tensor of the wrong
rank, a constant that does not fit what it describes. Options are read through
`FlatOperator.options(<class name>)`, tensors through the graph's checked accessors (`tensor`,
`spec_of`, `dims`, `const_value`). Decompositions of operators NNAPI 1.3 lacks are here too.
"""
from __future__ import annotations

import math
import struct

import numpy as np
import tflite

from ..hal import FusedActivationFunc, OperandType as T, OperationType as Op, PaddingScheme
from ._densify import densify
from ._flatbuffer import BadModel
from ._tflite_schema import FlatOperator
from .tflite import Spec, Unsupported

# TFLite ActivationFunctionType -> NNAPI FusedActivationFunc, or a separate operation after it.
_FUSED = {0: (FusedActivationFunc.NONE, None), 1: (FusedActivationFunc.RELU, None),
          2: (FusedActivationFunc.RELU1, None), 3: (FusedActivationFunc.RELU6, None), 4: (FusedActivationFunc.NONE,
                                                                                         Op.TANH)}
_SEPARATE = {1: Op.RELU, 2: Op.RELU1, 3: Op.RELU6, 4: Op.TANH}
_ACTIVATION_NAMES = {v: k for k, v in vars(tflite.ActivationFunctionType).items()
                     if not k.startswith("_") and isinstance(v, int)}
# TFLite Padding -> NNAPI implicit padding scheme.
_PADDING = {0: PaddingScheme.SAME, 1: PaddingScheme.VALID}
_QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

# Unary operators NNAPI 1.3 has in float only (int32 too for ABS / NEG): quantized ones run in float.
_FLOAT_UNARY = {"ABS": Op.ABS, "NEG": Op.NEG, "EXP": Op.EXP, "LOG": Op.LOG, "SQRT": Op.SQRT, "RSQRT": Op.RSQRT,
                "SIN": Op.SIN, "FLOOR": Op.FLOOR, "ELU": Op.ELU}
# Unary operators NNAPI has for float and quant8 (same or fixed output quantization).
_UNARY = {"LOGISTIC": Op.LOGISTIC, "TANH": Op.TANH, "RELU": Op.RELU, "RELU6": Op.RELU6, "RELU_N1_TO_1": Op.RELU1,
          "HARD_SWISH": Op.HARD_SWISH}
_COMPARISONS = {"LESS": Op.LESS, "LESS_EQUAL": Op.LESS_EQUAL, "GREATER": Op.GREATER,
                "GREATER_EQUAL": Op.GREATER_EQUAL, "EQUAL": Op.EQUAL, "NOT_EQUAL": Op.NOT_EQUAL}
_REDUCERS = {"SUM": Op.REDUCE_SUM, "REDUCE_MAX": Op.REDUCE_MAX, "REDUCE_MIN": Op.REDUCE_MIN,
             "REDUCE_PROD": Op.REDUCE_PROD, "REDUCE_ANY": Op.REDUCE_ANY}
_INT32_RANGE = (-2**31, 2**31 - 1)
#: A full-integer sequence LSTM becomes one QUANTIZED_LSTM per time step, up to this many.
_MAX_UNROLLED_STEPS = 4096

# GELU(x) = x * Phi(x) = 0.5 * (x + |x| * erf(|x| / sqrt 2)), erf by Abramowitz & Stegun 7.1.26
# (|error| <= 1.5e-7): erf(a) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-a^2), t = 1 / (1 + p a).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


class OperatorMappings:
    """Mixin of `tflite.Graph`: the mapping of every supported builtin operator."""

    # --- dispatch -------------------------------------------------------------------------------
    def map_operator(self, op: FlatOperator) -> None:
        if op.name == "CUSTOM":
            method = getattr(self, f"custom_{op.custom_code}", None) if (op.custom_code or "").isidentifier() else None
            if method is None:
                raise Unsupported("custom operator; NNAPI has no equivalent")
            return method(op)
        if op.name in _FLOAT_UNARY:
            return self._float_unary(op, _FLOAT_UNARY[op.name])
        if op.name in _UNARY:
            return self._unary(op, _UNARY[op.name])
        if op.name in _COMPARISONS:
            self._need(op, 2)
            return self._simple(op, _COMPARISONS[op.name], list(op.inputs))
        if op.name in _REDUCERS:
            return self._reduce(op, _REDUCERS[op.name])
        method = getattr(self, f"op_{op.name}", None)
        if method is None:
            raise Unsupported("no NNAPI mapping for this builtin operator")
        method(op)

    # --- helpers --------------------------------------------------------------------------------
    def _need(self, op: FlatOperator, n_in: int | tuple, n_out: int = 1) -> None:
        ins = (n_in,) if isinstance(n_in, int) else n_in
        if len(op.inputs) not in ins or len(op.outputs) != n_out:
            raise Unsupported(f"expected {'/'.join(map(str, ins))} inputs and {n_out} outputs, got "
                              f"{len(op.inputs)} and {len(op.outputs)}")

    def _const_ints(self, t: int, what: str, count: int | None = None) -> list[int]:
        """A constant integer tensor's values (int32 range), `count` of them when given."""
        v = self.const_value(t)
        if v is None:
            raise Unsupported(f"{what} (tensor {self.tensor(t).describe()}) must be constant")
        v = np.asarray(v).reshape(-1)
        if v.dtype.kind not in "iu":
            raise BadModel(f"{what} (tensor {self.tensor(t).describe()}) must hold integers")
        if v.size and (int(v.min()) < _INT32_RANGE[0] or int(v.max()) > _INT32_RANGE[1]):
            raise BadModel(f"{what} (tensor {self.tensor(t).describe()}) holds values outside the int32 range")
        if count is not None and v.size != count:
            raise BadModel(f"{what} (tensor {self.tensor(t).describe()}) has {v.size} values, {count} expected")
        return [int(x) for x in v]

    def _fused(self, act: int):
        if act not in _ACTIVATION_NAMES:
            raise BadModel(f"fused activation {act} is not a TFLite ActivationFunctionType")
        if act not in _FUSED:
            raise Unsupported(f"fused activation {_ACTIVATION_NAMES[act]} has no NNAPI equivalent")
        return _FUSED[act]

    @staticmethod
    def _padding(code: int):
        """The NNAPI implicit padding scheme of a TFLite Padding value."""
        if code not in _PADDING:
            raise BadModel(f"padding {code} is not a TFLite Padding (0 SAME, 1 VALID)")
        return _PADDING[code]

    def _with_activation(self, out_t: int, act: int, dims=None):
        """(NNAPI fused-activation scalar, operand to write, finish()) for an operation with a fused activation."""
        code, post = self._fused(act)
        dims = dims if dims is not None else self.spec_of(out_t).dims
        if post is None:
            out, finish = self.shaped_output(out_t, dims)
            return self.i32(code), out, finish
        tmp = self.temp(self.spec_of(out_t).with_dims(dims))

        def finish() -> None:
            src = tmp if tuple(dims) == self.spec_of(out_t).dims else self.reshape(tmp, self.spec_of(out_t).dims)
            self.emit(post, [src], [self.output(out_t)])
        return self.i32(code), tmp, finish

    def _separate_activation(self, out_t: int, act: int):
        """(operand to write, finish()) for operations NNAPI has without a fused activation."""
        self._fused(act)
        if act == 0:
            return self.output(out_t), lambda: None
        if act not in _SEPARATE:
            raise Unsupported(f"fused activation {_ACTIVATION_NAMES[act]} has no NNAPI equivalent")
        tmp = self.temp(self.spec_of(out_t))
        return tmp, lambda: self.emit(_SEPARATE[act], [tmp], [self.output(out_t)])

    def _simple(self, op: FlatOperator, nnapi: Op, inputs: list[int], params: list[int] = ()) -> None:
        self.emit(nnapi, [self.input(t) for t in inputs] + list(params), [self.output(op.outputs[0])])

    def _quantized(self, t: int) -> bool:
        return self.spec_of(t).quantized

    def _via_float(self, op: FlatOperator, build) -> None:
        """Run `build(float inputs) -> float output operand written` with quantized tensors dequantized
        before and the output quantized after (NNAPI has the operation in float only)."""
        ins = [self.float_input(t) for t in op.inputs]
        out, finish = self.float_output(op.outputs[0])
        build(ins, out)
        finish()

    # --- element-wise ---------------------------------------------------------------------------
    def _float_unary(self, op: FlatOperator, nnapi: Op) -> None:
        self._need(op, 1)
        spec = self.spec_of(op.inputs[0])
        if spec.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) or (
                spec.type == T.TENSOR_INT32 and nnapi in (Op.ABS, Op.NEG)):
            return self._simple(op, nnapi, [op.inputs[0]])
        if spec.quantized:
            return self._via_float(op, lambda ins, out: self.emit(nnapi, ins, [out]))
        raise Unsupported(f"input type {spec.type.name} is not supported by NNAPI {nnapi.name}")

    def _unary(self, op: FlatOperator, nnapi: Op) -> None:
        self._need(op, 1)
        x, y = self.spec_of(op.inputs[0]), self.spec_of(op.outputs[0])
        fixed = {Op.LOGISTIC: (1 / 256, {T.TENSOR_QUANT8_ASYMM: 0, T.TENSOR_QUANT8_ASYMM_SIGNED: -128}),
                 Op.TANH: (1 / 128, {T.TENSOR_QUANT8_ASYMM: 128, T.TENSOR_QUANT8_ASYMM_SIGNED: 0})}
        if x.type in _QUANT8:
            if nnapi in fixed:
                scale, zps = fixed[nnapi]
                ok = _f32(y.scale) == _f32(scale) and y.zero_point == zps[x.type]
            elif nnapi == Op.HARD_SWISH:
                ok = True
            else:
                ok = (x.scale, x.zero_point) == (y.scale, y.zero_point)
            if not ok:
                return self._via_float(op, lambda ins, out: self.emit(nnapi, ins, [out]))
        elif x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
            raise Unsupported(f"input type {x.type.name} is not supported by NNAPI {nnapi.name}")
        self._simple(op, nnapi, [op.inputs[0]])

    def _binary(self, op: FlatOperator, nnapi: Op, options: str, quant_ok: bool = True, int_ok: bool = True) -> None:
        self._need(op, 2)
        act = op.options(options).FusedActivationFunction()
        a, b = self.spec_of(op.inputs[0]), self.spec_of(op.inputs[1])
        if a.type != b.type:
            raise Unsupported(f"inputs have different types {a.type.name} and {b.type.name}")
        if (a.quantized and not quant_ok) or a.type == T.TENSOR_QUANT16_SYMM:
            code, post = self._fused(act)

            def build(ins, out):
                if post is None:
                    self.emit(nnapi, ins + [self.i32(code)], [out])
                else:
                    tmp = self.temp(self.specs[out])
                    self.emit(nnapi, ins + [self.i32(code)], [tmp])
                    self.emit(post, [tmp], [out])
            return self._via_float(op, build)
        if a.type == T.TENSOR_INT32 and (not int_ok or act != 0):
            raise Unsupported(f"int32 {op.name} with fused activation {act}")
        if a.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32) + _QUANT8:
            raise Unsupported(f"input type {a.type.name} is not supported by NNAPI {nnapi.name}")
        code, out, finish = self._with_activation(op.outputs[0], act)
        self.emit(nnapi, [self.input(op.inputs[0]), self.input(op.inputs[1]), code], [out])
        finish()

    def op_ADD(self, op):
        self._binary(op, Op.ADD, "AddOptions")

    def op_SUB(self, op):
        self._binary(op, Op.SUB, "SubOptions")

    def op_MUL(self, op):
        self._binary(op, Op.MUL, "MulOptions")

    def op_DIV(self, op):
        self._binary(op, Op.DIV, "DivOptions", quant_ok=False)

    def op_MAXIMUM(self, op):
        self._need(op, 2)
        self._simple(op, Op.MAXIMUM, list(op.inputs))

    def op_MINIMUM(self, op):
        self._need(op, 2)
        self._simple(op, Op.MINIMUM, list(op.inputs))

    def op_POW(self, op):
        self._need(op, 2)
        if self.spec_of(op.inputs[0]).type != T.TENSOR_FLOAT32:
            raise Unsupported("NNAPI POW is float only")
        self._simple(op, Op.POW, list(op.inputs))

    def op_SQUARED_DIFFERENCE(self, op):
        """(a - b)^2 as SUB then MUL (in float for quantized tensors)."""
        self._need(op, 2)
        a = self.spec_of(op.inputs[0])
        out_dims = self.spec_of(op.outputs[0]).dims
        if a.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32):
            d = self.temp(Spec(a.type, out_dims))
            self.emit(Op.SUB, [self.input(op.inputs[0]), self.input(op.inputs[1]), self.i32(0)], [d])
            self.emit(Op.MUL, [d, d, self.i32(0)], [self.output(op.outputs[0])])
            return

        def build(ins, out):
            d = self.temp(Spec(T.TENSOR_FLOAT32, out_dims))
            self.emit(Op.SUB, ins + [self.i32(0)], [d])
            self.emit(Op.MUL, [d, d, self.i32(0)], [out])
        self._via_float(op, build)

    def _gelu(self, x: int, out: int, dims, approximate: bool) -> None:
        f = Spec(T.TENSOR_FLOAT32, dims)
        one = self.const_f32([1.0])

        def mul(a, b):
            o = self.temp(f)
            self.emit(Op.MUL, [a, b, self.i32(0)], [o])
            return o

        def add(a, b):
            o = self.temp(f)
            self.emit(Op.ADD, [a, b, self.i32(0)], [o])
            return o

        if approximate:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            x3 = mul(mul(x, x), x)
            inner = mul(add(x, mul(x3, self.const_f32([0.044715]))), self.const_f32([math.sqrt(2 / math.pi)]))
            th = self.temp(f)
            self.emit(Op.TANH, [inner], [th])
            self.emit(Op.MUL, [mul(x, add(th, one)), self.const_f32([0.5]), self.i32(0)], [out])
            return
        a = self.temp(f)
        self.emit(Op.ABS, [x], [a])
        t = self.temp(f)
        self.emit(Op.DIV, [one, add(mul(a, self.const_f32([_ERF_P / math.sqrt(2)])), one), self.i32(0)], [t])
        poly = mul(t, self.const_f32([_ERF_A[4]]))
        for coefficient in reversed(_ERF_A[:4]):
            poly = mul(add(poly, self.const_f32([coefficient])), t)
        e = self.temp(f)
        self.emit(Op.EXP, [mul(mul(x, x), self.const_f32([-0.5]))], [e])
        erf = self.temp(f)
        self.emit(Op.SUB, [one, mul(poly, e), self.i32(0)], [erf])      # erf(|x| / sqrt 2)
        self.emit(Op.MUL, [add(x, mul(a, erf)), self.const_f32([0.5]), self.i32(0)], [out])

    def op_GELU(self, op):
        """x Phi(x): exact (erf) or tanh form, built from NNAPI 1.3 element-wise operations."""
        self._need(op, 1)
        approximate = bool(op.options("GeluOptions").Approximate())
        dims = self.spec_of(op.outputs[0]).dims
        self._via_float(op, lambda ins, out: self._gelu(ins[0], out, dims, approximate))

    def op_LEAKY_RELU(self, op):
        """PRELU with a constant alpha (in float for quantized tensors)."""
        self._need(op, 1)
        alpha = float(op.options("LeakyReluOptions").Alpha())
        if self.spec_of(op.inputs[0]).type == T.TENSOR_FLOAT32:
            return self._simple(op, Op.PRELU, [op.inputs[0]], [self.const_f32([alpha])])
        self._via_float(op, lambda ins, out: self.emit(Op.PRELU, [ins[0], self.const_f32([alpha])], [out]))

    def op_PRELU(self, op):
        self._need(op, 2)
        self._simple(op, Op.PRELU, list(op.inputs))

    def op_LOGICAL_AND(self, op):
        self._need(op, 2)
        self._simple(op, Op.LOGICAL_AND, list(op.inputs))

    def op_LOGICAL_OR(self, op):
        self._need(op, 2)
        self._simple(op, Op.LOGICAL_OR, list(op.inputs))

    def op_LOGICAL_NOT(self, op):
        self._need(op, 1)
        self._simple(op, Op.LOGICAL_NOT, list(op.inputs))

    def op_SELECT(self, op):
        self._need(op, 3)
        dims = [self.spec_of(t).dims for t in op.inputs]
        if len(set(dims)) != 1:
            raise Unsupported(f"SELECT with broadcasting ({[list(d) for d in dims]}); NNAPI SELECT does not broadcast")
        self._simple(op, Op.SELECT, list(op.inputs))

    op_SELECT_V2 = op_SELECT

    def op_CAST(self, op):
        self._need(op, 1)
        ok = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
        for t in (op.inputs[0], op.outputs[0]):
            if self.spec_of(t).type not in ok:
                raise Unsupported(f"NNAPI CAST does not convert {self.tensor(t).type}")
        self._simple(op, Op.CAST, [op.inputs[0]])

    # --- convolutions, pooling, fully connected -------------------------------------------------
    def _weights(self, t: int, x: Spec, channel_dim: int) -> tuple[int, Spec]:
        """Filter operand for an input of spec `x`: float weights for float inputs (dequantized at import
        when they are quantized: hybrid models), quantized ones as declared otherwise."""
        spec = self.spec_of(t)
        if x.is_float and spec.quantized:
            value = self.real_value(t)
            if value is None:
                raise Unsupported("quantized weights of a float operator must be constant")
            return self.const(value, Spec(x.type, spec.dims)), Spec(x.type, spec.dims)
        if x.is_float and spec.type != x.type:
            return self.float_input(t), Spec(T.TENSOR_FLOAT32, spec.dims)
        if spec.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and spec.channel[1] != channel_dim:
            raise Unsupported(f"per-channel weights along dimension {spec.channel[1]}, NNAPI needs {channel_dim}")
        return self.input(t, spec), spec

    def _bias(self, t: int, x: Spec, w: Spec, n: int) -> int:
        if x.is_float:
            spec = Spec(x.type, (n,))
            if t < 0:
                return self.zeros(spec)
            if self.spec_of(t).type != x.type:
                return self.float_input(t)
            return self.input(t, spec)
        if w.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            spec = Spec(T.TENSOR_INT32, (n,), 0.0, 0)
        else:
            spec = Spec(T.TENSOR_INT32, (n,), _f32(np.float32(x.scale) * np.float32(w.scale)), 0)
        if t < 0:
            return self.zeros(spec)
        if self.tensor(t).type != "INT32":
            raise Unsupported(f"bias {self.tensor(t).describe()} of a quantized operator must be int32")
        return self.input(t, spec)

    def _check_input(self, x: Spec, name: str) -> None:
        if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + _QUANT8:
            raise Unsupported(f"{name} input type {x.type.name} is not supported by NNAPI")

    def op_CONV_2D(self, op):
        self._need(op, (2, 3))
        o = op.options("Conv2DOptions")
        x = self.spec_of(op.inputs[0])
        x_dims = self.dims(op.inputs[0], 4, "input")
        self.dims(op.inputs[1], 4, "filter")
        self._check_input(x, "CONV_2D")
        w_operand, w = self._weights(op.inputs[1], x, 0)
        n_out, _, _, w_in = w.dims
        if w_in < 1:
            raise BadModel(f"filter {self.tensor(op.inputs[1]).describe()} has no input channels")
        bias = self._bias(op.inputs[2] if len(op.inputs) > 2 else -1, x, w, n_out)
        code, out, finish = self._with_activation(op.outputs[0], o.FusedActivationFunction())
        padding = self.i32(self._padding(o.Padding()))
        dilation = (o.DilationWFactor(), o.DilationHFactor())
        if x_dims[3] != w_in:
            groups = x_dims[3] // w_in
            if groups * w_in != x_dims[3] or dilation != (1, 1):
                raise Unsupported(f"input channels {x_dims[3]} and filter channels {w_in} (dilation {dilation})")
            self.emit(Op.GROUPED_CONV_2D, [self.input(op.inputs[0]), w_operand, bias, padding, self.i32(o.StrideW()),
                                           self.i32(o.StrideH()), self.i32(groups), code, self.bool(False)], [out])
        else:
            ins = [self.input(op.inputs[0]), w_operand, bias, padding, self.i32(o.StrideW()), self.i32(o.StrideH()),
                   code]
            if dilation != (1, 1):
                ins += [self.bool(False), self.i32(dilation[0]), self.i32(dilation[1])]
            self.emit(Op.CONV_2D, ins, [out])
        finish()

    def op_DEPTHWISE_CONV_2D(self, op):
        self._need(op, (2, 3))
        o = op.options("DepthwiseConv2DOptions")
        x = self.spec_of(op.inputs[0])
        x_dims = self.dims(op.inputs[0], 4, "input")
        self.dims(op.inputs[1], 4, "filter")
        self._check_input(x, "DEPTHWISE_CONV_2D")
        w_operand, w = self._weights(op.inputs[1], x, 3)
        channels = w.dims[3]
        multiplier = channels // x_dims[3] if x_dims[3] else 1
        if multiplier * x_dims[3] != channels:
            raise Unsupported(f"filter channels {channels} are not a multiple of input channels {x_dims[3]}")
        bias = self._bias(op.inputs[2] if len(op.inputs) > 2 else -1, x, w, channels)
        code, out, finish = self._with_activation(op.outputs[0], o.FusedActivationFunction())
        ins = [self.input(op.inputs[0]), w_operand, bias, self.i32(self._padding(o.Padding())), self.i32(o.StrideW()),
               self.i32(o.StrideH()), self.i32(multiplier), code]
        if (o.DilationWFactor(), o.DilationHFactor()) != (1, 1):
            ins += [self.bool(False), self.i32(o.DilationWFactor()), self.i32(o.DilationHFactor())]
        self.emit(Op.DEPTHWISE_CONV_2D, ins, [out])
        finish()

    def op_TRANSPOSE_CONV(self, op):
        self._need(op, (3, 4))
        o = op.options("TransposeConvOptions")
        shape_t, w_t, x_t = op.inputs[:3]
        x = self.spec_of(x_t)
        self.dims(x_t, 4, "input")
        self.dims(w_t, 4, "filter")
        self._check_input(x, "TRANSPOSE_CONV")
        w_operand, w = self._weights(w_t, x, 0)
        bias = self._bias(op.inputs[3] if len(op.inputs) > 3 else -1, x, w, w.dims[0])
        code, out, finish = self._with_activation(op.outputs[0], o.FusedActivationFunction())
        shape = self.const_i32(self._const_ints(shape_t, "output shape", 4))
        self.emit(Op.TRANSPOSE_CONV_2D, [self.input(x_t), w_operand, bias, shape,
                                         self.i32(self._padding(o.Padding())), self.i32(o.StrideW()),
                                         self.i32(o.StrideH()), code, self.bool(False)], [out])
        finish()

    def custom_Convolution2DTransposeBias(self, op):
        """MediaPipe's transposed convolution with bias (mediapipe/util/tflite/operations/
        transpose_conv_bias.cc): inputs data [N, H, W, I], weights [O, KH, KW, I], bias [O]; the custom
        options are a raw TfLiteTransposeConvParams (int32 padding 1 SAME / 2 VALID, stride_w, stride_h).
        SAME pads total = max(0, K - (in - 1) % stride - 1), half of it (rounded down) before: NNAPI
        TRANSPOSE_CONV_2D with those explicit paddings computes the same output."""
        self._need(op, 3)
        x_t, w_t, b_t = op.inputs
        if op.custom_options is None or op.custom_options[1] < 12:
            raise BadModel("custom options must hold padding, stride_w and stride_h (12 bytes)")
        padding, stride_w, stride_h = struct.unpack("<iii", self.flat.bytes_at((op.custom_options[0], 12)))
        if padding not in (1, 2):
            raise BadModel(f"custom options: padding {padding} is neither SAME (1) nor VALID (2)")
        if stride_w < 1 or stride_h < 1:
            raise BadModel(f"custom options: strides ({stride_w}, {stride_h}) must be positive")
        x = self.spec_of(x_t)
        batches, in_h, in_w, in_c = self.dims(x_t, 4, "input")
        out_c, k_h, k_w, w_c = self.dims(w_t, 4, "weights")
        self.dims(b_t, 1, "bias")
        if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
            raise Unsupported(f"input type {x.type.name}: MediaPipe's kernel is float only")
        if w_c != in_c or self.spec_of(b_t).dims[0] != out_c:
            raise BadModel(f"weights [{out_c}, {k_h}, {k_w}, {w_c}] and bias {list(self.spec_of(b_t).dims)} do not "
                           f"fit an input of {in_c} channels")

        def pads(size: int, k: int, stride: int) -> tuple[int, int]:
            total = max(0, k - (size - 1) % stride - 1) if padding == 1 else 0
            return total // 2, total - total // 2
        (top, bottom), (left, right) = pads(in_h, k_h, stride_h), pads(in_w, k_w, stride_w)
        out_dims = (batches, stride_h * (in_h - 1) + k_h - top - bottom,
                    stride_w * (in_w - 1) + k_w - left - right, out_c)
        if out_dims != self.spec_of(op.outputs[0]).dims:
            raise BadModel(f"output {self.tensor(op.outputs[0]).describe()} should have shape {list(out_dims)}")
        w_operand, w = self._weights(w_t, x, 0)
        bias = self._bias(b_t, x, w, out_c)
        self.emit(Op.TRANSPOSE_CONV_2D, [self.input(x_t), w_operand, bias, self.i32(left), self.i32(right),
                                         self.i32(top), self.i32(bottom), self.i32(stride_w), self.i32(stride_h),
                                         self.i32(FusedActivationFunc.NONE), self.bool(False)],
                  [self.output(op.outputs[0])])

    def _pool(self, op, nnapi: Op):
        self._need(op, 1)
        o = op.options("Pool2DOptions")
        x, y = self.spec_of(op.inputs[0]), self.spec_of(op.outputs[0])
        self.dims(op.inputs[0], 4, "input")
        self._check_input(x, op.name)
        if x.quantized and (x.scale, x.zero_point) != (y.scale, y.zero_point):
            raise Unsupported("quantized pooling with different input and output quantization")
        code, out, finish = self._with_activation(op.outputs[0], o.FusedActivationFunction())
        self.emit(nnapi, [self.input(op.inputs[0]), self.i32(self._padding(o.Padding())), self.i32(o.StrideW()),
                          self.i32(o.StrideH()), self.i32(o.FilterWidth()), self.i32(o.FilterHeight()), code], [out])
        finish()

    def op_AVERAGE_POOL_2D(self, op):
        self._pool(op, Op.AVERAGE_POOL_2D)

    def op_MAX_POOL_2D(self, op):
        self._pool(op, Op.MAX_POOL_2D)

    def op_L2_POOL_2D(self, op):
        self._pool(op, Op.L2_POOL_2D)

    def op_FULLY_CONNECTED(self, op):
        self._need(op, (2, 3), 1)
        o = op.options("FullyConnectedOptions")
        if o.WeightsFormat() != 0:
            raise Unsupported("shuffled weights format")
        x_t, w_t = op.inputs[0], op.inputs[1]
        b_t = op.inputs[2] if len(op.inputs) > 2 else -1
        act = o.FusedActivationFunction()
        self._fused(act)
        x = self.spec_of(x_t)
        self._check_input(x, "FULLY_CONNECTED")
        units, size = self.dims(w_t, 2, "weights")
        w = self.spec_of(w_t)
        if size < 1:
            raise BadModel(f"weights {self.tensor(w_t).describe()} have no input size")
        batch = math.prod(x.dims) // size
        if batch * size != math.prod(x.dims):
            raise Unsupported(f"input {list(x.dims)} is not a multiple of the weights' input size {size}")
        if w.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and not x.is_float:
            return self._fully_connected_per_channel(op, x, w, b_t, act, batch)
        w_operand, w = self._weights(w_t, x, 0)
        bias = self._bias(b_t, x, w, units)
        x_operand = self.input(x_t)
        if len(x.dims) > 4 or len(x.dims) < 2:
            x_operand = self.reshape(x_operand, (batch, size))
        code, out, finish = self._with_activation(op.outputs[0], act, dims=(batch, units))
        self.emit(Op.FULLY_CONNECTED, [x_operand, w_operand, bias, code], [out])
        finish()

    def _fully_connected_per_channel(self, op, x: Spec, w: Spec, b_t: int, act: int, batch: int) -> None:
        """NNAPI FULLY_CONNECTED has no per-channel weights: a 1x1 CONV_2D over [1, 1, batch, size] does."""
        units, size = w.dims
        filter_spec = Spec(w.type, (units, 1, 1, size), channel=w.channel)
        w_operand = self.input(op.inputs[1], filter_spec) if self.is_const(op.inputs[1]) else None
        if w_operand is None:
            raise Unsupported("per-channel weights must be constant")
        bias = self._bias(b_t, x, filter_spec, units)
        x_operand = self.reshape(self.input(op.inputs[0]), (1, 1, batch, size))
        code, out, finish = self._with_activation(op.outputs[0], act, dims=(1, 1, batch, units))
        self.emit(Op.CONV_2D, [x_operand, w_operand, bias, self.i32(PaddingScheme.VALID), self.i32(1), self.i32(1),
                               code], [out])
        finish()

    def op_BATCH_MATMUL(self, op):
        self._need(op, 2)
        o = op.options("BatchMatMulOptions")
        a, b = self.spec_of(op.inputs[0]), self.spec_of(op.inputs[1])
        if a.type != b.type or a.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32,
                                              T.TENSOR_QUANT8_ASYMM_SIGNED):
            raise Unsupported(f"input types {a.type.name} and {b.type.name}")
        if len(a.dims) != len(b.dims) or a.dims[:-2] != b.dims[:-2] or not 2 <= len(a.dims) <= 4:
            raise Unsupported(f"batch dimensions {list(a.dims)} and {list(b.dims)} differ (NNAPI BATCH_MATMUL "
                              "does not broadcast) or rank is not 2 to 4")
        self._simple(op, Op.BATCH_MATMUL, list(op.inputs), [self.bool(bool(o.AdjX())), self.bool(bool(o.AdjY()))])

    # --- shape and layout -------------------------------------------------------------------------
    def _reshape_to_output(self, op):
        self._need(op, (1, 2))
        out = self.spec_of(op.outputs[0])
        self.emit(Op.RESHAPE, [self.input(op.inputs[0]), self.const_i32(list(out.dims))], [self.output(op.outputs[0])])

    def op_RESHAPE(self, op):
        self._reshape_to_output(op)

    def op_SQUEEZE(self, op):
        self._reshape_to_output(op)

    def op_EXPAND_DIMS(self, op):
        self._reshape_to_output(op)

    def op_CONCATENATION(self, op):
        if not op.inputs or len(op.outputs) != 1:
            raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        o = op.options("ConcatenationOptions")
        rank = len(self.spec_of(op.outputs[0]).dims)
        axis = o.Axis() % rank
        out, finish = self._separate_activation(op.outputs[0], o.FusedActivationFunction())
        self.emit(Op.CONCATENATION, [self.input(t) for t in op.inputs] + [self.i32(axis)], [out])
        finish()

    def _pairs(self, t: int, rank: int, what: str) -> np.ndarray:
        """A constant [rank, 2] integer tensor (paddings)."""
        return np.asarray(self._const_ints(t, what, 2 * rank), np.int32).reshape(rank, 2)

    def op_PAD(self, op):
        self._need(op, (2, 3))
        x = self.spec_of(op.inputs[0])
        pad = self.const_i32(self._pairs(op.inputs[1], len(x.dims), "paddings"))
        if len(op.inputs) == 3 and op.inputs[2] >= 0:
            value = self.const_value(op.inputs[2])
            if value is None:
                raise Unsupported("the pad value must be constant")
            value = np.asarray(value).reshape(-1)
            if value.size != 1 or not np.isfinite(value.astype(np.float64)).all():
                raise BadModel(f"the pad value (tensor {self.tensor(op.inputs[2]).describe()}) must be one number")
            v = value[0]
            if not x.is_float and not _INT32_RANGE[0] <= int(v) <= _INT32_RANGE[1]:
                raise BadModel(f"the pad value {v} is outside the int32 range")
            param = self.f32(float(v)) if x.is_float else self.i32(int(v))
            if x.type == T.TENSOR_FLOAT16:
                param = self.scalar(T.FLOAT16, float(v))
            return self._simple(op, Op.PAD_V2, [op.inputs[0]], [pad, param])
        self._simple(op, Op.PAD, [op.inputs[0]], [pad])

    op_PADV2 = op_PAD

    def op_TRANSPOSE(self, op):
        self._need(op, 2)
        perm = self._const_ints(op.inputs[1], "perm")
        self._simple(op, Op.TRANSPOSE, [op.inputs[0]], [self.const_i32(perm)])

    def op_STRIDED_SLICE(self, op):
        """TFLite ignores `end` on shrunk axes (it takes one element at `begin`); NNAPI reads it, so
        shrunk axes get end = begin + 1 here."""
        self._need(op, 4)
        o = op.options("StridedSliceOptions")
        if o.EllipsisMask() or o.NewAxisMask() or o.Offset():
            raise Unsupported("ellipsis, new-axis masks and offset have no NNAPI equivalent")
        dims = self.spec_of(op.inputs[0]).dims
        begin = self._const_ints(op.inputs[1], "begin", len(dims))
        end = self._const_ints(op.inputs[2], "end", len(dims))
        strides = self._const_ints(op.inputs[3], "strides", len(dims))
        begin_mask, end_mask, shrink = o.BeginMask(), o.EndMask(), o.ShrinkAxisMask()
        for i in range(len(begin)):
            if shrink >> i & 1:
                b = 0 if begin_mask >> i & 1 else begin[i]
                b = b + dims[i] if b < 0 else b
                begin[i], end[i], strides[i] = b, b + 1, 1
                begin_mask &= ~(1 << i)
                end_mask &= ~(1 << i)
        out, finish = self.shaped_output(op.outputs[0], self._strided_dims(op))
        self.emit(Op.STRIDED_SLICE, [self.input(op.inputs[0]), self.const_i32(begin), self.const_i32(end),
                                     self.const_i32(strides), self.i32(begin_mask), self.i32(end_mask),
                                     self.i32(shrink)], [out])
        finish()

    def _strided_dims(self, op) -> tuple[int, ...]:
        """NNAPI's output shape: TFLite's, but [1] when every dimension is shrunk."""
        dims = self.tensor(op.outputs[0]).shape
        return dims if dims else (1,)

    def op_SLICE(self, op):
        self._need(op, 3)
        rank = len(self.spec_of(op.inputs[0]).dims)
        begin = self.const_i32(self._const_ints(op.inputs[1], "begin", rank))
        size = self.const_i32(self._const_ints(op.inputs[2], "size", rank))
        self._simple(op, Op.SLICE, [op.inputs[0]], [begin, size])

    def op_SPLIT(self, op):
        if len(op.inputs) != 2 or not op.outputs:
            raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        axis = self._const_ints(op.inputs[0], "axis", 1)[0]
        n = op.options("SplitOptions").NumSplits()
        rank = len(self.spec_of(op.inputs[1]).dims)
        self.emit(Op.SPLIT, [self.input(op.inputs[1]), self.i32(axis % rank), self.i32(n)],
                  [self.output(t) for t in op.outputs])

    def op_SPLIT_V(self, op):
        """Unequal splits as one SLICE per output."""
        if len(op.inputs) != 3 or not op.outputs:
            raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        x = self.spec_of(op.inputs[0])
        sizes = self._const_ints(op.inputs[1], "size_splits", len(op.outputs))
        axis = self._const_ints(op.inputs[2], "axis", 1)[0] % len(x.dims)
        if sizes.count(-1) > 1:
            raise BadModel(f"size_splits {sizes} has more than one -1")
        if -1 in sizes:
            sizes[sizes.index(-1)] = x.dims[axis] - (sum(sizes) + 1)
        start = 0
        for t, size in zip(op.outputs, sizes):
            begin = [0] * len(x.dims)
            begin[axis] = start
            extent = list(x.dims)
            extent[axis] = size
            self.emit(Op.SLICE, [self.input(op.inputs[0]), self.const_i32(begin), self.const_i32(extent)],
                      [self.output(t)])
            start += size

    def op_GATHER(self, op):
        self._need(op, 2)
        o = op.options("GatherOptions")
        if o.BatchDims():
            raise Unsupported("batch_dims has no NNAPI equivalent")
        params = self.spec_of(op.inputs[0])
        indices = self.tensor(op.inputs[1])
        if indices.type not in ("INT32", "INT64") or (indices.type == "INT64" and not self.is_const(op.inputs[1])):
            raise Unsupported(f"indices of type {indices.type}")
        axis = o.Axis() % len(params.dims)
        idx_dims = indices.shape or (1,)
        dims = params.dims[:axis] + tuple(idx_dims) + params.dims[axis + 1:]
        out, finish = self.shaped_output(op.outputs[0], dims)
        self.emit(Op.GATHER, [self.input(op.inputs[0]), self.i32(axis), self.input(op.inputs[1])], [out])
        finish()

    def op_TILE(self, op):
        self._need(op, 2)
        rank = len(self.spec_of(op.inputs[0]).dims)
        self._simple(op, Op.TILE, [op.inputs[0]], [self.const_i32(self._const_ints(op.inputs[1], "multiples", rank))])

    def op_DEPTH_TO_SPACE(self, op):
        self._need(op, 1)
        block = op.options("DepthToSpaceOptions").BlockSize()
        self._simple(op, Op.DEPTH_TO_SPACE, [op.inputs[0]], [self.i32(block), self.bool(False)])

    def op_SPACE_TO_DEPTH(self, op):
        self._need(op, 1)
        block = op.options("SpaceToDepthOptions").BlockSize()
        self._simple(op, Op.SPACE_TO_DEPTH, [op.inputs[0]], [self.i32(block), self.bool(False)])

    def op_SPACE_TO_BATCH_ND(self, op):
        self._need(op, 3)
        block = self.const_i32(self._const_ints(op.inputs[1], "block shape", 2))
        pads = self._pairs(op.inputs[2], 2, "paddings")
        self._simple(op, Op.SPACE_TO_BATCH_ND, [op.inputs[0]], [block, self.const_i32(pads), self.bool(False)])

    def op_BATCH_TO_SPACE_ND(self, op):
        self._need(op, 3)
        if any(self._const_ints(op.inputs[2], "crops")):
            raise Unsupported("non-zero crops have no NNAPI equivalent")
        block = self.const_i32(self._const_ints(op.inputs[1], "block shape", 2))
        self._simple(op, Op.BATCH_TO_SPACE_ND, [op.inputs[0]], [block, self.bool(False)])

    def _resize(self, op, nnapi: Op, options: str):
        self._need(op, 2)
        o = op.options(options)
        height, width = self._const_ints(op.inputs[1], "size", 2)
        self._simple(op, nnapi, [op.inputs[0]], [self.i32(width), self.i32(height), self.bool(False),
                                                 self.bool(bool(o.AlignCorners())),
                                                 self.bool(bool(o.HalfPixelCenters()))])

    def op_RESIZE_BILINEAR(self, op):
        self._resize(op, Op.RESIZE_BILINEAR, "ResizeBilinearOptions")

    def op_RESIZE_NEAREST_NEIGHBOR(self, op):
        self._resize(op, Op.RESIZE_NEAREST_NEIGHBOR, "ResizeNearestNeighborOptions")

    # --- reductions and normalisation --------------------------------------------------------------
    def _axes(self, op) -> int:
        rank = len(self.spec_of(op.inputs[0]).dims)
        return self.const_i32([a % rank for a in self._const_ints(op.inputs[1], "axes")])

    def op_MEAN(self, op):
        self._need(op, 2)
        keep = bool(op.options("ReducerOptions").KeepDims())
        x, y = self.spec_of(op.inputs[0]), self.spec_of(op.outputs[0])
        axes = self._axes(op)
        if x.type in _QUANT8 and (x.scale, x.zero_point) != (y.scale, y.zero_point):
            # NNAPI MEAN keeps the input quantization: compute in float and quantize once.
            return self._via_float(op, lambda ins, out: self.emit(Op.MEAN, [ins[0], axes, self.i32(int(keep))],
                                                                  [out]))
        if x.type not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) + _QUANT8:
            raise Unsupported(f"input type {x.type.name}")
        out, finish = self.shaped_output(op.outputs[0], y.dims)
        self.emit(Op.MEAN, [self.input(op.inputs[0]), axes, self.i32(int(keep))], [out])
        finish()

    def _reduce(self, op, nnapi: Op):
        self._need(op, 2)
        keep = bool(op.options("ReducerOptions").KeepDims())
        x, y = self.spec_of(op.inputs[0]), self.spec_of(op.outputs[0])
        axes = self._axes(op)
        float_only = nnapi in (Op.REDUCE_SUM, Op.REDUCE_PROD)
        if x.quantized and (float_only or (x.scale, x.zero_point) != (y.scale, y.zero_point)):
            return self._via_float(op, lambda ins, out: self.emit(nnapi, [ins[0], axes, self.bool(keep)], [out]))
        self._simple(op, nnapi, [op.inputs[0]], [axes, self.bool(keep)])

    def op_SOFTMAX(self, op):
        self._need(op, 1)
        beta = float(op.options("SoftmaxOptions").Beta())
        x = self.spec_of(op.inputs[0])
        param = self.scalar(T.FLOAT16, beta) if x.type == T.TENSOR_FLOAT16 else self.f32(beta)
        self._simple(op, Op.SOFTMAX, [op.inputs[0]], [param])

    def op_LOG_SOFTMAX(self, op):
        self._need(op, 1)
        self._simple(op, Op.LOG_SOFTMAX, [op.inputs[0]], [self.f32(1.0), self.i32(-1)])

    def op_L2_NORMALIZATION(self, op):
        self._need(op, 1)
        act = op.options("L2NormOptions").FusedActivationFunction()
        out, finish = self._separate_activation(op.outputs[0], act)
        self.emit(Op.L2_NORMALIZATION, [self.input(op.inputs[0])], [out])
        finish()

    def op_LOCAL_RESPONSE_NORMALIZATION(self, op):
        self._need(op, 1)
        o = op.options("LocalResponseNormalizationOptions")
        self._simple(op, Op.LOCAL_RESPONSE_NORMALIZATION, [op.inputs[0]],
                     [self.i32(o.Radius()), self.f32(o.Bias()), self.f32(o.Alpha()), self.f32(o.Beta())])

    def _arg(self, op, nnapi: Op, options: str):
        self._need(op, 2)
        op.options(options)
        if self.tensor(op.outputs[0]).type != "INT32":
            raise Unsupported(f"output type {self.tensor(op.outputs[0]).type}; NNAPI {nnapi.name} gives int32")
        rank = len(self.spec_of(op.inputs[0]).dims)
        axis = self._const_ints(op.inputs[1], "axis", 1)[0] % rank
        self._simple(op, nnapi, [op.inputs[0]], [self.i32(axis)])

    def op_ARG_MAX(self, op):
        self._arg(op, Op.ARGMAX, "ArgMaxOptions")

    def op_ARG_MIN(self, op):
        self._arg(op, Op.ARGMIN, "ArgMinOptions")

    # --- quantization and constants ---------------------------------------------------------------
    def op_DEQUANTIZE(self, op):
        """Constant input (float16 or int8 weights): folded into a float32 constant, as the delegate does."""
        self._need(op, 1)
        x_t, y_t = op.inputs[0], op.outputs[0]
        if self.is_const(x_t):
            y_dims = self.spec_of(y_t).dims
            value = self.real_value(x_t)
            if value.size != math.prod(y_dims):
                raise BadModel(f"input {self.tensor(x_t).describe()} and output {self.tensor(y_t).describe()} "
                               "differ in size")
            self.check_computed(y_dims, 4, f"output {self.tensor(y_t).describe()}")
            self.folded[y_t] = value.astype(np.float32).reshape(y_dims)
            return
        x = self.spec_of(x_t)
        if x.type == T.TENSOR_FLOAT16:
            return self._simple(op, Op.CAST, [x_t])
        self._simple(op, Op.DEQUANTIZE, [x_t])

    def op_QUANTIZE(self, op):
        self._need(op, 1)
        x, y = self.spec_of(op.inputs[0]), self.spec_of(op.outputs[0])
        if y.type not in _QUANT8:
            raise Unsupported(f"output type {y.type.name}")
        if x.type == T.TENSOR_FLOAT32 or x.type == T.TENSOR_FLOAT16:
            return self._simple(op, Op.QUANTIZE, [op.inputs[0]])
        # Requantization (quantized input): DEQUANTIZE, then QUANTIZE.
        self.emit(Op.QUANTIZE, [self.float_input(op.inputs[0])], [self.output(op.outputs[0])])

    def op_DENSIFY(self, op):
        """Sparse constant weights are densified at import (a folded constant)."""
        self._need(op, 1)
        tensor = self.tensor(op.inputs[0])
        out = self.tensor(op.outputs[0])
        if tensor.sparsity is None or tensor.region is None or tensor.dtype is None:
            raise Unsupported("DENSIFY needs a constant sparse input")
        if out.shape != tensor.shape:
            raise BadModel(f"output {out.describe()} and input {tensor.describe()} differ in shape")
        values = np.frombuffer(self.flat.data(tensor), dtype=tensor.dtype)
        self.folded[op.outputs[0]] = densify(values, tensor.shape, tensor.sparsity, f"tensor {tensor.describe()}",
                                             self.conv.computed_limit)

    # --- recurrent ----------------------------------------------------------------------------------
    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        o = op.options("UnidirectionalSequenceLSTMOptions")
        if len(op.inputs) not in (20, 24) or len(op.outputs) != 1:
            raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs (20 or 24 inputs, 1 output)")
        x = self.spec_of(op.inputs[0])
        self.dims(op.inputs[0], 3, "input")
        if x.type == T.TENSOR_QUANT8_ASYMM_SIGNED:
            return self._lstm_int8(op, o)
        if x.type != T.TENSOR_FLOAT32:
            raise Unsupported(f"{self.tensor(op.inputs[0]).type} input: NNAPI UNIDIRECTIONAL_SEQUENCE_LSTM is float "
                              "only (int8 is imported as QUANTIZED_LSTM steps)")
        for t in op.inputs[1:]:
            if t >= 0 and self.spec_of(t).type not in (T.TENSOR_FLOAT32,):
                if not self.is_const(t):
                    raise Unsupported(f"hybrid LSTM weight {self.tensor(t).describe()}")
        ins = []
        for k, t in enumerate(op.inputs[:20]):
            if t < 0:
                ins.append(self._omitted(T.TENSOR_FLOAT32))
            elif k > 0 and self.spec_of(t).type != T.TENSOR_FLOAT32:
                ins.append(self.const(self.real_value(t), Spec(T.TENSOR_FLOAT32, self.spec_of(t).dims)))
            else:
                ins.append(self.input(t))
        act = o.FusedActivationFunction()
        self._fused(act)
        if act not in (0, 1, 3, 4):
            raise Unsupported(f"activation {_ACTIVATION_NAMES[act]}")
        ins += [self.i32(act), self.f32(o.CellClip()), self.f32(o.ProjClip()), self.bool(bool(o.TimeMajor()))]
        for t in (op.inputs[20:24] if len(op.inputs) == 24 else ()):
            ins.append(self._omitted(T.TENSOR_FLOAT32) if t < 0 else self.input(t))
        if len(op.inputs) == 20:
            ins += [self._omitted(T.TENSOR_FLOAT32) for _ in range(4)]
        self.emit(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [self.output(op.outputs[0])])

    def _lstm_int8(self, op, o) -> None:
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
        x = self.spec_of(x_t)
        first, second, n_input = self.dims(x_t, 3, "input")
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
        n_units, _ = self.dims(ins[4], 2, "input-to-output weights")
        n_output = self.dims(ins[8], 2, "recurrent-to-output weights")[1]
        layer_norm = ins[21] >= 0
        if o.ProjClip() > 0 and ins[16] >= 0:
            raise Unsupported("projection clipping (TFLite and NNAPI quantize the clip differently)")
        if any(ins[k] >= 0 for k in (9, 10, 11)) and n_output != n_units:
            raise Unsupported("peephole weights with a projection to another size (LiteRT's integer kernel applies "
                              "them over output_size values, QUANTIZED_LSTM over num_units)")
        act = o.FusedActivationFunction()
        self._fused(act)
        if act != 4:
            raise Unsupported(f"activation {_ACTIVATION_NAMES[act]} (the integer kernel computes tanh)")
        if len(op.intermediates) < 5:
            raise Unsupported("the gate and hidden-state scales (5 intermediate tensors) are missing")
        hidden = self.tensor(op.intermediates[4]).quant
        if hidden is None or not hidden.scale > 0:
            raise BadModel(f"hidden-state intermediate {self.tensor(op.intermediates[4]).describe()} has no scale")
        if not -128 < hidden.zero_point <= 127:
            raise Unsupported(f"hidden-state zero point {hidden.zero_point} (QUANTIZED_LSTM takes its negation "
                              "as an int8)")
        gate_scales = []
        for k in range(4):
            q = self.tensor(op.intermediates[k]).quant
            if layer_norm and (q is None or not q.scale > 0):
                raise BadModel(f"gate intermediate {self.tensor(op.intermediates[k]).describe()} has no scale")
            gate_scales.append(q.scale if layer_norm else 2.0 ** -12)   # Q3.12 without layer norm
        state = self.spec_of(ins[18])
        cell = self.spec_of(ins[19])
        y = self.spec_of(op.outputs[0])
        if state.type != T.TENSOR_QUANT8_ASYMM_SIGNED or cell.type != T.TENSOR_QUANT16_SYMM:
            raise Unsupported(f"states of types {state.type.name} and {cell.type.name} (int8 and int16 expected)")
        if (y.type, y.scale, y.zero_point) != (state.type, state.scale, state.zero_point):
            raise Unsupported("the output's quantization differs from the output state's")
        want_y = (steps, batch, n_output) if time_major else (batch, steps, n_output)
        if y.dims != want_y:
            raise BadModel(f"output {self.tensor(op.outputs[0]).describe()} should have shape {list(want_y)}")

        # Constant operands shared by every step.
        gates = [g for g in range(4) if not (cifg and g == 0)]
        columns, extra = self._bias_columns(op, ins, gates, x, n_units, layer_norm)
        q8 = {}
        for g in gates:
            w_t = ins[1 + g]
            w_spec = self._lstm_weight(w_t, (n_units, n_input))
            if extra:
                w = np.concatenate([self.const_value(w_t).astype(np.int8).reshape(n_units, n_input), columns[g]], 1)
                q8[1 + g] = self.const(w, w_spec.with_dims((n_units, n_input + extra)))
            else:
                q8[1 + g] = self.input(w_t, w_spec)
            q8[5 + g] = self.input(ins[5 + g], self._lstm_weight(ins[5 + g], (n_units, n_output)))
        if ins[16] >= 0:
            q8[16] = self.input(ins[16], self._lstm_weight(ins[16], (n_output, n_units)))
        fixed = [None] * 32
        for k, operand in q8.items():
            fixed[k] = operand
        for k in (9, 10, 11, 20, 21, 22, 23):
            if ins[k] >= 0:
                spec = self.spec_of(ins[k])
                if spec.type != T.TENSOR_QUANT16_SYMM:
                    raise Unsupported(f"LSTM input {k} of type {spec.type.name} (int16 expected)")
                fixed[k] = self.input(ins[k], spec.with_dims((n_units,)))
        for g in gates:
            bias_spec = Spec(T.TENSOR_INT32, (n_units,))
            fixed[12 + g] = self.input(ins[12 + g], bias_spec) if layer_norm else self.zeros(bias_spec)
        if ins[17] >= 0:
            fixed[17] = self.input(ins[17], Spec(T.TENSOR_INT32, (n_output,)))
        omitted = {1: T.TENSOR_QUANT8_SYMM, 5: T.TENSOR_QUANT8_SYMM, 9: T.TENSOR_QUANT16_SYMM,
                   10: T.TENSOR_QUANT16_SYMM, 11: T.TENSOR_QUANT16_SYMM, 12: T.TENSOR_INT32,
                   16: T.TENSOR_QUANT8_SYMM, 17: T.TENSOR_INT32, 20: T.TENSOR_QUANT16_SYMM,
                   21: T.TENSOR_QUANT16_SYMM, 22: T.TENSOR_QUANT16_SYMM, 23: T.TENSOR_QUANT16_SYMM}
        for k, kind in omitted.items():
            if fixed[k] is None:
                fixed[k] = self._omitted(kind)
        fixed[24] = self.f32(max(float(o.CellClip()), 0.0))
        fixed[25] = self.f32(0.0)
        for g in range(4):
            fixed[26 + g] = self.f32(gate_scales[g])
        # TFLite's kernel adds the hidden zero point where Android's QUANTIZED_LSTM subtracts its operand
        # (and adds it back in the projection bias): the operand is the negated zero point.
        fixed[30] = self.i32(-hidden.zero_point)
        fixed[31] = self.f32(hidden.scale)
        # The steps. Rows of [batch * steps, n_input] (batch-major) or [steps * batch, n_input]
        # (time-major) take the bias columns at once; viewed as [batch, steps * width] or
        # [steps * batch, width], one SPLIT gives every step's [batch, width] input; the step outputs,
        # concatenated along that same axis, are the output sequence in TFLite's layout.
        width = n_input + extra
        x_rows = self.reshape(self.input(x_t), (batch * steps, n_input))
        if extra:
            self.check_computed((batch * steps, extra), 1, "LSTM bias columns")
            joined = self.temp(x.with_dims((batch * steps, width)))
            self.emit(Op.CONCATENATION, [x_rows, self.const(np.tile(columns["values"], (batch * steps, 1)),
                                                            x.with_dims((batch * steps, extra))), self.i32(1)],
                      [joined])
            x_rows = joined
        axis = 0 if time_major else 1
        pieces = [x_rows]
        if steps > 1:
            pieces = [self.temp(x.with_dims((batch, width))) for _ in range(steps)]
            sequence = x_rows if time_major else self.reshape(x_rows, (batch, steps * width))
            self.emit(Op.SPLIT, [sequence, self.i32(axis), self.i32(steps)], pieces)
        h = self.input(ins[18], state.with_dims((batch, n_output)))
        c = self.input(ins[19], cell.with_dims((batch, n_units)))
        outputs = []
        for piece in pieces:
            step = list(fixed)
            step[0], step[18], step[19] = piece, h, c
            h = self.temp(state.with_dims((batch, n_output)))
            c = self.temp(cell.with_dims((batch, n_units)))
            out = self.temp(state.with_dims((batch, n_output)))
            self.emit(Op.QUANTIZED_LSTM, step, [h, c, out])
            outputs.append(out)
        if len(outputs) > 1:
            joined = self.temp(state.with_dims((steps * batch, n_output) if time_major else (batch, steps * n_output)))
            self.emit(Op.CONCATENATION, outputs + [self.i32(axis)], [joined])
            outputs = [joined]
        self.emit(Op.RESHAPE, [outputs[0], self.const_i32(list(want_y))], [self.output(op.outputs[0])])

    def _lstm_weight(self, t: int, dims: tuple[int, int]) -> Spec:
        """The QUANT8_SYMM spec of an int8 LSTM weight matrix of `dims` (per-tensor, zero point 0)."""
        spec = self.spec_of(t)
        if spec.type != T.TENSOR_QUANT8_ASYMM_SIGNED or spec.zero_point != 0:
            raise Unsupported(f"LSTM weights {self.tensor(t).describe()}: int8 with zero point 0 expected")
        if spec.dims != dims:
            raise BadModel(f"LSTM weights {self.tensor(t).describe()} should have shape {list(dims)}")
        if not self.is_const(t):
            raise Unsupported(f"LSTM weights {self.tensor(t).describe()} must be constant")
        return Spec(T.TENSOR_QUANT8_SYMM, dims, spec.scale, 0)

    def _bias_columns(self, op, ins: list[int], gates: list[int], x: Spec, n_units: int,
                      layer_norm: bool) -> tuple[dict, int]:
        """Extra input columns that add each gate's int32 bias to its input matmul accumulator:
        ({gate: int8 weight columns [n_units, m], "values": the m int8 column inputs}, m)."""
        if layer_norm:
            return {}, 0
        biases = {}
        for g in gates:
            b = self._const_ints(ins[12 + g], f"gate {g} bias", n_units) if self.is_const(ins[12 + g]) else None
            if b is None:
                raise Unsupported(f"gate bias {self.tensor(ins[12 + g]).describe()} must be constant")
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

    def _omitted(self, kind: T = T.TENSOR_FLOAT32) -> int:
        """An omitted optional operand of type `kind` (quantized types still need a valid scale)."""
        spec = Spec(kind, ())
        index = self.add(Spec(kind, (), 1.0) if spec.quantized else spec)
        self.m.set_operand_value(index, None)
        return index

    # --- control flow ---------------------------------------------------------------------------------
    def _subgraph_operand(self, model) -> int:
        index = self.m.add_operand(T.SUBGRAPH)
        self.specs.append(Spec(T.SUBGRAPH, ()))
        self.m.set_operand_value_from_model(index, model)
        return index

    def op_WHILE(self, op):
        """Loop variables the body passes through unchanged become NNAPI input-only operands; the
        others are input-output operands (NNAPI orders them first)."""
        o = op.options("WhileOptions")
        body_index, cond_index = o.BodySubgraphIndex(), o.CondSubgraphIndex()
        for index, what in ((body_index, "body"), (cond_index, "condition")):
            if not 0 < index < len(self.flat.subgraphs):
                raise BadModel(f"{what} subgraph {index} out of range (the model has {len(self.flat.subgraphs)} "
                               "subgraphs; 0 is the main one)")
        body_sub = self.flat.subgraphs[body_index]
        n = len(op.inputs)
        if len(body_sub.inputs) != n or len(body_sub.outputs) != n or len(op.outputs) != n:
            raise Unsupported("loop variable counts of the WHILE, its body and its outputs differ")
        passthrough = [k for k in range(n) if body_sub.outputs[k] == body_sub.inputs[k]]
        carried = [k for k in range(n) if k not in passthrough]
        if not carried:
            raise Unsupported("the body changes no loop variable")
        order = carried + passthrough
        cond = self.conv.submodel(cond_index, order, [0])
        body = self.conv.submodel(body_index, order, carried)
        if cond is None or body is None:
            raise Unsupported("its condition or body has operators that cannot be mapped (listed)")
        ins = [self._subgraph_operand(cond), self._subgraph_operand(body)] + [self.input(op.inputs[k]) for k in order]
        outs = [self.output(op.outputs[k]) for k in carried]
        self.emit(Op.WHILE, ins, outs)
        for k in passthrough:
            self.values[op.outputs[k]] = self.input(op.inputs[k])

    def op_IF(self, op):
        o = op.options("IfOptions")
        if not op.inputs:
            raise BadModel("IF needs its condition as input 0")
        n_in = len(op.inputs) - 1
        then_m = self.conv.submodel(o.ThenSubgraphIndex(), list(range(n_in)), list(range(len(op.outputs))))
        else_m = self.conv.submodel(o.ElseSubgraphIndex(), list(range(n_in)), list(range(len(op.outputs))))
        if then_m is None or else_m is None:
            raise Unsupported("a branch has operators that cannot be mapped (listed)")
        ins = [self.input(op.inputs[0], Spec(T.TENSOR_BOOL8, (1,))), self._subgraph_operand(then_m),
               self._subgraph_operand(else_m)] + [self.input(t) for t in op.inputs[1:]]
        self.emit(Op.IF, ins, [self.output(t) for t in op.outputs])


def _f32(x: float) -> float:
    return float(np.float32(x))
