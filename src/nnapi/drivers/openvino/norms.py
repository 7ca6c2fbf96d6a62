"""Layer normalizations, found in a graph and lowered as one OpenVINO MVN each.

NNAPI has no layer normalization, so Keras's LayerNormalization arrives (as TFLite converts it) as a
chain of element-wise operations over the last axis:

    mean = MEAN(x)            d = SUB(x, mean)            var = MEAN(MUL(d, d))
    r = RSQRT(ADD(var, eps))  then y = x * (r * gamma) - mean * (r * gamma) (+ beta), in some form

Lowered operation by operation that is two reductions and a few fused element-wise nodes per norm
(tiny_transformer_f32: 5 norms, 11 operations each), where MVN (the variance normalized, eps inside the
square root) times gamma, plus beta, is one node.

`find_layer_norms` recognises a norm by what it computes, not by its form alone:
- its core, by structure: MEAN of x over its last axis (dimensions kept), SUB of that mean from x, MUL of
  the difference by itself, MEAN of that, ADD of a constant eps, RSQRT;
- the rest, by reach: the element-wise operations after the core that read only its values, x and
  constants, of which exactly one value, y, is read outside them (or is a model output); none of them
  with a fused activation (a clamp that random draws might not reach);
- then y itself: the operations run by the ops registry's kernels on random x, and y must be
  (x - mean) / sqrt(var + eps) * gamma + beta for one gamma and one beta per channel (fitted on two
  draws, checked on a third within float32 rounding). Otherwise the operations lower one by one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backend import ops

from ...hal import OperandType as T, OperationType as Op, Subgraph
from ...validation import ConstantReader
from .lowering import Value, constant, i64, out
from .unroll import evaluate

#: Operations the part after the core may consist of.
_ELEMENTWISE = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG)
#: Random draws: two to fit gamma and beta, one to check them; how far y may be from the fit.
FIT_DRAWS = 2
ATOL, RTOL = 1e-4, 1e-4


@dataclass(frozen=True)
class LayerNorm:
    """y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta over the last axis, with y written by
    operation `last` of the subgraph (gamma and beta: one value per channel)."""

    x: int
    y: int
    last: int
    eps: float
    gamma: np.ndarray
    beta: np.ndarray


def find_layer_norms(sub: Subgraph, dims: list[tuple[int, ...]], reader: ConstantReader) -> dict[int, LayerNorm]:
    """The layer norms of `sub` (`dims`: every operand's dimensions), by the index of the operation writing y."""
    writer = {i: n for n, op in enumerate(sub.operations) for i in op.outputs}
    readers: dict[int, list[int]] = {}
    for n, op in enumerate(sub.operations):
        for i in set(op.inputs):
            readers.setdefault(i, []).append(n)
    found = {}
    for n, op in enumerate(sub.operations):
        if op.type == Op.MEAN:
            norm = _norm_at(sub, dims, reader, n, writer, readers)
            if norm is not None:
                found[norm.last] = norm
    return found


def _only(sub: Subgraph, readers: dict[int, list[int]], operand: int, kind: Op) -> list[int]:
    return [n for n in readers.get(operand, []) if sub.operations[n].type == kind]


def _norm_at(sub: Subgraph, dims: list[tuple[int, ...]], reader: ConstantReader, n: int, writer: dict[int, int],
             readers: dict[int, list[int]]) -> LayerNorm | None:
    """The layer norm whose first MEAN is operation `n`, or None."""
    ops_, operands = sub.operations, sub.operands
    x, mean = ops_[n].inputs[0], ops_[n].outputs[0]
    shape = tuple(dims[x])
    if operands[x].type != T.TENSOR_FLOAT32 or len(shape) < 2 or 0 in shape or not _last_axis_mean(
            sub, reader, ops_[n], len(shape)):
        return None
    subs = [k for k in _only(sub, readers, mean, Op.SUB) if tuple(ops_[k].inputs[:2]) == (x, mean)]
    if len(subs) != 1:
        return None
    d = ops_[subs[0]].outputs[0]
    squares = [k for k in _only(sub, readers, d, Op.MUL) if tuple(ops_[k].inputs[:2]) == (d, d)]
    if len(squares) != 1:
        return None
    variances = [k for k in _only(sub, readers, ops_[squares[0]].outputs[0], Op.MEAN)
                 if _last_axis_mean(sub, reader, ops_[k], len(shape))]
    if len(variances) != 1:
        return None
    var = ops_[variances[0]].outputs[0]
    adds = _only(sub, readers, var, Op.ADD)
    if len(adds) != 1:
        return None
    eps = reader.value(operands[ops_[adds[0]].inputs[1]]) if ops_[adds[0]].inputs[0] == var else None
    if eps is None or eps.size != 1 or not float(eps.reshape(-1)[0]) >= 0:
        return None
    roots = _only(sub, readers, ops_[adds[0]].outputs[0], Op.RSQRT)
    if len(roots) != 1:
        return None
    core = [n, subs[0], squares[0], variances[0], adds[0], roots[0]]
    if not all(_no_activation(sub, reader, ops_[k]) for k in core[1:5]):
        return None
    region = _region(sub, reader, x, core, readers)
    if region is None:
        return None
    steps, y = region
    return _fitted(sub, dims, reader, x, y, float(eps.reshape(-1)[0]), steps, writer[y])


def _last_axis_mean(sub: Subgraph, reader: ConstantReader, op, rank: int) -> bool:
    """A MEAN over the last axis alone, its dimensions kept."""
    axes = reader.value(sub.operands[op.inputs[1]])
    keep = reader.value(sub.operands[op.inputs[2]]) if len(op.inputs) > 2 else None
    return axes is not None and keep is not None and axes.size == 1 and int(axes.reshape(-1)[0]) % rank == rank - 1 \
        and int(keep.reshape(-1)[0]) != 0


def _no_activation(sub: Subgraph, reader: ConstantReader, op) -> bool:
    """No fused activation (NEG has none; ADD, SUB, MUL and DIV take its code as their third input)."""
    if op.type == Op.NEG or op.type == Op.RSQRT or op.type == Op.MEAN:
        return True
    code = reader.value(sub.operands[op.inputs[2]]) if len(op.inputs) > 2 else None
    return code is not None and int(code.reshape(-1)[0]) == 0


def _region(sub: Subgraph, reader: ConstantReader, x: int, core: list[int],
            readers: dict[int, list[int]]) -> tuple[list[int], int] | None:
    """The core's operations and the element-wise ones after it that read only their values, x and
    constants (in order), and the one value of theirs read elsewhere; None when not exactly one is."""
    ops_, operands = sub.operations, sub.operands
    members = set(core)
    made = {i for k in core for i in ops_[k].outputs}
    for k in range(min(core) + 1, len(ops_)):
        op = ops_[k]
        if k not in members and op.type in _ELEMENTWISE and any(i in made for i in op.inputs) and all(
                i in made or i == x or reader.value(operands[i]) is not None for i in op.inputs) and \
                _no_activation(sub, reader, op):
            members.add(k)
            made.update(op.outputs)
    inside = sorted(members)
    outputs = set(sub.output_indexes)
    escaping = {i for i in made if i in outputs or any(r not in members for r in readers.get(i, []))}
    if len(escaping) != 1:
        return None
    (y,) = escaping
    return inside, y


def _fitted(sub: Subgraph, dims: list[tuple[int, ...]], reader: ConstantReader, x: int, y: int, eps: float,
            steps: list[int], last: int) -> LayerNorm | None:
    """The norm when y is the normalized x times one gamma plus one beta per channel (see the module doc)."""
    shape = tuple(dims[x])
    if tuple(dims[y]) != shape or any(k > last for k in steps):
        return None
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(FIT_DRAWS + 1):
        value = (rng.standard_normal(shape) * 3 + rng.standard_normal(shape[-1])).astype(np.float32)
        try:
            got = evaluate(sub, [sub.operations[k] for k in steps], {x: value}, reader)[y]
        except Exception:  # (a kernel refused what the random draw gave it: not a norm we can prove)
            return None
        if got.shape != shape or not np.all(np.isfinite(got)):
            return None
        v = value.astype(np.float64).reshape(-1, shape[-1])
        centred = v - v.mean(axis=1, keepdims=True)
        normalized = centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + eps)
        draws.append((normalized, got.astype(np.float64).reshape(-1, shape[-1])))
    fit_n = np.concatenate([n for n, _ in draws[:FIT_DRAWS]])
    fit_y = np.concatenate([g for _, g in draws[:FIT_DRAWS]])
    spread = fit_n - fit_n.mean(axis=0)
    gamma = (spread * (fit_y - fit_y.mean(axis=0))).sum(axis=0) / (spread * spread).sum(axis=0)
    beta = fit_y.mean(axis=0) - gamma * fit_n.mean(axis=0)
    check_n, check_y = draws[-1]
    if not np.allclose(check_n * gamma + beta, check_y, atol=ATOL, rtol=RTOL):
        return None
    # (the fit is exact up to rounding: where the operations hold gamma or beta as a constant, that
    # constant is taken as it is)
    held = [reader.value(sub.operands[i]) for k in steps for i in sub.operations[k].inputs]
    held = [c.astype(np.float32).reshape(-1) for c in held if c is not None and c.size == shape[-1]]
    return LayerNorm(x, y, last, eps, _snapped(gamma, held), _snapped(beta, held))


def _snapped(fitted: np.ndarray, held: list[np.ndarray]) -> np.ndarray:
    """`fitted` as float32: a held constant it matches, 0 or 1 where it is that (up to rounding)."""
    for c in held:
        if np.allclose(fitted, c, atol=ATOL, rtol=RTOL):
            return c
    for whole in (0.0, 1.0):
        if np.allclose(fitted, whole, atol=ATOL, rtol=RTOL):
            return np.full(fitted.shape, whole, np.float32)
    return fitted.astype(np.float32)


def lower_layer_norm(norm: LayerNorm, x: Value) -> Value:
    """y as MVN over the last axis times gamma, plus beta (skipped when they are 1 and 0)."""
    rank = x.rank
    y = out(ops.mvn(x.node, i64([rank - 1]), True, norm.eps, "inside_sqrt"))
    if not np.all(norm.gamma == 1):
        y = out(ops.multiply(y, constant(norm.gamma)))
    if np.any(norm.beta != 0):
        y = out(ops.add(y, constant(norm.beta)))
    return Value(y)


__all__ = ["LayerNorm", "find_layer_norms", "lower_layer_norm"]
