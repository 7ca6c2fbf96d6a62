"""Differential fuzz: random valid models from the operations every driver lowers, run on every driver
and compared with the reference driver (the spec baseline) within the CTS tolerances.

A model is drawn from a seed (numpy Generator): one to three operations from `GENERATORS`, each with
random types, shapes, parameters, data, and constant or input operands; a float operation may take an
earlier one's output (`FRESH_ONLY` says which never do; quantized ones never do: a 1-step difference
upstream is no bug downstream). A relaxed model's float32 data are values float16 holds (the driver may
round its inputs to float16: a comparison or FLOOR of other values may then go either way). The model
is a conformance vector (shared/cts/README.md), built and checked by `nnapi.conformance` as `nnapi cts`
does (`vectors.build`, `runner.compare`: AOSP's tolerances); where both sides give NaN, or the same
infinity, they agree. A driver runs a model only when it claims
every operation (`supported_operations`); the others are counted as skipped.

A disagreement is kept as `fuzz_corpus/<first operation>-<seed>.json` (seed, generator parameters and
the model itself), and the corpus is replayed first in every run (a case with `known`, a driver bug
reported and not fixed yet, is an expected failure while it fails). `NNAPI_FUZZ_EXAMPLES` is the number
of models each driver runs (`make fuzz`: 3000), `NNAPI_FUZZ_SEED` the first seed, `NNAPI_FUZZ_OPS`
(CONV_2D,ADD,...) narrows the operations drawn.
"""
from __future__ import annotations

import base64
import glob
import json
import math
import os
from collections import Counter, defaultdict

import numpy as np
import pytest

import nnapi
from nnapi.conformance.runner import compare
from nnapi.conformance.vectors import BuiltModel, TestModel as Vector, build
from nnapi.hal import NnError, OperandType, OperationType
from nnapi.ops import OpContext, Tensor, find_operation
from nnapi.runtime import find_device

from conftest import fuzz_examples

DRIVERS = ("xla", "openvino")
CORPUS = os.path.join(os.path.dirname(__file__), "fuzz_corpus")
#: The generator's parameters (saved with every corpus case; a case rebuilds from them and its seed).
#: `ops`: the operations drawn (None: every one with a generator; NNAPI_FUZZ_OPS=CONV_2D,... narrows it).
PARAMS = {"version": 2, "max_ops": 3, "max_dim": 5, "max_elements": 4096, "relaxed": 0.15, "special": 0.25,
          "ops": sorted(filter(None, os.environ.get("NNAPI_FUZZ_OPS", "").split(","))) or None}
F32, F16, I32, U8, S8, B8 = ("TENSOR_FLOAT32", "TENSOR_FLOAT16", "TENSOR_INT32", "TENSOR_QUANT8_ASYMM",
                             "TENSOR_QUANT8_ASYMM_SIGNED", "TENSOR_BOOL8")
FL, Q8 = (F32, F16), (U8, S8)
#: Output quantization the operation fixes.
FIXED_QUANT = {("LOGISTIC", U8): (1 / 256, 0), ("LOGISTIC", S8): (1 / 256, -128), ("TANH", U8): (1 / 128, 128),
               ("TANH", S8): (1 / 128, 0), ("SOFTMAX", U8): (1 / 256, 0), ("SOFTMAX", S8): (1 / 256, -128),
               ("L2_NORMALIZATION", U8): (1 / 128, 128), ("L2_NORMALIZATION", S8): (1 / 128, 0)}
#: Operations whose results on NaN and infinities the spec fixes (IEEE arithmetic; RELU's clamp takes NaN
#: to its low end): only models of these get such values in their inputs.
SPECIAL_OK = {"ABS", "NEG", "EXP", "FLOOR", "LOG", "RSQRT", "SIN", "SQRT", "ADD", "SUB", "MUL", "DIV", "RELU",
              "RELU1", "RELU6", "EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"}
#: Operations that never take an earlier operation's output: outside their domain (LOG of a negative),
#: ill-conditioned (EXP multiplies a relative error by |x|), or not continuous (a comparison, ARGMAX,
#: FLOOR, a cast to integers turn a rounding difference within the tolerance into another answer). An
#: earlier output is never a divisor either.
FRESH_ONLY = {"LOG", "RSQRT", "SQRT", "EXP", "POW", "FLOOR", "CAST", "ARGMAX", "ARGMIN", "EQUAL", "NOT_EQUAL",
              "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"}


class Retry(Exception):
    """The drawn operation does not fit (an empty or too large output): draw again."""


def _encode(value: np.ndarray | None) -> dict | None:
    if value is None:
        return None
    v = np.ascontiguousarray(value).reshape(-1)
    return {"dtype": v.dtype.name, "b64": base64.b64encode(v.astype(v.dtype.newbyteorder("<")).tobytes()).decode()}


class Graph:
    """One subgraph being drawn, in the conformance-vector format; `model` is the main graph's Graph."""

    def __init__(self, rng: np.random.Generator, model: "Graph | None" = None) -> None:
        self.rng, self.model = rng, model or self
        self.operands: list[dict] = []
        self.values: list[np.ndarray | None] = []
        self.operations: list[dict] = []
        self.inputs: list[int] = []
        self.pool: list[int] = []  # outputs of operations not consumed yet
        if model is None:
            self.referenced: list[dict] = []
            self.relaxed = self.special = False
            self.drawing = ""  # the operation being drawn

    # --- operands ------------------------------------------------------------------------------------
    def _new(self, t, dims, lifetime, value=None, q=(0.0, 0), cq=None) -> int:
        stored = lifetime in ("CONSTANT_COPY", "CONSTANT_REFERENCE", "SUBGRAPH") or (
            lifetime == "SUBGRAPH_INPUT" and self.model is self)
        self.operands.append({"name": None, "type": t, "dimensions": [int(d) for d in dims], "scale": float(q[0]),
                              "zero_point": int(q[1]), "lifetime": lifetime, "consumers": 0, "ignored": False,
                              "channel_quant": cq, "data": _encode(value) if stored else None})
        self.values.append(None if value is None else np.asarray(value))
        return len(self.operands) - 1

    def t(self, i): return self.operands[i]["type"]
    def d(self, i): return tuple(self.operands[i]["dimensions"])
    def q(self, i): return self.operands[i]["scale"], self.operands[i]["zero_point"]

    def qp(self, t: str) -> tuple[float, int]:
        """Random quantization for type `t` ((0, 0) unless quantized)."""
        if t not in Q8:
            return 0.0, 0
        zp = int(self.rng.integers(0, 256)) if t == U8 else int(self.rng.integers(-128, 128))
        return float(np.float32(2.0 ** self.rng.uniform(-7, 0))), zp

    def random(self, t: str, dims, lo=-2.0, hi=2.0, nonzero=False) -> np.ndarray:
        r, shape = self.rng, tuple(dims)
        if t in FL:
            v = r.uniform(lo, hi, shape)
            if nonzero:
                v = np.where(r.random(shape) < 0.5, -1, 1) * r.uniform(0.5, 2, shape)
            v = v.astype(np.float32 if t == F32 else np.float16)
            if t == F32 and self.model.relaxed:  # float16 values: the same data in float16 precision
                v = v.astype(np.float16).astype(np.float32)
            if self.model.special and v.size and r.random() < 0.5:
                v.reshape(-1)[r.integers(0, v.size)] = r.choice([np.nan, np.inf, -np.inf, -0.0])
            return v
        if t == B8:
            return r.random(shape) < 0.5
        if t == I32:
            return r.integers(1 if nonzero else -5, 6, shape).astype(np.int32)
        info = np.iinfo(np.uint8 if t == U8 else np.int8)
        return r.integers(info.min, info.max + 1, shape).astype(info.dtype)

    def shape(self, rank: int, lo: int = 1) -> tuple[int, ...]:
        return tuple(int(d) for d in self.rng.integers(lo, PARAMS["max_dim"] + 1, rank))

    def tensor(self, t, dims, q=(0.0, 0), value=None, const=False, cq=None, **kw) -> int:
        """A tensor operand: a model input, or a constant (copied or in shared memory)."""
        if value is None and (const or self.model is self):
            value = self.random(t, dims, **kw)
        if const:
            return self._new(t, dims, "CONSTANT_REFERENCE" if self.rng.random() < 0.3 else "CONSTANT_COPY",
                             value, q, cq)
        i = self._new(t, dims, "SUBGRAPH_INPUT", value, q, cq)
        self.inputs.append(i)
        return i

    def data(self, t, dims, q=(0.0, 0), p_const=0.3, **kw) -> int:
        """A data operand: an input, or a constant with probability `p_const`."""
        return self.tensor(t, dims, q, const=self.rng.random() < p_const, **kw)

    def param(self, values, t=I32, p_const=0.9) -> int:
        """A tensor parameter (axes, shapes): constant, or rarely an input."""
        return self.tensor(t, np.shape(values), value=np.asarray(values, np.int32), const=self.rng.random() < p_const)

    def scalar(self, t: str, v) -> int:
        dtype = {"INT32": np.int32, "FLOAT32": np.float32, "FLOAT16": np.float16, "BOOL": np.bool_}[t]
        return self._new(t, (), "CONSTANT_COPY", np.asarray(v, dtype))

    def i32(self, v): return self.scalar("INT32", int(v))
    def b(self, v): return self.scalar("BOOL", bool(v))
    def f(self, v, like): return self.scalar("FLOAT16" if like == F16 else "FLOAT32", float(v))

    def none(self, t=F32) -> int:
        return self._new(t, (0,), "NO_VALUE")

    def main(self, types, ranks=(1, 2, 3, 4), fits=None, make=None, **kw) -> int:
        """The operation's first input: an earlier float/int/bool output that fits, else a new input."""
        fit = [i for i in self.pool if self.t(i) in types and self.t(i) not in Q8 and len(self.d(i)) in ranks
               and (fits is None or fits(self.d(i)))] if self.model.drawing not in FRESH_ONLY else []
        if fit and self.rng.random() < 0.7:
            i = fit[int(self.rng.integers(0, len(fit)))]
            self.pool.remove(i)
            return i
        t = str(self.rng.choice(types))
        dims = make() if make else self.shape(int(self.rng.choice(ranks)))
        return self.tensor(t, dims, self.qp(t), **kw)

    def bcast(self, dims) -> tuple[int, ...]:
        """A shape that broadcasts against `dims` (leading dimensions dropped, some set to 1)."""
        d = [1 if self.rng.random() < 0.3 else v for v in dims[int(self.rng.integers(0, len(dims) + 1)):]]
        return tuple(d) or (1,)

    # --- operations ----------------------------------------------------------------------------------
    def op(self, name: str, ins: list[int], outs: list, dims=None) -> list[int]:
        """Add operation `name`; `outs` holds (type, (scale, zero point)) or a type per output. Output shapes
        come from the operation's own shape inference (`ops` prepare) unless given."""
        outs = [o if isinstance(o, tuple) else (o, (0.0, 0)) for o in outs]
        if dims is None:
            tensors = [Tensor(OperandType[o["type"]], tuple(o["dimensions"]), o["scale"], o["zero_point"],
                              value=v, omitted=o["lifetime"] == "NO_VALUE")
                       for o, v in ((self.operands[i], self.values[i]) for i in ins)]
            ctx = OpContext(OperationType[name], tensors,
                            [Tensor(OperandType[t], (), *q) for t, q in outs], relaxed=self.model.relaxed)
            try:
                dims = find_operation(OperationType[name]).prepare(ctx)
            except NnError as e:  # the drawn parameters do not fit the drawn shapes
                raise Retry(str(e)) from None
        if any(0 in d or not d or math.prod(d) > PARAMS["max_elements"] for d in dims):
            raise Retry(name)
        made = [self._new(t, d, "TEMPORARY_VARIABLE", q=q) for (t, q), d in zip(outs, dims)]
        self.operations.append({"type": name, "inputs": list(ins), "outputs": made})
        self.pool.extend(made)
        return made

    def subgraph(self, make_inputs, body) -> int:
        """A referenced subgraph: `make_inputs(sub)` declares its inputs, `body(sub, inputs)` returns its
        outputs; the index of its SUBGRAPH operand here."""
        sub = Graph(self.rng, self.model)
        ins = make_inputs(sub)
        outs = body(sub, ins)
        for i in outs:
            sub.operands[i]["lifetime"] = "SUBGRAPH_OUTPUT"
        self.model.referenced.append(sub.spec(outs))
        return self._new("SUBGRAPH", (), "SUBGRAPH", np.array([len(self.model.referenced) - 1], np.uint32))

    def spec(self, outputs) -> dict:
        return {"operands": self.operands, "operations": self.operations, "inputs": self.inputs,
                "outputs": list(outputs)}


GENERATORS: dict = {}


def generates(*ops: str):
    def register(fn):
        for op in ops:
            GENERATORS[op] = fn
        return fn
    return register


def _axis(g: Graph, rank: int) -> int:
    """An axis, negative half the time."""
    a = int(g.rng.integers(0, rank))
    return a - rank if g.rng.random() < 0.5 else a


def _out_q(g: Graph, op: str, t: str):
    return t, FIXED_QUANT.get((op, t)) or g.qp(t)


@generates("ABS", "NEG", "EXP", "FLOOR", "LOG", "RSQRT", "SIN", "SQRT")
def _unary(g, op):
    lo, hi = {"LOG": (0.05, 4), "RSQRT": (0.05, 4), "SQRT": (0, 4), "EXP": (-4, 4)}.get(op, (-3, 3))
    x = g.main(FL + ((I32,) if op in ("ABS", "NEG") else ()), lo=lo, hi=hi)
    g.op(op, [x], [g.t(x)])


@generates("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "PRELU")
def _binary(g, op):
    types = {"DIV": FL + (I32,), "POW": FL, "PRELU": FL + Q8}.get(op, FL + (I32,) + Q8)
    x = g.main(types, lo=0.1 if op == "POW" else -2, hi=3)
    t = g.t(x)
    y = g.data(t, g.bcast(g.d(x)), g.qp(t), nonzero=op == "DIV")
    ins = [x, y] if op in ("DIV", "POW", "PRELU") or g.rng.random() < 0.5 else [y, x]
    out = _out_q(g, op, t)
    if op == "MUL" and t in Q8:
        out = (t, (float(np.float32(g.q(x)[0] * g.q(y)[0] * g.rng.uniform(2, 60))), g.qp(t)[1]))
    if op in ("ADD", "SUB", "MUL", "DIV"):
        ins.append(g.i32(0 if t == I32 else g.rng.integers(0, 4)))
    g.op(op, ins, [out])


@generates("RELU", "RELU1", "RELU6", "LOGISTIC", "TANH", "HARD_SWISH", "ELU")
def _activation(g, op):
    wide = 8 if op == "HARD_SWISH" else 3
    x = g.main(FL if op == "ELU" else FL + Q8, lo=-wide, hi=wide)
    t = g.t(x)
    ins = [x] + ([g.f(g.rng.uniform(0.1, 2), t)] if op == "ELU" else [])
    g.op(op, ins, [(t, g.q(x)) if op.startswith("RELU") else _out_q(g, op, t)])


@generates("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION")
def _normalization(g, op):
    x = g.main(FL + Q8 if op in ("SOFTMAX", "L2_NORMALIZATION") else FL)
    t, r = g.t(x), len(g.d(x))
    ins = [x]
    if op in ("SOFTMAX", "LOG_SOFTMAX"):
        ins.append(g.f(g.rng.uniform(0.1, 2), t))
    elif op == "LOCAL_RESPONSE_NORMALIZATION":
        ins += [g.i32(g.rng.integers(0, 4)), g.f(g.rng.uniform(0.5, 2), t), g.f(g.rng.uniform(0, 1), t),
                g.f(g.rng.uniform(0.25, 1), t)]
    if op == "LOG_SOFTMAX" or g.rng.random() < 0.6 or (op == "LOCAL_RESPONSE_NORMALIZATION" and r != 4):
        ins.append(g.i32(_axis(g, r)))
    g.op(op, ins, [_out_q(g, op, t)])


@generates("INSTANCE_NORMALIZATION")
def _instance_norm(g, op):
    x = g.main(FL, (4,))
    t = g.t(x)
    gamma, beta, epsilon = g.rng.uniform(0.5, 2), g.rng.uniform(-1, 1), g.rng.choice([1e-3, 0.01, 0.1])
    g.op(op, [x, g.f(gamma, t), g.f(beta, t), g.f(epsilon, t), g.b(g.rng.random() < 0.5)], [t])


@generates("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_OR",
           "LOGICAL_NOT")
def _compare(g, op):
    x = g.main((B8,) if op.startswith("LOGICAL") else (B8, I32) + FL + Q8)
    t = g.t(x)
    ins = [x] if op == "LOGICAL_NOT" else [x, g.data(t, g.bcast(g.d(x)), g.qp(t))]
    g.op(op, ins if g.rng.random() < 0.5 else ins[::-1], [B8])


@generates("SELECT")
def _select(g, op):
    x = g.main(FL + (I32,) + Q8)
    t, d = g.t(x), g.d(x)
    g.op(op, [g.data(B8, d), x, g.data(t, d, g.qp(t))], [_out_q(g, op, t)])


@generates("CAST")
def _cast(g, op):
    x = g.main(FL + (I32, U8, S8, B8))
    t = g.t(x)
    out = str(g.rng.choice((F32, F16, I32, U8))) if t in (F32, F16, I32, U8) else t
    g.op(op, [x], [(out, g.q(x) if out == t else g.qp(out))])


@generates("ARGMAX", "ARGMIN")
def _argminmax(g, op):
    x = g.main(FL + (I32,) + Q8)
    g.op(op, [x, g.i32(_axis(g, len(g.d(x))))], [I32])


@generates("MEAN", "REDUCE_SUM", "REDUCE_PROD", "REDUCE_MIN", "REDUCE_MAX", "REDUCE_ALL", "REDUCE_ANY")
def _reduce(g, op):
    x = g.main({"REDUCE_ALL": (B8,), "REDUCE_ANY": (B8,), "REDUCE_SUM": FL, "REDUCE_PROD": FL}.get(op, FL + Q8))
    r = len(g.d(x))
    axes = [a - r if g.rng.random() < 0.3 else a for a in g.rng.choice(r, g.rng.integers(1, r + 1), replace=False)]
    if g.rng.random() < 0.1:
        axes.append(axes[0])  # a repeated axis counts once
    keep = g.rng.random() < 0.5
    g.op(op, [x, g.param(axes), g.i32(keep) if op == "MEAN" else g.b(keep)], [(g.t(x), g.q(x))])


@generates("CONCATENATION")
def _concatenation(g, op):
    x = g.main(FL + Q8)
    d, axis = g.d(x), _axis(g, len(g.d(x)))
    others = [g.data(g.t(x), d[:axis % len(d)] + (int(g.rng.integers(1, 4)),) + d[axis % len(d) + 1:], g.q(x))
              for _ in range(g.rng.integers(0, 3))]
    ins = [x] + others
    g.rng.shuffle(ins)
    g.op(op, ins + [g.i32(axis)], [(g.t(x), g.q(x))])


def _factor(g: Graph, n: int, rank: int) -> list[int]:
    """`n` as a product of `rank` factors."""
    dims = [1] * rank
    p, k = 2, n
    while k > 1:
        while k % p:
            p += 1
        dims[int(g.rng.integers(0, rank))] *= p
        k //= p
    return dims


@generates("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE")
def _reshape(g, op):
    ones = lambda: tuple(1 if g.rng.random() < 0.4 else d for d in g.shape(int(g.rng.integers(2, 5))))
    x = g.main(FL + Q8 + ((I32,) if op == "EXPAND_DIMS" else ()), (1, 2, 3) if op == "EXPAND_DIMS" else (1, 2, 3, 4),
               fits=(lambda d: 1 in d) if op == "SQUEEZE" else None, make=ones if op == "SQUEEZE" else None)
    d = g.d(x)
    if op == "RESHAPE":
        shape = _factor(g, math.prod(d), int(g.rng.integers(1, 5)))
        if g.rng.random() < 0.3:
            shape[int(g.rng.integers(0, len(shape)))] = -1
        second = g.param(shape, p_const=0.85)
    elif op == "SQUEEZE":
        axes = [a for a in range(len(d)) if d[a] == 1 and g.rng.random() < 0.6][:len(d) - 1]
        axes = [a - len(d) if g.rng.random() < 0.3 else a for a in axes]
        second = g.param(axes) if axes and (g.rng.random() < 0.7 or d.count(1) == len(d)) else g.none(I32)
    elif op == "EXPAND_DIMS":
        second = g.i32(g.rng.integers(-len(d) - 1, len(d) + 1))
    else:
        second = g.none(I32) if g.rng.random() < 0.2 else g.param(g.rng.permutation(len(d)))
    g.op(op, [x, second], [(g.t(x), g.q(x))])


@generates("PAD", "PAD_V2", "TILE", "GATHER", "SLICE", "STRIDED_SLICE", "SPLIT")
def _slicing(g, op):
    types = FL + Q8 + (() if op in ("PAD", "PAD_V2", "STRIDED_SLICE") else (I32,))
    x = g.main(types)
    t, d, r = g.t(x), g.d(x), len(g.d(x))
    rng, outs = g.rng, [(t, g.q(x))]
    if op in ("PAD", "PAD_V2"):
        ins = [x, g.param(rng.integers(0, 3, (r, 2)))]
        if op == "PAD_V2" and t in Q8:
            ins.append(g.i32(rng.integers(*((0, 256) if t == U8 else (-128, 128)))))
        elif op == "PAD_V2":
            ins.append(g.f(rng.uniform(-2, 2), t))
    elif op == "TILE":
        ins = [x, g.param(rng.integers(1, 4, r))]
    elif op == "GATHER":
        axis = _axis(g, r)
        shape = tuple(rng.integers(1, 4, int(rng.integers(1, 6 - r)))) if r < 4 else (int(rng.integers(1, 4)),)
        idx = rng.integers(0, d[axis], shape)
        ins = [x, g.i32(axis), g.param(idx)]
    elif op == "SLICE":
        begin = [int(rng.integers(0, n)) for n in d]
        size = [-1 if rng.random() < 0.2 else int(rng.integers(1, n - b + 1)) for n, b in zip(d, begin)]
        ins = [x, g.param(begin), g.param(size)]
    elif op == "STRIDED_SLICE":
        strides = [int(rng.choice([1, 1, 2, -1, -2])) for _ in d]
        begin = [int(rng.integers(-n, n)) for n in d]
        end = [int(rng.integers(-n - 1, n + 1)) for n in d]
        shrink = [i for i in range(r) if rng.random() < 0.2][:r - 1]
        for i in shrink:  # one element
            begin[i] = int(rng.integers(0, d[i]))
            end[i], strides[i] = begin[i] + 1, 1
        masks = [int(sum(1 << i for i in range(r) if rng.random() < 0.2 and i not in shrink)) for _ in range(2)]
        ins = [x, g.param(begin), g.param(end), g.param(strides), g.i32(masks[0]), g.i32(masks[1]),
               g.i32(sum(1 << i for i in shrink))]
    else:
        axis = _axis(g, r)
        n = int(rng.choice([k for k in range(1, d[axis] + 1) if d[axis] % k == 0]))
        ins, outs = [x, g.i32(axis), g.i32(n)], outs * n
    g.op(op, ins, outs)


@generates("FILL")
def _fill(g, op):
    t = str(g.rng.choice(FL + (I32,)))
    value = g.i32(g.rng.integers(-5, 6)) if t == I32 else g.f(g.rng.uniform(-2, 2), t)
    g.op(op, [g.param(g.shape(int(g.rng.integers(1, 5)))), value], [t])


def _split_hw(d, nchw):
    return (d[2], d[3], d[1]) if nchw else (d[1], d[2], d[3])


@generates("SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND")
def _space_depth(g, op):
    rng = g.rng
    nchw, bh, bw = rng.random() < 0.3, int(rng.integers(1, 4)), int(rng.integers(1, 4))
    if op in ("SPACE_TO_DEPTH", "DEPTH_TO_SPACE"):
        bh = bw = max(bh, 2)
    def fits(d):
        h, w, c = _split_hw(d, nchw)
        return {"SPACE_TO_DEPTH": h % bh == 0 and w % bw == 0, "DEPTH_TO_SPACE": c % (bh * bw) == 0,
                "SPACE_TO_BATCH_ND": True, "BATCH_TO_SPACE_ND": d[0] % (bh * bw) == 0}[op]
    def make():
        n, h, w, c = g.shape(4)
        h, w = (h * bh, w * bw) if op == "SPACE_TO_DEPTH" else (h, w)
        c, n = (c * bh * bw if op == "DEPTH_TO_SPACE" else c), (n * bh * bw if op == "BATCH_TO_SPACE_ND" else n)
        return (n, c, h, w) if nchw else (n, h, w, c)
    x = g.main(FL + Q8, (4,), fits=fits, make=make)
    ins = [x, g.i32(bh)] if op in ("SPACE_TO_DEPTH", "DEPTH_TO_SPACE") else [x, g.param([bh, bw])]
    if op == "SPACE_TO_BATCH_ND":
        h, w, _ = _split_hw(g.d(x), nchw)
        pads = []
        for size, block in ((h, bh), (w, bw)):
            first = int(rng.integers(0, 3))
            pads.append([first, (-(size + first)) % block + block * int(rng.integers(0, 2))])
        ins.append(g.param(pads))
    if nchw or rng.random() < 0.5:
        ins.append(g.b(nchw))
    g.op(op, ins, [(g.t(x), g.q(x))])


@generates("CHANNEL_SHUFFLE")
def _channel_shuffle(g, op):
    x = g.main(FL + Q8)
    d = g.d(x)
    axis = _axis(g, len(d))
    groups = int(g.rng.choice([k for k in range(1, d[axis] + 1) if d[axis] % k == 0]))
    g.op(op, [x, g.i32(groups), g.i32(axis)], [(g.t(x), g.q(x))])


def _weights(g: Graph, x: int, fdims, channel_dim: int, n_bias: int, per_channel_ok=True):
    """(filter, bias, output quantization) for a convolution-like operation on input `x`."""
    t, rng = g.t(x), g.rng
    if t in FL:
        return (g.data(t, fdims, p_const=0.8, lo=-1, hi=1), g.data(t, (n_bias,), p_const=0.8, lo=-1, hi=1),
                (t, (0.0, 0)))
    sx = g.q(x)[0]
    if per_channel_ok and rng.random() < 0.4:
        scales = [float(np.float32(2.0 ** rng.uniform(-8, -3))) for _ in range(fdims[channel_dim])]
        raw = rng.integers(-127, 128, fdims).astype(np.int8)
        f = g.tensor("TENSOR_QUANT8_SYMM_PER_CHANNEL", fdims, const=True, value=raw,
                     cq={"channel_dim": channel_dim, "scales": scales})
        sf, bias_q = float(np.mean(scales)), (0.0, 0)
    else:
        sf = float(np.float32(2.0 ** rng.uniform(-8, -3)))
        f = g.data(t, fdims, (sf, g.qp(t)[1]), p_const=0.8)
        bias_q = (float(np.float32(sx) * np.float32(sf)), 0)
    bias = rng.integers(-300, 301, n_bias).astype(np.int32)
    b = g.tensor(I32, (n_bias,), bias_q, value=bias, const=rng.random() < 0.8)
    k = math.prod(fdims) / fdims[0]
    return f, b, (t, (float(np.float32(sx * sf * math.sqrt(k) * rng.uniform(20, 200))), g.qp(t)[1]))


def _window(g: Graph, fh: int, fw: int, extras=()) -> list[int]:
    """Padding (implicit scheme or explicit), strides, `extras` and the fused activation."""
    rng = g.rng
    if rng.random() < 0.5:
        pads = [g.i32(rng.choice([1, 2]))]
    else:
        pads = [g.i32(rng.integers(0, min(2, f - 1) + 1)) for f in (fw, fw, fh, fh)]
    return pads + [g.i32(rng.integers(1, 3)), g.i32(rng.integers(1, 3))] + [g.i32(e) for e in extras] + \
        [g.i32(rng.integers(0, 4))]


def _conv_input(g: Graph, types=FL + Q8):
    nchw = g.rng.random() < 0.3
    x = g.main(types, (4,), make=lambda: g.shape(4, 2))
    return (x, nchw) + _split_hw(g.d(x), nchw)


def _tail(g: Graph, nchw: bool, dilation: bool, required_layout=False) -> list[int]:
    rng = g.rng
    dil = dilation and rng.random() < 0.3
    if not (nchw or dil or required_layout or rng.random() < 0.3):
        return []
    return [g.b(nchw)] + ([g.i32(rng.integers(1, 3)), g.i32(rng.integers(1, 3))] if dil else [])


@generates("CONV_2D", "DEPTHWISE_CONV_2D", "GROUPED_CONV_2D")
def _conv(g, op):
    x, nchw, h, w, c = _conv_input(g)
    rng = g.rng
    fh, fw = int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))
    if op == "CONV_2D":
        o = int(rng.integers(1, 5))
        f, b, out = _weights(g, x, (o, fh, fw, c), 0, o)
        ins = [x, f, b] + _window(g, fh, fw)
    elif op == "DEPTHWISE_CONV_2D":
        m = int(rng.integers(1, 3))
        f, b, out = _weights(g, x, (1, fh, fw, c * m), 3, c * m)
        ins = [x, f, b] + _window(g, fh, fw, (m,))
    else:
        groups = int(rng.choice([k for k in range(1, c + 1) if c % k == 0]))
        o = groups * int(rng.integers(1, 3))
        f, b, out = _weights(g, x, (o, fh, fw, c // groups), 0, o)
        ins = [x, f, b] + _window(g, fh, fw, (groups,))
    g.op(op, ins + _tail(g, nchw, op != "GROUPED_CONV_2D", op == "GROUPED_CONV_2D"), [out])


@generates("TRANSPOSE_CONV_2D")
def _transpose_conv(g, op):
    x, nchw, h, w, c = _conv_input(g)
    rng = g.rng
    o, fh, fw, sh, sw = (int(v) for v in rng.integers(1, 4, 5))
    f, b, out = _weights(g, x, (o, fh, fw, c), 0, o)
    act = g.i32(rng.integers(0, 4))
    if rng.random() < 0.5:
        pads = [g.i32(rng.integers(0, min(2, k - 1) + 1)) for k in (fw, fw, fh, fh)]
        ins = [x, f, b] + pads + [g.i32(sw), g.i32(sh), act, g.b(nchw)]
    else:
        same = rng.random() < 0.5
        oh, ow = (h * sh, w * sw) if same else ((h - 1) * sh + fh, (w - 1) * sw + fw)
        shape = [g.d(x)[0], o, oh, ow] if nchw else [g.d(x)[0], oh, ow, o]
        ins = [x, f, b, g.param(shape), g.i32(1 if same else 2), g.i32(sw), g.i32(sh), act, g.b(nchw)]
    g.op(op, ins, [out])


@generates("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D")
def _pool(g, op):
    x, nchw, h, w, c = _conv_input(g, FL if op == "L2_POOL_2D" else FL + Q8)
    fh, fw = int(g.rng.integers(1, min(h, 3) + 1)), int(g.rng.integers(1, min(w, 3) + 1))
    pads, tail = _window(g, fh, fw), _tail(g, nchw, False)
    g.op(op, [x] + pads[:-1] + [g.i32(fw), g.i32(fh), pads[-1]] + tail, [(g.t(x), g.q(x))])


@generates("FULLY_CONNECTED")
def _fully_connected(g, op):
    x = g.main(FL + Q8, (2, 3, 4))
    units, size = int(g.rng.integers(1, 6)), g.d(x)[-1]
    f, b, out = _weights(g, x, (units, size), 0, units, per_channel_ok=False)
    g.op(op, [x, f, b, g.i32(g.rng.integers(0, 4))], [out])


@generates("BATCH_MATMUL")
def _batch_matmul(g, op):
    x = g.main((F32, F16, I32, S8), (2, 3, 4))
    t, d, rng = g.t(x), g.d(x), g.rng
    adj_x, adj_y = (bool(v) for v in rng.random(2) < 0.3)
    k, n = (d[-2] if adj_x else d[-1]), int(rng.integers(1, 5))
    y = g.data(t, d[:-2] + ((n, k) if adj_y else (k, n)), g.qp(t), lo=-1, hi=1)
    out = (t, (float(np.float32(g.q(x)[0] * g.q(y)[0] * math.sqrt(k) * rng.uniform(20, 200))), g.qp(t)[1])) \
        if t == S8 else t
    g.op(op, [x, y] + ([g.b(adj_x), g.b(adj_y)] if adj_x or adj_y or rng.random() < 0.5 else []), [out])


@generates("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def _resize(g, op):
    x, nchw, h, w, c = _conv_input(g)
    rng = g.rng
    if rng.random() < 0.5:
        size = [g.i32(rng.integers(1, 2 * w + 1)), g.i32(rng.integers(1, 2 * h + 1))]
    else:
        size = [g.f(rng.choice([0.5, 0.75, 1.0, 1.5, 2.0, 2.5]), g.t(x)) for _ in range(2)]
        if g.t(x) not in FL:
            size = [g.scalar("FLOAT32", float(g.values[i])) for i in size]
    ins = [x] + size
    if op == "RESIZE_NEAREST_NEIGHBOR" or nchw or rng.random() < 0.7:
        ins.append(g.b(nchw))
        if rng.random() < 0.6:
            align = rng.random() < 0.4
            ins += [g.b(align), g.b(not align and rng.random() < 0.5)]
    g.op(op, ins, [(g.t(x), g.q(x))])


@generates("RNN", "UNIDIRECTIONAL_SEQUENCE_RNN")
def _rnn(g, op):
    x = g.main(FL, (2,) if op == "RNN" else (3,), lo=-1, hi=1)
    t, d, rng = g.t(x), g.d(x), g.rng
    time_major = rng.random() < 0.5
    batch, size, units = (d[0] if op == "RNN" or not time_major else d[1]), d[-1], int(rng.integers(1, 5))
    w = [g.data(t, s, p_const=0.7, lo=-0.5, hi=0.5) for s in ((units, size), (units, units), (units,))]
    ins = [x] + w + [g.data(t, (batch, units), p_const=0.2, lo=-1, hi=1), g.i32(rng.choice([0, 1, 2, 3, 4, 6]))]
    if op == "RNN":
        return g.op(op, ins, [t, t])
    g.op(op, ins + [g.i32(time_major)], [t] * int(rng.integers(1, 3)))


@generates("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _lstm(g, op):
    x = g.main(FL, (3,), lo=-1, hi=1)
    t, d, rng = g.t(x), g.d(x), g.rng
    time_major = rng.random() < 0.5
    batch, size, cells = (d[1] if time_major else d[0]), d[2], int(rng.integers(1, 4))
    cifg, peephole, projection, norm = (bool(v) for v in rng.random(4) < 0.3)
    out_size = int(rng.integers(1, 4)) if projection else cells
    w = lambda *s: g.data(t, s, p_const=0.7, lo=-0.5, hi=0.5)
    ins = [x] + [g.none(t) if cifg and k == 0 else w(cells, size) for k in range(4)]
    ins += [g.none(t) if cifg and k == 0 else w(cells, out_size) for k in range(4)]
    ins += [g.none(t) if not peephole or (cifg and k == 0) else w(cells) for k in range(3)]
    ins += [g.none(t) if cifg and k == 0 else w(cells) for k in range(4)]
    ins += [w(out_size, cells), w(out_size)] if projection else [g.none(t), g.none(t)]
    ins += [g.data(t, (batch, out_size), p_const=0.2, lo=-1, hi=1), g.data(t, (batch, cells), p_const=0.2, lo=-1, hi=1)]
    clip = "FLOAT16" if t == F16 else "FLOAT32"
    ins += [g.i32(rng.choice([1, 3, 4, 6])), g.scalar(clip, rng.choice([0.0, 3.0])),
            g.scalar(clip, rng.choice([0.0, 2.0]) if projection else 0.0), g.b(time_major)]
    ins += [g.none(t) if not norm or (cifg and k == 0) else w(cells) for k in range(4)]
    g.op(op, ins, [t] * int(rng.choice([1, 3])))


def _branch(sub: Graph, x: int, c: float) -> list[int]:
    t = sub.t(x)
    op = str(sub.rng.choice(["ADD", "SUB", "MUL"]))
    k = sub.tensor(t, (1,), const=True, value=np.array([c if t != I32 else int(c * 2)], np.float32).astype(
        np.float16 if t == F16 else np.int32 if t == I32 else np.float32))
    return sub.op(op, [x, k, sub.i32(0)], [t], dims=[sub.d(x)])


@generates("IF", "WHILE")
def _control_flow(g, op):
    x = g.main(FL + (I32,), lo=-1, hi=1)
    t, d, rng = g.t(x), g.d(x), g.rng
    if op == "IF":
        branches = [g.subgraph(lambda s: [s.tensor(t, d)], lambda s, ins, c=c: _branch(s, ins[0], c))
                    for c in rng.uniform(0.5, 1.5, 2)]
        return g.op(op, [g.data(B8, (1,), p_const=0.2)] + branches + [x], [t], dims=[d])
    limit = int(rng.integers(1, 5))
    carried = lambda s: [s.tensor(I32, (1,)), s.tensor(t, d)]
    def cond(s, ins):
        bound = s.tensor(I32, (1,), const=True, value=np.array([limit], np.int32))
        return s.op("LESS", [ins[0], bound], [B8], dims=[(1,)])
    def body(s, ins):
        one = s.tensor(I32, (1,), const=True, value=np.array([1], np.int32))
        counter = s.op("ADD", [ins[0], one, s.i32(0)], [I32], dims=[(1,)])
        return counter + _branch(s, ins[1], float(rng.uniform(0.5, 1.2)))
    graphs = [g.subgraph(carried, cond), g.subgraph(carried, body)]
    start = g.tensor(I32, (1,), value=np.array([rng.integers(0, 3)], np.int32))
    g.op(op, graphs + [start, x], [I32, t], dims=[(1,), d])


# --- drawing, running and comparing -----------------------------------------------------------------------
def generate(seed: int, params: dict = PARAMS) -> tuple[str, dict]:
    """(the first operation drawn, the model as a conformance vector without expected outputs)."""
    rng = np.random.default_rng(seed)
    ops = params["ops"] or sorted(GENERATORS)
    while True:
        g = Graph(rng)
        first = str(rng.choice(ops))
        g.relaxed = bool(rng.random() < params["relaxed"])
        g.special = first in SPECIAL_OK and bool(rng.random() < params["special"])
        try:
            for k in range(1 + int(rng.integers(0, params["max_ops"]))):
                g.drawing = first if k == 0 else str(rng.choice(sorted(SPECIAL_OK & set(ops)) if g.special else ops))
                GENERATORS[g.drawing](g, g.drawing)
        except Retry:
            continue
        for i in g.pool:
            g.operands[i]["lifetime"] = "SUBGRAPH_OUTPUT"
        return first, {"name": f"{first}-{seed}", "hal_version": "V1_3", "expect_failure": False,
                       "is_relaxed": g.relaxed, "multinomial_tolerance": 0, "main": g.spec(g.pool),
                       "referenced": g.referenced}


def _run(built: BuiltModel, device: str) -> list[np.ndarray]:
    outputs = nnapi.Compilation(built.model, devices=[device]).finish().execute(built.inputs)
    return [np.asarray(o) for o in outputs]


def _problem(test: Vector, built: BuiltModel, expected: list[np.ndarray], got: list[np.ndarray]) -> str | None:
    """None when `got` agrees with the reference's `expected` (runner.compare's tolerances; where both are
    NaN or both the same value, infinities included, they agree)."""
    outs = []
    for k, (e, a) in enumerate(zip(expected, got)):
        if a.shape != e.shape:
            return f"output {k}: shape {a.shape}, the reference gives {e.shape}"
        if e.dtype.kind == "f":
            same = (np.isnan(e) & np.isnan(a.astype(e.dtype))) | (e == a)
            e, a = np.where(same, 0, e), np.where(same, 0, a)
        outs.append((e, a))
    shown = BuiltModel(built.model, built.inputs, [(e, o) for (e, _), (_, o) in zip(outs, built.outputs)], [])
    return compare(test, shown, [a for _, a in outs])


def check_model(name: str, spec: dict, stats=None, devices=DRIVERS) -> dict[str, str]:
    """Run one model on the reference and on `devices`; {driver: disagreement} (empty when all agree)."""
    test = Vector(name, "fuzz", spec)
    built = build(test)
    stats = defaultdict(Counter) if stats is None else stats
    try:
        expected = _run(built, "reference")
    except NnError as e:
        stats["reference rejects"][str(e)[:80]] += 1
        return {}
    problems = {}
    for device in devices:
        if not all(find_device(device).supported_operations(built.model)):
            stats[device]["skipped as unclaimed"] += 1
            continue
        try:
            problem = _problem(test, built, expected, _run(built, device))
        except Exception as e:  # a claimed model must run (NnError or not)
            problem = f"{type(e).__name__}: {e}"
        stats[device]["run"] += 1
        stats[device]["disagreements"] += problem is not None
        stats["operations", device].update(op["type"] for graph in [spec["main"], *spec["referenced"]]
                                           for op in graph["operations"])
        if problem:
            problems[device] = problem
    return problems


def save_case(op: str, seed: int, spec: dict, problems: dict[str, str], params: dict = PARAMS) -> str:
    """Keep a disagreement in the corpus: the seed, the generator's parameters and the model."""
    path = os.path.join(CORPUS, f"{op}-{seed}.json")
    os.makedirs(CORPUS, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"op": op, "seed": seed, "generator": params, "problems": problems, "model": spec}, f)
    return path


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CORPUS, "*.json"))), ids=os.path.basename)
def test_corpus_cases_agree_with_the_reference(path):
    with open(path, encoding="utf-8") as f:
        case = json.load(f)
    spec = case.get("model") or generate(case["seed"], case["generator"])[1]
    problems = check_model(os.path.basename(path), spec)
    if case.get("known") and problems:  # a driver bug reported, not fixed yet (it may depend on the CPU)
        pytest.xfail(f"{case['known']}: {problems}")
    assert problems == {}


def test_random_models_agree_with_the_reference():
    """Models from consecutive seeds until every driver ran `NNAPI_FUZZ_EXAMPLES` of them (or 4 times as
    many were drawn); a driver that ran its share runs no more."""
    wanted, seed = fuzz_examples(120), int(os.environ.get("NNAPI_FUZZ_SEED", "0") or 0)
    stats: dict = defaultdict(Counter)
    failures, drawn = [], 0
    while drawn < 4 * wanted and any(stats[d]["run"] < wanted for d in DRIVERS):
        op, spec = generate(seed)
        problems = check_model(f"{op}-{seed}", spec, stats, [d for d in DRIVERS if stats[d]["run"] < wanted])
        if problems:
            failures.append(f"{save_case(op, seed, spec, problems)}: {problems}")
        seed, drawn = seed + 1, drawn + 1
    print(f"\n{drawn} models drawn (seeds from {seed - drawn})")
    for d in DRIVERS:
        ops = stats["operations", d]
        print(f"{d}: {dict(stats[d])}; {len(ops)} operations (models): {dict(sorted(ops.items()))}")
    if stats["reference rejects"]:
        print("rejected by the reference:", dict(stats["reference rejects"]))
    assert not failures, "\n".join(failures)


def test_every_operation_every_driver_lowers_is_drawn():
    from nnapi.drivers.openvino.graph import table
    from nnapi.drivers.xla.analysis import LOWERINGS  # (its reader loads the rules)
    lowered = {op.name for op in LOWERINGS} & {op.name for op in table()}
    assert lowered <= set(GENERATORS), f"no generator for {sorted(lowered - set(GENERATORS))}"
