"""Checks of one operand: type, rank, scale, zero point, per-channel parameters, lifetime, location."""
from __future__ import annotations

import enum
import math
import numbers
from typing import Any, Sequence, TypeVar

from ..hal import (DataLocation, OperandLifeTime, OperandType, Operand, SymmPerChannelQuantParams, byte_size,
                   invalid, is_int, is_scalar_type)

T = OperandType
L = OperandLifeTime
E = TypeVar("E", bound=enum.IntEnum)

_UINT32_MAX = 2**32 - 1
#: Types whose scale must be 0.
_ZERO_SCALE = frozenset({T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.FLOAT16, T.TENSOR_FLOAT32,
                         T.TENSOR_FLOAT16, T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.SUBGRAPH})
#: Types whose scale must be > 0.
_POSITIVE_SCALE = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                             T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM})
#: Allowed zero points per type (every other type needs 0).
_ZERO_POINT_RANGE = {T.TENSOR_QUANT8_ASYMM: (0, 255), T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
                     T.TENSOR_QUANT16_ASYMM: (0, 65535)}
#: Lifetimes whose location must be all zero.
_NO_LOCATION = frozenset({L.TEMPORARY_VARIABLE, L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.NO_VALUE})
_CONSTANT = frozenset({L.CONSTANT_COPY, L.CONSTANT_REFERENCE})


def as_enum(cls: type[E], value: Any) -> E | None:
    """`value` as a member of `cls`, or None when it is not an integer code of one."""
    if isinstance(value, cls):
        return value
    if not is_int(value):
        return None
    try:
        return cls(int(value))
    except ValueError:
        return None


def check_operand(label: str, operand: Any, *, operand_values_size: int, pool_sizes: Sequence[int],
                  referenced_count: int) -> OperandType:
    """Validate one operand (everything but graph-level facts); returns its type as an enum."""
    if not isinstance(operand, Operand):
        raise invalid(f"{label}: expected an Operand, got {type(operand).__name__}")
    op_type = as_enum(T, operand.type)
    if op_type is None:
        raise invalid(f"{label}: invalid operand type {operand.type!r} (valid types are 0..15)")
    if op_type in (T.OEM, T.TENSOR_OEM_BYTE):
        raise invalid(f"{label}: OEM operand type {op_type.name} is not supported")
    lifetime = as_enum(L, operand.lifetime)
    if lifetime is None:
        raise invalid(f"{label}: invalid lifetime {operand.lifetime!r}")
    if (op_type == T.SUBGRAPH) != (lifetime == L.SUBGRAPH):
        raise invalid(f"{label}: type {op_type.name} cannot have lifetime {lifetime.name} "
                      f"(SUBGRAPH type and lifetime go together)")
    dims = _check_dimensions(label, op_type, lifetime, operand.dimensions)
    _check_scale(label, op_type, operand.scale)
    _check_zero_point(label, op_type, operand.zero_point)
    _check_channel_quant(label, op_type, dims, operand.channel_quant)
    if not is_int(operand.number_of_consumers) or operand.number_of_consumers < 0:
        raise invalid(f"{label}: number_of_consumers must be a non-negative integer, "
                      f"got {operand.number_of_consumers!r}")
    _check_location(label, op_type, lifetime, dims, operand.location, operand_values_size=operand_values_size,
                    pool_sizes=pool_sizes, referenced_count=referenced_count)
    return op_type


def _check_dimensions(label: str, t: OperandType, lifetime: OperandLifeTime, dims: Any) -> tuple[int, ...]:
    if not isinstance(dims, (tuple, list)) or not all(is_int(d) for d in dims):
        raise invalid(f"{label}: dimensions must be a sequence of integers, got {dims!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 or d > _UINT32_MAX for d in dims):
        raise invalid(f"{label}: dimensions {list(dims)} must each be in [0, 2^32)")
    if is_scalar_type(t):
        if dims:
            raise invalid(f"{label}: scalar {t.name} must have rank 0, got dimensions {list(dims)}")
        return dims
    if lifetime in _CONSTANT:
        if not dims:
            raise invalid(f"{label}: constant tensor ({lifetime.name}) must have a known rank")
        if 0 in dims:
            raise invalid(f"{label}: constant tensor ({lifetime.name}) has an unknown dimension in {list(dims)}")
    if dims and 0 not in dims and byte_size(t, dims) > _UINT32_MAX:
        raise invalid(f"{label}: {t.name} of dimensions {list(dims)} is larger than 2^32 bytes")
    return dims


def _check_scale(label: str, t: OperandType, scale: Any) -> None:
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise invalid(f"{label}: scale must be a number, got {scale!r}")
    scale = float(scale)
    if t in _ZERO_SCALE and scale != 0.0:
        raise invalid(f"{label}: {t.name} scale must be 0, got {scale}")
    if t == T.TENSOR_INT32 and not (scale >= 0.0 and math.isfinite(scale)):
        raise invalid(f"{label}: TENSOR_INT32 scale must be >= 0, got {scale}")
    if t in _POSITIVE_SCALE and not (scale > 0.0 and math.isfinite(scale)):
        raise invalid(f"{label}: {t.name} scale must be > 0, got {scale}")


def _check_zero_point(label: str, t: OperandType, zero_point: Any) -> None:
    if not is_int(zero_point):
        raise invalid(f"{label}: zero_point must be an integer, got {zero_point!r}")
    lo, hi = _ZERO_POINT_RANGE.get(t, (0, 0))
    if not lo <= zero_point <= hi:
        expected = "0" if lo == hi else f"in [{lo}, {hi}]"
        raise invalid(f"{label}: {t.name} zero_point must be {expected}, got {zero_point}")


def _check_channel_quant(label: str, t: OperandType, dims: tuple[int, ...], cq: Any) -> None:
    if t != T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        if cq is not None:
            raise invalid(f"{label}: {t.name} must not have channel_quant parameters")
        return
    if not isinstance(cq, SymmPerChannelQuantParams):
        raise invalid(f"{label}: TENSOR_QUANT8_SYMM_PER_CHANNEL needs channel_quant parameters")
    if not is_int(cq.channel_dim) or not 0 <= cq.channel_dim < len(dims):
        raise invalid(f"{label}: channel_quant.channel_dim {cq.channel_dim!r} must be < rank {len(dims)}")
    scales = cq.scales
    if not isinstance(scales, (tuple, list)) or not all(
            isinstance(s, numbers.Real) and not isinstance(s, bool) for s in scales):
        raise invalid(f"{label}: channel_quant.scales must be a sequence of numbers")
    channels = dims[cq.channel_dim]
    if channels == 0:
        raise invalid(f"{label}: channel dimension {cq.channel_dim} must be known (not 0)")
    if len(scales) != channels:
        raise invalid(f"{label}: channel_quant has {len(scales)} scales but channel dimension "
                      f"{cq.channel_dim} has size {channels}")
    for k, s in enumerate(scales):
        if not (float(s) > 0.0 and math.isfinite(float(s))):
            raise invalid(f"{label}: channel_quant.scales[{k}] must be > 0, got {s}")


def _check_location(label: str, t: OperandType, lifetime: OperandLifeTime, dims: tuple[int, ...],
                    location: Any, *, operand_values_size: int, pool_sizes: Sequence[int],
                    referenced_count: int) -> None:
    if not isinstance(location, DataLocation):
        raise invalid(f"{label}: location must be a DataLocation, got {type(location).__name__}")
    pool, offset, length = location.pool_index, location.offset, location.length
    if not all(is_int(v) and v >= 0 for v in (pool, offset, length)):
        raise invalid(f"{label}: location fields must be non-negative integers, got "
                      f"(pool {pool!r}, offset {offset!r}, length {length!r})")
    where = f"(pool {pool}, offset {offset}, length {length})"
    if lifetime in _NO_LOCATION:
        if pool or offset or length:
            raise invalid(f"{label}: {lifetime.name} operand must have no location, got {where}")
        return
    if lifetime == L.SUBGRAPH:
        if pool or length:
            raise invalid(f"{label}: SUBGRAPH operand location must have pool 0 and length 0, got {where}")
        if offset >= referenced_count:
            raise invalid(f"{label}: SUBGRAPH operand refers to subgraph {offset}, but the model has "
                          f"{referenced_count} referenced subgraphs")
        return
    if lifetime == L.CONSTANT_COPY:
        if pool != 0:
            raise invalid(f"{label}: CONSTANT_COPY location must have pool_index 0, got {pool}")
        if offset + length > operand_values_size:
            raise invalid(f"{label}: CONSTANT_COPY location [{offset}, {offset + length}) is outside "
                          f"operand_values ({operand_values_size} bytes)")
    else:  # CONSTANT_REFERENCE
        if pool >= len(pool_sizes):
            raise invalid(f"{label}: CONSTANT_REFERENCE pool_index {pool} out of range "
                          f"({len(pool_sizes)} pools)")
        if offset + length > pool_sizes[pool]:
            raise invalid(f"{label}: CONSTANT_REFERENCE location [{offset}, {offset + length}) is outside "
                          f"pool {pool} ({pool_sizes[pool]} bytes)")
    expected = byte_size(t, dims)
    if expected and length != expected:
        raise invalid(f"{label}: {lifetime.name} location length {length} != {expected} bytes "
                      f"of {t.name} {list(dims)}")
