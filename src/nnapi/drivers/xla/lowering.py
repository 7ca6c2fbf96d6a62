"""The XLA driver's one lowering table: NNAPI operation -> jax.numpy / jax.lax expression.

Rules register themselves per operation family in `rules/` with `@lowers(...)`, as JAX's lowering
rules do; this module imports none of them back. Whoever reads `LOWERINGS` loads the rules first
(`rules.load_all()`; `analysis` does).

Each rule takes the operation's compile-time `OpContext` (built by `validation.build_operation_context`
with the shapes `validation.infer_model_shapes` propagated, so constants carry their values) and
the operation's inputs as traced jax values, and returns the outputs. Parameters come from the one
public resolver, `nnapi.ops.resolve(ctx)`: validation, shape inference and parameter resolution
live in `ops/` once; only the kernels are written here.

IF and WHILE (`rules/control_flow`) register here too; what the driver claims is decided in
`analysis`. Quantized operations stay on the reference driver.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import jax.numpy as jnp
from jax import lax

from ...hal import OperandType as T, OperationType as Op
from ...ops import OpContext, activation_range
from ..base import lowering as base_lowering

F32, F16, I32, B8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
FLOAT = (F32, F16)
#: Tensor types an operand of a lowered operation may have (anything quantized stays on reference).
TENSOR_TYPES = frozenset({F32, F16, I32, B8})
HIGHEST = lax.Precision.HIGHEST


@dataclass(frozen=True)
class Lowering(base_lowering.Lowering):
    """One table entry: `fn(ctx, inputs) -> outputs`; control-flow entries (IF, WHILE) instead
    take `fn(ctx, inputs, lowered_op, loop_budget)` and have `control`, which lowers their
    referenced subgraphs at analysis (see `control_flow`)."""

    control: Callable | None = None


#: The table (`drivers.base.lowering`): what the driver holds, and where its rules are.
LOWERINGS = base_lowering.LoweringTable("xla", rules="nnapi.drivers.xla.rules", tensor_types=TENSOR_TYPES,
                                        scalar_types=(T.FLOAT32, T.FLOAT16, T.INT32, T.BOOL), default_types=FLOAT,
                                        entry=Lowering)
#: `@lowers(*ops, types=FLOAT, control=None)`: register the decorated rule for `ops` when input 0 has
#: one of `types`.
lowers = LOWERINGS.register


# --- shared helpers ------------------------------------------------------------------------------
def f32(x):
    """Float16 is computed in float32 (as the reference kernels do); the result is cast back."""
    x = jnp.asarray(x)
    return x.astype(jnp.float32) if x.dtype == jnp.float16 else x


def activation(y, code: int):
    """Clamp `y` by a fused activation code (`ops.activation_range`; NaN becomes the low end)."""
    lo, hi = activation_range(code)
    if lo is not None:
        y = jnp.fmax(y, jnp.asarray(lo, y.dtype))
    if hi is not None:
        y = jnp.minimum(y, jnp.asarray(hi, y.dtype))
    return y


def out_dims(ctx: OpContext, k: int = 0) -> tuple[int, ...]:
    """The inferred shape of output `k`."""
    return tuple(ctx.outputs[k].dims)


def to_nhwc(x, nchw: bool):
    return jnp.transpose(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x, nchw: bool):
    return jnp.transpose(x, (0, 3, 1, 2)) if nchw else x


def time_major(x, is_time_major: bool):
    """A sequence [max_time, batch, ...] from either layout (the swap is its own inverse)."""
    return x if is_time_major else jnp.swapaxes(x, 0, 1)


# --- lowered operations ------------------------------------------------------------------------------
@dataclass
class LoweredOp:
    """One operation ready to lower: its index, operand indexes, context and entry; for IF and
    WHILE also their referenced subgraphs lowered for this operation's shapes (`analysis`)."""

    index: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ctx: OpContext
    lowering: Lowering
    graphs: tuple = ()


#: The program being traced (its `control_flow.LoopBudget`), which collects run-time checks.
_PROGRAM: contextvars.ContextVar[Any] = contextvars.ContextVar("nnapi_xla_program", default=None)


@contextlib.contextmanager
def tracing_program(env: Any) -> Iterator[None]:
    """While a program is traced: `runtime_check` records its checks in `env`."""
    token = _PROGRAM.set(env)
    try:
        yield
    finally:
        _PROGRAM.reset(token)


def runtime_check(failed: Any, message: str) -> None:
    """A condition the compiled program checks as it runs: when the traced boolean `failed` holds,
    the execution fails with INVALID_ARGUMENT and `message`, as the reference driver's kernel fails
    it (XLA itself would clamp, e.g. an index out of range)."""
    env = _PROGRAM.get()
    if env is not None:
        env.check(jnp.any(failed), message)


def run_op(lop: LoweredOp, values: dict, consts: dict, env=None) -> list:
    """Lower one operation: constants come from `consts` (executable arguments) or the context;
    `env` is the program's `control_flow.LoopBudget` (control-flow entries only)."""
    xs = []
    for k, i in enumerate(lop.inputs):
        t = lop.ctx.inputs[k]
        if t.omitted:
            xs.append(None)
        elif i in values:
            xs.append(values[i])
        elif i in consts:
            xs.append(consts[i])
        elif t.value is not None:
            xs.append(t.value)
        else:
            raise ValueError(f"operand {i} has no value")
    if lop.lowering.control is not None:
        outs = lop.lowering.fn(lop.ctx, xs, lop, env)
    else:
        outs = lop.lowering.fn(lop.ctx, xs)
    if len(outs) != len(lop.outputs):
        raise ValueError(f"{lop.ctx.op.name}: lowering gave {len(outs)} outputs for {len(lop.outputs)}")
    return [jnp.asarray(o) for o in outs]


__all__ = ["LOWERINGS", "Lowering", "LoweredOp", "lowers", "run_op", "runtime_check", "tracing_program",
           "f32", "activation", "out_dims", "to_nhwc", "from_nhwc", "time_major", "FLOAT", "F32", "F16",
           "I32", "B8", "TENSOR_TYPES", "HIGHEST"]
