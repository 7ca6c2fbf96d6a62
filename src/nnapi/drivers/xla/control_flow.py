"""IF and WHILE in the XLA lowering table: referenced subgraphs become `lax.cond` branches and
`lax.while_loop` bodies of the same program.

A WHILE loop in compiled code cannot be interrupted, yet NNAPI bounds every loop by the
execution's loop timeout (2 s by default) and a model whose condition never turns false must
fail, not hang. So a program with loops takes one more argument, an iteration budget, and
returns one more result, whether any loop stopped because the budget ran out. Each loop runs at
most `budget` iterations (per entry into it); the prepared model runs the program again with a
larger budget when one ran out, until the loops finish or the loop timeout has passed
(`XlaPreparedModel._run_with_budget`). Runs are pure functions of their arguments, so a repeated run
gives exactly what one long run would have.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jax.numpy as jnp
from jax import lax

from ...hal import OperandType as T, OperationType as Op
from .lowering import B8, LoweredOp, lowers, run_op

#: (NNAPI type, shape) of a value passed into or out of a referenced subgraph.
Spec = tuple[T, tuple[int, ...]]


class LoopBudget:
    """The iteration budget of one program run, and the flags of loops that ran out of it.

    Flags are collected per tracing scope (a subgraph run inside a loop body or a branch) and
    returned from that scope as a value, so no traced value leaks out of the scope it was made in.
    """

    def __init__(self, budget) -> None:
        self.budget = budget
        self._scopes: list[list] = [[]]

    def ran_out(self, flag) -> None:
        self._scopes[-1].append(flag)

    def enter(self) -> None:
        self._scopes.append([])

    def leave(self):
        return _any(self._scopes.pop())

    def finish(self):
        """The flag of the whole program (its outermost scope)."""
        return _any(self._scopes[0])


def _any(flags: list):
    return functools.reduce(jnp.logical_or, flags, jnp.asarray(False))


@dataclass
class LoweredGraph:
    """A referenced subgraph lowered for fixed input shapes (built by `analysis.lower_graph`)."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[Spec, ...]
    ops: list[LoweredOp]
    dtypes: dict[int, np.dtype]
    constants: dict[int, np.ndarray]

    def run(self, args, env: LoopBudget) -> tuple[list, object]:
        """(the outputs, whether a loop inside ran out of budget) for the given input values."""
        env.enter()
        values = {i: jnp.asarray(a).astype(self.dtypes[i]) for i, a in zip(self.inputs, args)}
        for lop in self.ops:
            for i, out in zip(lop.outputs, run_op(lop, values, {}, env)):
                values[i] = out.astype(self.dtypes[i])
        outs = [values[i] if i in values else jnp.asarray(self.constants[i]) for i in self.outputs]
        return [jnp.reshape(o, d) for o, (_, d) in zip(outs, self.out_specs)], env.leave()


def has_loops(ops: list[LoweredOp | None]) -> bool:
    """True when a WHILE occurs among `ops` or inside their subgraphs (the program needs a budget)."""
    return any(lop is not None and (lop.ctx.op == Op.WHILE or any(has_loops(g.ops) for g in lop.graphs))
               for lop in ops)


LowerGraph = Callable[[int, list[Spec]], "LoweredGraph | None"]


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
        (flag,), ran_out = cond.run(values, env)
        return jnp.reshape(flag, (-1,))[0], ran_out

    def loop_cond(carry):
        iteration, going, _, _ = carry
        return going & (iteration < env.budget)

    def loop_body(carry):
        iteration, _, ran_out, values = carry
        outs, inner = body.run(values, env)
        values = tuple(o.astype(v.dtype) for o, v in zip(outs, values)) + values[n_body:]
        going, in_cond = keep_going(values)
        return iteration + 1, going, ran_out | inner | in_cond, values

    going0, ran_out0 = keep_going(state0)
    _, going, ran_out, final = lax.while_loop(loop_cond, loop_body,
                                              (jnp.asarray(0, jnp.int32), going0, ran_out0, state0))
    env.ran_out(going | ran_out)  # still going: the budget, not the condition, ended the loop
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
            outs, ran_out = graph.run(list(operands), env)
            return tuple(outs), ran_out
        return run

    outs, ran_out = lax.cond(pred, branch(then), branch(other), args)
    env.ran_out(ran_out)
    return list(outs)


__all__ = ["LoopBudget", "LoweredGraph", "has_loops"]
