"""RANDOM_MULTINOMIAL: draw class indices from unnormalised log-probabilities (float32, float16).

Inputs: 0 logits [batches, classes], 1 sample count (INT32, > 0), 2 seeds (TENSOR_INT32 [2]).
Output: TENSOR_INT32 [batches, samples]. As Android's Multinomial::EvalFloat32, each batch
builds the cumulative sum of exp(x - max) over its finite logits and maps uniform doubles in
[0, total) through upper_bound; the uniform stream comes from numpy's PCG64 Generator seeded
with both seed values (Android uses Philox, so sequences differ but the distribution is the
same; the conformance vectors check only the distribution). The same seeds give the same
samples.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext, UnknownValue
from .registry import register

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _samples(ctx: OpContext) -> int:
    n = ctx.scalar(1)
    if not isinstance(n, int) or n <= 0:
        raise ctx.fail(f"input 1 (sample count) must be positive, got {n}")
    return n


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(3, 1)
    t = ctx.inputs[0].type
    if t not in _FLOATS:
        raise ctx.fail(f"input 0 has type {t.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    ctx.check_types([t, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32])
    ctx.check_rank(0, 2)
    ctx.check_rank(2, 1)
    try:
        _samples(ctx)
    except UnknownValue:
        pass


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    x, seeds = ctx.inputs[0].dims, ctx.inputs[2].dims
    if len(x) != 2:
        raise ctx.fail(f"input 0 has rank {len(x)}, expected 2 ([batches, classes])")
    if len(seeds) != 1 or seeds[0] < 2:
        raise ctx.fail(f"input 2 (seeds) has shape {seeds}, expected (2,)")
    return [(x[0], _samples(ctx))]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    n = _samples(ctx)
    logits = np.asarray(ctx.input(0), np.float32)
    seeds = np.asarray(ctx.input(2)).reshape(-1)[:2].astype(np.int64) & 0xFFFFFFFF
    rng = np.random.Generator(np.random.PCG64([int(seeds[0]), int(seeds[1])]))
    out = np.zeros((logits.shape[0], n), np.int32)
    for b, row in enumerate(logits):
        finite = np.isfinite(row)
        top = np.float64(row[finite].max()) if finite.any() else np.float64(np.finfo(np.float32).min)
        weights = np.zeros(row.shape, np.float64)
        weights[finite] = np.exp(row[finite].astype(np.float64) - top)
        cdf = np.cumsum(weights)
        targets = rng.random(n) * cdf[-1]
        idx = np.searchsorted(cdf, targets, side="right")          # std::upper_bound
        out[b] = np.minimum(idx, len(cdf) - 1)
    return [out]


register(Op.RANDOM_MULTINOMIAL, validate=_validate, prepare=_prepare, execute=_execute)
