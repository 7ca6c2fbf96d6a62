"""IF and WHILE run referenced subgraphs on the same interpreter; WHILE honours the loop timeout."""
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


def _while_model() -> nnapi.Model:
    """i = i0; while i < n: i += 1; return i."""
    cond = _graph(Op.LESS, 2, T.TENSOR_BOOL8)
    body = _graph(Op.ADD, 2, T.TENSOR_INT32, extra_const=1)
    m = nnapi.Model()
    c = m.add_operand(T.SUBGRAPH)
    b = m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, cond)
    m.set_operand_value_from_model(b, body)
    i0 = m.add_operand(T.TENSOR_INT32, (1,))
    n = m.add_operand(T.TENSOR_INT32, (1,))
    out = m.add_operand(T.TENSOR_INT32, (1,))
    m.add_operation(Op.WHILE, [c, b, i0, n], [out])
    m.identify_inputs_and_outputs([i0, n], [out])
    m.finish()
    return m


def test_while_counts_up():
    c = nnapi.Compilation(_while_model()).finish()
    (y,) = c.execute([np.array([3], np.int32), np.array([10], np.int32)])
    assert y.tolist() == [10]
    (y,) = c.execute([np.array([12], np.int32), np.array([10], np.int32)])   # body never runs
    assert y.tolist() == [12]


def test_while_loop_timeout_is_a_transient_deadline_miss():
    c = nnapi.Compilation(_while_model()).finish()
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


def test_if_picks_the_branch():
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
    c = nnapi.Compilation(m).finish()
    assert c.execute([np.array([True]), np.array([5], np.int32)])[0].tolist() == [105]
    assert c.execute([np.array([False]), np.array([5], np.int32)])[0].tolist() == [-95]
