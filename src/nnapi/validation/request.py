"""Request validation against a model (Android's validateRequest; VTS-BEHAVIOURS 2.2 and 5.2)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..hal import DataLocation, MemoryPool, Model, NnError, Operand, OperandType, Request, RequestArgument, invalid
from ..hal import byte_size, is_int, is_scalar_type
from ..memory.pool_checks import check_pool


def validate_request(request: Request, model: Model, *, allow_unspecified_output: bool = True) -> None:
    """Raise NnError(INVALID_ARGUMENT) naming the request argument or pool at fault.

    `model` must already be valid. `allow_unspecified_output=False` is for fenced executions,
    whose outputs must be fully specified.
    """
    try:
        _validate(request, model, allow_unspecified_output)
    except NnError:
        raise
    except Exception as e:  # malformed plain data must never crash a driver
        raise invalid(f"malformed request: {type(e).__name__}: {e}") from None


class RequestChecker:
    """`validate_request` for one model, with what the common case needs worked out once: requests
    whose arguments are all plain (each a fully specified tensor of exactly its operand's length,
    without dimensions or with exactly its own, in a pool of the right size; outputs in writable
    ones) pass in one short check; any other goes through `validate_request`, which names the fault."""

    def __init__(self, model: Model) -> None:
        self.model = model
        main = model.main
        self._inputs = [_plain_fact(main.operands[i]) for i in main.input_indexes]
        self._outputs = [_plain_fact(main.operands[i]) for i in main.output_indexes]

    def __call__(self, request: Request, *, allow_unspecified_output: bool = True) -> None:
        try:
            plain = self._plain(request)
        except Exception:  # malformed plain data: validate_request names the fault
            plain = False
        if not plain:
            validate_request(request, self.model, allow_unspecified_output=allow_unspecified_output)

    def _plain(self, request: Request) -> bool:
        if type(request) is not Request:
            return False
        inputs, outputs, pools = request.inputs, request.outputs, request.pools
        if type(inputs) not in _SEQUENCES or type(outputs) not in _SEQUENCES or type(pools) not in _SEQUENCES or (
                len(inputs) != len(self._inputs) or len(outputs) != len(self._outputs)):
            return False
        sizes = [_pool_size(pool, i) for i, pool in enumerate(pools)]
        return all(_plain(arg, fact, sizes, pools, False) for arg, fact in zip(inputs, self._inputs)) and all(
            _plain(arg, fact, sizes, pools, True) for arg, fact in zip(outputs, self._outputs))


_SEQUENCES = (list, tuple)


def _plain_fact(operand: Operand) -> tuple[tuple[int, ...], int] | None:
    """(dimensions, byte length) of a fully specified, non-empty tensor operand; None otherwise."""
    dims = tuple(operand.dimensions)
    if operand.type.is_scalar or not dims or 0 in dims:
        return None
    return dims, operand.type.element_size * _prod(dims)


def _validate(request: Request, model: Model, allow_unspecified_output: bool) -> None:
    if not isinstance(request, Request):
        raise invalid(f"expected a Request, got {type(request).__name__}")
    for field in ("inputs", "outputs", "pools"):
        if not isinstance(getattr(request, field), (list, tuple)):
            raise invalid(f"request {field} must be a list")
    sizes = [_pool_size(pool, i) for i, pool in enumerate(request.pools)]
    main = model.main
    for kind, args, indexes in (("input", request.inputs, main.input_indexes),
                                ("output", request.outputs, main.output_indexes)):
        if len(args) != len(indexes):
            raise invalid(f"request has {len(args)} {kind}s but the model has {len(indexes)}")
        output = kind == "output"
        for k, (arg, index) in enumerate(zip(args, indexes)):
            operand = main.operands[index]
            if _plain(arg, _plain_fact(operand), sizes, request.pools, output):
                continue
            _check_argument(f"request {kind} {k}", arg, operand, index, request.pools, sizes,
                            output=output, allow_unspecified=allow_unspecified_output)


def _pool_size(pool: Any, i: int) -> int:
    """`check_pool`, with an in-process buffer (a numpy array: the runtime's usual pool; a memoryview:
    a service's mapping) checked fast."""
    if type(pool) is MemoryPool and type(pool.pointer) in (np.ndarray, memoryview) and pool.handle is None \
            and pool.token is None:
        return pool.pointer.nbytes
    return check_pool(pool, f"request pool {i}", request=True)


def _plain(arg: Any, fact: tuple[tuple[int, ...], int] | None, sizes: Sequence[int], pools: Sequence[MemoryPool],
           output: bool) -> bool:
    """The common case, checked fast: a tensor argument of a fully specified operand (`fact`: its
    `_plain_fact`), given without dimensions or with exactly its dimensions, in the bounds of a pool
    with exactly the operand's length (an output: in a writable pool). False sends the argument
    through the full checks (which name any fault)."""
    if fact is None or type(arg) is not RequestArgument or arg.has_no_value:
        return False
    dims, loc = arg.dimensions, arg.location
    if (dims and dims != fact[0]) or type(loc) is not DataLocation:
        return False
    pool, offset, length = loc.pool_index, loc.offset, loc.length
    if not (type(pool) is int and type(offset) is int and type(length) is int and length == fact[1]
            and 0 <= pool < len(sizes) and offset >= 0 and offset + length <= sizes[pool]):
        return False
    if output:
        pointer = pools[pool].pointer
        if pointer is not None and not (pointer.flags.writeable if type(pointer) is np.ndarray else
                                        type(pointer) is memoryview and not pointer.readonly):
            return False  # (other buffers: in full)
    return True


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _check_argument(label: str, arg: Any, operand: Operand, index: int, pools: Sequence[MemoryPool],
                    sizes: Sequence[int], *, output: bool, allow_unspecified: bool) -> None:
    if not isinstance(arg, RequestArgument):
        raise invalid(f"{label}: expected a RequestArgument, got {type(arg).__name__}")
    loc, dims = arg.location, arg.dimensions
    if not isinstance(loc, DataLocation):
        raise invalid(f"{label}: location must be a DataLocation")
    pool, offset, length = loc.pool_index, loc.offset, loc.length
    if not all(is_int(v) and v >= 0 for v in (pool, offset, length)):
        raise invalid(f"{label}: location fields must be non-negative integers, got "
                      f"(pool {pool!r}, offset {offset!r}, length {length!r})")
    if not isinstance(dims, (tuple, list)) or not all(is_int(d) and 0 <= d < 2**32 for d in dims):
        raise invalid(f"{label}: dimensions must be 32-bit unsigned integers, got {dims!r}")
    dims = tuple(int(d) for d in dims)
    if arg.has_no_value:
        if pool or offset or length:
            raise invalid(f"{label}: has_no_value but the location is not empty "
                          f"(pool {pool}, offset {offset}, length {length})")
        if dims:
            raise invalid(f"{label}: has_no_value but dimensions {list(dims)} are given")
        return
    if pool >= len(sizes):
        raise invalid(f"{label}: pool_index {pool} out of range ({len(sizes)} pools)")
    if offset + length > sizes[pool]:  # Python ints: no 64-bit wrap-around
        raise invalid(f"{label}: region [{offset}, {offset + length}) is outside pool {pool} ({sizes[pool]} bytes)")
    if output and pools[pool].pointer is not None and memoryview(pools[pool].pointer).readonly:
        raise invalid(f"{label}: pool {pool} is a read-only buffer and cannot receive an output")
    op_type = OperandType(operand.type)
    combined = _check_dimensions(label, op_type, tuple(operand.dimensions), dims, index,
                                 output=output, allow_unspecified=allow_unspecified)
    expected = byte_size(op_type, combined) if is_scalar_type(op_type) or 0 not in combined else 0
    if expected and sizes[pool] and length != expected:
        raise invalid(f"{label}: length {length} != {expected} bytes of {op_type.name} {list(combined)}")


def _check_dimensions(label: str, op_type: OperandType, model_dims: tuple[int, ...], dims: tuple[int, ...],
                      index: int, *, output: bool, allow_unspecified: bool) -> tuple[int, ...]:
    """Request dimensions against the operand's; returns the combined dimensions."""
    may_be_unknown = output and allow_unspecified
    why = ("this execution needs fully specified outputs" if output
           else "inputs must be fully specified")
    if is_scalar_type(op_type):
        if dims:
            raise invalid(f"{label}: operand {index} is a scalar {op_type.name} but the request gives "
                          f"dimensions {list(dims)}")
        return ()
    if not dims:
        if not model_dims and not may_be_unknown:
            raise invalid(f"{label}: operand {index} has unknown rank and the request gives no dimensions "
                          f"({why})")
        for i, d in enumerate(model_dims):
            if d == 0 and not may_be_unknown:
                raise invalid(f"{label}: operand {index} dimension {i} is unknown and the request gives no "
                              f"dimensions ({why})")
        return model_dims
    if model_dims and len(dims) != len(model_dims):
        raise invalid(f"{label}: dimensions {list(dims)} have rank {len(dims)} but operand {index} has rank "
                      f"{len(model_dims)}")
    for i, d in enumerate(dims):
        if model_dims and model_dims[i] and d != model_dims[i]:
            raise invalid(f"{label}: dimension {i} is {d} but operand {index} has {model_dims[i]}")
        if d == 0 and not may_be_unknown:
            raise invalid(f"{label}: dimension {i} is 0 ({why})")
    return dims
