"""EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION (with its FarmHash Fingerprint64) and
RANDOM_MULTINOMIAL: semantics, output shapes and parameter errors."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, NnError, OperandType as T, OperationType as Op
from nnapi.ops import OpContext, Tensor, find_operation
from nnapi.ops._farmhash import fingerprint64, to_int64


def _t(v, t: T) -> Tensor:
    a = np.asarray(v, Tensor(t, ()).dtype)
    return Tensor(t, a.shape, value=a)


def _scalar(v, t: T = T.INT32) -> Tensor:
    return Tensor(t, (), value=np.array(v, Tensor(t, ()).dtype))


def _run(op: Op, ins: list[Tensor], out_types: list[T]) -> list[np.ndarray]:
    reg = find_operation(op)
    outs = [Tensor(t, ()) for t in out_types]
    reg.validate(OpContext(op, ins, outs, compile_time=True))
    ctx = OpContext(op, ins, outs)
    dims = reg.prepare(ctx)
    res = reg.execute(ctx)
    assert [r.shape for r in res] == [tuple(d) for d in dims]
    return res


def _fails(op: Op, ins: list[Tensor], out_types: list[T], match: str) -> None:
    with pytest.raises(NnError, match=match) as info:
        _run(op, ins, out_types)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT


# --- EMBEDDING_LOOKUP / HASHTABLE_LOOKUP --------------------------------------------------------
def test_embedding_lookup_gathers_rows() -> None:
    values = _t([[1, 2], [3, 4], [5, 6]], T.TENSOR_QUANT8_ASYMM)
    out, = _run(Op.EMBEDDING_LOOKUP, [_t([2, 0, 2], T.TENSOR_INT32), values], [T.TENSOR_QUANT8_ASYMM])
    assert out.dtype == np.uint8 and out.tolist() == [[5, 6], [1, 2], [5, 6]]


def test_embedding_lookup_index_out_of_range() -> None:
    _fails(Op.EMBEDDING_LOOKUP, [_t([3], T.TENSOR_INT32), _t([[1.0], [2.0], [3.0]], T.TENSOR_FLOAT32)],
           [T.TENSOR_FLOAT32], "out of range")


def test_hashtable_lookup_hits_and_misses() -> None:
    out, hits = _run(Op.HASHTABLE_LOOKUP,
                     [_t([5, 7, 1], T.TENSOR_INT32), _t([1, 5, 9], T.TENSOR_INT32),
                      _t([[10.0, 11.0], [50.0, 51.0], [90.0, 91.0]], T.TENSOR_FLOAT32)],
                     [T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM])
    assert out.tolist() == [[50.0, 51.0], [0.0, 0.0], [10.0, 11.0]]           # a miss gives zeros
    assert hits.dtype == np.uint8 and hits.tolist() == [1, 0, 1]


def test_hashtable_lookup_keys_must_match_rows() -> None:
    _fails(Op.HASHTABLE_LOOKUP, [_t([1], T.TENSOR_INT32), _t([1, 2], T.TENSOR_INT32),
                                 _t([[1], [2], [3]], T.TENSOR_INT32)],
           [T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM], "keys")


# --- FarmHash / LSH_PROJECTION ------------------------------------------------------------------
def test_fingerprint64_known_answers() -> None:
    # Reference values of farmhash::Fingerprint64 (Google's FarmHash) for each length class.
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F
    assert fingerprint64(b"a") == 12917804110809363939
    assert fingerprint64(b"hello") == 13009744463427800296
    assert fingerprint64(b"0123456789abcdef0123") == 8665324875548751069
    assert fingerprint64(bytes(range(50))) == 12334112670463347188
    assert fingerprint64(bytes(range(200))) == 525935771297148851
    assert to_int64(0xFFFFFFFFFFFFFFFF) == -1


SEEDS = [[0.123, 0.456], [-1.5, 3.25], [7.0, 0.001]]
INPUT = [[12345, 54321], [67890, 9876], [-1, 2]]


def _lsh(kind: int, weight=None):
    w = _t(weight, T.TENSOR_FLOAT32) if weight is not None else Tensor(T.TENSOR_FLOAT32, (0,), omitted=True)
    return [_t(SEEDS, T.TENSOR_FLOAT32), _t(INPUT, T.TENSOR_INT32), w, _scalar(kind)]


def _bits_by_hand(weights) -> list[list[int]]:
    rows = [np.asarray(r, np.int32).tobytes() for r in INPUT]
    out = []
    for seed_row in SEEDS:
        bits = []
        for s in seed_row:
            key = np.float32(s).tobytes()
            score = sum(w * float(to_int64(fingerprint64(key + r))) for w, r in zip(weights, rows))
            bits.append(1 if score > 0 else 0)
        out.append(bits)
    return out


def test_lsh_dense_and_sparse_layouts() -> None:
    dense, = _run(Op.LSH_PROJECTION, _lsh(2, [0.5, -2.0, 1.0]), [T.TENSOR_INT32])
    assert dense.tolist() == sum(_bits_by_hand([0.5, -2.0, 1.0]), [])
    bits = _bits_by_hand([1.0, 1.0, 1.0])                                      # omitted weight = 1.0
    packed = [b[0] * 2 + b[1] for b in bits]
    sparse, = _run(Op.LSH_PROJECTION, _lsh(3), [T.TENSOR_INT32])
    assert sparse.tolist() == [p + i * 4 for i, p in enumerate(packed)]        # + hash index * 2^bits
    deprecated, = _run(Op.LSH_PROJECTION, _lsh(1), [T.TENSOR_INT32])
    assert deprecated.tolist() == packed


def test_lsh_negated_weights_flip_dense_bits() -> None:
    a, = _run(Op.LSH_PROJECTION, _lsh(2, [0.5, -2.0, 1.0]), [T.TENSOR_INT32])
    b, = _run(Op.LSH_PROJECTION, _lsh(2, [-0.5, 2.0, -1.0]), [T.TENSOR_INT32])
    assert (a + b).tolist() == [1] * 6


def test_lsh_parameter_errors() -> None:
    _fails(Op.LSH_PROJECTION, _lsh(4), [T.TENSOR_INT32], "type")
    _fails(Op.LSH_PROJECTION, _lsh(2), [T.TENSOR_INT32], "weight")            # DENSE needs a weight
    _fails(Op.LSH_PROJECTION, _lsh(3, [1.0, 1.0, 1.0]), [T.TENSOR_INT32], "omitted")
    _fails(Op.LSH_PROJECTION, _lsh(2, [1.0, 1.0]), [T.TENSOR_INT32], "weight")


# --- RANDOM_MULTINOMIAL -------------------------------------------------------------------------
def _multinomial(logits, n: int, seeds=(1, 2), t: T = T.TENSOR_FLOAT32):
    return _run(Op.RANDOM_MULTINOMIAL, [_t(logits, t), _scalar(n), _t(list(seeds), T.TENSOR_INT32)],
                [T.TENSOR_INT32])[0]


def test_multinomial_distribution_and_determinism() -> None:
    out = _multinomial([np.log([0.2, 0.8]).tolist(), [0.0, -np.inf]], 20000)
    assert out.shape == (2, 20000) and out.dtype == np.int32
    assert abs((out[0] == 1).mean() - 0.8) < 0.02
    assert (out[1] == 0).all()                                                 # non-finite logits never drawn
    again = _multinomial([np.log([0.2, 0.8]).tolist(), [0.0, -np.inf]], 20000)
    assert np.array_equal(out, again)                                          # same seeds, same samples
    other = _multinomial([np.log([0.2, 0.8]).tolist(), [0.0, -np.inf]], 20000, seeds=(3, 4))
    assert not np.array_equal(out, other)


def test_multinomial_float16_and_bad_sample_count() -> None:
    out = _multinomial([[0.0, 0.0, 20.0]], 50, t=T.TENSOR_FLOAT16)
    assert (out == 2).all()
    with pytest.raises(NnError, match="sample count") as info:
        _multinomial([[0.0, 1.0]], 0)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
