"""Zero-sized inputs, as Android allows them: every operation whose Android registration says
`allowZeroSizedInput` takes an input with a 0 dimension at execution and produces the zero-sized
output Android's shape rules give, on every driver that claims it.

Android never lets a request input be zero-sized (inputs must be fully specified), so, as its own
generated `*_zero_sized` tests do, each model makes the zero-sized tensor at execution: a
BOX_WITH_NMS_LIMIT whose one candidate scores below the threshold keeps no box ([0, 4] boxes, [0]
batch indices), and a ROI_ALIGN over no regions gives an image batch of 0 ([0, 4, 4, 2]). The
models are built through the public `nnapi.Model` API with those dimensions declared 0 (unknown)
and outputs of unknown dimensions. A driver that does not claim the operation under test never
runs it (claims must be honest: what is claimed runs); the reference driver claims them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.runtime.devices import find_device

F32, I32, Q8 = T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM
NONE, SAME = 0, 1

#: Android's operations registered with allowZeroSizedInput = true (frameworks/ml/nn/common/operations).
ANDROID_ALLOWS = {
    Op.RELU, Op.RELU1, Op.RELU6, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH, Op.ADD, Op.MUL, Op.SUB, Op.DIV,
    Op.CONCATENATION, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.QUANTIZE, Op.DEQUANTIZE, Op.FULLY_CONNECTED,
    Op.AVERAGE_POOL_2D, Op.L2_POOL_2D, Op.MAX_POOL_2D, Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR,
    Op.ROI_ALIGN, Op.SLICE, Op.SOFTMAX, Op.TRANSPOSE, Op.TRANSPOSE_CONV_2D, Op.AXIS_ALIGNED_BBOX_TRANSFORM,
    Op.BOX_WITH_NMS_LIMIT,
}


@dataclass
class Case:
    """One operation fed a zero-sized input: the model, its execution inputs, the index of the
    operation under test, and the expected shapes (Android's rules) and dtypes of its outputs."""

    model: nnapi.Model
    inputs: list[np.ndarray]
    index: int
    shapes: list[tuple[int, ...]]
    dtypes: list[np.dtype]


class Builder:
    """A model whose operation under test reads a tensor that is zero-sized only at execution."""

    def __init__(self) -> None:
        self.m = nnapi.Model()
        self.inputs: list[int] = []
        self.values: list[np.ndarray] = []
        self.n_ops = 0
        # The one candidate box scores 0.1 in class 1, below the 0.3 threshold: nothing is kept.
        scores = self.input(F32, (1, 2), np.array([[0.9, 0.1]], np.float32))
        self.boxes = self.tensor(F32, (0, 4))       # [0, 4] at execution
        self.batch = self.tensor(I32, (0,))         # [0]
        self.op(Op.BOX_WITH_NMS_LIMIT,
                [scores, self.const(F32, [[1, 1, 10, 10, 0, 0, 10, 10]]), self.const(I32, [0]), self.f(0.3),
                 self.i(-1), self.i(0), self.f(0.4), self.f(1.0), self.f(0.3)],
                [self.tensor(F32, (0,)), self.boxes, self.tensor(I32, (0,)), self.batch])

    def tensor(self, t: T, dims: tuple[int, ...], scale: float = 0.0, zp: int = 0) -> int:
        return self.m.add_operand(t, dims, scale, zp)

    def input(self, t: T, dims: tuple[int, ...], value: np.ndarray) -> int:
        i = self.tensor(t, dims)
        self.inputs.append(i)
        self.values.append(value)
        return i

    def const(self, t: T, value, scale: float = 0.0, zp: int = 0) -> int:
        a = np.asarray(value, nnapi.ops.numpy_dtype(t))
        i = self.m.add_operand(t, a.shape, scale, zp)
        self.m.set_operand_value(i, a)
        return i

    def scalar(self, t: T, v) -> int:
        i = self.m.add_operand(t)
        self.m.set_operand_value(i, v)
        return i

    def i(self, v: int) -> int:
        return self.scalar(T.INT32, v)

    def f(self, v: float) -> int:
        return self.scalar(T.FLOAT32, v)

    def b(self, v: bool) -> int:
        return self.scalar(T.BOOL, v)

    def op(self, op: Op, ins: list[int], outs: list[int]) -> int:
        self.m.add_operation(op, ins, outs)
        self.n_ops += 1
        return self.n_ops - 1

    def images(self) -> int:
        """[0, 4, 4, 2] at execution: ROI_ALIGN of a [1, 4, 4, 2] map over the kept (no) boxes."""
        out = self.tensor(F32, (0, 4, 4, 2))
        self.op(Op.ROI_ALIGN, [self.const(F32, np.ones((1, 4, 4, 2))), self.boxes, self.batch, self.i(4),
                               self.i(4), self.f(1.0), self.f(1.0), self.i(2), self.i(2), self.b(False)], [out])
        return out

    def case(self, op: Op, ins: list[int], outs: list[tuple[T, int, float, int]],
             shapes: list[tuple[int, ...]]) -> Case:
        """The operation under test; `outs`: (type, rank, scale, zero point) per output, declared with
        unknown dimensions, all model outputs."""
        out_ids = [self.tensor(t, (0,) * rank, scale, zp) for t, rank, scale, zp in outs]
        index = self.op(op, ins, out_ids)
        self.m.identify_inputs_and_outputs(self.inputs, out_ids)
        self.m.finish()
        dtypes = [nnapi.ops.numpy_dtype(t) for t, _, _, _ in outs]
        return Case(self.m, self.values, index, shapes, dtypes)


def _unary(op: Op) -> Callable[[], Case]:
    def build() -> Case:
        b = Builder()
        return b.case(op, [b.boxes], [(F32, 2, 0.0, 0)], [(0, 4)])
    return build


def _binary(op: Op) -> Callable[[], Case]:
    def build() -> Case:  # [0, 4] with [1, 4] broadcasts to [0, 4]
        b = Builder()
        return b.case(op, [b.boxes, b.const(F32, [[1.0, 2.0, 3.0, 4.0]]), b.i(NONE)], [(F32, 2, 0.0, 0)], [(0, 4)])
    return build


def _concatenation() -> Case:  # [0, 4] then a [3, 4] model input along axis 0: [3, 4]
    b = Builder()
    x = b.input(F32, (3, 4), np.arange(12, dtype=np.float32).reshape(3, 4))
    return b.case(Op.CONCATENATION, [b.boxes, x, b.i(0)], [(F32, 2, 0.0, 0)], [(3, 4)])


def _conv2d() -> Case:
    b = Builder()
    return b.case(Op.CONV_2D, [b.images(), b.const(F32, np.ones((3, 2, 2, 2))), b.const(F32, np.zeros(3)), b.i(SAME),
                               b.i(1), b.i(1), b.i(NONE)], [(F32, 4, 0.0, 0)], [(0, 4, 4, 3)])


def _depthwise() -> Case:
    b = Builder()
    return b.case(Op.DEPTHWISE_CONV_2D, [b.images(), b.const(F32, np.ones((1, 2, 2, 4))), b.const(F32, np.zeros(4)),
                                         b.i(SAME), b.i(2), b.i(2), b.i(2), b.i(NONE)],
                  [(F32, 4, 0.0, 0)], [(0, 2, 2, 4)])


def _transpose_conv() -> Case:  # stride 2, 2x2 filter, no padding: 4x4 -> 8x8
    b = Builder()
    return b.case(Op.TRANSPOSE_CONV_2D, [b.images(), b.const(F32, np.ones((3, 2, 2, 2))), b.const(F32, np.zeros(3)),
                                         b.i(0), b.i(0), b.i(0), b.i(0), b.i(2), b.i(2), b.i(NONE), b.b(False)],
                  [(F32, 4, 0.0, 0)], [(0, 8, 8, 3)])


def _fully_connected() -> Case:
    b = Builder()
    return b.case(Op.FULLY_CONNECTED, [b.boxes, b.const(F32, np.ones((3, 4))), b.const(F32, np.zeros(3)), b.i(NONE)],
                  [(F32, 2, 0.0, 0)], [(0, 3)])


def _pool(op: Op) -> Callable[[], Case]:
    def build() -> Case:  # 2x2 windows, stride 2, VALID: 4x4 -> 2x2
        b = Builder()
        return b.case(op, [b.images(), b.i(2), b.i(2), b.i(2), b.i(2), b.i(2), b.i(NONE)], [(F32, 4, 0.0, 0)],
                      [(0, 2, 2, 2)])
    return build


def _resize(op: Op) -> Callable[[], Case]:
    def build() -> Case:  # output width 6, height 8 (INT32 sizes)
        b = Builder()
        return b.case(op, [b.images(), b.i(6), b.i(8), b.b(False)], [(F32, 4, 0.0, 0)], [(0, 8, 6, 2)])
    return build


def _quantize() -> Case:
    b = Builder()
    return b.case(Op.QUANTIZE, [b.boxes], [(Q8, 2, 0.5, 128)], [(0, 4)])


def _dequantize() -> Case:  # a zero-sized quantized tensor: QUANTIZE of the kept (no) boxes
    b = Builder()
    q = b.tensor(Q8, (0, 4), 0.5, 128)
    b.op(Op.QUANTIZE, [b.boxes], [q])
    return b.case(Op.DEQUANTIZE, [q], [(F32, 2, 0.0, 0)], [(0, 4)])


def _roi_align() -> Case:  # no regions of interest: [0, out_h, out_w, C]
    b = Builder()
    return b.case(Op.ROI_ALIGN, [b.const(F32, np.ones((1, 4, 4, 2))), b.boxes, b.batch, b.i(2), b.i(3), b.f(1.0),
                                 b.f(1.0), b.i(2), b.i(2), b.b(False)], [(F32, 4, 0.0, 0)], [(0, 2, 3, 2)])


def _slice() -> Case:  # size -1 on the zero-sized dimension takes its 0 elements
    b = Builder()
    return b.case(Op.SLICE, [b.images(), b.const(I32, [0, 1, 1, 0]), b.const(I32, [-1, 1, -1, 1])],
                  [(F32, 4, 0.0, 0)], [(0, 1, 3, 1)])


def _softmax() -> Case:
    b = Builder()
    return b.case(Op.SOFTMAX, [b.boxes, b.f(1.0)], [(F32, 2, 0.0, 0)], [(0, 4)])


def _transpose() -> Case:  # [0, 4, 4, 2] permuted by (3, 0, 1, 2): [2, 0, 4, 4]
    b = Builder()
    return b.case(Op.TRANSPOSE, [b.images(), b.const(I32, [3, 0, 1, 2])], [(F32, 4, 0.0, 0)], [(2, 0, 4, 4)])


def _bbox_transform() -> Case:  # no rois: [0, 4 * classes]
    b = Builder()
    return b.case(Op.AXIS_ALIGNED_BBOX_TRANSFORM, [b.boxes, b.boxes, b.batch, b.const(F32, [[32.0, 32.0]])],
                  [(F32, 2, 0.0, 0)], [(0, 4)])


def _box_with_nms() -> Case:  # no candidates (scores [0, 4], boxes [0, 16]): every output empty
    b = Builder()
    boxes16 = b.tensor(F32, (0, 16))
    b.op(Op.CONCATENATION, [b.boxes, b.boxes, b.boxes, b.boxes, b.i(1)], [boxes16])
    return b.case(Op.BOX_WITH_NMS_LIMIT, [b.boxes, boxes16, b.batch, b.f(0.3), b.i(-1), b.i(0), b.f(0.4), b.f(1.0),
                                          b.f(0.3)],
                  [(F32, 1, 0.0, 0), (F32, 2, 0.0, 0), (I32, 1, 0.0, 0), (I32, 1, 0.0, 0)],
                  [(0,), (0, 4), (0,), (0,)])


CASES: dict[Op, Callable[[], Case]] = {
    **{op: _unary(op) for op in (Op.RELU, Op.RELU1, Op.RELU6, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH)},
    **{op: _binary(op) for op in (Op.ADD, Op.MUL, Op.SUB, Op.DIV)},
    Op.CONCATENATION: _concatenation, Op.CONV_2D: _conv2d, Op.DEPTHWISE_CONV_2D: _depthwise,
    Op.QUANTIZE: _quantize, Op.DEQUANTIZE: _dequantize, Op.FULLY_CONNECTED: _fully_connected,
    **{op: _pool(op) for op in (Op.AVERAGE_POOL_2D, Op.L2_POOL_2D, Op.MAX_POOL_2D)},
    **{op: _resize(op) for op in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR)},
    Op.ROI_ALIGN: _roi_align, Op.SLICE: _slice, Op.SOFTMAX: _softmax, Op.TRANSPOSE: _transpose,
    Op.TRANSPOSE_CONV_2D: _transpose_conv, Op.AXIS_ALIGNED_BBOX_TRANSFORM: _bbox_transform,
    Op.BOX_WITH_NMS_LIMIT: _box_with_nms,
}


def test_every_operation_android_allows_is_covered_and_registered_so():
    assert set(CASES) == ANDROID_ALLOWS
    refused = [op.name for op in ANDROID_ALLOWS if not nnapi.ops.find_operation(op).allow_zero_sized_input]
    assert not refused, f"registered without allow_zero_sized_input: {refused}"


DEVICES = [d.name for d in nnapi.devices()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(CASES, key=lambda o: o.name), ids=lambda o: o.name)
def test_a_zero_sized_input_gives_the_zero_sized_output_android_gives(op, device):
    case = CASES[op]()
    flags = find_device(device).supported_operations(case.model)
    if device == "reference":
        assert all(flags), f"the reference driver does not claim {op.name} with a zero-sized input"
    if not flags[case.index]:
        return  # not claimed, never run there: an honest claim
    # Claimed: the model runs on this device, with the reference driver for what it does not claim.
    devices = [device] if all(flags) else [device, "reference"]
    outputs = nnapi.Compilation(case.model, devices=devices).finish().execute(case.inputs, timeout=60)
    assert [tuple(o.shape) for o in outputs] == case.shapes
    assert [o.dtype for o in outputs] == case.dtypes
    if op == Op.CONCATENATION:  # the non-empty part passes through
        np.testing.assert_array_equal(outputs[0], case.inputs[1])
