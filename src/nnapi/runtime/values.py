"""Numbers an app gives (operand values, execution inputs) as arrays of an operand's dtype, exactly:
numpy's own conversion wraps integers, truncates fractions and overflows to infinity, with at most
a warning, and the model or the execution would then hold other numbers than the app gave."""
from __future__ import annotations

from typing import Any

import numpy as np


def exact_array(value: Any, dtype: np.dtype) -> np.ndarray:
    """`value` as an array of `dtype`, refusing what the conversion would change (ValueError naming a
    value): a fraction, NaN or infinity for an integer type, a number beyond the type's range (numpy
    would wrap it, or give infinity, with at most a warning)."""
    src = np.asarray(value)
    if src.dtype == dtype:
        return src
    if src.dtype.kind in "iuf" and dtype.kind in "iu" and src.size:
        info = np.iinfo(dtype)
        if src.dtype.kind == "f":
            wide = src.astype(np.float64)
            fraction = ~np.isfinite(wide) | (wide != np.floor(np.where(np.isfinite(wide), wide, 0)))
            if np.any(fraction):
                raise ValueError(f"{src[fraction].flat[0].item()!r} is not a whole number")
        outside = (src < info.min) | (src > info.max)
        if np.any(outside):
            raise ValueError(f"{src[outside].flat[0].item()!r} is out of range [{info.min}, {info.max}]")
    try:
        with np.errstate(over="raise", invalid="raise"):
            return src.astype(dtype)  # (a Python integer too large for int64 raises OverflowError here)
    except FloatingPointError:
        raise ValueError(f"a value is beyond the range of {dtype.name} "
                         f"(largest {float(np.finfo(dtype).max):g})") from None
