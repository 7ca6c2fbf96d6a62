"""RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, ROI_ALIGN, ROI_POOLING and HEATMAP_MAX_KEYPOINT:
coordinate conventions (align_corners, half-pixel centres, scales), layouts, quantized paths and
bad parameters, against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation

_NP = {T.TENSOR_FLOAT32: np.float32, T.FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16,
       T.FLOAT16: np.float16, T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
       T.TENSOR_QUANT16_ASYMM: np.uint16, T.BOOL: np.bool_}
_SCALARS = (T.INT32, T.FLOAT32, T.FLOAT16, T.BOOL)


def _t(value, t: T = T.TENSOR_INT32, **kw) -> Tensor:
    v = np.asarray(value, dtype=_NP.get(t, np.int32))
    return Tensor(t, () if t in _SCALARS else v.shape, value=v, **kw)


def _f(x) -> Tensor:
    return _t(x, T.TENSOR_FLOAT32)


def _run(op: Op, ins: list[Tensor], outs: list[Tensor]) -> list[np.ndarray]:
    reg = find_operation(op)
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    dims = reg.prepare(ctx)
    ys = reg.execute(ctx)
    for y, d, o in zip(ys, dims, outs):
        assert y.shape == tuple(d) and y.dtype == o.dtype
    return ys


def _run1(op: Op, ins: list[Tensor], out_type: T = T.TENSOR_FLOAT32, **out_kw) -> np.ndarray:
    return _run(op, ins, [Tensor(out_type, (), **out_kw)])[0]


def _invalid(fn, *words: str) -> None:
    with pytest.raises(NnError) as e:
        fn()
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in words:
        assert w in e.value.message, e.value.message


def _resize(op: Op, x, w, h, *flags, t: T = T.TENSOR_FLOAT32, scalar: T = T.INT32, **kw) -> np.ndarray:
    ins = [_t(x, t, **kw), _t(w, scalar), _t(h, scalar)] + [_t(f, T.BOOL) for f in flags]
    return _run1(op, ins, t, **kw)


def _row(values) -> np.ndarray:
    """A 1 x 1 x W x 1 NHWC image."""
    return np.asarray(values, np.float32).reshape(1, 1, -1, 1)


# --- RESIZE_BILINEAR -------------------------------------------------------------------------------
def test_bilinear_legacy_coordinates() -> None:
    # scale 2/4: source x = 0, 0.5, 1, 1.5 (the last clamps to the last pixel)
    y = _resize(Op.RESIZE_BILINEAR, _row([0, 4]), 4, 1)
    assert y.reshape(-1).tolist() == [0, 2, 4, 4]


def test_bilinear_align_corners() -> None:
    # scale (2-1)/(3-1): source x = 0, 0.5, 1
    y = _resize(Op.RESIZE_BILINEAR, _row([0, 4]), 3, 1, False, True, False)
    assert y.reshape(-1).tolist() == [0, 2, 4]


def test_bilinear_half_pixel_centers() -> None:
    # source x = (x + 0.5) * 0.5 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped into [0, 1]
    y = _resize(Op.RESIZE_BILINEAR, _row([0, 4]), 4, 1, False, False, True)
    assert y.reshape(-1).tolist() == [0, 1, 3, 4]


def test_bilinear_three_input_form_and_2d() -> None:
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    y = _resize(Op.RESIZE_BILINEAR, x, 3, 3)
    # scale 2/3 in both axes: source 0, 2/3, 4/3 (clamped)
    expected = np.array([[1, 5 / 3, 2], [7 / 3, 3, 10 / 3], [3, 11 / 3, 4]], np.float32)
    np.testing.assert_allclose(y[0, :, :, 0], expected, rtol=1e-6)


def test_bilinear_quant_truncates() -> None:
    # 0, 1.5, 3, 3 cast to uint8 as C++ does (truncation)
    y = _resize(Op.RESIZE_BILINEAR, np.array([0, 3], np.uint8).reshape(1, 1, 2, 1), 4, 1,
                t=T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=0)
    assert y.reshape(-1).tolist() == [0, 1, 3, 3]


def test_bilinear_float_scales_and_nchw() -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)  # NCHW: 2 channels of 2x2
    y = _resize(Op.RESIZE_BILINEAR, x, 1.5, 1.5, True, scalar=T.FLOAT32)
    assert y.shape == (1, 2, 3, 3)  # floor(2 * 1.5) = 3
    ref = _resize(Op.RESIZE_BILINEAR, x.transpose(0, 2, 3, 1), 3, 3, False)
    np.testing.assert_array_equal(y, ref.transpose(0, 3, 1, 2))


def test_bilinear_float16() -> None:
    y = _resize(Op.RESIZE_BILINEAR, _row([0, 4]).astype(np.float16), 2.0, 1.0, False,
                t=T.TENSOR_FLOAT16, scalar=T.FLOAT16)
    assert y.dtype == np.float16 and y.reshape(-1).tolist() == [0, 2, 4, 4]


def test_resize_zero_batch() -> None:
    y = _resize(Op.RESIZE_BILINEAR, np.zeros((0, 2, 2, 1), np.float32), 4, 4, False)
    assert y.shape == (0, 4, 4, 1)


def test_resize_bad_parameters() -> None:
    x = _row([0, 4])
    _invalid(lambda: _resize(Op.RESIZE_BILINEAR, x, 4, 1, False, True, True), "align_corners",
             "half_pixel_centers")
    _invalid(lambda: _resize(Op.RESIZE_BILINEAR, x, 4, 0), "RESIZE_BILINEAR", "output height")
    _invalid(lambda: _resize(Op.RESIZE_NEAREST_NEIGHBOR, x, 0.1, 1.0, False, scalar=T.FLOAT32),
             "output width")
    # float16 scales do not go with a float32 tensor
    _invalid(lambda: _resize(Op.RESIZE_BILINEAR, x, 2.0, 1.0, False, scalar=T.FLOAT16), "input 1")
    # RESIZE_NEAREST_NEIGHBOR needs the layout flag
    _invalid(lambda: _resize(Op.RESIZE_NEAREST_NEIGHBOR, x, 4, 1), "inputs")
    _invalid(lambda: _resize(Op.RESIZE_BILINEAR, np.zeros((2, 2), np.float32), 4, 1), "rank")


# --- RESIZE_NEAREST_NEIGHBOR -----------------------------------------------------------------------
@pytest.mark.parametrize("width,align,half,expected", [
    (4, False, False, [10, 10, 20, 20]),   # floor(x * 0.5)
    (3, True, False, [10, 20, 20]),        # round(x * 0.5), halves away from zero
    (4, False, True, [10, 10, 20, 20]),    # floor((x + 0.5) * 0.5)
    (1, False, False, [10]),
])
def test_nearest_neighbor_coordinates(width, align, half, expected) -> None:
    y = _resize(Op.RESIZE_NEAREST_NEIGHBOR, _row([10, 20]), width, 1, False, align, half)
    assert y.reshape(-1).tolist() == expected


def test_nearest_neighbor_downscale_half_pixel() -> None:
    # 4 -> 2: legacy takes 0, 2; half-pixel takes floor(0.5 * 2) = 1 and floor(1.5 * 2) = 3
    x = _row([1, 2, 3, 4])
    assert _resize(Op.RESIZE_NEAREST_NEIGHBOR, x, 2, 1, False).reshape(-1).tolist() == [1, 3]
    assert _resize(Op.RESIZE_NEAREST_NEIGHBOR, x, 2, 1, False, False, True).reshape(-1).tolist() == [2, 4]


def test_nearest_neighbor_signed_keeps_values() -> None:
    x = np.array([-128, 127], np.int8).reshape(1, 1, 2, 1)
    y = _resize(Op.RESIZE_NEAREST_NEIGHBOR, x, 4, 2, False, t=T.TENSOR_QUANT8_ASYMM_SIGNED,
                scale=0.1, zero_point=3)
    assert y.dtype == np.int8 and y[0, :, :, 0].tolist() == [[-128, -128, 127, 127]] * 2


# --- ROI_ALIGN -------------------------------------------------------------------------------------
def _roi_align(x, rois, batches, out_h, out_w, h_stride, w_stride, h_ratio, w_ratio, nchw=False, *,
               t=T.TENSOR_FLOAT32, roi_t=T.TENSOR_FLOAT32, stride_t=T.FLOAT32, x_kw=None, roi_kw=None,
               out_kw=None) -> np.ndarray:
    ins = [_t(x, t, **(x_kw or {})), _t(rois, roi_t, **(roi_kw or {})), _t(batches),
           _t(out_h, T.INT32), _t(out_w, T.INT32), _t(h_stride, stride_t), _t(w_stride, stride_t),
           _t(h_ratio, T.INT32), _t(w_ratio, T.INT32), _t(nchw, T.BOOL)]
    return _run1(Op.ROI_ALIGN, ins, t, **(out_kw or {}))


_IMG = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)  # value = 4 * row + col


def test_roi_align_single_sample_per_bin() -> None:
    # bins of 2x2 pixels, one sample at each bin centre: (1, 1), (1, 3), (3, 1), (3, 3)
    y = _roi_align(_IMG, [[0, 0, 4, 4]], [0], 2, 2, 1.0, 1.0, 1, 1)
    assert y[0, :, :, 0].tolist() == [[5, 7], [13, 15]]


def test_roi_align_two_by_two_samples_and_edge_clamp() -> None:
    # bin (0, 0) samples x, y in {0.5, 1.5}: mean of 4y + x = 5; bin (0, 1) samples x = 2.5 and
    # 3.5 (which clamps to column 3): mean x = 2.75, so 4 * 1 + 2.75
    y = _roi_align(_IMG, [[0, 0, 4, 4]], [0], 2, 2, 1.0, 1.0, 2, 2)
    assert y[0, 0, :, 0].tolist() == [5.0, 6.75]


def test_roi_align_stride_and_adaptive_ratio_and_nchw() -> None:
    # stride 2 halves the roi; ratio 0 becomes ceil(2 / 1) = 2 per axis for a 2x2 output
    a = _roi_align(_IMG, [[0, 0, 8, 8]], [0], 2, 2, 2.0, 2.0, 0, 0)
    b = _roi_align(_IMG, [[0, 0, 4, 4]], [0], 2, 2, 1.0, 1.0, 2, 2)
    np.testing.assert_array_equal(a, b)
    c = _roi_align(_IMG.transpose(0, 3, 1, 2), [[0, 0, 8, 8]], [0], 2, 2, 2.0, 2.0, 0, 0, True)
    np.testing.assert_array_equal(c, a.transpose(0, 3, 1, 2))


def test_roi_align_batch_index_per_roi() -> None:
    x = np.stack([_IMG[0], _IMG[0] + 100])
    y = _roi_align(x, [[0, 0, 4, 4], [0, 0, 4, 4]], [1, 0], 1, 1, 1.0, 1.0, 1, 1)
    # one sample at (2, 2): 4 * 2 + 2 = 10
    assert y.reshape(-1).tolist() == [110, 10]


def test_roi_align_quant8() -> None:
    # samples on pixel centres: weights 1 -> 255 steps of 1/255, requantized back exactly
    x = np.arange(16, dtype=np.uint8).reshape(1, 4, 4, 1) + 10
    y = _roi_align(x, [[0, 0, 32, 32]], [0], 2, 2, 1.0, 1.0, 1, 1, t=T.TENSOR_QUANT8_ASYMM,
                   roi_t=T.TENSOR_QUANT16_ASYMM, x_kw=dict(scale=0.5, zero_point=10),
                   roi_kw=dict(scale=0.125, zero_point=0), out_kw=dict(scale=0.25, zero_point=0))
    # (value - 10) * 0.5 / 0.25
    assert y[0, :, :, 0].tolist() == [[10, 14], [26, 30]]


def test_roi_align_zero_rois() -> None:
    y = _roi_align(_IMG, np.zeros((0, 4), np.float32), np.zeros(0, np.int32), 2, 2, 1.0, 1.0, 1, 1)
    assert y.shape == (0, 2, 2, 1)


def test_roi_align_bad_parameters() -> None:
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4, 4]], [1], 2, 2, 1.0, 1.0, 1, 1), "ROI_ALIGN",
             "batch index")
    _invalid(lambda: _roi_align(_IMG, [[3, 0, 1, 4]], [0], 2, 2, 1.0, 1.0, 1, 1), "roi 0")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 5, 4]], [0], 2, 2, 1.0, 1.0, 1, 1), "roi 0")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4, 4]], [0], 0, 2, 1.0, 1.0, 1, 1), "output height")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4, 4]], [0], 2, 2, 0.0, 1.0, 1, 1), "height stride")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4, 4]], [0], 2, 2, 1.0, 1.0, -1, 1), "sampling ratio")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4, 4]], [0, 0], 2, 2, 1.0, 1.0, 1, 1), "input 2")
    _invalid(lambda: _roi_align(_IMG, [[0, 0, 4]], [0], 2, 2, 1.0, 1.0, 1, 1), "input 1")
    _invalid(lambda: _roi_align(_IMG.astype(np.uint8), [[0, 0, 32, 32]], [0], 2, 2, 1.0, 1.0, 1, 1,
                                t=T.TENSOR_QUANT8_ASYMM, roi_t=T.TENSOR_QUANT16_ASYMM,
                                x_kw=dict(scale=1.0), roi_kw=dict(scale=0.25), out_kw=dict(scale=1.0)),
             "scale 0.125")
    # float32 rois with a quantized input
    _invalid(lambda: _roi_align(_IMG.astype(np.uint8), [[0, 0, 4, 4]], [0], 2, 2, 1.0, 1.0, 1, 1,
                                t=T.TENSOR_QUANT8_ASYMM, x_kw=dict(scale=1.0), out_kw=dict(scale=1.0)),
             "input 1")


# --- ROI_POOLING -----------------------------------------------------------------------------------
def _roi_pool(x, rois, batches, out_h, out_w, h_stride, w_stride, nchw=False, *, t=T.TENSOR_FLOAT32,
              roi_t=T.TENSOR_FLOAT32, x_kw=None, roi_kw=None) -> np.ndarray:
    ins = [_t(x, t, **(x_kw or {})), _t(rois, roi_t, **(roi_kw or {})), _t(batches),
           _t(out_h, T.INT32), _t(out_w, T.INT32), _t(h_stride, T.FLOAT32), _t(w_stride, T.FLOAT32),
           _t(nchw, T.BOOL)]
    return _run1(Op.ROI_POOLING, ins, t, **(x_kw or {}))


def test_roi_pooling_bins_include_end_pixel() -> None:
    # corners (0, 0)-(3, 3) cover 4 pixels per axis: bins [0, 2) and [2, 4)
    y = _roi_pool(_IMG, [[0, 0, 3, 3]], [0], 2, 2, 1.0, 1.0)
    assert y[0, :, :, 0].tolist() == [[5, 7], [13, 15]]


def test_roi_pooling_rounds_scaled_corners_and_overlaps_bins() -> None:
    # stride 2: corners (1, 1)-(2.5, 2.5) round (halves away from zero) to 1 and 3, so the
    # single bin covers rows/cols 1..3 and its maximum is at (3, 3)
    y = _roi_pool(_IMG, [[2, 2, 5, 5]], [0], 1, 1, 2.0, 2.0)
    assert y.reshape(-1).tolist() == [15]
    # 3 pixels into 2 bins: step 1.5, bins [0, 2) and [1, 3) overlap
    z = _roi_pool(_IMG, [[0, 0, 2, 2]], [0], 2, 2, 1.0, 1.0)
    assert z[0, :, :, 0].tolist() == [[5, 6], [9, 10]]


def test_roi_pooling_quant_signed_nchw() -> None:
    x = (np.arange(16, dtype=np.int8) - 8).reshape(1, 1, 4, 4)
    y = _roi_pool(x, [[0, 0, 24, 24]], [0], 2, 2, 1.0, 1.0, True, t=T.TENSOR_QUANT8_ASYMM_SIGNED,
                  roi_t=T.TENSOR_QUANT16_ASYMM, x_kw=dict(scale=0.5, zero_point=-3),
                  roi_kw=dict(scale=0.125, zero_point=0))
    # rois (0, 0)-(3, 3) after the 0.125 scale
    assert y.dtype == np.int8 and y[0, 0].tolist() == [[-3, -1], [5, 7]]


def test_roi_pooling_bad_parameters() -> None:
    _invalid(lambda: _roi_pool(_IMG, [[0, 0, 3, 3]], [2], 2, 2, 1.0, 1.0), "ROI_POOLING", "batch index")
    _invalid(lambda: _roi_pool(_IMG, [[0, 3, 3, 1]], [0], 2, 2, 1.0, 1.0), "roi 0")
    _invalid(lambda: _roi_pool(_IMG, [[0, 0, 3, 3]], [0], 2, -1, 1.0, 1.0), "output width")
    _invalid(lambda: _roi_pool(_IMG, [[0, 0, 3, 3]], [0], 2, 2, 1.0, 0.0), "width stride")


# --- HEATMAP_MAX_KEYPOINT --------------------------------------------------------------------------
def _heatmap(maps, boxes, nchw=False, *, t=T.TENSOR_FLOAT32, box_t=T.TENSOR_FLOAT32, heat_kw=None,
             box_kw=None, score_kw=None, kp_kw=None) -> list[np.ndarray]:
    ins = [_t(maps, t, **(heat_kw or {})), _t(boxes, box_t, **(box_kw or {})), _t(nchw, T.BOOL)]
    outs = [Tensor(t, (), **(score_kw or {})), Tensor(box_t, (), **(kp_kw or {}))]
    return _run(Op.HEATMAP_MAX_KEYPOINT, ins, outs)


def _grid(middle_row) -> np.ndarray:
    g = np.zeros((3, 3), np.float32)
    g[1] = middle_row
    return g.reshape(1, 3, 3, 1)


def test_heatmap_symmetric_peak_needs_no_correction() -> None:
    scores, kps = _heatmap(_grid([0, 1, 0]), [[0, 0, 6, 6]])
    assert scores.tolist() == [[1.0]]
    # (1 + 0.5) / 3 of a 6-wide box
    assert kps.tolist() == [[[3.0, 3.0]]]


def test_heatmap_taylor_refinement() -> None:
    # b = (-0.25, 0), A = [[-1.5, 0], [0, -2]] -> delta x = 1/6; score = 1 + 1/24 - 1/48
    scores, kps = _heatmap(_grid([0, 1, 0.5]), [[0, 0, 6, 6]])
    np.testing.assert_allclose(scores, [[1 + 1 / 24 - 1 / 48]], rtol=1e-6)
    np.testing.assert_allclose(kps, [[[(1 + 1 / 6 + 0.5) * 2, 3.0]]], rtol=1e-6)


def test_heatmap_border_maximum_mirrors_and_nchw() -> None:
    # maximum at column 0: the missing left neighbour mirrors column 1, so the gradient is 0
    maps = np.zeros((1, 3, 3, 1), np.float32)
    maps[0, 1, :, 0] = [1, 0.5, 0]
    scores, kps = _heatmap(maps, [[0, 0, 3, 3]])
    assert kps[0, 0, 0] == pytest.approx(0.5) and scores[0, 0] == pytest.approx(1.0)
    scores_c, kps_c = _heatmap(maps.transpose(0, 3, 1, 2), [[0, 0, 3, 3]], True)
    np.testing.assert_array_equal(kps_c, kps)
    np.testing.assert_array_equal(scores_c, scores)


def test_heatmap_quant8() -> None:
    maps = (_grid([0, 1, 0]) * 100).astype(np.uint8)
    scores, kps = _heatmap(maps, [[0, 0, 48, 48]], t=T.TENSOR_QUANT8_ASYMM, box_t=T.TENSOR_QUANT16_ASYMM,
                           heat_kw=dict(scale=0.01, zero_point=0), box_kw=dict(scale=0.125),
                           score_kw=dict(scale=0.02, zero_point=5), kp_kw=dict(scale=0.125))
    assert scores.tolist() == [[55]]       # 1.0 / 0.02 + 5
    assert kps.tolist() == [[[24, 24]]]    # 3.0 / 0.125


def test_heatmap_bad_parameters() -> None:
    _invalid(lambda: _heatmap(_grid([0, 1, 0]), [[6, 0, 0, 6]]), "HEATMAP_MAX_KEYPOINT", "box 0")
    _invalid(lambda: _heatmap(np.zeros((1, 3, 2, 1), np.float32), [[0, 0, 1, 1]]), "square")
    _invalid(lambda: _heatmap(np.zeros((1, 1, 1, 1), np.float32), [[0, 0, 1, 1]]), "at least 2")
    _invalid(lambda: _heatmap(_grid([0, 1, 0]), [[0, 0, 1, 1], [0, 0, 1, 1]]), "input 1")
    _invalid(lambda: _heatmap((_grid([0, 1, 0]) * 100).astype(np.uint8), [[0, 0, 8, 8]],
                              t=T.TENSOR_QUANT8_ASYMM, box_t=T.TENSOR_QUANT16_ASYMM,
                              heat_kw=dict(scale=0.01), box_kw=dict(scale=0.125),
                              score_kw=dict(scale=0.01), kp_kw=dict(scale=0.25)), "scale 0.125")
