"""IF and WHILE on every device: the reference driver runs referenced subgraphs on the same
interpreter, the XLA driver compiles them into the program (lax.while_loop / lax.cond, with an
iteration budget that grows until the loop ends or the loop timeout passes)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op


def _graph(op: Op, n_inputs: int, out_type: T, extra_const=None) -> nnapi.Model:
    """A one-operation subgraph over int32 [1] inputs (ADD gets the constant `extra_const` and act 0)."""
    m = nnapi.Model()
    ins = [m.add_operand(T.TENSOR_INT32, (1,)) for _ in range(n_inputs)]
    out = m.add_operand(out_type, (1,))
    if op == Op.ADD:
        one = m.add_operand(T.TENSOR_INT32, (1,))
        m.set_operand_value(one, np.array([extra_const], np.int32))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        m.add_operation(Op.ADD, [ins[0], one, act], [out])
    else:
        m.add_operation(op, ins[:2], [out])
    m.identify_inputs_and_outputs(ins, [out])
    m.finish()
    return m


def _loop(cond: nnapi.Model, body: nnapi.Model) -> nnapi.Model:
    """i = i0; while cond(i, n): i = body(i, n); return i (over int32 [1] inputs i0 and n)."""
    m = nnapi.Model()
    c, b = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, cond)
    m.set_operand_value_from_model(b, body)
    i0, n, out = (m.add_operand(T.TENSOR_INT32, (1,)) for _ in range(3))
    m.add_operation(Op.WHILE, [c, b, i0, n], [out])
    m.identify_inputs_and_outputs([i0, n], [out])
    m.finish()
    return m


def _while_model() -> nnapi.Model:
    """i = i0; while i < n: i += 1; return i."""
    return _loop(_graph(Op.LESS, 2, T.TENSOR_BOOL8), _graph(Op.ADD, 2, T.TENSOR_INT32, extra_const=1))


DEVICES = ["reference", "xla"]


def _compile(model: nnapi.Model, device: str, **options) -> nnapi.Compilation:
    c = nnapi.Compilation(model, devices=[device], **options).finish()
    assert [s.device.name for s in c.steps] == [device]   # the whole model, control flow included
    return c


@pytest.mark.parametrize("device", DEVICES)
def test_while_counts_up(device):
    c = _compile(_while_model(), device)
    (y,) = c.execute([np.array([3], np.int32), np.array([10], np.int32)])
    assert y.tolist() == [10]
    (y,) = c.execute([np.array([12], np.int32), np.array([10], np.int32)])   # body never runs
    assert y.tolist() == [12]


def test_xla_loop_budget_grows_until_the_loop_ends_and_is_kept():
    """More iterations than the first budget: the program runs again with a larger budget (same
    result as one long run), and the next execution starts from the budget that sufficed."""
    from nnapi.drivers.base.loops import FIRST_LOOP_ITERATIONS
    c = _compile(_while_model(), "xla")
    prepared = c.steps[0].prepared
    n = 10 * FIRST_LOOP_ITERATIONS + 7
    (y,) = c.execute([np.array([0], np.int32), np.array([n], np.int32)])
    assert y.tolist() == [n]
    kept = prepared._loop_budgets[0].kept
    assert kept >= n
    (y,) = c.execute([np.array([5], np.int32), np.array([n], np.int32)])
    assert y.tolist() == [n] and prepared._loop_budgets[0].kept == kept


def test_xla_loop_program_is_cached(tmp_path):
    token = bytes([5] * 32)
    first = _compile(_while_model(), "xla", cache_dir=tmp_path, token=token)
    hit = _compile(_while_model(), "xla", cache_dir=tmp_path, token=token)
    assert [o.outcome for o in first.cache_outcomes] == ["miss"]
    assert [o.outcome for o in hit.cache_outcomes] == ["hit"]
    assert hit.steps[0].prepared.signature.loops
    (y,) = hit.execute([np.array([1], np.int32), np.array([3000], np.int32)])
    assert y.tolist() == [3000]


@pytest.mark.timing
@pytest.mark.parametrize("device", DEVICES)
def test_while_loop_timeout_is_a_transient_deadline_miss(device):
    c = _compile(_while_model(), device)
    e = nnapi.Execution(c)
    e.set_loop_timeout(0.05)
    e.set_input(0, np.array([0], np.int32))
    e.set_input(1, np.array([2**31 - 1], np.int32))                        # effectively infinite
    e.set_output(0, np.zeros(1, np.int32))
    start = time.monotonic()
    with pytest.raises(nnapi.NnError) as err:
        e.compute()
    assert err.value.status == nnapi.ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("device", DEVICES)
def test_if_picks_the_branch(device):
    then_graph = _graph(Op.ADD, 1, T.TENSOR_INT32, extra_const=100)
    else_graph = _graph(Op.ADD, 1, T.TENSOR_INT32, extra_const=-100)
    m = nnapi.Model()
    cond = m.add_operand(T.TENSOR_BOOL8, (1,))
    t = m.add_operand(T.SUBGRAPH)
    f = m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(t, then_graph)
    m.set_operand_value_from_model(f, else_graph)
    x = m.add_operand(T.TENSOR_INT32, (1,))
    out = m.add_operand(T.TENSOR_INT32, (1,))
    m.add_operation(Op.IF, [cond, t, f, x], [out])
    m.identify_inputs_and_outputs([cond, x], [out])
    m.finish()
    c = _compile(m, device)
    assert c.execute([np.array([True]), np.array([5], np.int32)])[0].tolist() == [105]
    assert c.execute([np.array([False]), np.array([5], np.int32)])[0].tolist() == [-95]


def _step_loop_model() -> nnapi.Model:
    """i = i0; while i < 100: i += step; return i (with zeros, the warm-up input, it never ends)."""
    def graph(kind: str) -> nnapi.Model:
        g = nnapi.Model()
        i, step = g.add_operand(T.TENSOR_INT32, (1,)), g.add_operand(T.TENSOR_INT32, (1,))
        if kind == "cond":
            limit, out = g.add_operand(T.TENSOR_INT32, (1,)), g.add_operand(T.TENSOR_BOOL8, (1,))
            g.set_operand_value(limit, np.array([100], np.int32))
            g.add_operation(Op.LESS, [i, limit], [out])
        else:
            act, out = g.add_operand(T.INT32), g.add_operand(T.TENSOR_INT32, (1,))
            g.set_operand_value(act, 0)
            g.add_operation(Op.ADD, [i, step, act], [out])
        g.identify_inputs_and_outputs([i, step], [out])
        g.finish()
        return g

    m = nnapi.Model()
    c, b = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, graph("cond"))
    m.set_operand_value_from_model(b, graph("body"))
    i0, step, out = (m.add_operand(T.TENSOR_INT32, (1,)) for _ in range(3))
    m.add_operation(Op.WHILE, [c, b, i0, step], [out])
    m.identify_inputs_and_outputs([i0, step], [out])
    m.finish()
    return m


@pytest.mark.timing
def test_xla_optimised_stage_of_a_loop_program_is_swapped_in():
    """Multi-stage compilation of a program whose loop never ends on zeros (what the optimised
    executable is warmed up with): the warm-up stops after one iteration, the optimised stage is
    swapped in and gives the same results."""
    from nnapi.drivers.xla import XlaDevice
    from nnapi.runtime.devices import _make
    compilation = nnapi.Compilation(_step_loop_model(), devices=[_make(XlaDevice(optimize_after=2))]).finish()
    prepared = compilation.steps[0].prepared
    run = lambda i0, step: compilation.execute([np.array([i0], np.int32), np.array([step], np.int32)])[0].tolist()  # noqa: E731
    assert [run(0, 7), run(3, 10)] == [[105], [103]]
    assert prepared.wait_optimized(timeout=60), prepared.optimize_error
    assert prepared.stage == "optimized"
    assert [run(0, 7), run(3, 10), run(200, 1)] == [[105], [103], [200]]


def _gather_loop_model() -> nnapi.Model:
    """i = i0; while i < n: i = table[i] with table = [1, 2, 3, 4, 5] (a GATHER in the body whose
    index leaves the table once n > 5)."""
    cond = _graph(Op.LESS, 2, T.TENSOR_BOOL8)
    body = nnapi.Model()
    i, n = body.add_operand(T.TENSOR_INT32, (1,)), body.add_operand(T.TENSOR_INT32, (1,))
    table = body.add_operand(T.TENSOR_INT32, (5,))
    body.set_operand_value(table, np.arange(1, 6, dtype=np.int32))
    axis = body.add_operand(T.INT32)
    body.set_operand_value(axis, 0)
    nxt = body.add_operand(T.TENSOR_INT32, (1,))
    body.add_operation(Op.GATHER, [table, axis, i], [nxt])
    body.identify_inputs_and_outputs([i, n], [nxt])
    body.finish()
    return _loop(cond, body)


@pytest.mark.parametrize("device", ["reference", "openvino", "xla"])
def test_an_index_out_of_range_inside_a_loop_body_fails_the_execution(device):
    """The GATHER inside the WHILE body checks its index at every iteration (openvino carries the
    body's check out of its Loop node, xla out of its while loop, which it ends): in range the loop
    ends normally, out of range it fails (clamped, the index would cycle until the loop timeout)."""
    c = _compile(_gather_loop_model(), device)
    (y,) = c.execute([np.array([0], np.int32), np.array([4], np.int32)])
    assert y.tolist() == [4]
    with pytest.raises(nnapi.NnError, match=r"GATHER: input 2 \(indices\) holds .*out of range \[0, 5\)"):
        c.execute([np.array([0], np.int32), np.array([10], np.int32)])


def _gather_if_model() -> nnapi.Model:
    """y = [10, 11, 12, 13, 14][x] if cond else x + 100."""
    def branch(gather: bool) -> nnapi.Model:
        b = nnapi.Model()
        i, out = b.add_operand(T.TENSOR_INT32, (1,)), b.add_operand(T.TENSOR_INT32, (1,))
        const = b.add_operand(T.TENSOR_INT32, (5,) if gather else (1,))
        b.set_operand_value(const, np.arange(10, 15, dtype=np.int32) if gather else np.array([100], np.int32))
        scalar = b.add_operand(T.INT32)
        b.set_operand_value(scalar, 0)  # GATHER's axis, ADD's activation
        if gather:
            b.add_operation(Op.GATHER, [const, scalar, i], [out])
        else:
            b.add_operation(Op.ADD, [i, const, scalar], [out])
        b.identify_inputs_and_outputs([i], [out])
        b.finish()
        return b

    m = nnapi.Model()
    cond, then_, else_ = m.add_operand(T.TENSOR_BOOL8, (1,)), m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(then_, branch(True))
    m.set_operand_value_from_model(else_, branch(False))
    x, y = m.add_operand(T.TENSOR_INT32, (1,)), m.add_operand(T.TENSOR_INT32, (1,))
    m.add_operation(Op.IF, [cond, then_, else_, x], [y])
    m.identify_inputs_and_outputs([cond, x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("device", ["reference", "openvino", "xla"])
def test_an_index_out_of_range_fails_only_in_the_branch_taken(device):
    c = _compile(_gather_if_model(), device)
    run = lambda cond, x: c.execute([np.array([cond]), np.array([x], np.int32)])[0].tolist()  # noqa: E731
    assert run(True, 2) == [12]
    assert run(False, 7) == [107]  # the GATHER of the branch not taken would be out of range
    with pytest.raises(nnapi.NnError, match=r"GATHER: input 2 \(indices\) holds .*out of range \[0, 5\)"):
        run(True, 7)


def _nested_while_model() -> nnapi.Model:
    """i = i0; while i < n: (k = 0; while k < i: k += 1); i = k + 1; return i: the inner loop runs i
    times per outer iteration, so a run with budget b costs about b^2 / 2 iterations."""
    body = nnapi.Model()
    i, n = body.add_operand(T.TENSOR_INT32, (1,)), body.add_operand(T.TENSOR_INT32, (1,))
    c, b = body.add_operand(T.SUBGRAPH), body.add_operand(T.SUBGRAPH)
    body.set_operand_value_from_model(c, _graph(Op.LESS, 2, T.TENSOR_BOOL8))
    body.set_operand_value_from_model(b, _graph(Op.ADD, 2, T.TENSOR_INT32, extra_const=1))
    zero, one = body.add_operand(T.TENSOR_INT32, (1,)), body.add_operand(T.TENSOR_INT32, (1,))
    body.set_operand_value(zero, np.array([0], np.int32))
    body.set_operand_value(one, np.array([1], np.int32))
    act = body.add_operand(T.INT32)
    body.set_operand_value(act, 0)
    k, nxt = body.add_operand(T.TENSOR_INT32, (1,)), body.add_operand(T.TENSOR_INT32, (1,))
    body.add_operation(Op.WHILE, [c, b, zero, i], [k])
    body.add_operation(Op.ADD, [k, one, act], [nxt])
    body.identify_inputs_and_outputs([i, n], [nxt])
    body.finish()
    return _loop(_graph(Op.LESS, 2, T.TENSOR_BOOL8), body)


ALL_DEVICES = ["reference", "xla", "openvino"]


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_nested_loops_give_what_one_long_run_gives(device):
    """The inner loop runs up to 200 times per entry: more than the first budget of a program with
    two nested loops (32), so compiled programs run again with larger budgets. The loop timeout is the
    longest NNAPI allows (15 s): what is checked is the result (the reference interpreter takes about
    2 s of the default 2 s timeout on a loaded 2-core machine; the timeout itself is tested below)."""
    c = _compile(_nested_while_model(), device)
    for start, n, want in ((0, 200, 200), (7, 5, 7)):
        e = nnapi.Execution(c)
        e.set_loop_timeout(15.0)
        e.set_input(0, np.array([start], np.int32))
        e.set_input(1, np.array([n], np.int32))
        out = np.zeros(1, np.int32)
        e.set_output(0, out)
        e.compute()
        assert out.tolist() == [want]


def _timed_endless(model: nnapi.Model, device: str, *, loop_timeout: float | None = None,
                   timeout: float | None = None) -> float:
    """Seconds until an endless loop (n = 2^31 - 1) fails; asserts it is a transient deadline miss."""
    c = _compile(model, device)
    c.execute([np.array([0], np.int32), np.array([3], np.int32)])  # (first-run costs out of the way)
    e = nnapi.Execution(c)
    if loop_timeout is not None:
        e.set_loop_timeout(loop_timeout)
    if timeout is not None:
        e.set_timeout(timeout)
    e.set_input(0, np.array([0], np.int32))
    e.set_input(1, np.array([2**31 - 1], np.int32))
    e.set_output(0, np.zeros(1, np.int32))
    start = time.monotonic()
    with pytest.raises(nnapi.NnError) as err:
        e.compute()
    assert err.value.status == nnapi.ErrorStatus.MISSED_DEADLINE_TRANSIENT, err.value
    return time.monotonic() - start


@pytest.mark.timing
@pytest.mark.parametrize("device", ALL_DEVICES)
def test_nested_loops_end_by_their_loop_timeout_not_after_it(device):
    """A compiled run cannot be stopped, and nested loops cost the square of their budget: the next
    budget is sized on the growth seen, so the execution ends near the loop timeout (it ended after
    7 s on xla and 12 s on openvino when budgets were sized as if run time grew linearly)."""
    assert _timed_endless(_nested_while_model(), device, loop_timeout=2.0) < 2.0 * 1.5


@pytest.mark.timing
@pytest.mark.parametrize("device", ALL_DEVICES)
def test_loops_end_by_the_execution_deadline_before_their_loop_timeout(device):
    """A 1 s deadline and the default 2 s loop timeout: budgets are sized to the deadline, the sooner
    of the two (sized to the loop timeout, the last run ended after 6.5 s on xla, 11.7 s on openvino)."""
    assert _timed_endless(_nested_while_model(), device, timeout=1.0) < 1.0 * 1.5


def test_loop_depth_counts_nested_while_through_subgraphs():
    from nnapi.drivers.base.loops import IterationBudget, loop_depth
    assert [loop_depth(m.to_hal()) for m in (_while_model(), _nested_while_model())] == [1, 2]
    assert (IterationBudget(1, 2**31 - 1).first, IterationBudget(2, 2**31 - 1).first) == (1024, 32)
