"""DENSIFY at import time: TFLite's sparse tensor format (SparsityParameters) to a dense numpy array.

The format (TFLite `FormatConverter`): the dense shape, optionally cut into blocks (`block_map`
names the original dimensions that are blocked, the trailing levels give the block sizes), is
traversed in `traversal_order`; each level is DENSE (all `dense_size` indices) or SPARSE_CSR
(`segments` / `indices` of the present indices). The values are stored in traversal order. This
expands the levels with numpy, level by level, in that same order, after checking the metadata
against the shape (level sizes, segment bounds, index ranges), so a corrupt file is BAD_DATA
naming what is wrong, never an out-of-range write or an unbounded allocation.
"""
from __future__ import annotations

import math

import numpy as np

from .flatbuffer import BadModel
from .generated import generated
from .schema import Sparsity

_DENSE = generated("DimensionType").DENSE


def _bad(what: str, message: str) -> BadModel:
    return BadModel(f"{what}: {message}")


def _level_sizes(shape: tuple[int, ...], sparsity: Sparsity, what: str) -> list[int]:
    """The number of indices of each traversal level, after checking order and block map."""
    rank, order, block_map, levels = len(shape), sparsity.traversal_order or list(range(len(shape))), \
        sparsity.block_map, sparsity.levels
    n = len(levels)
    if n != len(order) or n != rank + len(block_map):
        raise _bad(what, f"{n} dimension metadata entries do not match traversal order {order} and block map "
                         f"{block_map} for shape {list(shape)}")
    if sorted(order[:rank]) != list(range(rank)) or sorted(order[rank:]) != list(range(rank, n)):
        raise _bad(what, f"traversal order {order} is not a permutation of the {rank} dimensions then the "
                         f"{len(block_map)} block dimensions")
    if sorted(set(block_map)) != sorted(block_map) or any(not 0 <= d < rank for d in block_map):
        raise _bad(what, f"block map {block_map} does not name distinct dimensions of shape {list(shape)}")
    if any(d < 0 for d in shape):
        raise _bad(what, f"shape {list(shape)} has an unknown dimension")
    block = {}
    for k, d in enumerate(block_map):
        size = levels[rank + k].dense_size
        if size < 1 or shape[d] % size:
            raise _bad(what, f"block size {size} does not divide dimension {d} of shape {list(shape)}")
        block[d] = size
    sizes = []
    for level in range(n):
        d = order[level]
        sizes.append(shape[d] // block.get(d, 1) if d < rank else block[block_map[d - rank]])
    return sizes


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: Sparsity, what: str = "sparse tensor",
            max_bytes: int | None = None) -> np.ndarray:
    """The dense array of `shape` holding `values` (1-D, traversal order) placed as `sparsity` says.
    `max_bytes` bounds the memory the expansion may take (BAD_DATA beyond it)."""
    rank = len(shape)
    sizes = _level_sizes(shape, sparsity, what)
    order, block_map, levels = sparsity.traversal_order or list(range(rank)), sparsity.block_map, sparsity.levels
    count = math.prod(shape)
    if max_bytes is not None and count * (values.itemsize + 8 * (len(levels) + 1)) > max_bytes:
        raise _bad(what, f"densifying shape {list(shape)} would take more than {max_bytes} bytes")
    prev = np.zeros(1, np.int64)           # position of each partial path at the previous level
    columns: list[np.ndarray] = []         # index at each level, one entry per partial path
    for level, meta in enumerate(levels):
        size = sizes[level]
        if meta.format == _DENSE:
            if meta.dense_size != size:
                raise _bad(what, f"level {level} is dense with size {meta.dense_size}, the shape needs {size}")
            columns = [np.repeat(c, size) for c in columns]
            columns.append(np.tile(np.arange(size, dtype=np.int64), prev.size))
            prev = (prev[:, None] * size + np.arange(size, dtype=np.int64)).reshape(-1)
            continue
        segments, indices = meta.segments, meta.indices
        if prev.size and int(prev.max()) + 1 >= segments.size:
            raise _bad(what, f"level {level} has {segments.size} segments, too few for its parents")
        if segments.size and (segments[0] < 0 or np.any(np.diff(segments) < 0) or segments[-1] > indices.size):
            raise _bad(what, f"level {level} segments are not non-decreasing offsets into its "
                             f"{indices.size} indices")
        if indices.size and (indices.min() < 0 or indices.max() >= size):
            raise _bad(what, f"level {level} has indices outside [0, {size})")
        starts, counts = segments[prev], segments[prev + 1] - segments[prev]
        positions = np.repeat(starts - (np.cumsum(counts) - counts), counts) \
            + np.arange(int(counts.sum()), dtype=np.int64)
        columns = [np.repeat(c, counts) for c in columns]
        columns.append(indices[positions])
        prev = positions
    stored = columns[0].size if columns else 1
    if values.size != stored:
        raise _bad(what, f"{values.size} stored values for {stored} positions")
    original = [np.zeros(stored, np.int64) for _ in range(rank)]
    for level in range(rank):
        original[order[level]] = columns[level]
    for level in range(rank, len(levels)):
        k = order[level] - rank
        d = block_map[k]
        original[d] = original[d] * sizes[level] + columns[level]
    dense = np.zeros(shape, dtype=values.dtype)
    if stored:
        dense[tuple(original)] = values.reshape(-1)
    return dense
