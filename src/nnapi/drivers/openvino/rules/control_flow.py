"""IF and WHILE: referenced subgraphs lowered into the bodies of OpenVINO If and Loop nodes.

A WHILE becomes a Loop whose body is the NNAPI body followed by the NNAPI condition on the new
values (the condition on the initial values, inlined in the outer graph, decides the first
iteration). Its trip count is the graph's iteration budget (`graph.Scope.budget`); whether the loop
stopped on the budget rather than on its condition (the last condition, when it ran at all) goes to
the scope's ran-out flags, as do the flags of loops nested in its body, accumulated over iterations.
A WHILE that runs a GRU cell over a sequence is one GRUSequence instead (`gru`).
"""
from __future__ import annotations

import numpy as np
from ..backend import ov, ops

from ....hal import OperandType as T, OperationType as Op
from ....ops import OpContext
from ..gru import find_gru, lower_gru
from ..lowering import B8, Unsupported, Value, collecting_checks, i64, lowers, out, runtime_check, scalar


def _scalar_bool(x: ov.Output) -> ov.Output:
    """A TENSOR_BOOL8 of one element as a boolean scalar."""
    shape = tuple(x.get_partial_shape().to_shape())
    if int(np.prod(shape, dtype=np.int64)) != 1 or x.get_element_type() != ov.Type.boolean:
        raise Unsupported(f"a condition of shape {list(shape)}")
    return out(ops.reshape(x, i64([]), special_zero=False))


def _same(a: ov.Output, b: ov.Output) -> bool:
    return (a.get_element_type() == b.get_element_type()
            and tuple(a.get_partial_shape().to_shape()) == tuple(b.get_partial_shape().to_shape()))


@lowers(Op.WHILE, types=(T.SUBGRAPH,), control=True)
def while_loop(ctx: OpContext, xs, scope):
    cond_index, body_index = int(scalar(ctx, 0)), int(scalar(ctx, 1))
    args = xs[2:]
    gru = find_gru(scope.model, cond_index, body_index, ctx.inputs[2:])
    if gru is not None:  # a GRU over a sequence: one GRUSequence, no loop
        return lower_gru(gru, args, ctx.outputs)
    first = scope.lower_subgraph(cond_index, args, inline=True)
    if len(first.outputs) != 1:
        raise Unsupported("WHILE condition with more than one output")
    go = _scalar_bool(first.outputs[0])
    body = scope.lower_subgraph(body_index, args)
    n_state = len(body.outputs)  # loop-carried and state-only values; the rest are invariant
    if not len(ctx.outputs) <= n_state <= len(args):
        raise Unsupported(f"WHILE body gives {n_state} values for {len(args)} inputs")
    for p, o in zip(body.params, body.outputs):
        if not _same(p.output(0), o):
            raise Unsupported("WHILE body changes a value's type or shape")
    inner = body.scope
    with collecting_checks(body.checks):  # (the condition after each iteration runs in the body)
        following = inner.lower_subgraph(cond_index, [Value(o) for o in body.outputs]
                                         + [Value(p.output(0)) for p in body.params[n_state:]], inline=True)
    next_go = _scalar_bool(following.outputs[0])
    results = [ops.result(o) for o in body.outputs] + [ops.result(next_go)]
    params = list(body.params)
    inner_flag = inner.any_ran_out()
    acc = None
    if inner_flag is not None:  # loops nested in the body: accumulate their flags over iterations
        acc = ops.parameter([], ov.Type.boolean)
        acc_next = out(ops.logical_or(acc, inner_flag))
        params.append(acc)
        results.append(ops.result(acc_next))
    check = body.any_check()
    bad_acc = None
    if check is not None:  # the body's run-time checks, accumulated over iterations the same way
        bad_acc = ops.parameter([], ov.Type.boolean)
        params.append(bad_acc)
        results.append(ops.result(out(ops.logical_or(bad_acc, check[0]))))
    if inner.budget_param is not None:
        params.append(inner.budget_param)
    loop = ops.loop(scope.budget(), go)
    loop.set_function(ov.Model(results, params))
    loop.set_special_body_ports([-1, n_state])
    for j, (p, a) in enumerate(zip(body.params, args)):
        if j < n_state:
            loop.set_merged_input(p, a.node, body.outputs[j])
        else:
            loop.set_invariant_input(p, a.node)
    if acc is not None:
        acc_result = results[-2] if bad_acc is not None else results[-1]
        loop.set_merged_input(acc, ops.constant(np.array(False)).output(0), acc_result.input_value(0))
        scope.ran_out(loop.get_iter_value(acc_result.input_value(0), -1))
    if bad_acc is not None:
        loop.set_merged_input(bad_acc, ops.constant(np.array(False)).output(0), results[-1].input_value(0))
        runtime_check(loop.get_iter_value(results[-1].input_value(0), -1), check[1])
    if inner.budget_param is not None:
        loop.set_invariant_input(inner.budget_param, scope.budget())
    last_go = loop.get_iter_value(next_go, -1)
    scope.ran_out(out(ops.logical_and(go, last_go)))  # still going after the last iteration: out of budget
    return [loop.get_iter_value(body.outputs[k], -1) for k in range(len(ctx.outputs))]


@lowers(Op.IF, types=(B8,), control=True)
def if_then_else(ctx: OpContext, xs, scope):
    then_index, else_index = int(scalar(ctx, 1)), int(scalar(ctx, 2))
    args = xs[3:]
    branches = [scope.lower_subgraph(then_index, args), scope.lower_subgraph(else_index, args)]
    if len(branches[0].outputs) != len(ctx.outputs) or len(branches[1].outputs) != len(ctx.outputs):
        raise Unsupported("IF branches give another number of outputs")
    for a, b in zip(*(br.outputs for br in branches)):
        if not _same(a, b):
            raise Unsupported("IF branches give values of different types or shapes")
    node = ops.if_op(_scalar_bool(xs[0].node))
    checks = [br.any_check() for br in branches]
    has_checks = any(c is not None for c in checks)
    has_loops = any(br.scope.flags for br in branches)
    uses_budget = any(br.scope.budget_param is not None for br in branches)
    bodies = []
    for br, check in zip(branches, checks):
        results = [ops.result(o) for o in br.outputs]
        if has_loops:
            flag = br.scope.any_ran_out()
            results.append(ops.result(flag if flag is not None else ops.constant(np.array(False)).output(0)))
        if has_checks:  # (the branch taken says whether its checks failed)
            results.append(ops.result(check[0] if check is not None else ops.constant(np.array(False)).output(0)))
        params = list(br.params) + ([br.scope.budget_param] if br.scope.budget_param is not None else [])
        bodies.append((ov.Model(results, params), results))
    node.set_then_body(bodies[0][0])
    node.set_else_body(bodies[1][0])
    for a, p_then, p_else in zip(args, branches[0].params, branches[1].params):
        node.set_input(a.node, p_then, p_else)
    if uses_budget:
        node.set_input(scope.budget(), branches[0].scope.budget_param, branches[1].scope.budget_param)
    outs = [node.set_output(r_then, r_else) for r_then, r_else in zip(bodies[0][1], bodies[1][1])]
    if has_checks:
        runtime_check(outs.pop(), "; ".join(dict.fromkeys(c[1] for c in checks if c is not None)))
    if has_loops:
        scope.ran_out(outs.pop())
    return outs
