"""Fused activation functions (NONE, RELU, RELU1, RELU6) for float and quantized outputs."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..hal import FusedActivationFunc, invalid

if TYPE_CHECKING:
    from .context import OpContext

_FLOAT_RANGES = {
    FusedActivationFunc.NONE: (None, None),
    FusedActivationFunc.RELU: (0.0, None),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}
#: Each activation by its code.
_BY_CODE = {int(f): f for f in FusedActivationFunc}


def activation_range(activation: int) -> tuple[float | None, float | None]:
    """(low, high) clamp a fused activation code puts on float results; None: unbounded on that side.
    Public (re-exported as `nnapi.ops.activation_range`): lowering tables clamp with it.
    NaN becomes the low end (0; -1 for RELU1): the spec's max(0, input) as C and Android's kernel compute it."""
    return _FLOAT_RANGES[FusedActivationFunc(activation)]


def check_activation(op_name: str, value: int) -> FusedActivationFunc:
    """The activation code as an enum; INVALID_ARGUMENT naming the operation when out of range."""
    known = _BY_CODE.get(value) if type(value) is int else None
    if known is not None:
        return known  # (the enum's own lookup costs more than the rest of a tiny execution's kernel)
    try:
        return FusedActivationFunc(value)
    except ValueError:
        raise invalid(f"{op_name}: invalid fused activation {value}") from None


def apply_float(x: np.ndarray, activation: int) -> np.ndarray:
    """Clamp a float result by the fused activation (a new array unless the activation is NONE)."""
    lo, hi = _FLOAT_RANGES[activation] if type(activation) is FusedActivationFunc else \
        _FLOAT_RANGES[FusedActivationFunc(activation)]
    if lo is None and hi is None:
        return x
    # np.fmax/np.minimum: much cheaper than np.clip; fmax takes NaN to the low end (activation_range)
    y = np.fmax(x, x.dtype.type(lo))
    if hi is not None:
        np.minimum(y, x.dtype.type(hi), out=y)
    return y


def quant_range(activation: int, scale: float, zero_point: int, dtype: np.dtype) -> tuple[int, int]:
    """Integer clamp range of a quantized output (Android's CalculateActivationRange{Uint8,Int8})."""
    info = np.iinfo(dtype)
    lo, hi = _FLOAT_RANGES[FusedActivationFunc(activation)]

    def q(v: float) -> int:
        r = float(np.float32(v) / np.float32(scale))  # Android: std::round(v / scale) in float
        return zero_point + int(math.copysign(math.floor(abs(r) + 0.5), r))

    qlo = info.min if lo is None else max(info.min, q(lo))
    qhi = info.max if hi is None else min(info.max, q(hi))
    return qlo, qhi


def apply_quant(q: np.ndarray, activation: int, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Clamp integer results into the activation range and the output type; returns `dtype`."""
    lo, hi = quant_range(activation, scale, zero_point, dtype)
    return np.clip(q, lo, hi).astype(dtype)


def constant_activation(ctx: OpContext, index: int) -> FusedActivationFunc | None:
    """The fused activation code at input `index`, checked; None while it is not a constant."""
    from .context import UnknownValue  # local: keeps this module importable without the context
    try:
        value = ctx.scalar(index)
    except UnknownValue:
        return None
    return check_activation(ctx.op.name, value)


# --- Recurrent-cell activations (Android's ActivationFn / TfLiteFusedActivation) ----------------
#: Codes RNN, sequence RNNs, SVDF and LSTM accept: the fused codes plus TANH (4) and SIGMOID (6);
#: 5 (SIGN_BIT) has no kernel in Android's ActivationFunctor.
CELL_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU1", 3: "RELU6", 4: "TANH", 6: "SIGMOID"}


def check_cell_activation(op_name: str, value: int, param: str = "activation") -> int:
    """A recurrent-cell activation code, checked; INVALID_ARGUMENT naming the operation otherwise."""
    if not isinstance(value, int) or value not in CELL_ACTIVATIONS:
        raise invalid(f"{op_name}: {param} {value!r} is not a supported activation "
                      f"(expected one of {sorted(CELL_ACTIVATIONS)})")
    return value


def apply_cell_activation(x: np.ndarray, activation: int, xp=np) -> np.ndarray:
    """Apply a recurrent-cell activation (codes of CELL_ACTIVATIONS) to a float array; `xp` is the
    array namespace (numpy here, jax.numpy when the XLA driver traces the same cell)."""
    if activation == 4:
        return xp.tanh(x)
    if activation == 6:
        return (1.0 / (1.0 + xp.exp(-x))).astype(x.dtype)
    if xp is np:
        return apply_float(x, activation)
    lo, hi = _FLOAT_RANGES[FusedActivationFunc(activation)]
    if lo is None:
        return x
    y = xp.fmax(x, xp.asarray(lo, x.dtype))  # NaN to the low end, as apply_float
    return y if hi is None else xp.minimum(y, xp.asarray(hi, x.dtype))
