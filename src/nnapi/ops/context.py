"""The context an operation's validate / prepare / execute functions receive."""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..hal import NnError, OperandType, OperationType, invalid
from .tensor import Tensor


class SubgraphExecutor(Protocol):
    """What control-flow operations need from the interpreter running them."""

    #: Longest a WHILE loop may run, in nanoseconds.
    loop_timeout_ns: int

    def run_subgraph(self, index: int, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Run referenced subgraph `index` on `inputs` and return its outputs."""


class UnknownValue(Exception):
    """Raised by `OpContext.scalar` when a parameter is not known yet (compile time, non-constant)."""


class OpContext:
    """Inputs and declared outputs of one operation.

    At compile time (`compile_time=True`) only constants carry a value and dimensions may be
    0 (unknown); at execution every present input has its value and full dimensions. A context is
    not changed once built: the parameters resolved from it are remembered (`registry.resolver`).
    """

    def __init__(self, op: OperationType, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                 *, relaxed: bool = False, compile_time: bool = False,
                 executor: "SubgraphExecutor | None" = None) -> None:
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.relaxed = relaxed
        self.compile_time = compile_time
        #: At execution, runs referenced subgraphs (IF / WHILE bodies) on the same interpreter.
        self.executor = executor
        self._resolved: tuple[Any, Any] | None = None  # (params function, its result)

    def resolved(self, fn: "Callable[[OpContext], Any]") -> Any:
        """`fn(self)`, computed once per context and remembered: the operation's resolved parameters
        (`registry.resolver`), shared by prepare, execute and lowering rules."""
        memo = self._resolved
        if memo is not None and memo[0] is fn:
            return memo[1]
        result = fn(self)
        self._resolved = (fn, result)
        return result

    # --- reading inputs -------------------------------------------------------------------
    def input(self, i: int) -> np.ndarray:
        """The value of input `i` (execution time)."""
        v = self.inputs[i].value
        if v is None:
            raise UnknownValue(f"{self.op.name}: input {i} has no value")
        return v

    def scalar(self, i: int, default: Any = None) -> Any:
        """Python value of scalar input `i`; `default` when it is absent or omitted."""
        if i >= len(self.inputs) or self.inputs[i].omitted:
            if default is None:
                raise invalid(f"{self.op.name}: required input {i} is missing")
            return default
        v = self.inputs[i].value
        if v is None:
            raise UnknownValue(f"{self.op.name}: input {i} is not constant")
        size = v.size
        return v.item() if size == 1 else v.reshape(-1)[0].item() if size else None

    def has_input(self, i: int) -> bool:
        """True when input `i` exists and is not omitted."""
        return i < len(self.inputs) and not self.inputs[i].omitted

    # --- checks shared by validate functions ----------------------------------------------
    def fail(self, message: str) -> NnError:
        """An INVALID_ARGUMENT error prefixed with the operation name."""
        return invalid(f"{self.op.name}: {message}")

    def check_counts(self, n_inputs: int | Sequence[int], n_outputs: int | Sequence[int]) -> None:
        ins = (n_inputs,) if isinstance(n_inputs, int) else tuple(n_inputs)
        outs = (n_outputs,) if isinstance(n_outputs, int) else tuple(n_outputs)
        if len(self.inputs) not in ins:
            raise self.fail(f"expected {' or '.join(map(str, ins))} inputs, got {len(self.inputs)}")
        if len(self.outputs) not in outs:
            raise self.fail(f"expected {' or '.join(map(str, outs))} outputs, got {len(self.outputs)}")

    def check_types(self, inputs: Sequence[OperandType | Sequence[OperandType] | None],
                    outputs: Sequence[OperandType | Sequence[OperandType] | None] = ()) -> None:
        """Check operand types position by position; None skips a position, a sequence allows several.
        Omitted (NO_VALUE) operands are checked too: their declared type must still fit (as Android does)."""
        for kind, tensors, expected in (("input", self.inputs, inputs), ("output", self.outputs, outputs)):
            for i, want in enumerate(expected):
                if want is None or i >= len(tensors):
                    continue
                allowed = (want,) if isinstance(want, OperandType) else tuple(want)
                if tensors[i].type not in allowed:
                    names = "/".join(t.name for t in allowed)
                    raise self.fail(f"{kind} {i} has type {tensors[i].type.name}, expected {names}")

    def check_rank(self, i: int, *ranks: int, output: bool = False) -> None:
        """Check the rank of input (or output) `i` when it is known."""
        t = (self.outputs if output else self.inputs)[i]
        if t.dims and len(t.dims) not in ranks:
            kind = "output" if output else "input"
            raise self.fail(f"{kind} {i} has rank {len(t.dims)}, expected {' or '.join(map(str, ranks))}")

    def check_same_quant(self, i: int, j: int, *, j_output: bool = False) -> None:
        """Inputs i and j (or output j) must share type, scale and zero point."""
        a = self.inputs[i]
        b = self.outputs[j] if j_output else self.inputs[j]
        if a.type != b.type or (a.type.is_quantized and (a.scale != b.scale or a.zero_point != b.zero_point)):
            kind = "output" if j_output else "input"
            raise self.fail(f"input {i} and {kind} {j} differ in type or quantization "
                            f"({a.type.name} {a.scale}/{a.zero_point} vs {b.type.name} {b.scale}/{b.zero_point})")
