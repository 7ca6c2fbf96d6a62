"""IF and WHILE in the XLA driver: referenced subgraphs become `lax.cond` branches and
`lax.while_loop` bodies of the same program (the rules themselves: `rules/control_flow`).

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
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jax.numpy as jnp

from ...hal import OperandType as T, OperationType as Op
from .lowering import LoweredOp, run_op

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


__all__ = ["LoopBudget", "LoweredGraph", "LowerGraph", "Spec", "has_loops"]
