"""The OpenVINO driver's one lowering table: NNAPI operation -> OpenVINO opset nodes.

Rules register themselves per operation family in `rules/` with `@lowers(...)`; whoever reads
`LOWERINGS` loads them first (`rules.load_all()`), so this table never imports a rule back.
A rule is `fn(ctx, xs) -> outputs`: `ctx` is the operation's compile-time `OpContext` (built by
`validation.build_operation_context` with the shapes `validation.infer_model_shapes` propagated, so
constants carry their values and outputs their inferred dimensions), `xs` one `Value` per input
(None for an omitted one), and it returns one `Value` (or a node output in logical layout) per output.
A rule raises `Unsupported` (or any error) for parameters it does not lower: the operation is then
not claimed.

How values are represented inside the graph (the "compute" representation):
- float32, float16 and quantized operands are float32 tensors of their real values (quantized ones
  dequantized, so they lie on their quantization grid); the graph builder converts model inputs to it
  and model outputs back (`graph.py`);
- after a rule, a quantized output is put back on its grid with a FakeQuantize (OpenVINO's
  low-precision pipeline turns FakeQuantize -> Convolution / MatMul / GroupConvolution with
  `Convert -> Subtract -> Multiply` dequantized weights into int8 kernels), unless the rule moves
  data only (`keeps_grid`) and the output has its input's quantization;
- TENSOR_INT32 is i32, TENSOR_BOOL8 boolean; scalars are read from the context (constants only).

Layouts: a `Value` may hold its tensor transposed (`perm`: physical axis i holds logical axis
perm[i]); convolutions and pools leave NHWC tensors channel-first, element-wise rules keep whatever
layout their inputs share, and only a rule that needs the logical layout (`Value.node`) pays a Transpose.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
from .backend import ov, ops

from ...hal import FusedActivationFunc, OperandType as T, OperationType as Op
from ...ops import OpContext, Tensor
from ..base import lowering as base_lowering
from .tensors import writable_alias

F32, F16, I32, B8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8A, Q8AS, Q8S, Q8PC = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                        T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
Q16A, Q16S = T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM
FLOAT = (F32, F16)
QUANT8 = (Q8A, Q8AS)
FLOAT_Q8 = FLOAT + QUANT8
#: Tensor types an operand of a lowered operation may have.
TENSOR_TYPES = frozenset({F32, F16, I32, B8, Q8A, Q8AS, Q8S, Q8PC, Q16A, Q16S})
#: Types held as float32 real values in the graph.
REAL_TYPES = frozenset({F32, F16, Q8A, Q8AS, Q8S, Q8PC, Q16A, Q16S})
#: NHWC tensor laid out channel-first (physical NCHW).
NCHW = (0, 3, 1, 2)


class Unsupported(Exception):
    """A rule does not lower these parameters (the operation is not claimed)."""


@dataclass(frozen=True)
class Lowering(base_lowering.Lowering):
    """One table entry (`fn(ctx, xs)`; IF / WHILE: `control` is True and the rule is `fn(ctx, xs, scope)`,
    lowering referenced subgraphs through the graph builder's `scope`: `graph.Scope`: `lower_subgraph`,
    the loop budget, ran-out flags)."""

    control: bool = False
    #: The rule only moves or selects values: a quantized output with its inputs' quantization needs
    #: no requantization.
    keeps_grid: bool = False


#: The table (`drivers.base.lowering`): what the graph holds (every scalar parameter a constant), and
#: where the rules are.
LOWERINGS = base_lowering.LoweringTable(
    "openvino", rules="nnapi.drivers.openvino.rules", tensor_types=TENSOR_TYPES, default_types=FLOAT,
    scalar_types=(T.INT32, T.FLOAT32, T.FLOAT16, T.BOOL, T.UINT32), entry=Lowering, constant_scalars=True)
#: `@lowers(*ops, types=FLOAT, keeps_grid=False, control=False)`: register the decorated rule for `ops`
#: when input 0 has one of `types`.
lowers = LOWERINGS.register


# --- values ------------------------------------------------------------------------------------------
def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


class Value:
    """One operand's tensor in the graph being built: a node output holding the logical tensor
    transposed by `perm` (None: logical layout), or a constant made on first use."""

    __slots__ = ("_out", "perm", "_array", "_logical", "shape")

    def __init__(self, out: ov.Output | None = None, perm: Sequence[int] | None = None, *,
                 array: np.ndarray | None = None) -> None:
        if perm is not None and tuple(perm) == tuple(range(len(perm))):
            perm = None
        self.perm = None if perm is None else tuple(perm)
        self._out = out
        self._array = array
        self._logical: ov.Output | None = out if self.perm is None else None
        if array is not None:
            self.shape = tuple(int(d) for d in array.shape)
        else:
            physical = tuple(int(d) for d in out.get_partial_shape().to_shape())
            self.shape = physical if self.perm is None else tuple(physical[i] for i in _inverse(self.perm))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_constant(self) -> bool:
        return self._array is not None

    @property
    def array(self) -> np.ndarray | None:
        """The logical value of a constant, else None."""
        return self._array

    @property
    def node(self) -> ov.Output:
        """The tensor in its logical layout."""
        if self._logical is None:
            if self._array is not None:
                self._logical = constant(self._array)
            else:
                self._logical = transpose(self._out, _inverse(self.perm))
        return self._logical

    def laid_out(self, perm: Sequence[int] | None) -> ov.Output:
        """The tensor transposed by `perm` (physical axis i = logical axis perm[i]); None: logical."""
        if perm is None or tuple(perm) == tuple(range(len(perm))):
            return self.node
        perm = tuple(perm)
        if self._array is not None:
            return constant(np.ascontiguousarray(np.transpose(self._array, perm)))
        if self.perm == perm:
            return self._out
        if self.perm is None:
            return transpose(self._out, perm)
        return transpose(self._out, [self.perm.index(a) for a in perm])

    def physical(self) -> tuple[ov.Output, tuple[int, ...] | None]:
        """(node output, perm) as held, without transposing."""
        if self._array is not None or self.perm is None:
            return self.node, None
        return self._out, self.perm

    def axis(self, logical_axis: int) -> int:
        """Where logical axis `logical_axis` sits in the held layout (see `physical`)."""
        if self._array is not None or self.perm is None:
            return logical_axis
        return self.perm.index(logical_axis)


def as_value(x: "Value | ov.Output | ov.Node", perm: Sequence[int] | None = None) -> Value:
    if isinstance(x, Value):
        return x
    if isinstance(x, ov.Node):
        x = x.output(0)
    return Value(x, perm)


# --- node helpers --------------------------------------------------------------------------------------
#: The large Constants of the graph being built, by content (`sharing_constants`; None: not kept).
_CONSTANTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("nnapi_openvino_constants", default=None)


@contextlib.contextmanager
def sharing_constants() -> Iterator[None]:
    """Within: equal large constants are one node of the graph being built (one table per graph, since
    a loop's body is a graph of its own). A weight that recurs (a loop unrolled, a recurrent cell per
    time step) is then stored and exported once, not once per use: the exports of lstm_text_int8 (64
    QUANTIZED_LSTM steps) and gru_text_f32 (a WHILE unrolled) shrink 22.6 -> 3.9 MB and 7.9 -> 2.3 MB."""
    token = _CONSTANTS.set({})
    try:
        yield
    finally:
        _CONSTANTS.reset(token)


def constant(array: np.ndarray | float | int, dtype: np.dtype | type | None = None) -> ov.Output:
    """A Constant; large contiguous arrays are shared, not copied (the graph builder keeps their
    memory alive with the compiled model), and equal ones are one node (`sharing_constants`)."""
    a = np.asarray(array, dtype=dtype)
    if a.nbytes >= 4096 and a.flags.c_contiguous:
        table = _CONSTANTS.get()
        if table is None:
            return ops.constant(writable_alias(a), shared_memory=True).output(0)
        key = (a.dtype.str, a.shape, hashlib.blake2b(a.reshape(-1).view(np.uint8), digest_size=16).digest())
        node = table.get(key)
        if node is None:
            node = table[key] = ops.constant(writable_alias(a), shared_memory=True).output(0)
        return node
    return ops.constant(np.array(a)).output(0)


def f32(value: float | np.ndarray) -> ov.Output:
    return constant(np.asarray(value, np.float32))


def i64(values: Sequence[int] | int) -> ov.Output:
    return constant(np.asarray(values, np.int64))


def transpose(x: ov.Output, perm: Sequence[int]) -> ov.Output:
    return ops.transpose(x, i64(list(perm))).output(0)


def reshape(x: ov.Output, shape: Sequence[int]) -> ov.Output:
    return ops.reshape(x, i64([int(d) for d in shape]), special_zero=False).output(0)


def out(node: ov.Node | ov.Output) -> ov.Output:
    return node.output(0) if isinstance(node, ov.Node) else node


def activation(x: ov.Output, code: int) -> ov.Output:
    """A fused activation (NONE, RELU, RELU1, RELU6) applied to float values."""
    code = FusedActivationFunc(int(code))
    if code == FusedActivationFunc.NONE:
        return x
    if code == FusedActivationFunc.RELU:
        return out(ops.relu(x))
    if code == FusedActivationFunc.RELU1:
        return out(ops.clamp(x, -1.0, 1.0))
    return out(ops.clamp(x, 0.0, 6.0))


def broadcast_pair(ctx: OpContext, a: Value, b: Value) -> tuple[ov.Output, ov.Output, tuple[int, ...] | None]:
    """Both operands of a broadcasting element-wise operation in one shared layout: the layout of the
    higher-rank non-constant operand; the other is brought to it (unsqueezed to its rank, transposed)."""
    lead = a if (not a.is_constant and (a.rank >= b.rank or b.is_constant)) else b
    _, perm = lead.physical()
    if perm is None:
        return a.node, b.node, None
    rank = lead.rank

    def place(v: Value) -> ov.Output:
        if v is lead:
            return lead.physical()[0]
        if v.rank < rank:
            if v.is_constant:
                return constant(np.ascontiguousarray(
                    np.transpose(v.array.reshape((1,) * (rank - v.rank) + v.shape), perm)))
            x = reshape(v.node, (1,) * (rank - v.rank) + v.shape)
            return transpose(x, perm)
        return v.laid_out(perm)

    return place(a), place(b), perm


# --- quantization ----------------------------------------------------------------------------------------
def int_range(t: T) -> tuple[int, int]:
    info = np.iinfo({Q8A: np.uint8, Q8AS: np.int8, Q8S: np.int8, Q8PC: np.int8,
                     Q16A: np.uint16, Q16S: np.int16}[t])
    return int(info.min), int(info.max)


def real_range(t: Tensor) -> tuple[np.float32, np.float32]:
    """The smallest and largest real value of a per-tensor quantized operand's grid."""
    lo, hi = int_range(t.type)
    scale = np.float32(t.scale)
    return np.float32(lo - t.zero_point) * scale, np.float32(hi - t.zero_point) * scale


#: The run-time checks of the graph (or body) being lowered: (a boolean scalar, true when the
#: execution must fail, and what to say then). The main graph's list, or a referenced subgraph's
#: body's, which its IF / WHILE rule carries out as one flag of its own (`graph.Body.any_check`).
CHECKS: contextvars.ContextVar[list | None] = contextvars.ContextVar("nnapi_openvino_checks", default=None)


@contextlib.contextmanager
def collecting_checks(checks: list | None) -> Iterator[None]:
    """Run-time checks made inside go to `checks` (None: none can be made there)."""
    token = CHECKS.set(checks)
    try:
        yield
    finally:
        CHECKS.reset(token)


def runtime_check(bad: ov.Output, message: str) -> None:
    """Fail the execution with INVALID_ARGUMENT `message` when `bad` (a boolean scalar) is true, as the
    reference driver fails on the same values (Unsupported where no check can be made)."""
    checks = CHECKS.get()
    if checks is None:
        raise Unsupported("a run-time check where none can be made")
    checks.append((bad, message))


#: "fq": quantized values are put on their grid with FakeQuantize (the low-precision pipeline's int8
#: kernels); "plain": with Round and Clamp, which no OpenVINO transformation rewrites (the fallback
#: when a graph with FakeQuantize fails to compile).
ROUNDING: contextvars.ContextVar[str] = contextvars.ContextVar("nnapi_openvino_rounding", default="fq")

#: "compact": long recurrences (sequences, loops of a known count) stay loops over blocks of steps, few
#: nodes for a cached start to import; "unrolled": every step is nodes of the graph, which OpenVINO
#: runs 35-75% faster once loaded (SUSTAINED_SPEED: `graph.build`).
LOOPS: contextvars.ContextVar[str] = contextvars.ContextVar("nnapi_openvino_loops", default="compact")


def fake_quantize(x: ov.Output, t: Tensor, *, to_int: bool = False) -> ov.Output:
    """Round float values onto the grid of quantized operand `t` (saturating): real values, or with
    `to_int` the integers themselves (as float)."""
    lo, hi = int_range(t.type)
    rlo, rhi = real_range(t)
    if ROUNDING.get() == "plain":
        scale = np.float32(t.scale)
        q = ops.clamp(ops.add(ops.round(ops.divide(x, f32(scale)), "half_to_even"), f32(t.zero_point)),
                      float(lo), float(hi))
        if to_int:
            return out(q)
        return out(ops.multiply(ops.subtract(q, f32(t.zero_point)), f32(scale)))
    if to_int:
        return out(ops.fake_quantize(x, f32(rlo), f32(rhi), f32(lo), f32(hi), hi - lo + 1))
    return out(ops.fake_quantize(x, f32(rlo), f32(rhi), f32(rlo), f32(rhi), hi - lo + 1))


def dequantize_input(x: ov.Output, t: Tensor, *, channel_axis: int | None = None) -> ov.Output:
    """Quantized integers (any integer element type) -> their real values in float32, as
    `Convert -> Subtract(zero point) -> Multiply(scale)`: the dequantization the low-precision pipeline
    recognises, and exact (the zero point maps to 0.0 exactly)."""
    xf = out(ops.convert(x, ov.Type.f32))
    if t.type == Q8PC:
        cq = t.channel_quant
        shape = [1] * len(t.dims)
        shape[cq.channel_dim if channel_axis is None else channel_axis] = -1
        return out(ops.multiply(xf, constant(np.asarray(cq.scales, np.float32).reshape(shape))))
    if t.zero_point:
        xf = out(ops.subtract(xf, f32(t.zero_point)))
    return out(ops.multiply(xf, f32(t.scale)))


def dequantized_array(t: Tensor) -> np.ndarray:
    """The real values of a constant operand as float32 (float operands are widened)."""
    v = t.value
    if t.type == Q8PC:
        cq = t.channel_quant
        shape = [1] * v.ndim
        shape[cq.channel_dim] = -1
        return v.astype(np.float32) * np.asarray(cq.scales, np.float32).reshape(shape)
    if t.type in REAL_TYPES and t.type not in FLOAT:
        return (v.astype(np.float32) - np.float32(t.zero_point)) * np.float32(t.scale)
    if t.type == F16:
        return v.astype(np.float32)
    return v


def dequantized_weights(t: Tensor, *, perm: Sequence[int] | None = None, shape: Sequence[int] | None = None,
                        channel_axis: int | None = None) -> ov.Output:
    """A constant quantized filter as `Constant(int8) -> Convert -> [Subtract] -> Multiply`, the
    weights pattern of the low-precision pipeline; the integers are first transposed by `perm` and
    reshaped to `shape`, and per-channel scales then apply along `channel_axis` (of the result).
    Float filters, and every filter under plain rounding (`ROUNDING`), become plain float32 constants."""
    v = t.value
    if perm is not None:
        v = np.transpose(v, perm)
    if shape is not None:
        v = v.reshape(shape)
    v = np.ascontiguousarray(v)
    if t.type in FLOAT:
        return constant(v.astype(np.float32, copy=False))
    zero = t.zero_point if t.type != Q8PC else 0
    if v.dtype == np.uint8:  # u8 weights as i8 with the zero point shifted (LPT wants signed weights)
        v = (v.astype(np.int16) - 128).astype(np.int8)
        zero -= 128
    if t.type == Q8PC:
        sshape = [1] * v.ndim
        sshape[channel_axis if channel_axis is not None else t.channel_quant.channel_dim] = -1
        scale = np.asarray(t.channel_quant.scales, np.float32).reshape(sshape)
    else:
        scale = np.float32(t.scale)
    if ROUNDING.get() == "plain":  # computed in float: plain float32 weights, the same values (no int8 pattern
        return constant((v.astype(np.float32) - np.float32(zero)) * scale)  # for OpenVINO's passes to rewrite)
    w = out(ops.convert(constant(v), ov.Type.f32))
    if zero:
        w = out(ops.subtract(w, f32(zero)))
    return out(ops.multiply(w, constant(scale) if t.type == Q8PC else f32(scale)))


def bias_values(ctx: OpContext, index: int = 2) -> np.ndarray | None:
    """The real values of a constant bias (int32 biases of quantized operations scaled by input
    scale x filter scale, per channel for per-channel filters), or None when not constant."""
    b = ctx.inputs[index]
    if b.value is None:
        return None
    if b.type != I32:
        return dequantized_array(b).astype(np.float32, copy=False)
    f = ctx.inputs[1]
    if f.type == Q8PC:
        scales = np.float32(ctx.inputs[0].scale) * np.asarray(f.channel_quant.scales, np.float32)
    else:
        scales = np.float32(ctx.inputs[0].scale) * np.float32(f.scale)
    return (b.value.astype(np.float64) * scales.astype(np.float64)).astype(np.float32)


# --- scalar parameters --------------------------------------------------------------------------------------
def scalar(ctx: OpContext, i: int, default=None):
    """Scalar parameter `i` (a constant); `default` when absent or omitted; Unsupported when it is
    not a constant (the lowered graph cannot change its structure per request)."""
    from ...ops import UnknownValue
    try:
        return ctx.scalar(i, default)
    except UnknownValue:
        raise Unsupported(f"{ctx.op.name}: input {i} is not a constant") from None


def out_shape(ctx: OpContext, k: int = 0) -> tuple[int, ...]:
    return tuple(int(d) for d in ctx.outputs[k].dims)


__all__ = ["LOWERINGS", "Lowering", "Unsupported", "Value", "lowers", "as_value", "constant", "f32", "i64",
           "transpose", "reshape", "activation", "broadcast_pair", "fake_quantize", "dequantize_input",
           "dequantized_array", "dequantized_weights", "bias_values", "scalar",
           "out_shape", "int_range", "real_range", "writable_alias", "sharing_constants", "ROUNDING", "LOOPS", "CHECKS",
           "collecting_checks",
           "runtime_check", "NCHW", "F32", "F16", "I32", "B8",
           "Q8A", "Q8AS", "Q8S", "Q8PC", "Q16A", "Q16S", "FLOAT", "QUANT8", "FLOAT_Q8", "TENSOR_TYPES", "REAL_TYPES"]
