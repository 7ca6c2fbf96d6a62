"""LSH_PROJECTION: locality-sensitive hashing of the rows of an input tensor.

Inputs: 0 hash seeds (TENSOR_FLOAT32 or TENSOR_FLOAT16 [num_hash, num_bits], num_bits <= 32),
1 input (float16/float32/int32/quant8 asymm, rank >= 1, hashed row by row as raw bytes),
2 weight (same type as input 0, [input.dims[0]], optional), 3 type (INT32):
1 SPARSE_DEPRECATED, 2 DENSE, 3 SPARSE. Output: TENSOR_INT32, [num_hash] for the sparse types,
[num_hash * num_bits] for DENSE.

Each bit is the sign of sum_i weight[i] * double(int64 Fingerprint64(float32 seed bytes ++ row i
bytes)) (weight 1 when omitted), as Android's LSHProjection.cpp. SPARSE packs a hash's bits into
one integer and adds hash_index * 2^num_bits; SPARSE_DEPRECATED omits that offset. As Android's
prepare, the sparse types require the weight to be omitted and DENSE requires it.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from ._farmhash import fingerprint64, to_int64
from .context import OpContext, UnknownValue
from .registry import register

_SPARSE_DEPRECATED, _DENSE, _SPARSE = 1, 2, 3
_HASH_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_INPUT_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


def _type(ctx: OpContext) -> int:
    kind = ctx.scalar(3)
    if kind not in (_SPARSE_DEPRECATED, _DENSE, _SPARSE):
        raise ctx.fail(f"input 3 (type) must be 1 (SPARSE_DEPRECATED), 2 (DENSE) or 3 (SPARSE), got {kind}")
    if kind == _DENSE and not ctx.has_input(2):
        raise ctx.fail("input 2 (weight) is required by the DENSE type")
    # A model input may still be omitted by the request: only execution knows it is present.
    if kind != _DENSE and ctx.has_input(2) and not ctx.compile_time:
        raise ctx.fail("input 2 (weight) must be omitted for the SPARSE types")
    return kind


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(4, 1)
    hash_type = ctx.inputs[0].type
    if hash_type not in _HASH_TYPES:
        raise ctx.fail(f"input 0 (hash) has type {hash_type.name}, expected TENSOR_FLOAT32/TENSOR_FLOAT16")
    if ctx.inputs[1].type not in _INPUT_TYPES:
        raise ctx.fail(f"input 1 has type {ctx.inputs[1].type.name}, expected "
                       f"{'/'.join(t.name for t in _INPUT_TYPES)}")
    ctx.check_types([hash_type, None, hash_type, T.INT32], [T.TENSOR_INT32])
    for i in (0, 1, 3):
        if not ctx.has_input(i):
            raise ctx.fail(f"required input {i} is omitted")
    ctx.check_rank(0, 2)
    ctx.check_rank(2, 1)
    try:
        _type(ctx)
    except UnknownValue:
        pass


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    kind = _type(ctx)
    hash_dims, input_dims = ctx.inputs[0].dims, ctx.inputs[1].dims
    if len(hash_dims) != 2:
        raise ctx.fail(f"input 0 (hash) has rank {len(hash_dims)}, expected 2")
    if hash_dims[1] > 32:
        raise ctx.fail(f"input 0 (hash) has {hash_dims[1]} bits per hash, at most 32 are supported")
    if len(input_dims) < 1:
        raise ctx.fail("input 1 must have rank at least 1")
    if kind == _DENSE and not (ctx.compile_time and not ctx.inputs[2].known):
        w = ctx.inputs[2].dims
        if len(w) != 1 or w[0] != input_dims[0]:
            raise ctx.fail(f"input 2 (weight) has shape {w}, expected ({input_dims[0]},)")
        return [(hash_dims[0] * hash_dims[1],)]
    return [(hash_dims[0],)]


def _sign_bit(seed: np.float32, rows: list[bytes], weights: np.ndarray | None) -> int:
    score = 0.0
    prefix = np.float32(seed).tobytes()
    for i, row in enumerate(rows):
        value = float(to_int64(fingerprint64(prefix + row)))
        score += value if weights is None else float(weights[i]) * value
    return 1 if score > 0 else 0


def _execute(ctx: OpContext) -> list[np.ndarray]:
    kind = _type(ctx)
    seeds = np.asarray(ctx.input(0), np.float32)
    num_hash, num_bits = seeds.shape
    x = np.ascontiguousarray(ctx.input(1))
    n = x.shape[0]
    raw = x.astype(x.dtype.newbyteorder("<")).tobytes()
    item = len(raw) // n if n else 0
    rows = [raw[i * item:(i + 1) * item] for i in range(n)]
    weights = np.asarray(ctx.input(2), np.float64) if ctx.has_input(2) else None
    bits = np.array([[_sign_bit(seeds[i, j], rows, weights) for j in range(num_bits)] for i in range(num_hash)],
                    dtype=np.int64).reshape(num_hash, num_bits)
    if kind == _DENSE:
        return [bits.reshape(-1).astype(np.int32)]
    out = []
    for i in range(num_hash):
        signature = 0
        for b in bits[i]:
            signature = (signature << 1) | int(b)
        if kind == _SPARSE:
            signature += i * (1 << num_bits)
        signature &= 0xFFFFFFFF                                # int32 wrap-around, as in C
        out.append(signature - (1 << 32) if signature >= (1 << 31) else signature)
    return [np.array(out, dtype=np.int32)]


register(Op.LSH_PROJECTION, validate=_validate, prepare=_prepare, execute=_execute, allow_omitted_operand=True)
