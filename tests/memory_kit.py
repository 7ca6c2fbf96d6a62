"""Shared pieces of the memory tests (VTS-BEHAVIOURS sections 2 and 3).

- The VTS memory-domain models: the "conv model" (N independent CONV_2D 3x3 SAME stride 1, each
  with its own input and output of shape [1, 32, 32, 8]) and the "add model" (ADD of two
  operands with the INT32 activation as a model input), for the four operand types.
- `execute(prepared, request, executor)`: one HAL execution through SYNC, ASYNC or FENCED,
  returning (status, output shapes, timing) the way the VTS reads them.
- Request builders with shared-memory pools (offset 0, exact length) and token pools.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (DataLocation, ErrorStatus, ExecutionPreference, MeasureTiming, MemoryPool, NnError,
                       OutputShape, Priority, Request, RequestArgument, Timing)
from nnapi.memory import allocate_ashmem, map_handle
from nnapi.ops import numpy_dtype

#: The operand types of the VTS memory-domain tests.
TYPES = [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED]
DIMS = (1, 32, 32, 8)
NO_TIMING = 2**64 - 1
EXECUTORS = ["sync", "async", "fenced"]

_DEVICE: ReferenceDevice | None = None


def device() -> ReferenceDevice:
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = ReferenceDevice()
    return _DEVICE


def quant(t: T, scale: float | None = None, zero_point: int | None = None) -> tuple[float, int]:
    if t.is_quantized:
        return (0.5 if scale is None else scale), (0 if zero_point is None else zero_point)
    return 0.0, 0


def _filter_type(t: T) -> T:
    return t  # float32/float16 filters match the input; quant8 (signed) filters too


def conv_model(t: T, n_ops: int = 1, dims: tuple[int, ...] = DIMS, scale: float | None = None,
               zero_point: int | None = None) -> nnapi.Model:
    """N CONV_2D operations (3x3 filter, SAME padding, stride 1), each with its own input and output."""
    s, zp = quant(t, scale, zero_point)
    m = nnapi.Model()
    ins, outs = [], []
    channels = dims[-1] if dims else 8
    for _ in range(n_ops):
        x = m.add_operand(t, dims, s, zp)
        w = m.add_operand(_filter_type(t), (channels, 3, 3, channels), 0.5 if t.is_quantized else 0.0, 0)
        m.set_operand_value(w, np.full((channels, 3, 3, channels), 1 if t.is_quantized else 0.01,
                                       numpy_dtype(t)))
        if t.is_quantized:
            b = m.add_operand(T.TENSOR_INT32, (channels,), s * 0.5, 0)
            m.set_operand_value(b, np.zeros(channels, np.int32))
        else:
            b = m.add_operand(t, (channels,))
            m.set_operand_value(b, np.zeros(channels, numpy_dtype(t)))
        scalars = []
        for value in (int(nnapi.PaddingScheme.SAME), 1, 1, 0):
            i = m.add_operand(T.INT32)
            m.set_operand_value(i, value)
            scalars.append(i)
        out = m.add_operand(t, dims, s, zp)
        m.add_operation(Op.CONV_2D, [x, w, b, *scalars], [out])
        ins.append(x)
        outs.append(out)
    m.identify_inputs_and_outputs(ins, outs)
    m.finish()
    return m


def add_model(t: T, dims: tuple[int, ...] = DIMS, scale: float | None = None,
              zero_point: int | None = None) -> nnapi.Model:
    """out = ADD(a, b, act) with the INT32 activation as model input 2."""
    s, zp = quant(t, scale, zero_point)
    m = nnapi.Model()
    a = m.add_operand(t, dims, s, zp)
    b = m.add_operand(t, dims, s, zp)
    act = m.add_operand(T.INT32)
    out = m.add_operand(t, dims, s, zp)
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b, act], [out])
    m.finish()
    return m


def prepare(model: nnapi.Model):
    return device().prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                  None, None, None)


def size_of(t: T, dims: tuple[int, ...] = DIMS) -> int:
    return t.element_size * int(np.prod(dims))


# --- requests -------------------------------------------------------------------------------------------
@dataclass
class Shared:
    """A request argument in its own shared-memory pool (offset 0, exact length)."""

    nbytes: int
    data: bytes | None = None
    dims: tuple[int, ...] = ()


@dataclass
class Token:
    """A request argument in a token pool (poolIndex only)."""

    token: int
    dims: tuple[int, ...] = ()


def make_request(inputs: list, outputs: list) -> tuple[Request, dict]:
    """A request from `Shared` / `Token` arguments; returns it and {("out", k): MappedPool}."""
    pools: list[MemoryPool] = []
    maps: dict = {}
    token_pools: dict[int, int] = {}

    def arg(spec, key) -> RequestArgument:
        if isinstance(spec, Token):
            if spec.token not in token_pools:
                token_pools[spec.token] = len(pools)
                pools.append(MemoryPool(token=spec.token))
            return RequestArgument(False, DataLocation(token_pools[spec.token], 0, 0), tuple(spec.dims))
        handle = allocate_ashmem(max(spec.nbytes, 1))
        mapped = map_handle(handle)
        if spec.data is not None:
            mapped.write_bytes(0, spec.data)
        maps[key] = mapped
        pools.append(MemoryPool(handle=handle))
        return RequestArgument(False, DataLocation(len(pools) - 1, 0, spec.nbytes), tuple(spec.dims))

    req_inputs = [arg(s, ("in", k)) for k, s in enumerate(inputs)]
    req_outputs = [arg(s, ("out", k)) for k, s in enumerate(outputs)]
    return Request(req_inputs, req_outputs, pools), maps


def execute(prepared, request: Request, executor: str) -> tuple[ErrorStatus, list[OutputShape], Timing]:
    """Run with MeasureTiming NO; (status, output shapes, timing) as the VTS sees them."""
    try:
        if executor == "sync":
            shapes, timing = prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
            return ErrorStatus.NONE, shapes, timing
        if executor == "async":
            done = threading.Event()
            got: list = []

            def callback(status, shapes, timing):
                got.append((status, shapes, timing))
                done.set()

            prepared.execute(request, MeasureTiming.NO, None, None, callback)
            assert done.wait(30), "the callback never came"
            return got[0]
        if executor == "fenced":
            fence, callback = prepared.execute_fenced(request, [], MeasureTiming.NO, None, None, None)
            status, launched, _ = callback.get_execution_info()
            return status, [], launched
        raise ValueError(executor)
    except NnError as e:
        return e.status, list(e.output_shapes or []), Timing()


def check_result(result, expected: ErrorStatus | tuple[ErrorStatus, ...]) -> None:
    """The VTS checks: the status, no output shapes on error, no timing when not measured."""
    status, shapes, timing = result
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert status in expected, f"status {status.name}, expected {[e.name for e in expected]}"
    assert timing.time_on_device == NO_TIMING and timing.time_in_driver == NO_TIMING
    if status != ErrorStatus.NONE:
        assert shapes == []


def data_for(t: T, dims: tuple[int, ...] = DIMS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if t.is_quantized:
        return rng.integers(0, 5, size=dims).astype(numpy_dtype(t))
    return rng.uniform(-1, 1, size=dims).astype(numpy_dtype(t))
