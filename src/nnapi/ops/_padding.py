"""Padding and output-size maths of windowed operations, and NCHW <-> NHWC layout helpers.

Follows Android's OperationsUtils (`calculateExplicitPadding`, `computeOutSize`,
`computeOutSizeTransposeConv`): C++ int32 arithmetic, so divisions truncate toward zero.
"""
from __future__ import annotations

import numpy as np

from ..hal import PaddingScheme


def c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero), unlike Python's floor division."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def effective_filter_size(filter_size: int, dilation: int = 1) -> int:
    """Extent of a dilated filter: (filter - 1) * dilation + 1."""
    return (filter_size - 1) * dilation + 1


def explicit_padding(in_size: int, stride: int, filter_size: int, scheme: int, *,
                     dilation: int = 1, transpose: bool = False) -> tuple[int, int]:
    """(head, tail) padding of an implicit padding scheme (Android's calculateExplicitPadding).

    SAME pads so that out = ceil(in / stride), the odd pixel going to the tail; VALID pads nothing.
    For transposed convolution the tail is fitted to the last stride and may be negative.
    """
    head = tail = 0
    if scheme == PaddingScheme.SAME:
        out = c_div(in_size + stride - 1, stride)
        needed = (out - 1) * stride + effective_filter_size(filter_size, dilation)
        if needed > in_size:
            head = c_div(needed - in_size, 2)
            tail = needed - in_size - head
        if transpose:
            tail = needed - in_size - head
    return head, tail


def out_size(in_size: int, filter_size: int, stride: int, pad_head: int, pad_tail: int,
             dilation: int = 1) -> int:
    """Output extent of a strided, dilated window (Android's computeOutSize); <= 0 means no output."""
    eff = effective_filter_size(filter_size, dilation)
    return c_div(in_size - eff + stride + pad_head + pad_tail, stride)


def transpose_out_size(in_size: int, filter_size: int, stride: int, pad_head: int, pad_tail: int) -> int:
    """Output extent of a transposed convolution (Android's computeOutSizeTransposeConv)."""
    return stride * (in_size - 1) + filter_size - pad_head - pad_tail


def split_dims(dims: tuple[int, ...], nchw: bool) -> tuple[int, int, int, int]:
    """(batches, height, width, channels) of a rank-4 shape in either layout."""
    if nchw:
        n, c, h, w = dims
    else:
        n, h, w, c = dims
    return n, h, w, c


def join_dims(n: int, h: int, w: int, c: int, nchw: bool) -> tuple[int, int, int, int]:
    """A rank-4 shape in the requested layout from (batches, height, width, channels)."""
    return (n, c, h, w) if nchw else (n, h, w, c)


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    """View an input as NHWC (a transposed view when it is NCHW; no copy)."""
    return x.transpose(0, 2, 3, 1) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    """An NHWC result in the requested layout, C-contiguous."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if nchw else x)
