"""Detection operations: AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and
DETECTION_POSTPROCESSING, with hand-computed boxes, NMS outcomes and parameter errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, UnknownValue, find_operation


def _t(t: T, a, scale: float = 0.0, zp: int = 0) -> Tensor:
    v = np.asarray(a, Tensor(t, ()).dtype)
    return Tensor(t, v.shape, scale, zp, value=v)


def _s(t: T, v) -> Tensor:
    return Tensor(t, (), value=np.array(v, Tensor(t, ()).dtype))


def _run(op: Op, ins: list[Tensor], outs: list[Tensor]) -> list[np.ndarray]:
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    dims = reg.prepare(ctx)
    res = reg.execute(ctx)
    for r, d, o in zip(res, dims, outs):
        assert r.shape == tuple(d) and r.dtype == o.dtype
    return res


def _fail(op: Op, ins: list[Tensor], outs: list[Tensor], *words: str) -> None:
    with pytest.raises(NnError) as e:
        _run(op, ins, outs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message
    for w in words:
        assert w in e.value.message


# --- AXIS_ALIGNED_BBOX_TRANSFORM ---------------------------------------------------------------

def _bbox(rois, deltas, batches, info, t=T.TENSOR_FLOAT32, dt=None, scale=0.0):
    dt = dt or t
    dscale, dzp = (0.05, 128) if dt.is_quantized else (0.0, 0)
    return [_t(t, rois, scale), _t(dt, deltas, dscale, dzp), _t(T.TENSOR_INT32, batches),
            _t(t, info, scale)], [Tensor(t, (), scale)]


def test_bbox_transform_shifts_scales_and_clips() -> None:
    # w = h = 10, centre (5, 5) -> centre (6, 7), w 20, h 10 -> [-4, 2, 16, 12] clipped to 12 x 11.
    ins, outs = _bbox([[0, 0, 10, 10]], [[0.1, 0.2, math.log(2), 0.0]], [0], [[11, 12]])
    (y,) = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs)
    np.testing.assert_allclose(y, [[0.0, 2.0, 12.0, 11.0]], atol=1e-5)


def test_bbox_transform_uses_each_rois_batch_image() -> None:
    ins, outs = _bbox([[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 0, 0, 1, 1, 0, 0]] * 2, [0, 1],
                      [[100, 100], [8, 9]])
    (y,) = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs)
    np.testing.assert_allclose(y, [[0, 0, 10, 10, 10, 10, 20, 20], [0, 0, 9, 8, 9, 8, 9, 8]], atol=1e-5)


def test_bbox_transform_quant16_rois_and_zero_rois() -> None:
    # rois in 1/8 units; deltas quant8 (q - 128) * 0.05: 148 -> 1.0.
    ins, outs = _bbox([[0, 0, 80, 80]], [[148, 128, 128, 128]], [0], [[800, 800]],
                      T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_ASYMM, 0.125)
    (y,) = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs)
    assert y.tolist() == [[80, 0, 160, 80]]
    ins, outs = _bbox(np.zeros((0, 4)), np.zeros((0, 4)), np.zeros(0), [[10, 10]])
    (y,) = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs)
    assert y.shape == (0, 4)


def test_bbox_transform_errors() -> None:
    ins, outs = _bbox([[0, 0, 80, 80]], [[128] * 4], [0], [[800, 800]],
                      T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_ASYMM, 0.25)
    _fail(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs, "input 0", "0.125")
    ins, outs = _bbox([[5, 0, 1, 10]], [[0] * 4], [0], [[20, 20]])
    _fail(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs, "x2 < x1")
    ins, outs = _bbox([[0, 0, 1, 1]], [[0] * 4], [1], [[20, 20]])
    _fail(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs, "batch index")
    ins, outs = _bbox([[0, 0, 1, 1]], [[0] * 5], [0], [[20, 20]])
    _fail(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, outs, "input 1")


# --- BOX_WITH_NMS_LIMIT -------------------------------------------------------------------------

# Three rois, classes [background, 1, 2]; roi 1 overlaps roi 0 (IoU 81/119), roi 2 is apart.
_SCORES = [[0.9, 0.8, 0.1], [0.1, 0.7, 0.6], [0.0, 0.2, 0.95]]
_BOXES = [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]]
_IOU01 = 81 / 119


def _nms(batches=(0, 0, 0), max_det=-1, kernel=0, iou=0.5, sigma=0.5, nms_thr=0.4, score_thr=0.3,
         t=T.TENSOR_FLOAT32):
    rois = [b * 3 for b in _BOXES]
    if t.is_quantized:
        s = T.FLOAT32
        ins = [_t(t, np.round(np.array(_SCORES) * 100), 0.01, 0),
               _t(T.TENSOR_QUANT16_ASYMM, np.array(rois) * 8, 0.125)]
        outs = [Tensor(t, (), 0.01, 0), Tensor(T.TENSOR_QUANT16_ASYMM, (), 0.125)]
    else:
        s = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
        ins = [_t(t, _SCORES), _t(t, rois)]
        outs = [Tensor(t, ()), Tensor(t, ())]
    ins += [_t(T.TENSOR_INT32, batches), _s(s, score_thr), _s(T.INT32, max_det), _s(T.INT32, kernel),
            _s(s, iou), _s(s, sigma), _s(s, nms_thr)]
    outs += [Tensor(T.TENSOR_INT32, ()), Tensor(T.TENSOR_INT32, ())]
    return ins, outs


def test_hard_nms_sorted_by_class_then_score() -> None:
    scores, rois, classes, batches = _run(Op.BOX_WITH_NMS_LIMIT, *_nms())
    assert scores.tolist() == pytest.approx([0.8, 0.95, 0.6])
    assert classes.tolist() == [1, 2, 2]
    assert rois.tolist() == [_BOXES[0], _BOXES[2], _BOXES[1]]
    assert batches.tolist() == [0, 0, 0]


def test_max_detections_keeps_best_scores() -> None:
    scores, _, classes, _ = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(max_det=2))
    assert scores.tolist() == pytest.approx([0.8, 0.95])
    assert classes.tolist() == [1, 2]


def test_hard_kernel_keeps_suppressed_box_with_zero_score_when_nms_threshold_is_zero() -> None:
    # Android applies the hard kernel as score * 0 and drops only scores below the NMS threshold.
    scores, rois, classes, _ = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(nms_thr=0.0))
    assert scores.tolist() == pytest.approx([0.8, 0.0, 0.95, 0.6])
    assert classes.tolist() == [1, 1, 2, 2]
    assert rois[1].tolist() == _BOXES[1]


def test_linear_and_gaussian_kernels_rescale_overlapping_scores() -> None:
    scores, _, classes, _ = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(kernel=1, nms_thr=0.1))
    assert classes.tolist() == [1, 1, 2, 2]
    assert scores.tolist() == pytest.approx([0.8, 0.7 * (1 - _IOU01), 0.95, 0.6], rel=1e-5)
    scores, _, _, _ = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(kernel=2, sigma=0.5, nms_thr=0.1))
    assert scores.tolist() == pytest.approx([0.8, 0.7 * math.exp(-_IOU01 ** 2 / 0.5), 0.95, 0.6], rel=1e-5)


def test_batches_are_processed_separately() -> None:
    scores, _, classes, batches = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(batches=(0, 0, 1)))
    assert scores.tolist() == pytest.approx([0.8, 0.6, 0.95])
    assert classes.tolist() == [1, 2, 2]
    assert batches.tolist() == [0, 0, 1]


@pytest.mark.parametrize("t", [T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM])
def test_nms_float16_and_quant(t: T) -> None:
    scores, rois, classes, _ = _run(Op.BOX_WITH_NMS_LIMIT, *_nms(t=t))
    assert classes.tolist() == [1, 2, 2]
    if t.is_quantized:
        assert scores.tolist() == [80, 95, 60]
        assert rois.tolist() == [[v * 8 for v in _BOXES[i]] for i in (0, 2, 1)]
    else:
        assert scores.tolist() == pytest.approx([0.8, 0.95, 0.6], abs=1e-3)


def test_nms_errors_and_unknown_shapes() -> None:
    _fail(Op.BOX_WITH_NMS_LIMIT, *_nms(kernel=3), "input 5", "kernel")
    ins, outs = _nms(t=T.TENSOR_QUANT8_ASYMM)
    ins[1].scale = 0.5
    _fail(Op.BOX_WITH_NMS_LIMIT, ins, outs, "input 1", "0.125")
    # Output sizes depend on the values: prepare cannot run on shapes alone.
    ins, outs = _nms()
    ins[0] = Tensor(T.TENSOR_FLOAT32, (3, 3))
    with pytest.raises(UnknownValue):
        ctx = OpContext(Op.BOX_WITH_NMS_LIMIT, ins, outs, compile_time=True)
        find_operation(Op.BOX_WITH_NMS_LIMIT).prepare(ctx)


# --- GENERATE_PROPOSALS -------------------------------------------------------------------------

def _proposals(scores, deltas, anchors, info, *, stride=(1.0, 1.0), pre=-1, post=-1, iou=0.5,
               min_size=1.0, nchw=False):
    f = T.FLOAT32
    ins = [_t(T.TENSOR_FLOAT32, scores), _t(T.TENSOR_FLOAT32, deltas), _t(T.TENSOR_FLOAT32, anchors),
           _t(T.TENSOR_FLOAT32, info), _s(f, stride[0]), _s(f, stride[1]), _s(T.INT32, pre),
           _s(T.INT32, post), _s(f, iou), _s(f, min_size), _s(T.BOOL, nchw)]
    outs = [Tensor(T.TENSOR_FLOAT32, ()), Tensor(T.TENSOR_FLOAT32, ()), Tensor(T.TENSOR_INT32, ())]
    return ins, outs


def test_proposals_nms_over_overlapping_anchors() -> None:
    args = ([[[[0.9, 0.8]]]], np.zeros((1, 1, 1, 8)), [[0, 0, 10, 10], [1, 1, 11, 11]], [[20, 20]])
    scores, rois, batches = _run(Op.GENERATE_PROPOSALS, *_proposals(*args))
    assert scores.tolist() == pytest.approx([0.9]) and rois.tolist() == [[0, 0, 10, 10]]
    assert batches.tolist() == [0]
    scores, rois, _ = _run(Op.GENERATE_PROPOSALS, *_proposals(*args, iou=0.9))
    assert scores.tolist() == pytest.approx([0.9, 0.8])
    scores, _, _ = _run(Op.GENERATE_PROPOSALS, *_proposals(*args, iou=0.9, pre=1))
    assert scores.tolist() == pytest.approx([0.9])


def test_proposals_with_an_infinite_stride_compute_as_ieee_without_numpy_warnings() -> None:
    """Seen in the fuzz test: 0 * inf in the grid shift gave numpy's RuntimeWarning on the app's stderr."""
    import warnings
    args = ([[[[0.9], [0.8]]]], np.zeros((1, 1, 2, 4)), [[0, 0, 10, 10]], [[20, 20]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NnError) as e:  # (the nan boxes are then refused, as Android's kernel does)
            _run(Op.GENERATE_PROPOSALS, *_proposals(*args, stride=(1.0, float("inf"))))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "roi" in e.value.message


@pytest.mark.parametrize("nchw", [False, True])
def test_proposals_shift_anchors_over_the_grid(nchw: bool) -> None:
    # Grid 1 x 2 with one anchor, width stride 5: the second cell's box is shifted by 5 in x.
    scores = [[[[0.3], [0.7]]]]  # NHWC (1, 1, 2, 1)
    deltas = np.zeros((1, 1, 2, 4))
    if nchw:
        scores, deltas = np.transpose(scores, (0, 3, 1, 2)), np.transpose(deltas, (0, 3, 1, 2))
    out_scores, rois, _ = _run(Op.GENERATE_PROPOSALS, *_proposals(
        scores, deltas, [[0, 0, 4, 4]], [[10, 10]], stride=(1.0, 5.0), nchw=nchw))
    assert out_scores.tolist() == pytest.approx([0.7, 0.3])
    assert rois.tolist() == [[5, 0, 9, 4], [0, 0, 4, 4]]


def test_proposals_min_size_can_leave_nothing() -> None:
    scores, rois, batches = _run(Op.GENERATE_PROPOSALS, *_proposals(
        [[[[0.5]]]], np.zeros((1, 1, 1, 4)), [[0, 0, 4, 4]], [[10, 10]], min_size=4.0))
    assert scores.shape == (0,) and rois.shape == (0, 4) and batches.shape == (0,)


def test_proposals_shape_errors() -> None:
    ins, outs = _proposals([[[[0.5]]]], np.zeros((1, 1, 1, 8)), [[0, 0, 4, 4]], [[10, 10]])
    _fail(Op.GENERATE_PROPOSALS, ins, outs, "input 1")
    ins, outs = _proposals([[[[0.5]]]], np.zeros((1, 1, 1, 4)), [[0, 0, 4, 4]], [[10, 10, 1]])
    _fail(Op.GENERATE_PROPOSALS, ins, outs, "input 3")


# --- DETECTION_POSTPROCESSING -------------------------------------------------------------------

def _detect(scores, deltas, *, regular, max_det=2, max_classes=1, per_class=1, bg_in_label=False,
            score_thr=0.0, iou=0.5, scales=(10.0, 10.0, 5.0, 5.0)):
    anchors = [[5, 5, 10, 10], [6, 6, 10, 10]]  # [y_ctr, x_ctr, h, w]
    f = T.FLOAT32
    ins = [_t(T.TENSOR_FLOAT32, scores), _t(T.TENSOR_FLOAT32, deltas), _t(T.TENSOR_FLOAT32, anchors)]
    ins += [_s(f, v) for v in scales]
    ins += [_s(T.BOOL, regular), _s(T.INT32, max_det), _s(T.INT32, max_classes), _s(T.INT32, per_class),
            _s(f, score_thr), _s(f, iou), _s(T.BOOL, bg_in_label)]
    outs = [Tensor(T.TENSOR_FLOAT32, ()), Tensor(T.TENSOR_FLOAT32, ()), Tensor(T.TENSOR_INT32, ()),
            Tensor(T.TENSOR_INT32, ())]
    return ins, outs


_DSCORES = [[[0.1, 0.9, 0.3], [0.2, 0.4, 0.8]]]


def test_fast_nms_pads_unused_detections_with_zeros() -> None:
    scores, boxes, classes, count = _run(Op.DETECTION_POSTPROCESSING,
                                         *_detect(_DSCORES, np.zeros((1, 2, 4)), regular=False))
    np.testing.assert_allclose(scores, [[0.9, 0.0]], rtol=1e-6)
    assert boxes.tolist() == [[[0, 0, 10, 10], [0, 0, 0, 0]]]
    assert classes.tolist() == [[0, 0]]  # class 1 - 1: background not in the labels
    assert count.tolist() == [1]


def test_regular_nms_is_per_class() -> None:
    scores, boxes, classes, count = _run(Op.DETECTION_POSTPROCESSING, *_detect(
        _DSCORES, np.zeros((1, 2, 4)), regular=True, bg_in_label=True))
    np.testing.assert_allclose(scores, [[0.9, 0.8]], rtol=1e-6)
    assert boxes.tolist() == [[[0, 0, 10, 10], [1, 1, 11, 11]]]
    assert classes.tolist() == [[1, 2]]
    assert count.tolist() == [2]


def test_box_decoding_uses_scales() -> None:
    # dy = 1 with scale_y 10 moves the centre by h * 1 / 10 = 1; dh = ln 2 * 5 doubles the height.
    deltas = [[[1.0, 0.0, 5 * math.log(2), 0.0], [0.0, 0.0, 0.0, 0.0]]]
    _, boxes, _, _ = _run(Op.DETECTION_POSTPROCESSING, *_detect(_DSCORES, deltas, regular=False))
    assert boxes[0, 0].tolist() == pytest.approx([-4, 0, 16, 10], abs=1e-5)


def test_detection_parameter_errors() -> None:
    _fail(Op.DETECTION_POSTPROCESSING, *_detect(_DSCORES, np.zeros((1, 2, 4)), regular=False, max_det=0),
          "input 8")
    _fail(Op.DETECTION_POSTPROCESSING, *_detect(_DSCORES, np.zeros((1, 2, 4)), regular=True,
                                                scales=(0.0, 1.0, 1.0, 1.0)), "input 3")
    _fail(Op.DETECTION_POSTPROCESSING, *_detect(_DSCORES, np.zeros((1, 2, 3)), regular=True), "input 1")
