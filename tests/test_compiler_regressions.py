"""The bug classes of the compilers we build on, pushed through our lowerings on every driver.

jax/jaxlib 0.10.2 returned silently wrong results on CPU for a batched mat-vec followed by a reduction
from 32,769 float32 elements (jax-ml/jax#39103) and for a transcendental element-wise function from
50 elements (jax-ml/jax#39352). A compiler upgrade lands only when these pass on every driver (DESIGN:
the whole corpus, the differential fuzz and these tests)."""
from __future__ import annotations

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op

DEVICES = ["reference", "xla", "openvino"]
#: float32 results against float64 numpy: the CTS's float32 tolerance.
ATOL = RTOL = 1e-5


def _scalar(m: nnapi.Model, t: T, value) -> int:
    k = m.add_operand(t)
    m.set_operand_value(k, value)
    return k


def _axes(m: nnapi.Model, axes: list[int]) -> int:
    k = m.add_operand(T.TENSOR_INT32, (len(axes),))
    m.set_operand_value(k, np.array(axes, np.int32))
    return k


def _run(m: nnapi.Model, device: str, inputs: list[np.ndarray]) -> np.ndarray:
    c = nnapi.Compilation(m, devices=[device]).finish()
    assert [s.device.name for s in c.steps] == [device]
    return c.execute(inputs)[0]


def _matvec_then(reduce: Op, batch: int, rows: int, depth: int) -> tuple[nnapi.Model, np.ndarray]:
    """x (batch, rows, depth) @ v (batch, depth, 1), then `reduce` over the rows: the mat-vec's
    output has batch * rows elements."""
    rng = np.random.default_rng(7)
    v = rng.standard_normal((batch, depth, 1)).astype(np.float32)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (batch, rows, depth))
    w = m.add_operand(T.TENSOR_FLOAT32, v.shape)
    m.set_operand_value(w, v)
    product = m.add_operand(T.TENSOR_FLOAT32, (batch, rows, 1))
    m.add_operation(Op.BATCH_MATMUL, [x, w, _scalar(m, T.BOOL, False), _scalar(m, T.BOOL, False)], [product])
    out = m.add_operand(T.TENSOR_FLOAT32, (batch, 1))
    keep = _scalar(m, T.BOOL, False) if reduce == Op.REDUCE_SUM else _scalar(m, T.INT32, 0)
    m.add_operation(reduce, [product, _axes(m, [1]), keep], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m, v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", [Op.REDUCE_SUM, Op.MEAN], ids=lambda o: o.name)
@pytest.mark.parametrize("batch, rows", [(8, 4096), (64, 1024)])  # 32,768 and 65,536 elements
def test_a_batched_matvec_into_a_reduction(device, reduce, batch, rows):
    depth = 8
    m, v = _matvec_then(reduce, batch, rows, depth)
    x = np.random.default_rng(3).standard_normal((batch, rows, depth)).astype(np.float32)
    product = np.matmul(x.astype(np.float64), v.astype(np.float64))[..., 0]
    expected = product.sum(axis=1) if reduce == Op.REDUCE_SUM else product.mean(axis=1)
    got = _run(m, device, [x]).reshape(batch)
    # a sum of `rows` terms: float32 rounding grows with sqrt(rows) times the terms' size
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.sqrt(rows) * np.abs(product).max())


@pytest.mark.parametrize("device", DEVICES)
def test_fully_connected_matvec_into_a_mean_over_40000_rows(device):
    rng = np.random.default_rng(11)
    weights = rng.standard_normal((1, 16)).astype(np.float32)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (40000, 16))
    w = m.add_operand(T.TENSOR_FLOAT32, weights.shape)
    m.set_operand_value(w, weights)
    b = m.add_operand(T.TENSOR_FLOAT32, (1,))
    m.set_operand_value(b, np.zeros(1, np.float32))
    fc = m.add_operand(T.TENSOR_FLOAT32, (40000, 1))
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, _scalar(m, T.INT32, 0)], [fc])
    out = m.add_operand(T.TENSOR_FLOAT32, (1,))
    m.add_operation(Op.MEAN, [fc, _axes(m, [0]), _scalar(m, T.INT32, 0)], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    xs = rng.standard_normal((40000, 16)).astype(np.float32)
    expected = (xs.astype(np.float64) @ weights.T.astype(np.float64)).mean(axis=0)
    np.testing.assert_allclose(_run(m, device, [xs]), expected, rtol=1e-4, atol=1e-4)


def _rows_squared_norms(n: int, form: str) -> nnapi.Model:
    """jax-ml/jax#39103's reproducer in NNAPI operations: each row of x (n, 3) times the identity, squared
    and summed (MUL, REDUCE_SUM). `form`: FULLY_CONNECTED (x w^T), BATCH_MATMUL (x w^T, batch 1) or
    "matrix first" (BATCH_MATMUL of w and x with adj_y: w x^T, as `vmap(lambda row: matrix @ row)`
    lowers, and the form 0.10.2 computes wrong)."""
    m = nnapi.Model()
    eye = np.eye(3, dtype=np.float32)
    batched = form != "FULLY_CONNECTED"
    x = m.add_operand(T.TENSOR_FLOAT32, (1, n, 3) if batched else (n, 3))
    w = m.add_operand(T.TENSOR_FLOAT32, (1, 3, 3) if batched else (3, 3))
    m.set_operand_value(w, eye[None] if batched else eye)
    shape = (1, 3, n) if form == "matrix first" else (1, n, 3) if batched else (n, 3)
    rows = m.add_operand(T.TENSOR_FLOAT32, shape)
    if form == "matrix first":
        m.add_operation(Op.BATCH_MATMUL, [w, x, _scalar(m, T.BOOL, False), _scalar(m, T.BOOL, True)], [rows])
    elif batched:
        m.add_operation(Op.BATCH_MATMUL, [x, w, _scalar(m, T.BOOL, False), _scalar(m, T.BOOL, True)], [rows])
    else:
        b = m.add_operand(T.TENSOR_FLOAT32, (3,))
        m.set_operand_value(b, np.zeros(3, np.float32))
        m.add_operation(Op.FULLY_CONNECTED, [x, w, b, _scalar(m, T.INT32, 0)], [rows])
    squared = m.add_operand(T.TENSOR_FLOAT32, shape)
    m.add_operation(Op.MUL, [rows, rows, _scalar(m, T.INT32, 0)], [squared])
    out = m.add_operand(T.TENSOR_FLOAT32, (1, n) if batched else (n,))
    axis = 1 if form == "matrix first" else -1
    m.add_operation(Op.REDUCE_SUM, [squared, _axes(m, [axis]), _scalar(m, T.BOOL, False)], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["FULLY_CONNECTED", "BATCH_MATMUL", "matrix first"])
@pytest.mark.parametrize("n", [32_768, 32_769, 65_537])
def test_the_jax_39103_reproducer(device, form, n):
    i = np.arange(n, dtype=np.float32)
    x = np.stack((i, np.zeros_like(i), np.zeros_like(i)), axis=1)
    got = _run(_rows_squared_norms(n, form), device, [x if form == "FULLY_CONNECTED" else x[None]]).reshape(n)
    np.testing.assert_array_equal(got, i * i)  # exact: every i * i is a float32 here


#: Element-wise transcendental operations, the inputs in their domain, and numpy's float64 answer.
UNARY = {
    Op.EXP: (lambda r, n: r.uniform(-20, 20, n), np.exp),
    Op.LOG: (lambda r, n: r.uniform(1e-3, 1e3, n), np.log),
    Op.SIN: (lambda r, n: r.uniform(-100, 100, n), np.sin),
    Op.TANH: (lambda r, n: r.uniform(-10, 10, n), np.tanh),
    Op.LOGISTIC: (lambda r, n: r.uniform(-30, 30, n), lambda x: 1 / (1 + np.exp(-x))),
    Op.SQRT: (lambda r, n: r.uniform(0, 1e4, n), np.sqrt),
    Op.RSQRT: (lambda r, n: r.uniform(1e-3, 1e4, n), lambda x: 1 / np.sqrt(x)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
@pytest.mark.parametrize("n", [49, 50, 4099])
def test_transcendental_elementwise_on_many_elements(device, op, n):
    draw, exact = UNARY[op]
    x = draw(np.random.default_rng(n), n).astype(np.float32)
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(op, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    got = _run(m, device, [x])
    expected = exact(x.astype(np.float64))
    if op == Op.SIN:  # sin of |x| up to 100: float32's own rounding of x is 4e-6 there
        np.testing.assert_allclose(got, expected, atol=2e-5)
    else:
        np.testing.assert_allclose(got, expected, rtol=RTOL * 4, atol=ATOL)
