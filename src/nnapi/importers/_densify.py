"""DENSIFY at import time: TFLite's sparse tensor format (SparsityParameters) to a dense numpy array.

The format (TFLite `FormatConverter`): the dense shape, optionally cut into blocks (`block_map`
names the original dimensions that are blocked, the trailing `dim_metadata` entries give the block
sizes), is traversed in `traversal_order`; each level is DENSE (all `dense_size` indices) or
SPARSE_CSR (`array_segments` / `array_indices` of the present indices). The values are stored in
traversal order. This expands the levels with numpy, level by level, in that same order.
"""
from __future__ import annotations

import numpy as np
import tflite

from ..hal import NnError, ResultCode

_DENSE = tflite.DimensionType.DENSE
_VECTOR_CLASSES = {tflite.SparseIndexVector.Int32Vector: tflite.Int32Vector,
                   tflite.SparseIndexVector.Uint16Vector: tflite.Uint16Vector,
                   tflite.SparseIndexVector.Uint8Vector: tflite.Uint8Vector}


def _index_vector(kind: int, table) -> np.ndarray:
    cls = _VECTOR_CLASSES.get(kind)
    if cls is None or table is None:
        raise NnError(ResultCode.BAD_DATA, f"sparse tensor: unsupported index vector type {kind}")
    vec = cls()
    vec.Init(table.Bytes, table.Pos)
    if vec.ValuesLength() == 0:
        return np.zeros(0, np.int64)
    return np.asarray(vec.ValuesAsNumpy(), dtype=np.int64)


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity) -> np.ndarray:
    """The dense array of `shape` holding `values` (1-D, traversal order) placed as `sparsity` says."""
    rank = len(shape)
    order = [int(x) for x in sparsity.TraversalOrderAsNumpy()] if sparsity.TraversalOrderLength() \
        else list(range(rank))
    block_map = [int(x) for x in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    levels = sparsity.DimMetadataLength()
    if levels != len(order) or levels != rank + len(block_map) or sorted(order) != list(range(levels)):
        raise NnError(ResultCode.BAD_DATA, f"sparse tensor: {levels} dimension metadata entries do not match "
                                           f"traversal order {order} and block map {block_map} for shape {shape}")
    block_sizes = [int(sparsity.DimMetadata(rank + k).DenseSize()) for k in range(len(block_map))]
    prev = np.zeros(1, np.int64)           # position of each partial path at the previous level
    columns: list[np.ndarray] = []         # index at each level, one entry per partial path
    for level in range(levels):
        meta = sparsity.DimMetadata(level)
        if meta.Format() == _DENSE:
            n = int(meta.DenseSize())
            columns = [np.repeat(c, n) for c in columns]
            columns.append(np.tile(np.arange(n, dtype=np.int64), prev.size))
            prev = (prev[:, None] * n + np.arange(n, dtype=np.int64)).reshape(-1)
        else:
            segments = _index_vector(meta.ArraySegmentsType(), meta.ArraySegments())
            indices = _index_vector(meta.ArrayIndicesType(), meta.ArrayIndices())
            if prev.size and (prev.max() + 1 >= segments.size):
                raise NnError(ResultCode.BAD_DATA, f"sparse tensor: level {level} has too few segments")
            starts, ends = segments[prev], segments[prev + 1]
            counts = ends - starts
            if counts.size and (counts.min() < 0 or ends.max() > indices.size):
                raise NnError(ResultCode.BAD_DATA, f"sparse tensor: level {level} segments are out of range")
            positions = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) \
                + np.arange(int(counts.sum()), dtype=np.int64)
            columns = [np.repeat(c, counts) for c in columns]
            columns.append(indices[positions])
            prev = positions
    count = columns[0].size if columns else 1
    if values.size != count:
        raise NnError(ResultCode.BAD_DATA, f"sparse tensor: {values.size} stored values for {count} positions")
    original = [np.zeros(count, np.int64) for _ in range(rank)]
    for level in range(rank):
        original[order[level]] = columns[level]
    for level in range(rank, levels):
        block = order[level] - rank
        dim = block_map[block]
        original[dim] = original[dim] * block_sizes[block] + columns[level]
    dense = np.zeros(shape, dtype=values.dtype)
    if count:
        dense[tuple(original)] = values.reshape(-1)
    return dense
