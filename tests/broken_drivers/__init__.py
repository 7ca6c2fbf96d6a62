"""Deliberately broken drivers: each delegates to the reference driver and breaks exactly one behaviour.

`Delegating` only delegates (the kit must pass it); every other class changes one thing, and
`BROKEN` says which suite and check of `nnapi vts` must catch it and what its message must name (and
whether it may only run hosted in a process of its own: one that ends or forks its process). Each can
be certified from the command line: `PYTHONPATH=tests nnapi vts --driver broken_drivers:NAME --quick`.
"""
from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import (DeviceInfo, ErrorStatus, IBuffer, IBurst, IDevice, IExecution, IFencedExecutionCallback,
                       IPreparedModel, MemoryPool, Model, NnError, OperationType, OutputShape, Priority, Request,
                       SimpleBurst, SimpleExecution, Subgraph, Timing)
from nnapi.memory import map_handle, map_pool
from nnapi.memory.domains import calling_client, current_client


# --- the delegating driver ---------------------------------------------------------------------------------
class DelegatingPrepared(IPreparedModel):
    """Forwards every call to the reference driver's prepared model."""

    def __init__(self, inner: IPreparedModel, device: "Delegating") -> None:
        self.inner = inner
        self.device = device

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        return self.inner.execute(request, measure, deadline, loop_timeout_ns, callback, **kw)

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns, **kw):
        return self.inner.execute_synchronously(request, measure, deadline, loop_timeout_ns, **kw)

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns, **kw):
        return self.inner.execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns,
                                         timeout_after_fence_ns, **kw)

    def configure_execution_burst(self) -> IBurst:
        return self.inner.configure_execution_burst()

    def create_reusable_execution(self, request, measure, loop_timeout_ns, **kw) -> IExecution:
        return self.inner.create_reusable_execution(request, measure, loop_timeout_ns, **kw)


class Delegating(IDevice):
    """Only delegates to `ReferenceDevice`, under its own name."""

    NAME = "delegating"
    Prepared = DelegatingPrepared

    def __init__(self) -> None:
        self.inner = ReferenceDevice()

    def wrap(self, prepared: IPreparedModel) -> IPreparedModel:
        return self.Prepared(prepared, self)

    @staticmethod
    def unwrap(prepared: Any) -> Any:
        return prepared.inner if isinstance(prepared, DelegatingPrepared) else prepared

    def get_info(self) -> DeviceInfo:
        info = self.inner.get_info()
        return DeviceInfo(self.NAME, info.version, info.type, info.feature_level)

    def get_capabilities(self):
        return self.inner.get_capabilities()

    def get_supported_operations(self, model: Model) -> list[bool]:
        return self.inner.get_supported_operations(model)

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return self.inner.get_number_of_cache_files_needed()

    def prepare_model(self, model, preference, priority, deadline, cache, token, **kw):
        return self.wrap(self.inner.prepare_model(model, preference, priority, deadline, cache, token, **kw))

    def prepare_model_from_cache(self, deadline, cache, token, **kw):
        return self.wrap(self.inner.prepare_model_from_cache(deadline, cache, token, **kw))

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        models = [self.unwrap(m) for m in prepared_models] if isinstance(prepared_models, (list, tuple)) \
            else prepared_models
        return self.inner.allocate(desc, models, input_roles, output_roles)


# --- caching ---------------------------------------------------------------------------------------------
def _usable(fd: int) -> bool:
    """A regular file open for reading and writing."""
    try:
        import fcntl
        return stat.S_ISREG(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
    except (OSError, TypeError, ValueError):
        return False


class AcceptsTamperedCache(Delegating):
    """Breaks §1.3: when the reference driver rejects a model cache whose handles are fine, it prepares the
    model it remembers for that token anyway (no integrity check of the content)."""

    NAME = "broken-tampered-cache"

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[bytes, IPreparedModel] = {}

    def prepare_model(self, model, preference, priority, deadline, cache, token, **kw):
        prepared = super().prepare_model(model, preference, priority, deadline, cache, token, **kw)
        if cache is not None and token is not None and (cache.model_cache or cache.data_cache):
            self.saved[bytes(token)] = prepared
        return prepared

    def prepare_model_from_cache(self, deadline, cache, token, **kw):
        try:
            return super().prepare_model_from_cache(deadline, cache, token, **kw)
        except NnError as e:
            fds = (*cache.model_cache, *cache.data_cache)
            counts = (len(cache.model_cache), len(cache.data_cache))
            if (e.status == ErrorStatus.GENERAL_FAILURE and bytes(token) in self.saved
                    and counts == self.get_number_of_cache_files_needed() and all(_usable(fd) for fd in fds)):
                return self.saved[bytes(token)]
            raise


# --- memory -----------------------------------------------------------------------------------------------
def _region_checks(request: Request) -> None:
    """What a driver that slices its mapping without checking does: IndexError on a region out of range."""
    for kind, args in (("input", request.inputs), ("output", request.outputs)):
        for k, arg in enumerate(args):
            if arg.has_no_value:
                continue
            loc = arg.location
            if loc.pool_index >= len(request.pools):
                raise IndexError(f"list index out of range ({kind} {k} in pool {loc.pool_index})")
            pool = request.pools[loc.pool_index]
            if pool.token is None and loc.offset + loc.length > pool.size:
                raise IndexError(f"{kind} {k}: slice [{loc.offset}:{loc.offset + loc.length}] out of range")


class CrashingPrepared(DelegatingPrepared):
    def execute(self, request, *a, **kw):
        _region_checks(request)
        return super().execute(request, *a, **kw)

    def execute_synchronously(self, request, *a, **kw):
        _region_checks(request)
        return super().execute_synchronously(request, *a, **kw)

    def execute_fenced(self, request, *a, **kw):
        _region_checks(request)
        return super().execute_fenced(request, *a, **kw)

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class CrashesOnOutOfBoundsPool(Delegating):
    """Breaks §2.2 rule 3: a request region outside its pool raises IndexError instead of INVALID_ARGUMENT."""

    NAME = "broken-out-of-bounds"
    Prepared = CrashingPrepared


def _uses_mmap_fd(pools: Sequence[MemoryPool]) -> bool:
    return any(p.handle is not None and p.handle.name == "mmap_fd" for p in pools)


class NoMmapFdPrepared(DelegatingPrepared):
    def _check(self, request: Request) -> None:
        if _uses_mmap_fd(request.pools):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "this driver cannot map mmap_fd memory")

    def execute(self, request, *a, **kw):
        self._check(request)
        return super().execute(request, *a, **kw)

    def execute_synchronously(self, request, *a, **kw):
        self._check(request)
        return super().execute_synchronously(request, *a, **kw)

    def execute_fenced(self, request, *a, **kw):
        self._check(request)
        return super().execute_fenced(request, *a, **kw)

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class RejectsMmapFd(Delegating):
    """Breaks M4: mmap_fd memory (mandatory) is refused as constants and as execution I/O."""

    NAME = "broken-no-mmap-fd"
    Prepared = NoMmapFdPrepared

    def get_supported_operations(self, model):
        flags = super().get_supported_operations(model)
        return [False] * len(flags) if _uses_mmap_fd(model.pools) else flags

    def prepare_model(self, model, *a, **kw):
        if _uses_mmap_fd(model.pools):
            raise NnError(ErrorStatus.GENERAL_FAILURE, "this driver cannot map mmap_fd memory")
        return super().prepare_model(model, *a, **kw)


# --- memory domains ------------------------------------------------------------------------------------------
class OwnerBuffer(IBuffer):
    """Runs copies as the allocating client, whoever calls."""

    def __init__(self, inner: IBuffer, owner: tuple[int, int]) -> None:
        self.inner, self.owner = inner, owner

    def copy_to(self, dst):
        with calling_client(*self.owner):
            return self.inner.copy_to(dst)

    def copy_from(self, src, dimensions):
        with calling_client(*self.owner):
            return self.inner.copy_from(src, dimensions)


class SharingPrepared(DelegatingPrepared):
    def _owner(self, request: Request) -> tuple[int, int] | None:
        for pool in request.pools:
            if pool.token is not None and pool.token in self.device.owners:
                return self.device.owners[pool.token]
        return None

    def _as_owner(self, request: Request, fn: Callable[[], Any]) -> Any:
        owner = self._owner(request)
        if owner is None:
            return fn()
        with calling_client(*owner):
            return fn()

    def execute(self, request, *a, **kw):
        return self._as_owner(request, lambda: super(SharingPrepared, self).execute(request, *a, **kw))

    def execute_synchronously(self, request, *a, **kw):
        return self._as_owner(request, lambda: super(SharingPrepared, self).execute_synchronously(request, *a, **kw))

    def execute_fenced(self, request, *a, **kw):
        return self._as_owner(request, lambda: super(SharingPrepared, self).execute_fenced(request, *a, **kw))


class SharesBufferTokens(Delegating):
    """Breaks M8: any client may use a buffer (token or IBuffer) allocated by another client."""

    NAME = "broken-shared-tokens"
    Prepared = SharingPrepared

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[int, tuple[int, int]] = {}

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        buffer, token = super().allocate(desc, prepared_models, input_roles, output_roles)
        self.owners[token] = current_client()
        return OwnerBuffer(buffer, self.owners[token]), token


class ZeroFillBuffer(IBuffer):
    def __init__(self, inner: IBuffer) -> None:
        self.inner = inner

    def copy_to(self, dst):
        try:
            return self.inner.copy_to(dst)
        except NnError as e:
            if e.status != ErrorStatus.GENERAL_FAILURE:
                raise
            mapped = map_handle(dst)
            mapped.write_bytes(0, bytes(mapped.size))   # "uninitialized" reads as zeros

    def copy_from(self, src, dimensions):
        return self.inner.copy_from(src, dimensions)


class ReadsUninitializedBuffers(Delegating):
    """Breaks §3.3 CopyTo_UninitializedMemory: copy_to of a buffer never written gives zeros, not GENERAL_FAILURE."""

    NAME = "broken-uninitialized-copy"

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        buffer, token = super().allocate(desc, prepared_models, input_roles, output_roles)
        return ZeroFillBuffer(buffer), token


# --- quality of service ---------------------------------------------------------------------------------------
class AcceptsInvalidPriority(Delegating):
    """Breaks §4.1: a priority outside LOW..HIGH is taken as MEDIUM instead of refused."""

    NAME = "broken-priority"

    def prepare_model(self, model, preference, priority, *a, **kw):
        if priority not in (0, 1, 2) or isinstance(priority, bool):
            priority = Priority.MEDIUM
        return super().prepare_model(model, preference, priority, *a, **kw)


class NoDeadlinePrepared(DelegatingPrepared):
    def execute(self, request, measure, deadline, *a, **kw):
        return super().execute(request, measure, None, *a, **kw)

    def execute_synchronously(self, request, measure, deadline, *a, **kw):
        return super().execute_synchronously(request, measure, None, *a, **kw)

    def execute_fenced(self, request, wait_for, measure, deadline, *a, **kw):
        return super().execute_fenced(request, wait_for, measure, None, *a, **kw)

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class IgnoresDeadlines(Delegating):
    """Breaks §4.2 / Q6: every deadline is dropped, so work whose deadline has passed still runs."""

    NAME = "broken-deadlines"
    Prepared = NoDeadlinePrepared

    def prepare_model(self, model, preference, priority, deadline, *a, **kw):
        return super().prepare_model(model, preference, priority, None, *a, **kw)

    def prepare_model_from_cache(self, deadline, cache, token, **kw):
        return super().prepare_model_from_cache(None, cache, token, **kw)


# --- validation ----------------------------------------------------------------------------------------------
def _recount(model: Model) -> Model:
    """The model with every main-graph consumer count recomputed (what a driver trusting its own count does)."""
    main = model.main
    try:
        counts = [0] * len(main.operands)
        for op in main.operations:
            for i in op.inputs:
                counts[i] += 1
        operands = [replace(o, number_of_consumers=n) for o, n in zip(main.operands, counts)]
    except (IndexError, TypeError, AttributeError):
        return model
    return Model(Subgraph(operands, main.operations, main.input_indexes, main.output_indexes), model.referenced,
                 model.operand_values, model.pools, model.relax_computation_float32_to_float16)


class AcceptsWrongConsumerCounts(Delegating):
    """Breaks §5.1 mutateOperandNumberOfConsumersTest: wrong numberOfConsumers are silently recomputed."""

    NAME = "broken-consumer-counts"

    def get_supported_operations(self, model):
        return super().get_supported_operations(_recount(model))

    def prepare_model(self, model, *a, **kw):
        return super().prepare_model(_recount(model), *a, **kw)


class LaxBurst(IBurst):
    def __init__(self, prepared: IPreparedModel) -> None:
        self.prepared = prepared

    def execute_synchronously(self, request, memory_identifier_tokens, measure, deadline, loop_timeout_ns, **kw):
        return self.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns, **kw)

    def release_memory_resource(self, token):
        return None


class LaxBurstPrepared(DelegatingPrepared):
    def configure_execution_burst(self) -> IBurst:
        return LaxBurst(self.inner)


class BurstIgnoresTokens(Delegating):
    """Breaks §5.3 (our IBurst): memory identifier tokens are never checked (wrong counts, -2 accepted)."""

    NAME = "broken-burst-tokens"
    Prepared = LaxBurstPrepared


class _StaleExecution(IExecution):
    """Computes once; later computations report success and write nothing."""

    def __init__(self, inner: IExecution) -> None:
        self.inner, self.result = inner, None

    def compute(self, deadline=None):
        if self.result is None:
            self.result = self.inner.compute(deadline)
        return self.result


class StaleReusablePrepared(DelegatingPrepared):
    def create_reusable_execution(self, request, measure, loop_timeout_ns, **kw) -> IExecution:
        return _StaleExecution(self.inner.create_reusable_execution(request, measure, loop_timeout_ns, **kw))


class ReusableComputesOnce(Delegating):
    """Breaks Android 13's IExecution: a reusable execution computes only the first time (later ones keep
    the first result and write nothing)."""

    NAME = "broken-reusable-once"
    Prepared = StaleReusablePrepared


# --- execution ---------------------------------------------------------------------------------------------
class SilentPrepared(DelegatingPrepared):
    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        return super().execute(request, measure, deadline, loop_timeout_ns, lambda *args: None, **kw)


class NeverCallsBack(Delegating):
    """Breaks §6 ASYNC: the asynchronous execution runs but its callback is never called."""

    NAME = "broken-no-callback"
    Prepared = SilentPrepared


class RaisingFencedPrepared(DelegatingPrepared):
    def execute_fenced(self, *a, **kw):
        raise RuntimeError("the fence machinery is not implemented")


class FencedRaisesRuntimeError(Delegating):
    """Breaks §6 FENCED: execute_fenced raises a plain RuntimeError instead of running (or an NnError)."""

    NAME = "broken-fenced-error"
    Prepared = RaisingFencedPrepared


class _StuckCallback(IFencedExecutionCallback):
    def get_execution_info(self):
        threading.Event().wait()   # never returns


class HangingFencedPrepared(DelegatingPrepared):
    def execute_fenced(self, *a, **kw):
        fd, _ = super().execute_fenced(*a, **kw)
        return fd, _StuckCallback()


class FencedCallbackHangs(Delegating):
    """Breaks §6 FENCED: IFencedExecutionCallback.get_execution_info never returns."""

    NAME = "broken-fenced-hang"
    Prepared = HangingFencedPrepared


def _all_sufficient(shapes: list | None) -> list:
    return [OutputShape(tuple(s.dimensions), True) for s in shapes or []]


class WrongShapesPrepared(DelegatingPrepared):
    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        def forward(status, shapes, timing):
            if status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                shapes = _all_sufficient(shapes)
            callback(status, shapes, timing)
        return super().execute(request, measure, deadline, loop_timeout_ns, forward, **kw)

    def execute_synchronously(self, *a, **kw):
        try:
            return super().execute_synchronously(*a, **kw)
        except NnError as e:
            if e.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                raise NnError(e.status, e.message, output_shapes=_all_sufficient(e.output_shapes)) from None
            raise

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class WrongInsufficientShapes(Delegating):
    """Breaks §6 INSUFFICIENT: OUTPUT_INSUFFICIENT_SIZE reports every output as sufficient."""

    NAME = "broken-insufficient-shapes"
    Prepared = WrongShapesPrepared


def _late(timing: Timing) -> Timing:
    if timing.time_in_driver == 2**64 - 1:
        return timing
    return Timing(timing.time_in_driver + 1000, timing.time_in_driver)


class LateTimingPrepared(DelegatingPrepared):
    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        return super().execute(request, measure, deadline, loop_timeout_ns,
                               lambda status, shapes, timing: callback(status, shapes, _late(timing)), **kw)

    def execute_synchronously(self, *a, **kw):
        shapes, timing = super().execute_synchronously(*a, **kw)
        return shapes, _late(timing)

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class DeviceTimeOverDriverTime(Delegating):
    """Breaks §6 timing: the reported time on the device exceeds the time in the driver by 1 ms."""

    NAME = "broken-timing"
    Prepared = LateTimingPrepared


class NoShapesPrepared(DelegatingPrepared):
    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        return super().execute(request, measure, deadline, loop_timeout_ns,
                               lambda status, shapes, timing: callback(status, [] if status == ErrorStatus.NONE
                                                                       else shapes, timing), **kw)

    def execute_synchronously(self, *a, **kw):
        _, timing = super().execute_synchronously(*a, **kw)
        return [], timing

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)


class DropsOutputShapes(Delegating):
    """Breaks §6 UNSPECIFIED: a successful execution never reports its output shapes (not even unknown ones)."""

    NAME = "broken-output-shapes"
    Prepared = NoShapesPrepared


def _scramble(request: Request) -> None:
    for arg in request.outputs:
        if arg.has_no_value:
            continue
        pool = request.pools[arg.location.pool_index]
        if pool.token is not None:
            continue
        mapped = map_pool(pool)
        n = arg.location.length
        mapped.buffer[arg.location.offset:arg.location.offset + n] = bytes([0x40]) * n


class AfterSuccessPrepared(DelegatingPrepared):
    """Runs `after(request)` once an execution succeeded, whatever the executor: a driver that does something
    to the request's memory when it is done."""

    def after(self, request: Request) -> None:
        raise NotImplementedError

    def execute(self, request, measure, deadline, loop_timeout_ns, callback, **kw):
        def forward(status, shapes, timing):
            if status == ErrorStatus.NONE:
                self.after(request)
            callback(status, shapes, timing)
        return super().execute(request, measure, deadline, loop_timeout_ns, forward, **kw)

    def execute_synchronously(self, request, *a, **kw):
        result = super().execute_synchronously(request, *a, **kw)
        self.after(request)
        return result

    def execute_fenced(self, request, *a, **kw):
        result = super().execute_fenced(request, *a, **kw)
        self.after(request)
        return result

    def configure_execution_burst(self) -> IBurst:
        return SimpleBurst(self)

    def create_reusable_execution(self, request, measure, loop_timeout_ns, **kw) -> IExecution:
        return SimpleExecution(self, request, measure, loop_timeout_ns, kw.get("client"))


class WrongValuesPrepared(AfterSuccessPrepared):
    def __init__(self, inner: IPreparedModel, device: Delegating) -> None:
        super().__init__(inner, device)
        model = getattr(inner, "model", None)
        self.broken = model is not None and any(op.type == OperationType.LOGISTIC for op in model.main.operations)

    def after(self, request: Request) -> None:
        if self.broken:
            _scramble(request)


class WrongLogisticValues(Delegating):
    """Breaks correctness: models with a LOGISTIC operation get every output byte set to 0x40."""

    NAME = "broken-logistic-values"
    Prepared = WrongValuesPrepared


# --- what no single check owned (issue 33: the kit misses nothing) ------------------------------------------
def _touch_input(request: Request) -> None:
    """Add 1 to the first byte of input 0 (in the app's memory): a driver that uses its inputs as scratch."""
    if not request.inputs or request.inputs[0].has_no_value:
        return
    loc = request.inputs[0].location
    pool = request.pools[loc.pool_index]
    if pool.token is not None or loc.length == 0:
        return
    mapped = map_pool(pool)
    mapped.buffer[loc.offset] = (mapped.buffer[loc.offset] + 1) % 256


class InputWritingPrepared(AfterSuccessPrepared):
    def after(self, request: Request) -> None:
        _touch_input(request)


class WritesInputs(Delegating):
    """Breaks §2.2 rule 8: after each successful execution the first byte of input 0 is changed in place."""

    NAME = "broken-writes-inputs"
    Prepared = InputWritingPrepared


class RaisingClaims(ReferenceDevice):
    """Breaks get_supported_operations the way a driver on `nnapi.drivers.base` does: its `supported()`
    raises KeyError for any model with a RELU, which the base logs and answers as "nothing supported"."""

    NAME = "broken-claims"

    def supported(self, model: Model) -> list[bool]:
        if any(op.type == OperationType.RELU for op in model.main.operations):
            raise KeyError("no claim rule for RELU")
        return super().supported(model)


class CachesNothing(Delegating):
    """Breaks §1: asks for cache files but never writes them, and every preparation from cache fails."""

    NAME = "broken-caches-nothing"

    def prepare_model(self, model, preference, priority, deadline, cache, token, **kw):
        return super().prepare_model(model, preference, priority, deadline, None, None, **kw)

    def prepare_model_from_cache(self, deadline, cache, token, **kw):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "nothing cached")


class PrepareHangs(Delegating):
    """Breaks "never hangs": prepare_model never returns."""

    NAME = "broken-prepare-hang"

    def prepare_model(self, *a, **kw):
        threading.Event().wait()


# --- what only a driver in a process of its own can do to the kit (`nnapi vts` hosts it) -------------------------
class ExitingPrepared(DelegatingPrepared):
    def execute_fenced(self, *a, **kw):
        os._exit(3)


class ExitsInFenced(Delegating):
    """Breaks "never ends its process": execute_fenced calls os._exit(3)."""

    NAME = "broken-exits"
    Prepared = ExitingPrepared


class SegfaultingPrepared(DelegatingPrepared):
    def configure_execution_burst(self) -> IBurst:
        import ctypes
        ctypes.string_at(0)   # a native crash: SIGSEGV
        raise AssertionError("unreachable")


class CrashesInBurst(Delegating):
    """Breaks "never crashes": configure_execution_burst dereferences a null pointer (SIGSEGV)."""

    NAME = "broken-segfault"
    Prepared = SegfaultingPrepared


class ForksInPrepare(Delegating):
    """Breaks "keeps to its process": every prepare_model forks the process, and the child lingers 30 s."""

    NAME = "broken-forks"

    def prepare_model(self, *a, **kw):
        import time
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        return super().prepare_model(*a, **kw)


class LeavesAProcess(Delegating):
    """Breaks "keeps to its process": each prepare_model starts `sleep 60` and never waits for it."""

    NAME = "broken-leftover"

    def prepare_model(self, *a, **kw):
        import subprocess
        subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return super().prepare_model(*a, **kw)


class DetachesAProcess(Delegating):
    """Breaks "keeps to its process": each prepare_model starts a daemon the way a service does, `sleep 60`
    in a session of its own whose parent exits at once (with its environment cleared: no mark)."""

    NAME = "broken-detached"

    def prepare_model(self, *a, **kw):
        import subprocess
        subprocess.run(["sh", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 &"],
                       env={"PATH": os.environ["PATH"]}, timeout=10, check=True)
        return super().prepare_model(*a, **kw)


@dataclass(frozen=True)
class Broken:
    """A broken driver, the check of `nnapi vts` that catches it and what the failure must name."""

    driver: type[IDevice]
    suite: str
    k: str
    fragment: str
    timeout: float = 10.0
    #: Only hosted in a process of its own (in the kit's process it would end or fork the kit).
    hosted: bool = False


BROKEN = [
    Broken(AcceptsTamperedCache, "caching", "corrupted-model-cache[float32]", "returned a prepared model"),
    Broken(CrashesOnOutOfBoundsPool, "memory", "request-region-out-of-bounds", "raised IndexError"),
    Broken(RejectsMmapFd, "memory", "io-pool[mmap_fd][sync]", "with mmap_fd pools: the driver answered GENERAL_FAILURE"),
    Broken(SharesBufferTokens, "domains", "another-clients-token[TENSOR_FLOAT32]", "another client"),
    Broken(ReadsUninitializedBuffers, "domains", "copy-to-uninitialized[TENSOR_FLOAT32]",
           "copy_to from a new (uninitialized) buffer: the driver answered NONE, expected GENERAL_FAILURE"),
    Broken(AcceptsInvalidPriority, "qos", "invalid-priority", "priority -1 returned a prepared model"),
    Broken(IgnoresDeadlines, "qos", "deadline-execute[add][now][sync]", "with the deadline NOW answered NONE"),
    Broken(AcceptsWrongConsumerCounts, "validation", "validation/add_", "mutateOperandNumberOfConsumersTest"),
    Broken(BurstIgnoresTokens, "validation", "validation/add_", "memory identifier tokens"),
    Broken(NeverCallsBack, "execution", "execution/async[timing-no]", "never came", timeout=2.0),
    Broken(FencedRaisesRuntimeError, "execution", "execution/fenced[timing-no]", "raised RuntimeError"),
    Broken(FencedCallbackHangs, "execution", "execution/fenced[timing-no]", "did not return within", timeout=2.0),
    Broken(WrongInsufficientShapes, "execution", "insufficient-output[sync]", "expected one shape [4] marked "
           "insufficient"),
    Broken(DeviceTimeOverDriverTime, "execution", "timing-order[sync]", "time on device"),
    Broken(DropsOutputShapes, "execution", "dynamic-output-shape[sync]", "reported output shapes []"),
    Broken(WrongLogisticValues, "vectors", "logistic", "values off"),
    Broken(WritesInputs, "execution", "execution/sync[timing-no]", "input 0 was written"),
    Broken(ReusableComputesOnce, "execution", "execution/reusable[timing-no]",
           "reusable execution (timing NO) computed [nan, nan, nan, nan], expected [2.0, 0.0, 4.0, 0.0]"),
    Broken(RaisingClaims, "memory", "io-pool[ashmem][sync]", "supported() raised KeyError: 'no claim rule for "
           "RELU' on a model of ADD, RELU"),
    Broken(CachesNothing, "caching", "save-and-retrieve[float32]", "cached none of the kit's models"),
    Broken(PrepareHangs, "execution", "execution/sync[timing-no]", "did not return within", timeout=2.0),
    Broken(ExitsInFenced, "execution", "execution/fenced[timing-no]", "the driver's process exited with status 3",
           hosted=True),
    Broken(CrashesInBurst, "execution", "execution/burst[timing-no]", "the driver's process was killed by SIGSEGV",
           hosted=True),
    Broken(ForksInPrepare, "execution", "execution/sync[timing-no]", "the driver forked its process", hosted=True),
    Broken(LeavesAProcess, "execution", "execution/sync[timing-no]", "(sleep 60) (ended by the kit)", hosted=True),
]

__all__ = ["BROKEN", "Broken", "Delegating", "DetachesAProcess"] + [b.driver.__name__ for b in BROKEN]
