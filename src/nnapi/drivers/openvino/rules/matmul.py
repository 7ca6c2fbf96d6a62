"""BATCH_MATMUL as MatMul (adjoint flags as transposes); quantized operands multiply as real values."""
from __future__ import annotations

from ..backend import ops

from ....hal import OperationType as Op
from ....ops import OpContext, resolve
from ..lowering import FLOAT_Q8, I32, Unsupported, lowers, out


@lowers(Op.BATCH_MATMUL, types=FLOAT_Q8 + (I32,))
def batch_matmul(ctx: OpContext, xs):
    if ctx.inputs[0].type == I32:
        raise Unsupported("BATCH_MATMUL of int32 (wrapping arithmetic)")
    g = resolve(ctx)
    return [out(ops.matmul(xs[0].node, xs[1].node, g.adj_x, g.adj_y))]
