"""What a compiled graph's tensors need at run time besides the model: writable aliases of read-only
memory (OpenVINO shares only writable numpy memory) and the run-time checks' output. Kept apart from
the graph builder, so a model loaded from a cache imports no lowering."""
from __future__ import annotations

import ctypes
import json

import numpy as np

from .backend import ov

#: The name of the run-time checks' output tensor: this prefix and the JSON list of their messages.
CHECK_PREFIX = "nnapi-checks:"


def writable_alias(array: np.ndarray) -> np.ndarray:
    """`array` itself when writable, else a writable view of the same memory (OpenVINO shares only
    writable numpy memory; it never writes to constants or input tensors). The caller keeps the
    original (and its mapping) alive as long as the alias is used."""
    if array.flags.writeable or array.size == 0:
        return array
    array = np.ascontiguousarray(array)
    if array.flags.writeable:
        return array
    raw = (ctypes.c_char * array.nbytes).from_address(array.ctypes.data)
    return np.frombuffer(raw, dtype=array.dtype).reshape(array.shape)


def check_outputs(compiled: ov.CompiledModel, first: int) -> tuple[int, list[str]] | None:
    """(output index, one message per flag) of the run-time checks among a compiled graph's outputs
    from `first`; None when it has none."""
    for k in range(first, len(compiled.outputs)):
        for n in compiled.output(k).get_names():
            if n.startswith(CHECK_PREFIX):
                return k, [str(m) for m in json.loads(n[len(CHECK_PREFIX):])]
    return None


__all__ = ["CHECK_PREFIX", "check_outputs", "writable_alias"]
