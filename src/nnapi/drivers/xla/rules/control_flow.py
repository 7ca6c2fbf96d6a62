"""IF and WHILE rules: the referenced subgraphs are lowered at analysis (`control`, called with the
analysis's own `lower` callback) and become `lax.cond` branches and `lax.while_loop` bodies; loops
run under the program's iteration budget (`control_flow.LoopBudget`), and the run-time checks of
a body or branch come out of it as a value."""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ....hal import OperandType as T, OperationType as Op
from ..control_flow import LoopBudget, LowerGraph, LoweredGraph, Spec
from ..lowering import B8, LoweredOp, lowers


def _specs(sub, dims, indexes) -> list[Spec]:
    out = []
    for i in indexes:
        t = T(sub.operands[i].type)
        out.append((t, () if t.is_scalar else tuple(dims[i])))
    return out


def _types_match(sub, outputs, specs: tuple[Spec, ...]) -> bool:
    return len(outputs) == len(specs) and all(T(sub.operands[i].type) == t for i, (t, _) in zip(outputs, specs))


def _one_bool(spec: Spec) -> bool:
    return spec[0] == T.TENSOR_BOOL8 and math.prod(spec[1]) == 1


# --- WHILE ----------------------------------------------------------------------------------------
def _while_graphs(model, sub, op, ctx, dims, lower: LowerGraph):
    """(cond, body) lowered for the outer inputs, and the WHILE output shapes, or None."""
    specs = _specs(sub, dims, op.inputs[2:])
    cond, body = lower(int(ctx.scalar(0)), specs), lower(int(ctx.scalar(1)), specs)
    if cond is None or body is None or len(cond.out_specs) != 1 or not _one_bool(cond.out_specs[0]):
        return None
    n = len(body.out_specs)
    # The body returns the loop-carried and state-only values with unchanged types and shapes.
    if not len(op.outputs) <= n <= len(specs) or tuple(body.out_specs) != tuple(specs[:n]):
        return None
    if not _types_match(sub, op.outputs, tuple(specs[:len(op.outputs)])):
        return None
    return (cond, body), [d for _, d in specs[:len(op.outputs)]]


@lowers(Op.WHILE, types=(T.SUBGRAPH,), control=_while_graphs)
def _while(ctx, xs, lop: LoweredOp, env: LoopBudget):
    cond, body = lop.graphs
    n_body = len(body.out_specs)
    state0 = tuple(jnp.asarray(x) for x in xs[2:])

    def keep_going(values):
        (flag,), (ran_out, failed) = cond.run(values, env)
        return jnp.reshape(flag, (-1,))[0], ran_out, failed

    def loop_cond(carry):
        iteration, going, _, failed, _ = carry
        return going & (iteration < env.budget) & ~failed  # a failed check ends the loop at once

    def loop_body(carry):
        iteration, _, ran_out, failed, values = carry
        outs, (inner, body_failed) = body.run(values, env)
        values = tuple(o.astype(v.dtype) for o, v in zip(outs, values)) + values[n_body:]
        going, in_cond, cond_failed = keep_going(values)
        return iteration + 1, going, ran_out | inner | in_cond, failed | body_failed | cond_failed, values

    going0, ran_out0, failed0 = keep_going(state0)
    _, going, ran_out, failed, final = lax.while_loop(
        loop_cond, loop_body, (jnp.asarray(0, jnp.int32), going0, ran_out0, failed0, state0))
    env.ran_out(going | ran_out)  # still going: the budget, not the condition, ended the loop
    env.claim_inner(failed)
    return list(final[:len(ctx.outputs)])


# --- IF -------------------------------------------------------------------------------------------
def _if_graphs(model, sub, op, ctx, dims, lower: LowerGraph):
    """(then, else) lowered for the outer inputs, and the IF output shapes, or None."""
    if math.prod(dims[op.inputs[0]]) != 1:
        return None
    specs = _specs(sub, dims, op.inputs[3:])
    then, other = lower(int(ctx.scalar(1)), specs), lower(int(ctx.scalar(2)), specs)
    if then is None or other is None or then.out_specs != other.out_specs:
        return None  # lax.cond needs both branches to give the same types and shapes
    if not _types_match(sub, op.outputs, then.out_specs):
        return None
    return (then, other), [d for _, d in then.out_specs]


@lowers(Op.IF, types=(B8,), control=_if_graphs)
def _if(ctx, xs, lop: LoweredOp, env: LoopBudget):
    then, other = lop.graphs
    pred = jnp.reshape(xs[0], (-1,))[0]
    args = tuple(jnp.asarray(x) for x in xs[3:])

    def branch(graph: LoweredGraph):
        def run(operands):
            outs, flags = graph.run(list(operands), env)
            return tuple(outs), flags
        return run

    outs, (ran_out, failed) = lax.cond(pred, branch(then), branch(other), args)
    env.ran_out(ran_out)
    env.claim_inner(failed)  # only the branch taken can fail
    return list(outs)
