"""Shape and layout operators: reshapes, concatenation, padding, transposes, slices and splits,
gathers and tiles, space / depth / batch rearrangements and resizes, with their constant parameters
checked."""
from __future__ import annotations

import numpy as np

from ....hal import OperandType as T, OperationType as Op
from ..flatbuffer import BadModel
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from .common import INT32_RANGE, const_ints, need, separate_activation, simple

_BLOCKS = {"DEPTH_TO_SPACE": (Op.DEPTH_TO_SPACE, "DepthToSpaceOptions"),
           "SPACE_TO_DEPTH": (Op.SPACE_TO_DEPTH, "SpaceToDepthOptions")}
_RESIZES = {"RESIZE_BILINEAR": (Op.RESIZE_BILINEAR, "ResizeBilinearOptions"),
            "RESIZE_NEAREST_NEIGHBOR": (Op.RESIZE_NEAREST_NEIGHBOR, "ResizeNearestNeighborOptions")}


@register("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def map_reshape(graph: Graph, op: FlatOperator) -> None:
    """RESHAPE to the output tensor's shape (a shape input, when there is one, agrees with it)."""
    need(op, (1, 2))
    out = graph.spec_of(op.outputs[0])
    graph.emit(Op.RESHAPE, [graph.input(op.inputs[0]), graph.const_i32(list(out.dims))], [graph.output(op.outputs[0])])


@register("CONCATENATION")
def map_concatenation(graph: Graph, op: FlatOperator) -> None:
    """CONCATENATION along the (non-negative) axis, its fused activation as a separate operation."""
    if not op.inputs or len(op.outputs) != 1:
        raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
    o = op.options("ConcatenationOptions")
    rank = len(graph.spec_of(op.outputs[0]).dims)
    axis = o.Axis() % rank
    out, finish = separate_activation(graph, op.outputs[0], o.FusedActivationFunction())
    graph.emit(Op.CONCATENATION, [graph.input(t) for t in op.inputs] + [graph.i32(axis)], [out])
    finish()


def _pairs(graph: Graph, t: int, rank: int, what: str) -> np.ndarray:
    """A constant [rank, 2] integer tensor (paddings)."""
    return np.asarray(const_ints(graph, t, what, 2 * rank), np.int32).reshape(rank, 2)


@register("PAD", "PADV2")
def map_pad(graph: Graph, op: FlatOperator) -> None:
    """PAD, or PAD_V2 with a constant pad value (PADV2, or PAD with a third input)."""
    need(op, (2, 3))
    x = graph.spec_of(op.inputs[0])
    pad = graph.const_i32(_pairs(graph, op.inputs[1], len(x.dims), "paddings"))
    if len(op.inputs) == 3 and op.inputs[2] >= 0:
        value = graph.const_value(op.inputs[2])
        if value is None:
            raise Unsupported("the pad value must be constant")
        value = np.asarray(value).reshape(-1)
        if value.size != 1 or not np.isfinite(value.astype(np.float64)).all():
            raise BadModel(f"the pad value (tensor {graph.tensor(op.inputs[2]).describe()}) must be one number")
        v = value[0]
        if not x.is_float and not INT32_RANGE[0] <= int(v) <= INT32_RANGE[1]:
            raise BadModel(f"the pad value {v} is outside the int32 range")
        param = graph.f32(float(v)) if x.is_float else graph.i32(int(v))
        if x.type == T.TENSOR_FLOAT16:
            param = graph.scalar(T.FLOAT16, float(v))
        return simple(graph, op, Op.PAD_V2, [op.inputs[0]], [pad, param])
    simple(graph, op, Op.PAD, [op.inputs[0]], [pad])


@register("TRANSPOSE")
def map_transpose(graph: Graph, op: FlatOperator) -> None:
    """TRANSPOSE by a constant permutation."""
    need(op, 2)
    perm = const_ints(graph, op.inputs[1], "perm")
    simple(graph, op, Op.TRANSPOSE, [op.inputs[0]], [graph.const_i32(perm)])


@register("STRIDED_SLICE")
def map_strided_slice(graph: Graph, op: FlatOperator) -> None:
    """TFLite ignores `end` on shrunk axes (it takes one element at `begin`); NNAPI reads it, so
    shrunk axes get end = begin + 1 here."""
    need(op, 4)
    o = op.options("StridedSliceOptions")
    if o.EllipsisMask() or o.NewAxisMask() or o.Offset():
        raise Unsupported("ellipsis, new-axis masks and offset have no NNAPI equivalent")
    dims = graph.spec_of(op.inputs[0]).dims
    begin = const_ints(graph, op.inputs[1], "begin", len(dims))
    end = const_ints(graph, op.inputs[2], "end", len(dims))
    strides = const_ints(graph, op.inputs[3], "strides", len(dims))
    begin_mask, end_mask, shrink = o.BeginMask(), o.EndMask(), o.ShrinkAxisMask()
    for i in range(len(begin)):
        if shrink >> i & 1:
            b = 0 if begin_mask >> i & 1 else begin[i]
            b = b + dims[i] if b < 0 else b
            begin[i], end[i], strides[i] = b, b + 1, 1
            begin_mask &= ~(1 << i)
            end_mask &= ~(1 << i)
    out, finish = graph.shaped_output(op.outputs[0], _strided_dims(graph, op))
    graph.emit(Op.STRIDED_SLICE, [graph.input(op.inputs[0]), graph.const_i32(begin), graph.const_i32(end),
                                  graph.const_i32(strides), graph.i32(begin_mask), graph.i32(end_mask),
                                  graph.i32(shrink)], [out])
    finish()


def _strided_dims(graph: Graph, op: FlatOperator) -> tuple[int, ...]:
    """NNAPI's output shape: TFLite's, but [1] when every dimension is shrunk."""
    dims = graph.tensor(op.outputs[0]).shape
    return dims if dims else (1,)


@register("SLICE")
def map_slice(graph: Graph, op: FlatOperator) -> None:
    """SLICE with constant begin and size."""
    need(op, 3)
    rank = len(graph.spec_of(op.inputs[0]).dims)
    begin = graph.const_i32(const_ints(graph, op.inputs[1], "begin", rank))
    size = graph.const_i32(const_ints(graph, op.inputs[2], "size", rank))
    simple(graph, op, Op.SLICE, [op.inputs[0]], [begin, size])


@register("SPLIT")
def map_split(graph: Graph, op: FlatOperator) -> None:
    """SPLIT into equal parts along a constant axis."""
    if len(op.inputs) != 2 or not op.outputs:
        raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
    axis = const_ints(graph, op.inputs[0], "axis", 1)[0]
    n = op.options("SplitOptions").NumSplits()
    rank = len(graph.spec_of(op.inputs[1]).dims)
    graph.emit(Op.SPLIT, [graph.input(op.inputs[1]), graph.i32(axis % rank), graph.i32(n)],
               [graph.output(t) for t in op.outputs])


@register("SPLIT_V")
def map_split_v(graph: Graph, op: FlatOperator) -> None:
    """Unequal splits as one SLICE per output."""
    if len(op.inputs) != 3 or not op.outputs:
        raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
    x = graph.spec_of(op.inputs[0])
    sizes = const_ints(graph, op.inputs[1], "size_splits", len(op.outputs))
    axis = const_ints(graph, op.inputs[2], "axis", 1)[0] % len(x.dims)
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
        graph.emit(Op.SLICE, [graph.input(op.inputs[0]), graph.const_i32(begin), graph.const_i32(extent)],
                   [graph.output(t)])
        start += size


@register("GATHER")
def map_gather(graph: Graph, op: FlatOperator) -> None:
    """GATHER along an axis (int32 indices, or constant int64 ones; no batch_dims)."""
    need(op, 2)
    o = op.options("GatherOptions")
    if o.BatchDims():
        raise Unsupported("batch_dims has no NNAPI equivalent")
    params = graph.spec_of(op.inputs[0])
    indices = graph.tensor(op.inputs[1])
    if indices.type not in ("INT32", "INT64") or (indices.type == "INT64" and not graph.is_const(op.inputs[1])):
        raise Unsupported(f"indices of type {indices.type}")
    axis = o.Axis() % len(params.dims)
    idx_dims = indices.shape or (1,)
    dims = params.dims[:axis] + tuple(idx_dims) + params.dims[axis + 1:]
    out, finish = graph.shaped_output(op.outputs[0], dims)
    graph.emit(Op.GATHER, [graph.input(op.inputs[0]), graph.i32(axis), graph.input(op.inputs[1])], [out])
    finish()


@register("TILE")
def map_tile(graph: Graph, op: FlatOperator) -> None:
    """TILE by constant multiples."""
    need(op, 2)
    rank = len(graph.spec_of(op.inputs[0]).dims)
    simple(graph, op, Op.TILE, [op.inputs[0]], [graph.const_i32(const_ints(graph, op.inputs[1], "multiples", rank))])


@register(*_BLOCKS)
def map_depth_space(graph: Graph, op: FlatOperator) -> None:
    """DEPTH_TO_SPACE and SPACE_TO_DEPTH with their block size (NHWC)."""
    nnapi, options = _BLOCKS[op.name]
    need(op, 1)
    block = op.options(options).BlockSize()
    simple(graph, op, nnapi, [op.inputs[0]], [graph.i32(block), graph.bool(False)])


@register("SPACE_TO_BATCH_ND")
def map_space_to_batch_nd(graph: Graph, op: FlatOperator) -> None:
    """SPACE_TO_BATCH_ND with constant block shape and paddings (NHWC)."""
    need(op, 3)
    block = graph.const_i32(const_ints(graph, op.inputs[1], "block shape", 2))
    pads = _pairs(graph, op.inputs[2], 2, "paddings")
    simple(graph, op, Op.SPACE_TO_BATCH_ND, [op.inputs[0]], [block, graph.const_i32(pads), graph.bool(False)])


@register("BATCH_TO_SPACE_ND")
def map_batch_to_space_nd(graph: Graph, op: FlatOperator) -> None:
    """BATCH_TO_SPACE_ND with a constant block shape (NNAPI has no crops: they must be 0)."""
    need(op, 3)
    if any(const_ints(graph, op.inputs[2], "crops")):
        raise Unsupported("non-zero crops have no NNAPI equivalent")
    block = graph.const_i32(const_ints(graph, op.inputs[1], "block shape", 2))
    simple(graph, op, Op.BATCH_TO_SPACE_ND, [op.inputs[0]], [block, graph.bool(False)])


@register(*_RESIZES)
def map_resize(graph: Graph, op: FlatOperator) -> None:
    """RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR to a constant size (NHWC)."""
    nnapi, options = _RESIZES[op.name]
    need(op, 2)
    o = op.options(options)
    height, width = const_ints(graph, op.inputs[1], "size", 2)
    simple(graph, op, nnapi, [op.inputs[0]], [graph.i32(width), graph.i32(height), graph.bool(False),
                                              graph.bool(bool(o.AlignCorners())),
                                              graph.bool(bool(o.HalfPixelCenters()))])
