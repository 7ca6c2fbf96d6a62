"""IF and WHILE in the XLA driver: referenced subgraphs become `lax.cond` branches and
`lax.while_loop` bodies of the same program (the rules themselves: `rules/control_flow`).

A WHILE loop in compiled code cannot be interrupted, yet NNAPI bounds every loop by the
execution's loop timeout (2 s by default) and a model whose condition never turns false must
fail, not hang. So a program with loops takes one more argument, an iteration budget, and
returns one more result, whether any loop stopped because the budget ran out. Each loop runs at
most `budget` iterations (per entry into it); the prepared model runs the program again with a
larger budget when one ran out, until the loops finish or the loop timeout has passed
(`drivers.base.loops` sizes each budget to end before the loop timeout and the deadline). Runs are
pure functions of their arguments, so a repeated run gives exactly what one long run would have.
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
    """The iteration budget of one program run, the flags of loops that ran out of it, and the
    program's run-time checks (`lowering.runtime_check`).

    Flags and checks are collected per tracing scope (a subgraph run inside a loop body or a
    branch) and returned from that scope as values, so no traced value leaks out of the scope it
    was made in; the operation that owns the scope checks what came out of it (`claim_inner`)
    under the messages of the checks inside. A failed check ends a loop at once.
    """

    def __init__(self, budget) -> None:
        self.budget = budget
        self._scopes: list[list] = [[]]
        self._checks: list[list[tuple[object, str]]] = [[]]
        self._inner: list[list[str]] = [[]]  # messages of the scopes just left, for their owner

    def ran_out(self, flag) -> None:
        self._scopes[-1].append(flag)

    def check(self, failed, message: str) -> None:
        self._checks[-1].append((failed, message))

    def enter(self) -> None:
        self._scopes.append([])
        self._checks.append([])
        self._inner.append([])

    def leave(self) -> tuple[object, object]:
        """(a loop ran out, a check failed) of the scope being left."""
        checks = self._checks.pop()
        self._inner.pop()
        self._inner[-1].extend(m for _, m in checks)
        return _any(self._scopes.pop()), _any([f for f, _ in checks])

    def claim_inner(self, failed) -> None:
        """Check `failed`, what the scopes the current operation ran gave, under their messages."""
        messages = list(dict.fromkeys(self._inner[-1]))  # (a scope traced twice names its checks once)
        self._inner[-1].clear()
        if messages:
            self.check(failed, " or ".join(messages))

    def finish(self):
        """The ran-out flag of the whole program (its outermost scope)."""
        return _any(self._scopes[0])

    def finish_checks(self) -> tuple[list, list[str]]:
        """The program's checks: their failed flags and messages."""
        return [f for f, _ in self._checks[0]], [m for _, m in self._checks[0]]


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

    def run(self, args, env: LoopBudget) -> tuple[list, tuple[object, object]]:
        """(the outputs, (whether a loop inside ran out of budget, whether a check inside failed))
        for the given input values."""
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
