"""Axis parameters: negative axes counted from the end, range checks with clear messages.

Android's `handleNegativeAxis`: an axis in [-rank, rank) is valid, a negative one counts
from the end. Errors are INVALID_ARGUMENT naming the operation and the parameter at fault.
"""
from __future__ import annotations

from .context import OpContext, UnknownValue


def normalize_axis(ctx: OpContext, axis: int, rank: int, *, param: str = "axis") -> int:
    """`axis` made non-negative for a tensor of rank `rank`; fails unless -rank <= axis < rank.

    `param` names the offending parameter in the message (e.g. "input 1 (axis)").
    """
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ctx.fail(f"{param} must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ctx.fail(f"{param} {axis} is out of range [{-rank}, {rank}) for rank {rank}")
    return axis + rank if axis < 0 else axis


def scalar_axis(ctx: OpContext, i: int, rank: int, *, default: int | None = None) -> int:
    """The INT32 scalar input `i` as a non-negative axis of a rank-`rank` tensor.

    Raises UnknownValue (from `ctx.scalar`) when the axis is not constant at compile time.
    """
    axis = ctx.scalar(i, default)
    return normalize_axis(ctx, axis, rank, param=f"input {i} (axis)")


def check_scalar_axis(ctx: OpContext, i: int, *, default: int | None = None, tensor: int = 0) -> None:
    """Validate-time check of axis input `i` against input `tensor`'s rank, when both are known."""
    rank = len(ctx.inputs[tensor].dims)
    if rank:
        try:
            scalar_axis(ctx, i, rank, default=default)
        except UnknownValue:
            pass


def normalize_axes(ctx: OpContext, axes, rank: int, *, param: str = "axes") -> list[int]:
    """Each of `axes` made non-negative (order and duplicates kept); fails on any out of range."""
    return [normalize_axis(ctx, int(a), rank, param=param) for a in axes]


def reduced_dims(dims, axes, keep_dims: bool) -> tuple[int, ...]:
    """Output shape of a reduction over non-negative `axes` (duplicates allowed), as Android's
    REDUCE_* / MEAN prepare: reduced axes dropped (kept as 1 with `keep_dims`); when every
    dimension is dropped the result is (1,), not a scalar."""
    reduce = set(axes)
    out = tuple(1 if i in reduce else d for i, d in enumerate(dims) if keep_dims or i not in reduce)
    return out or (1,)
