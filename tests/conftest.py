"""Shared fixtures: small models built with the public API."""
from __future__ import annotations

import os

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared")
CTS = os.path.join(SHARED, "cts")


def add_relu_model(n: int = 4, large_constant: bool = False) -> nnapi.Model:
    """out = RELU(a + b) (+ c when `large_constant`: a constant of n floats, > 128 bytes when n > 32)."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (n,))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    s = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.ADD, [a, b, act], [s])
    if large_constant:
        c = m.add_operand(T.TENSOR_FLOAT32, (n,))
        m.set_operand_value(c, np.arange(n, dtype=np.float32))
        s2 = m.add_operand(T.TENSOR_FLOAT32, (n,))
        m.add_operation(Op.ADD, [s, c, act], [s2])
        s = s2
    out = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.add_operation(Op.RELU, [s], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


@pytest.fixture(autouse=True, scope="session")
def _private_state_dir(tmp_path_factory):
    """Drivers keep their integrity registry and caching engine in a per-session state directory."""
    path = tmp_path_factory.mktemp("nnapi-state")
    old = os.environ.get("NNAPI_STATE_DIR")
    os.environ["NNAPI_STATE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("NNAPI_STATE_DIR", None)
    else:
        os.environ["NNAPI_STATE_DIR"] = old


@pytest.fixture
def add_relu() -> nnapi.Model:
    return add_relu_model()


@pytest.fixture
def android_partitioning(monkeypatch):
    """Partition as Android's runtime does, without weighing partition boundaries (tests of what crosses
    a boundary build tiny models that a cost-aware plan would keep whole on one device)."""
    from nnapi.runtime import partitioner
    monkeypatch.setattr(partitioner, "STEP_NS", 0.0)
    monkeypatch.setattr(partitioner, "BYTE_NS", 0.0)


def fuzz_examples(default: int) -> int:
    """Hypothesis examples for a fuzz test: `default`, or NNAPI_FUZZ_EXAMPLES when set (`make fuzz`)."""
    value = os.environ.get("NNAPI_FUZZ_EXAMPLES", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default
