"""Shared pieces of the compilation-caching tests (VTS-BEHAVIOURS section 1).

- The two parameter models of the VTS fixture, float32 and quant8, small but with weights over 128
  bytes so both the model cache and the data cache carry content, plus numpy golden outputs.
- The 100-operation ADD / MUL chains of the TOCTOU and Replace tests (ADD gives 101, MUL 1).
- `VtsCache`: the VTS fixture's temporary files `model0..`, `data0..`, `tmp` and handles on them in
  any access mode; `save` / `retrieve` as the VTS helpers `saveModelToCache` and
  `prepareModelFromCache`; `run_hal` executes a prepared model through the HAL.
- `RecordingDriver`: Android's `CachingDriver` of TestCompilationCaching.cpp.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (CacheHandles, Capabilities, DataLocation, DeviceInfo, DeviceType, ErrorStatus,
                       ExecutionPreference, IDevice, MeasureTiming, MemoryPool, NnError, OperandPerformance,
                       PerformanceInfo, Priority, Request, RequestArgument)
from nnapi.memory import allocate_ashmem, map_handle
from nnapi.ops import numpy_dtype
from nnapi.runtime import Memory


# --- the parameter models ---------------------------------------------------------------------------
@dataclass
class Subject:
    name: str
    model: nnapi.Model
    inputs: list[np.ndarray]
    golden: list[np.ndarray]
    #: Allowed absolute error (quant8: 3, as the VTS relaxes it for the caching tests).
    tolerance: float
    keep: list = field(default_factory=list)   # memories the model references

    @property
    def hal(self):
        return self.model.to_hal()


def float_model(seed: int = 0, n_in: int = 16, n_hidden: int = 32) -> Subject:
    """x[2, n_in] -> FC(W1 from shared memory, RELU) -> FC(W2) -> + c: weights go to the data cache."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(n_hidden, n_in)).astype(np.float32)
    b1 = rng.normal(size=n_hidden).astype(np.float32)
    w2 = rng.normal(size=(4, n_hidden)).astype(np.float32)
    b2 = rng.normal(size=4).astype(np.float32)
    c = np.float32(0.5)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (2, n_in))
    mem = Memory.ashmem(w1.nbytes + 64)
    mem.mapped().view(64, w1.nbytes)[:] = w1.tobytes()
    w1_i = m.add_operand(T.TENSOR_FLOAT32, w1.shape)
    m.set_operand_value_from_memory(w1_i, mem, 64, w1.nbytes)
    b1_i = m.add_operand(T.TENSOR_FLOAT32, b1.shape)
    m.set_operand_value(b1_i, b1)
    relu = m.add_operand(T.INT32)
    m.set_operand_value(relu, 1)
    none = m.add_operand(T.INT32)
    m.set_operand_value(none, 0)
    h = m.add_operand(T.TENSOR_FLOAT32, (2, n_hidden))
    m.add_operation(Op.FULLY_CONNECTED, [x, w1_i, b1_i, relu], [h])
    w2_i = m.add_operand(T.TENSOR_FLOAT32, w2.shape)
    m.set_operand_value(w2_i, w2)
    b2_i = m.add_operand(T.TENSOR_FLOAT32, b2.shape)
    m.set_operand_value(b2_i, b2)
    y = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    m.add_operation(Op.FULLY_CONNECTED, [h, w2_i, b2_i, none], [y])
    c_i = m.add_operand(T.TENSOR_FLOAT32, (1,))
    m.set_operand_value(c_i, np.array([c], np.float32))
    out = m.add_operand(T.TENSOR_FLOAT32, (2, 4))
    m.add_operation(Op.ADD, [y, c_i, none], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    xv = rng.normal(size=(2, n_in)).astype(np.float32)
    golden = (np.maximum(xv.astype(np.float64) @ w1.T + b1, 0) @ w2.T + b2 + c).astype(np.float32)
    return Subject("float32", m, [xv], [golden], 1e-4, [mem])


def quant8_model(seed: int = 0) -> Subject:
    """x quant8[2, 16] -> FC(W quant8[16, 16] = 256 bytes, in the data cache) -> ADD constant."""
    rng = np.random.default_rng(seed)
    in_s, in_z, w_s, w_z, out_s, out_z = 0.1, 128, 0.05, 120, 0.25, 100
    wq = rng.integers(80, 160, size=(16, 16), dtype=np.uint8)
    bq = rng.integers(-200, 200, size=16, dtype=np.int32)
    cq = rng.integers(90, 110, size=(2, 16), dtype=np.uint8)
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), in_s, in_z)
    w = m.add_operand(T.TENSOR_QUANT8_ASYMM, (16, 16), w_s, w_z)
    m.set_operand_value(w, wq)
    b = m.add_operand(T.TENSOR_INT32, (16,), in_s * w_s, 0)
    m.set_operand_value(b, bq)
    none = m.add_operand(T.INT32)
    m.set_operand_value(none, 0)
    h = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, none], [h])
    c = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.set_operand_value(c, cq)
    out = m.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 16), out_s, out_z)
    m.add_operation(Op.ADD, [h, c, none], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    xq = rng.integers(100, 156, size=(2, 16), dtype=np.uint8)
    xf = (xq.astype(np.float64) - in_z) * in_s
    wf = (wq.astype(np.float64) - w_z) * w_s
    hf = xf @ wf.T + bq * (in_s * w_s)
    hq = np.clip(np.round(hf / out_s) + out_z, 0, 255)
    of = (hq - out_z) * out_s + (cq.astype(np.float64) - out_z) * out_s
    golden = np.clip(np.round(of / out_s) + out_z, 0, 255).astype(np.uint8)
    return Subject("quant8", m, [xq], [golden], 3, [])


MODELS: dict[str, Callable[[], Subject]] = {"float32": float_model, "quant8": quant8_model}


def chain_model(op: Op, quant: bool, length: int = 100) -> Subject:
    """`length` ADD or MUL operations on [1] tensors, each with its own constant [1] second input and one
    shared activation scalar 0. Input 1: ADD gives length + 1, MUL gives 1 (quant8 MUL: scale 0.5, value 2)."""
    m = nnapi.Model()
    if quant:
        def tensor():
            return m.add_operand(T.TENSOR_QUANT8_ASYMM, (1,), 1.0, 0)

        def const():
            i = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1,), 0.5 if op == Op.MUL else 1.0, 0)
            m.set_operand_value(i, np.array([2 if op == Op.MUL else 1], np.uint8))
            return i
        x_value = np.array([1], np.uint8)
    else:
        def tensor():
            return m.add_operand(T.TENSOR_FLOAT32, (1,))

        def const():
            i = m.add_operand(T.TENSOR_FLOAT32, (1,))
            m.set_operand_value(i, np.array([1.0], np.float32))
            return i
        x_value = np.array([1.0], np.float32)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    x = tensor()
    h = x
    for _ in range(length):
        out = tensor()
        m.add_operation(op, [h, const(), act], [out])
        h = out
    m.identify_inputs_and_outputs([x], [h])
    m.finish()
    expected = length + 1 if op == Op.ADD else 1
    return Subject(f"{op.name}x{length}", m, [x_value], [np.array([expected], x_value.dtype)], 0)


def release_empty_pool(model: nnapi.Model) -> None:
    """Close the 1-byte "nnapi-empty" shared-memory pool that `Model.finish` creates for a model without large
    constants: nothing owns it, so it is never closed (a descriptor leak of runtime/model.py, reported).
    Tests that build many models call this when done so they do not add up to the fd limit."""
    for pool in model.to_hal().pools:
        handle = pool.handle
        if handle is not None and handle.name == "ashmem" and handle.size == 1:
            for fd in handle.fds:
                try:
                    os.close(fd)
                except OSError:
                    pass


# --- HAL helpers --------------------------------------------------------------------------------------
def run_hal(prepared, hal_model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Execute synchronously with every input and output in its own ashmem pool."""
    main = hal_model.main
    pools, args_in, args_out, outs = [], [], [], []
    for k, (index, value) in enumerate(zip(main.input_indexes, inputs)):
        raw = np.ascontiguousarray(value).tobytes()
        handle = allocate_ashmem(max(1, len(raw)))
        map_handle(handle).view(0, len(raw))[:] = raw
        args_in.append(RequestArgument(False, DataLocation(len(pools), 0, len(raw))))
        pools.append(MemoryPool(handle=handle))
    for index in main.output_indexes:
        operand = main.operands[index]
        n = operand.byte_size()
        handle = allocate_ashmem(n)
        args_out.append(RequestArgument(False, DataLocation(len(pools), 0, n)))
        pools.append(MemoryPool(handle=handle))
        outs.append((map_handle(handle), n, numpy_dtype(operand.type), operand.dimensions))
    prepared.execute_synchronously(Request(args_in, args_out, pools), MeasureTiming.NO, None, None)
    result = [mapped.array(0, n, dtype, dims).copy() for mapped, n, dtype, dims in outs]
    for p in pools:
        os.close(p.handle.fds[0])
    return result


def check_outputs(test: Subject, outputs: list[np.ndarray]) -> None:
    for got, want in zip(outputs, test.golden):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=test.tolerance, rtol=0)


class VtsCache:
    """The VTS fixture: empty `model{i}`, `data{i}` and `tmp` files and handles opened on them."""

    def __init__(self, root: Path, counts: tuple[int, int]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.counts = counts
        self.model = [self.root / f"model{i}" for i in range(counts[0])]
        self.data = [self.root / f"data{i}" for i in range(counts[1])]
        self.tmp = self.root / "tmp"
        for p in (*self.model, *self.data, self.tmp):
            p.touch()
        self._fds: list[int] = []

    def open(self, path: Path, mode: int = os.O_RDWR) -> int:
        flags = mode | (os.O_CREAT if mode != os.O_RDONLY else 0)
        fd = os.open(path, flags, 0o600)
        self._fds.append(fd)
        return fd

    def handles(self, mode: int = os.O_RDWR, *, model: list[Path] | None = None, data: list[Path] | None = None,
                modes: dict[tuple[str, int], int] | None = None) -> CacheHandles:
        """Handles on `model` / `data` paths (default the fixture's), `modes[("model"|"data", i)]` overriding."""
        modes = modes or {}
        model = self.model if model is None else model
        data = self.data if data is None else data
        return CacheHandles(tuple(self.open(p, modes.get(("model", i), mode)) for i, p in enumerate(model)),
                            tuple(self.open(p, modes.get(("data", i), mode)) for i, p in enumerate(data)))

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


def save(device: IDevice, test: Subject, handles: CacheHandles, token: bytes):
    """saveModelToCache: prepare_model with the handles must succeed whatever the handles are."""
    return device.prepare_model(test.hal, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                handles, token)


def retrieve(device: IDevice, handles: CacheHandles, token: bytes):
    """prepareModelFromCache: (ErrorStatus.NONE, model) or (the failure status, None)."""
    try:
        return ErrorStatus.NONE, device.prepare_model_from_cache(None, handles, token)
    except NnError as e:
        return e.status, None


def device_for(driver: IDevice) -> nnapi.Device:
    """A runtime `Device` for a driver object, without registering it globally."""
    info = driver.get_info()
    return nnapi.Device(info.name, info.version, info.type, info.feature_level, driver.get_capabilities(),
                        tuple(driver.get_number_of_cache_files_needed()), driver)


def reference(**kwargs) -> nnapi.Device:
    """The reference driver as a runtime device, without discovering every installed driver (which may
    import heavy toolkits), so these tests do not depend on what else is installed."""
    return device_for(ReferenceDevice(**kwargs))


class VersionedReference(ReferenceDevice):
    """The reference driver reporting another version string (a driver update)."""

    def __init__(self, version: str, **kwargs) -> None:
        self._reported_version = version
        super().__init__(**kwargs)

    def driver_version(self) -> str:
        return self._reported_version


# --- Android's CachingDriver ----------------------------------------------------------------------------
KNOWN_BYTES = bytes(range(256))


class RecordingDriver(IDevice):
    """Writes 256 known bytes to every cache fd in prepare_model, checks them in prepare_model_from_cache,
    records each call, and answers prepare_model_from_cache with `from_cache_status` (NONE: success)."""

    def __init__(self, n_model: int, n_data: int, from_cache_status: ErrorStatus = ErrorStatus.NONE,
                 files_status: ErrorStatus = ErrorStatus.NONE, name: str = "caching-driver",
                 supported: Callable[[object], bool] | None = None) -> None:
        self.counts = (n_model, n_data)
        self.from_cache_status = from_cache_status
        self.files_status = files_status
        self.name = name
        self.supported = supported
        self.calls: list[tuple[str, bool]] = []    # ("prepare_model", with handles) / ("prepare_model_from_cache", ok)
        self.tokens: list[bytes | None] = []
        self.reference = ReferenceDevice()
        self._prepared: dict[bytes, object] = {}

    def get_info(self) -> DeviceInfo:
        return DeviceInfo(self.name, "1.0", DeviceType.ACCELERATOR, 30)

    def get_capabilities(self):
        """Twice as fast as the reference device for every type, so the partitioner prefers it."""
        caps = self.reference.get_capabilities()
        fast = PerformanceInfo(0.5, 0.5)
        return Capabilities(fast, fast, tuple(OperandPerformance(p.type, fast) for p in caps.operand_performance),
                            fast, fast)

    def get_supported_operations(self, model) -> list[bool]:
        return [True if self.supported is None else self.supported(op) for op in model.main.operations]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        if self.files_status != ErrorStatus.NONE:
            raise NnError(self.files_status, "cache file counts unavailable")
        return self.counts

    def _check_handles(self, handles: CacheHandles) -> None:
        assert (len(handles.model_cache), len(handles.data_cache)) == self.counts, \
            f"runtime passed {len(handles.model_cache)}/{len(handles.data_cache)} handles, expected {self.counts}"

    def prepare_model(self, model, preference, priority, deadline, cache, token):
        with_handles = cache is not None and bool(cache.model_cache or cache.data_cache)
        if with_handles:
            self._check_handles(cache)
            for fd in (*cache.model_cache, *cache.data_cache):
                os.ftruncate(fd, 0)
                os.pwrite(fd, KNOWN_BYTES, 0)
        self.calls.append(("prepare_model", with_handles))
        self.tokens.append(token)
        prepared = self.reference.prepare_model(model, preference, priority, deadline, None, None)
        if token is not None:
            self._prepared[bytes(token)] = prepared
        return prepared

    def prepare_model_from_cache(self, deadline, cache, token):
        self._check_handles(cache)
        for fd in (*cache.model_cache, *cache.data_cache):
            assert os.pread(fd, 512, 0) == KNOWN_BYTES
        ok = self.from_cache_status == ErrorStatus.NONE
        self.calls.append(("prepare_model_from_cache", ok))
        self.tokens.append(token)
        if not ok:
            raise NnError(self.from_cache_status, "the caching driver was told to fail")
        return self._prepared[bytes(token)]

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "no memory domains")


# --- workers of the multi-process tests (importable by spawned children) -----------------------------
def compile_and_run_worker(cache_dir: str, token: bytes, rounds: int, barrier, results) -> None:
    """Compile the float32 model `rounds` times with the cache and report outcomes and output errors."""
    try:
        test = float_model()
        barrier.wait(timeout=60)
        outcomes, errors = [], []
        for _ in range(rounds):
            c = nnapi.Compilation(test.model, devices=[reference()], cache_dir=cache_dir, token=token).finish()
            outcomes.append(c.cache_outcomes[0].outcome)
            (out,) = c.execute(test.inputs)
            errors.append(float(np.abs(out.astype(np.float64) - test.golden[0]).max()))
        results.put((os.getpid(), outcomes, errors, None))
    except BaseException as e:   # report, never hang the parent
        results.put((os.getpid(), [], [], f"{type(e).__name__}: {e}"))


def engine_worker(root: str, worker: int, rounds: int, max_bytes: int, barrier, results) -> None:
    """put/get ten keys with known content in a shared engine directory; every get must be exact or None."""
    from nnapi.caching import CachingEngine
    try:
        engine = CachingEngine("test", "1", root=Path(root), max_bytes=max_bytes)
        barrier.wait(timeout=60)
        bad, hits = [], 0
        for r in range(rounds):
            for k in range(10):
                key = f"key{k}"
                want = (bytes([k]) * (1000 + 37 * k), bytes([255 - k]) * (500 + k))
                if (r + worker + k) % 2:
                    engine.put(key, [want[0]], [want[1]])
                got = engine.get(key)
                if got is not None:
                    hits += 1
                    if (bytes(got[0][0]), bytes(got[1][0])) != want:
                        bad.append(key)
        results.put((worker, hits, bad, None))
    except BaseException as e:
        results.put((worker, 0, [], f"{type(e).__name__}: {e}"))


def engine_compile_worker(state_dir: str, barrier, results) -> None:
    """Compile the float32 model without caching information on a driver with its caching engine."""
    os.environ["NNAPI_STATE_DIR"] = state_dir
    try:
        test = float_model()
        driver = ReferenceDevice(engine=True)
        barrier.wait(timeout=60)
        errs = []
        for _ in range(3):
            c = nnapi.Compilation(test.model, devices=[device_for(driver)]).finish()
            (out,) = c.execute(test.inputs)
            errs.append(float(np.abs(out.astype(np.float64) - test.golden[0]).max()))
        results.put((os.getpid(), dict(driver.engine.stats), errs, None))
    except BaseException as e:
        results.put((os.getpid(), {}, [], f"{type(e).__name__}: {e}"))
