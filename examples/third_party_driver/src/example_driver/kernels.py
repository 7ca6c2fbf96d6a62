"""What this example "accelerator" can run: float32 element-wise operations, computed with numpy.

Replace this module with your device's compiler and kernels; `device.py` only asks `supports` which
operations it can run and `run` to compute one.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from nnapi.hal import FusedActivationFunc, Operation, OperationType as Op

#: Binary operations: inputs (a, b, fused activation).
BINARY: dict[Op, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
}
#: Unary operations: input (a).
UNARY: dict[Op, Callable[[np.ndarray], np.ndarray]] = {
    Op.RELU: lambda a: np.maximum(a, np.float32(0)),
    Op.RELU1: lambda a: np.clip(a, np.float32(-1), np.float32(1)),
    Op.RELU6: lambda a: np.clip(a, np.float32(0), np.float32(6)),
    Op.LOGISTIC: lambda a: (np.float32(1) / (np.float32(1) + np.exp(-a))).astype(np.float32),
    Op.TANH: np.tanh,
    Op.ABS: np.abs,
    Op.EXP: np.exp,
    Op.SQRT: np.sqrt,
}
_ACTIVATIONS = {
    FusedActivationFunc.NONE: lambda x: x,
    FusedActivationFunc.RELU: UNARY[Op.RELU],
    FusedActivationFunc.RELU1: UNARY[Op.RELU1],
    FusedActivationFunc.RELU6: UNARY[Op.RELU6],
}


def supports(op: Operation) -> bool:
    return op.type in BINARY or op.type in UNARY


def run(op: Operation, inputs: list[np.ndarray]) -> np.ndarray:
    """One operation on float32 arrays (already validated: shapes broadcast, the activation is valid)."""
    with np.errstate(all="ignore"):   # inf / nan follow IEEE, as on any float unit
        if op.type in BINARY:
            a, b, activation = inputs
            out = BINARY[op.type](a, b).astype(np.float32)
            return _ACTIVATIONS[FusedActivationFunc(int(activation))](out)
        return UNARY[op.type](inputs[0]).astype(np.float32)
