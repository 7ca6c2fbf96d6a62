"""What the operator families share: operand counts, constant integer parameters, fused activations,
padding schemes, and the float island (quantized tensors computed in float where NNAPI 1.3 has an
operation in float only)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....hal import FusedActivationFunc, OperandType as T, OperationType as Op, PaddingScheme
from ..flatbuffer import BadModel
from ..generated import generated
from ..graph import Graph
from ..imported import Unsupported
from ..schema import FlatOperator

#: TFLite ActivationFunctionType -> NNAPI FusedActivationFunc, or a separate operation after it.
FUSED = {0: (FusedActivationFunc.NONE, None), 1: (FusedActivationFunc.RELU, None),
         2: (FusedActivationFunc.RELU1, None), 3: (FusedActivationFunc.RELU6, None),
         4: (FusedActivationFunc.NONE, Op.TANH)}
_SEPARATE = {1: Op.RELU, 2: Op.RELU1, 3: Op.RELU6, 4: Op.TANH}
ACTIVATION_NAMES = {v: k for k, v in vars(generated("ActivationFunctionType")).items()
                    if not k.startswith("_") and isinstance(v, int)}
#: TFLite Padding -> NNAPI implicit padding scheme.
_PADDING = {0: PaddingScheme.SAME, 1: PaddingScheme.VALID}
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
INT32_RANGE = (-2**31, 2**31 - 1)


def need(op: FlatOperator, n_in: int | tuple[int, ...], n_out: int = 1) -> None:
    """Refuse an operator without `n_in` (one of them) inputs and `n_out` outputs."""
    ins = (n_in,) if isinstance(n_in, int) else n_in
    if len(op.inputs) not in ins or len(op.outputs) != n_out:
        raise Unsupported(f"expected {'/'.join(map(str, ins))} inputs and {n_out} outputs, got "
                          f"{len(op.inputs)} and {len(op.outputs)}")


def const_ints(graph: Graph, t: int, what: str, count: int | None = None) -> list[int]:
    """A constant integer tensor's values (int32 range), `count` of them when given."""
    v = graph.const_value(t)
    if v is None:
        raise Unsupported(f"{what} (tensor {graph.tensor(t).describe()}) must be constant")
    v = np.asarray(v).reshape(-1)
    if v.dtype.kind not in "iu":
        raise BadModel(f"{what} (tensor {graph.tensor(t).describe()}) must hold integers")
    if v.size and (int(v.min()) < INT32_RANGE[0] or int(v.max()) > INT32_RANGE[1]):
        raise BadModel(f"{what} (tensor {graph.tensor(t).describe()}) holds values outside the int32 range")
    if count is not None and v.size != count:
        raise BadModel(f"{what} (tensor {graph.tensor(t).describe()}) has {v.size} values, {count} expected")
    return [int(x) for x in v]


def fused(act: int) -> tuple[FusedActivationFunc, Op | None]:
    """(NNAPI fused activation, operation to run after it or None) of a TFLite activation."""
    if act not in ACTIVATION_NAMES:
        raise BadModel(f"fused activation {act} is not a TFLite ActivationFunctionType")
    if act not in FUSED:
        raise Unsupported(f"fused activation {ACTIVATION_NAMES[act]} has no NNAPI equivalent")
    return FUSED[act]


def padding_scheme(code: int) -> PaddingScheme:
    """The NNAPI implicit padding scheme of a TFLite Padding value."""
    if code not in _PADDING:
        raise BadModel(f"padding {code} is not a TFLite Padding (0 SAME, 1 VALID)")
    return _PADDING[code]


def with_activation(graph: Graph, out_t: int, act: int, dims=None) -> tuple[int, int, Callable[[], None]]:
    """(NNAPI fused-activation scalar, operand to write, finish()) for an operation with a fused activation."""
    code, post = fused(act)
    dims = dims if dims is not None else graph.spec_of(out_t).dims
    if post is None:
        out, finish = graph.shaped_output(out_t, dims)
        return graph.i32(code), out, finish
    tmp = graph.temp(graph.spec_of(out_t).with_dims(dims))

    def finish() -> None:
        src = tmp if tuple(dims) == graph.spec_of(out_t).dims else graph.reshape(tmp, graph.spec_of(out_t).dims)
        graph.emit(post, [src], [graph.output(out_t)])
    return graph.i32(code), tmp, finish


def separate_activation(graph: Graph, out_t: int, act: int) -> tuple[int, Callable[[], None]]:
    """(operand to write, finish()) for operations NNAPI has without a fused activation."""
    fused(act)
    if act == 0:
        return graph.output(out_t), lambda: None
    if act not in _SEPARATE:
        raise Unsupported(f"fused activation {ACTIVATION_NAMES[act]} has no NNAPI equivalent")
    tmp = graph.temp(graph.spec_of(out_t))
    return tmp, lambda: graph.emit(_SEPARATE[act], [tmp], [graph.output(out_t)])


def simple(graph: Graph, op: FlatOperator, nnapi: Op, inputs: list[int], params: list[int] = ()) -> None:
    """Emit `nnapi` on the operands of TFLite tensors `inputs` and then `params`, into output 0."""
    graph.emit(nnapi, [graph.input(t) for t in inputs] + list(params), [graph.output(op.outputs[0])])


def via_float(graph: Graph, op: FlatOperator, build: Callable[[list[int], int], None]) -> None:
    """Run `build(float inputs, float output operand)` with quantized tensors dequantized before and
    the output quantized after (NNAPI has the operation in float only)."""
    ins = [graph.float_input(t) for t in op.inputs]
    out, finish = graph.float_output(op.outputs[0])
    build(ins, out)
    finish()
