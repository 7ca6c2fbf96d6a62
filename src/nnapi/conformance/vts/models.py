"""The kit's own models, built with the public API, each with inputs and golden outputs computed in numpy.

- `float_model` / `quant8_model`: the two parameter models of the VTS caching fixture, small but with
  weights over 128 bytes, so both the model cache and the data cache carry content;
- `op_chain`: the 100-operation ADD / MUL chains of the TOCTOU and Replace tests (ADD gives 101, MUL 1);
- `conv_model` / `add_model`: the memory-domain models of `MemoryDomainTests.cpp` for the four types;
- `alternating_chain`: ADD / MUL chains for quality-of-service runs;
- `constant_model`: out = a + c with the constant c in a given memory (memory kinds).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...hal import OperandType as T, OperationType as Op, PaddingScheme
from ...ops import numpy_dtype
from ...runtime import Memory, Model


@dataclass
class Subject:
    """A model with its inputs, golden outputs and the absolute error allowed."""

    name: str
    model: Model
    inputs: list[np.ndarray]
    golden: list[np.ndarray]
    tolerance: float
    keep: list = field(default_factory=list)   # memories the model references

    @property
    def hal(self):
        return self.model.to_hal()

    def problem(self, outputs: list[np.ndarray]) -> str | None:
        """None when every output is within tolerance, else what is off."""
        for k, (got, want) in enumerate(zip(outputs, self.golden)):
            got = np.asarray(got, np.float64).reshape(-1)
            want = np.asarray(want, np.float64).reshape(-1)
            if got.shape != want.shape:
                return f"output {k} has {got.size} values, expected {want.size}"
            bad = np.flatnonzero(~(np.abs(got - want) <= self.tolerance))
            if bad.size:
                i = bad[:3]
                return (f"output {k}: {bad.size}/{want.size} values off, e.g. at {i.tolist()} got "
                        f"{got[i].tolist()} expected {want[i].tolist()}")
        return None


def float_model(seed: int = 0, n_in: int = 16, n_hidden: int = 32) -> Subject:
    """x[2, n_in] -> FC(W1 from shared memory, RELU) -> FC(W2) -> + c: weights go to the data cache."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(n_hidden, n_in)).astype(np.float32)
    b1 = rng.normal(size=n_hidden).astype(np.float32)
    w2 = rng.normal(size=(4, n_hidden)).astype(np.float32)
    b2 = rng.normal(size=4).astype(np.float32)
    c = np.float32(0.5)
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (2, n_in))
    mem = Memory.ashmem(w1.nbytes + 64)
    mem.mapped().view(64, w1.nbytes)[:] = w1.tobytes()
    w1_i = m.add_operand(T.TENSOR_FLOAT32, w1.shape)
    m.set_operand_value_from_memory(w1_i, mem, 64, w1.nbytes)
    b1_i = m.add_operand(T.TENSOR_FLOAT32, b1.shape)
    m.set_operand_value(b1_i, b1)
    relu = m.add_operand(T.INT32)
    m.set_operand_value(relu, 1)
    none = m.add_operand(T.INT32)
    m.set_operand_value(none, 0)
    h = m.add_operand(T.TENSOR_FLOAT32, (2, n_hidden))
    m.add_operation(Op.FULLY_CONNECTED, [x, w1_i, b1_i, relu], [h])
    w2_i = m.add_operand(T.TENSOR_FLOAT32, w2.shape)
    m.set_operand_value(w2_i, w2)
    b2_i = m.add_operand(T.TENSOR_FLOAT32, b2.shape)
    m.set_operand_value(b2_i, b2)
    y = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    m.add_operation(Op.FULLY_CONNECTED, [h, w2_i, b2_i, none], [y])
    c_i = m.add_operand(T.TENSOR_FLOAT32, (1,))
    m.set_operand_value(c_i, np.array([c], np.float32))
    out = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    m.add_operation(Op.ADD, [y, c_i, none], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    xv = rng.normal(size=(2, n_in)).astype(np.float32)
    golden = (np.maximum(xv.astype(np.float64) @ w1.T + b1, 0) @ w2.T + b2 + c).astype(np.float32)
    return Subject("float32", m, [xv], [golden], 1e-4, [mem])


def quant8_model(seed: int = 0) -> Subject:
    """x quant8[2, 16] -> FC(W quant8[16, 16] = 256 bytes, in the data cache) -> ADD constant."""
    rng = np.random.default_rng(seed)
    in_s, in_z, w_s, w_z, out_s, out_z = 0.1, 128, 0.05, 120, 0.25, 100
    wq = rng.integers(80, 160, size=(16, 16), dtype=np.uint8)
    bq = rng.integers(-200, 200, size=16, dtype=np.int32)
    cq = rng.integers(90, 110, size=(2, 16), dtype=np.uint8)
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), in_s, in_z)
    w = m.add_operand(T.TENSOR_QUANT8_ASYMM, (16, 16), w_s, w_z)
    m.set_operand_value(w, wq)
    b = m.add_operand(T.TENSOR_INT32, (16,), in_s * w_s, 0)
    m.set_operand_value(b, bq)
    none = m.add_operand(T.INT32)
    m.set_operand_value(none, 0)
    h = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, none], [h])
    c = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.set_operand_value(c, cq)
    out = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.add_operation(Op.ADD, [h, c, none], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    xq = rng.integers(100, 156, size=(2, 16), dtype=np.uint8)
    xf = (xq.astype(np.float64) - in_z) * in_s
    wf = (wq.astype(np.float64) - w_z) * w_s
    hf = xf @ wf.T + bq * (in_s * w_s)
    hq = np.clip(np.round(hf / out_s) + out_z, 0, 255)
    of = (hq - out_z) * out_s + (cq.astype(np.float64) - out_z) * out_s
    golden = np.clip(np.round(of / out_s) + out_z, 0, 255).astype(np.uint8)
    return Subject("quant8", m, [xq], [golden], 3, [])   # quant8: 3, as the VTS relaxes it for caching


#: The parameter models of the caching suite (VTS: mobilenet float32 and quant8).
CACHING_MODELS: dict[str, Callable[[], Subject]] = {"float32": float_model, "quant8": quant8_model}


def op_chain(op: Op, quant: bool, length: int = 100) -> Subject:
    """`length` ADD or MUL operations on [1] tensors, each with its own constant [1] second input and one
    shared activation scalar 0. Input 1: ADD gives length + 1, MUL gives 1 (quant8 MUL: scale 0.5, value 2)."""
    m = Model()
    if quant:
        def tensor() -> int:
            return m.add_operand(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 0)

        def const() -> int:
            i = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1,), 0.5 if op == Op.MUL else 1.0, 0)
            m.set_operand_value(i, np.array([2 if op == Op.MUL else 1], np.uint8))
            return i
        x_value = np.array([1], np.uint8)
    else:
        def tensor() -> int:
            return m.add_operand(T.TENSOR_FLOAT32, (1,))

        def const() -> int:
            i = m.add_operand(T.TENSOR_FLOAT32, (1,))
            m.set_operand_value(i, np.array([1.0], np.float32))
            return i
        x_value = np.array([1.0], np.float32)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    x = tensor()
    h = x
    for _ in range(length):
        out = tensor()
        m.add_operation(op, [h, const(), act], [out])
        h = out
    m.identify_inputs_and_outputs([x], [h])
    m.finish()
    expected = length + 1 if op == Op.ADD else 1
    return Subject(f"{op.name}x{length}", m, [x_value], [np.array([expected], x_value.dtype)], 0)


# --- memory domains ------------------------------------------------------------------------------------
#: The operand types of the VTS memory-domain tests.
DOMAIN_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
DIMS = (1, 32, 32, 8)


def quant_params(t: T, scale: float | None = None, zero_point: int | None = None) -> tuple[float, int]:
    if t.is_quantized:
        return (0.5 if scale is None else scale), (0 if zero_point is None else zero_point)
    return 0.0, 0


def conv_model(t: T, n_ops: int = 1, dims: tuple[int, ...] = DIMS, scale: float | None = None,
               zero_point: int | None = None) -> Model:
    """N CONV_2D operations (3x3 filter, SAME padding, stride 1), each with its own input and output."""
    s, zp = quant_params(t, scale, zero_point)
    m = Model()
    ins, outs = [], []
    channels = dims[-1] if dims else 8
    for _ in range(n_ops):
        x = m.add_operand(t, dims, s, zp)
        w = m.add_operand(t, (channels, 3, 3, channels), 0.5 if t.is_quantized else 0.0, 0)
        m.set_operand_value(w, np.full((channels, 3, 3, channels), 1 if t.is_quantized else 0.01, numpy_dtype(t)))
        if t.is_quantized:
            b = m.add_operand(T.TENSOR_INT32, (channels,), s * 0.5, 0)
            m.set_operand_value(b, np.zeros(channels, np.int32))
        else:
            b = m.add_operand(t, (channels,))
            m.set_operand_value(b, np.zeros(channels, numpy_dtype(t)))
        scalars = []
        for value in (int(PaddingScheme.SAME), 1, 1, 0):
            i = m.add_operand(T.INT32)
            m.set_operand_value(i, value)
            scalars.append(i)
        out = m.add_operand(t, dims, s, zp)
        m.add_operation(Op.CONV_2D, [x, w, b, *scalars], [out])
        ins.append(x)
        outs.append(out)
    m.identify_inputs_and_outputs(ins, outs)
    m.finish()
    return m


def add_model(t: T, dims: tuple[int, ...] = DIMS, scale: float | None = None, zero_point: int | None = None) -> Model:
    """out = ADD(a, b, act) with the INT32 activation as model input 2."""
    s, zp = quant_params(t, scale, zero_point)
    m = Model()
    a = m.add_operand(t, dims, s, zp)
    b = m.add_operand(t, dims, s, zp)
    act = m.add_operand(T.INT32)
    out = m.add_operand(t, dims, s, zp)
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b, act], [out])
    m.finish()
    return m


def size_of(t: T, dims: tuple[int, ...] = DIMS) -> int:
    return t.element_size * int(np.prod(dims))


def data_for(t: T, dims: tuple[int, ...] = DIMS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if t.is_quantized:
        return rng.integers(0, 5, size=dims).astype(numpy_dtype(t))
    return rng.uniform(-1, 1, size=dims).astype(numpy_dtype(t))


# --- quality of service and memory pools ----------------------------------------------------------------
def alternating_chain(n: int = 20, size: int = 16, gate_at: int | None = None, seed: int = 0,
                      spread: float = 0.5) -> Model:
    """x -> n operations alternating ADD and MUL with random constants in [1 - spread, 1 + spread] (small
    for long chains, whose products would overflow); ABS after operation `gate_at`."""
    rng = np.random.default_rng(seed)
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (size,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for k in range(n):
        c = m.add_operand(T.TENSOR_FLOAT32, (size,))
        m.set_operand_value(c, rng.uniform(1 - spread, 1 + spread, size).astype(np.float32))
        y = m.add_operand(T.TENSOR_FLOAT32, (size,))
        m.add_operation(Op.ADD if k % 2 == 0 else Op.MUL, [cur, c, act], [y])
        cur = y
        if gate_at is not None and k == gate_at:
            z = m.add_operand(T.TENSOR_FLOAT32, (size,))
            m.add_operation(Op.ABS, [cur], [z])
            cur = z
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


def alternating_chain_subject(n: int = 20, size: int = 16, seed: int = 0) -> Subject:
    """`alternating_chain` with an input and its golden output (float64 reference)."""
    rng = np.random.default_rng(seed)
    constants = [rng.uniform(0.5, 1.5, size).astype(np.float32) for _ in range(n)]
    x = np.linspace(-1, 1, size, dtype=np.float32)
    y = x.copy()
    for k, c in enumerate(constants):
        y = (y + c) if k % 2 == 0 else (y * c)
        y = y.astype(np.float32)
    return Subject(f"chain{n}", alternating_chain(n, size, seed=seed), [x], [y], 1e-4)


def constant_model(memory: Memory, offset: int = 0, n: int = 4) -> Model:
    """out = a + c where c (n floats) lives in `memory` at `offset`."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    c = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.set_operand_value_from_memory(c, memory, offset, 4 * n)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, c, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    return m


def add_relu_model(n: int = 4) -> Model:
    """out = RELU(a + b): two [n] float32 inputs, one output."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    s = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, b, act], [s])
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.RELU, [s], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def dynamic_relu_model(rank_known: bool = True) -> Model:
    """out = RELU(a) with a's and out's only dimension unknown ([0])."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (0,) if rank_known else ())
    out = m.add_operand(T.TENSOR_FLOAT32, (0,) if rank_known else ())
    m.add_operation(Op.RELU, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    return m
