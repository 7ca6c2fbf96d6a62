"""ABS, EXP, FLOOR, LOG, NEG, RSQRT, SIN, SQRT: unary element-wise maths.

As in Android's Elementwise.cpp / Neg.cpp each element is converted to float (float16 and
float32 tensors), the function applied in single precision, and the result cast back to the
tensor type. ABS and NEG also take TENSOR_INT32 (two's-complement: |INT32_MIN| and -INT32_MIN
stay INT32_MIN). FLOOR accepts at most rank 4; the others any rank.
"""
from __future__ import annotations

import numpy as np

from ..hal import OperandType as T, OperationType as Op
from .context import OpContext
from .registry import register

_FLOAT = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_TYPES = {
    Op.ABS: _FLOAT + (T.TENSOR_INT32,),
    Op.NEG: _FLOAT + (T.TENSOR_INT32,),
    Op.EXP: _FLOAT, Op.FLOOR: _FLOAT, Op.LOG: _FLOAT, Op.RSQRT: _FLOAT, Op.SIN: _FLOAT, Op.SQRT: _FLOAT,
}


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / np.sqrt(x)


_FUNCS = {Op.ABS: np.abs, Op.NEG: np.negative, Op.EXP: np.exp, Op.FLOOR: np.floor, Op.LOG: np.log,
          Op.RSQRT: _rsqrt, Op.SIN: np.sin, Op.SQRT: np.sqrt}


def _validate(ctx: OpContext) -> None:
    ctx.check_counts(1, 1)
    t = ctx.inputs[0].type
    if t not in _TYPES[ctx.op]:
        names = "/".join(x.name for x in _TYPES[ctx.op])
        raise ctx.fail(f"input 0 has unsupported type {t.name}, expected {names}")
    ctx.check_types([t], [t])
    if ctx.op == Op.FLOOR:
        ctx.check_rank(0, 0, 1, 2, 3, 4)


def _prepare(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.inputs[0].dims
    if ctx.op == Op.FLOOR and len(dims) > 4:
        raise ctx.fail(f"input 0 has rank {len(dims)}, expected at most 4")
    return [tuple(dims)]


def _execute(ctx: OpContext) -> list[np.ndarray]:
    x, out = ctx.inputs[0], ctx.outputs[0]
    v = ctx.input(0)
    if x.type == T.TENSOR_INT32:
        # int64 intermediate, then keep the low 32 bits (wraps like the C++ reference).
        r = _FUNCS[ctx.op](v.astype(np.int64)).astype(np.int32)
    else:
        with np.errstate(all="ignore"):  # log(-1), rsqrt(0) give nan/inf as in C++
            r = _FUNCS[ctx.op](v.astype(np.float32)).astype(np.float32)
    return [np.asarray(r).reshape(x.dims).astype(out.dtype)]


register(Op.ABS, Op.EXP, Op.FLOOR, Op.LOG, Op.NEG, Op.RSQRT, Op.SIN, Op.SQRT,
         validate=_validate, prepare=_prepare, execute=_execute)
