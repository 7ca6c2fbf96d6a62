"""Executions through the HAL as the VTS drives them: requests over shared memory, pointers or driver
buffers, and one call per executor (sync, async, fenced, burst, reusable) read back as (status, shapes, timing).

Everything here calls the driver through `Kit.call`, so a hang or a plain exception becomes a
failure of the check, never of the kit. Every execution, whatever the check and the executor, also
checks that the request's input regions are unchanged afterwards (`InputGuard`: a driver never writes
to the app's inputs).
"""
from __future__ import annotations

import contextlib
import mmap
import os
import select
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from ...hal import (DataLocation, ErrorStatus, MeasureTiming, MemoryHandle, MemoryPool, Model, NnError, OutputShape,
                    Request, RequestArgument, Timing)
from ...memory import (HardwareBuffer, MappedImage, allocate_ashmem, close_handle, map_handle, map_pool,
                       mmap_fd_handle)
from .core import DriverHang, Fail, Kit, status_name

NO_TIMING = 2**64 - 1
#: The executors of a prepared model (VTS `Executor`, with FENCED; "reusable": Android 13's reusable
#: execution, `create_reusable_execution`, computed twice).
EXECUTORS = ("sync", "async", "fenced", "burst", "reusable")


# --- memory -------------------------------------------------------------------------------------------
class Region:
    """One pool of a request the kit made: its `MemoryPool`, a CPU view and what to close. Kinds: "ashmem",
    "mmap_fd", "hardware_buffer_blob", and "pointer" (an in-process buffer the driver uses in place)."""

    def __init__(self, kind: str, size: int) -> None:
        size = max(1, int(size))
        self.kind = kind
        self._keep: Any = None
        if kind == "pointer":
            buf = np.zeros(size, np.uint8)
            self.pool = MemoryPool(pointer=buf)
            self.mapped = map_pool(self.pool)
            self.handle = None
            return
        if kind == "ashmem":
            handle = allocate_ashmem(size, "nnapi-vts")
        elif kind == "mmap_fd":  # a file mapped from a page offset, so the offset ints are exercised
            fd = os.memfd_create("nnapi-vts-mmap", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, mmap.PAGESIZE + size)
                handle = mmap_fd_handle(fd, mmap.PAGESIZE, size, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        elif kind == "hardware_buffer_blob":
            hb = HardwareBuffer(size)
            handle = MemoryHandle(hb.handle.name, tuple(os.dup(fd) for fd in hb.handle.fds), hb.handle.ints,
                                  hb.handle.size)
            hb.close()
        else:
            raise ValueError(f"unknown pool kind {kind!r}")
        self.handle = handle
        self.pool = MemoryPool(handle=handle)
        self.mapped = map_handle(handle)

    def write(self, offset: int, data: bytes) -> None:
        if data:
            self.mapped.buffer[offset:offset + len(data)] = data

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.mapped.buffer[offset:offset + length])

    def close(self) -> None:
        self.mapped = None  # type: ignore[assignment]
        if self.handle is not None:
            close_handle(self.handle)
            self.handle = None


def shared_memory(data: bytes | None, size: int | None = None, kind: str = "ashmem") -> Region:
    """A region holding `data` (zero-filled to `size`)."""
    region = Region(kind, size if size is not None else len(data or b""))
    if data:
        region.write(0, data)
    return region


def _align(n: int) -> int:
    return (n + 3) // 4 * 4


@dataclass
class Shared:
    """A request argument in its own shared-memory pool (offset 0, exact length)."""

    nbytes: int
    data: bytes | None = None
    dims: tuple[int, ...] = ()
    kind: str = "ashmem"


@dataclass
class Token:
    """A request argument in a driver-buffer pool (addressed by pool index only)."""

    token: int
    dims: tuple[int, ...] = ()


@dataclass
class Io:
    """A request and the memory behind it; `close` releases the memory."""

    request: Request
    regions: list[Region | None] = field(default_factory=list)
    #: Per output: (pool index, offset) where the kit reads it back.
    out_at: list[tuple[int, int]] = field(default_factory=list)

    def output_bytes(self, k: int, length: int) -> bytes:
        pool, offset = self.out_at[k]
        region = self.regions[pool]
        if region is None:
            raise ValueError(f"output {k} is in a driver buffer")
        return region.read(offset, length)

    def output_array(self, k: int, dtype: np.dtype, dims: Sequence[int]) -> np.ndarray:
        count = int(np.prod(dims)) if dims else 1
        raw = self.output_bytes(k, count * np.dtype(dtype).itemsize)
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(dims) if dims else ())

    def close(self) -> None:
        for region in self.regions:
            if region is not None:
                region.close()
        self.regions = []

    def __enter__(self) -> "Io":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def vts_io(inputs: Sequence[np.ndarray | bytes | None], outputs: Sequence[int], *,
           input_dims: Sequence[Sequence[int]] | None = None, output_dims: Sequence[Sequence[int]] | None = None,
           kind: str = "ashmem") -> Io:
    """The VTS request layout (`createRequest`): pool 0 holds every input, pool 1 every output, each at
    a 4-byte aligned offset with its exact length; an input without data has no value."""
    args_in, offset = [], 0
    placed = []
    for k, x in enumerate(inputs):
        if x is None:
            args_in.append(RequestArgument(has_no_value=True))
            placed.append(None)
            continue
        raw = x if isinstance(x, bytes) else np.ascontiguousarray(x).tobytes()
        dims = tuple(input_dims[k]) if input_dims is not None else ()
        args_in.append(RequestArgument(False, DataLocation(0, offset, len(raw)), dims))
        placed.append((offset, raw))
        offset = _align(offset + len(raw))
    in_region = Region(kind, max(offset, 1))
    for item in placed:
        if item is not None:
            in_region.write(*item)
    args_out, out_at, offset = [], [], 0
    for k, n in enumerate(outputs):
        dims = tuple(output_dims[k]) if output_dims is not None else ()
        args_out.append(RequestArgument(False, DataLocation(1, offset, int(n)), dims))
        out_at.append((1, offset))
        offset = _align(offset + int(n))
    out_region = Region(kind, max(offset, 1))
    return Io(Request(args_in, args_out, [in_region.pool, out_region.pool]), [in_region, out_region], out_at)


def separate_io(inputs: Sequence[Shared | Token], outputs: Sequence[Shared | Token]) -> Io:
    """Every argument in its own pool: shared memory (offset 0, exact length) or a driver buffer token
    (one pool per distinct token, offset = length = 0)."""
    pools: list[MemoryPool] = []
    regions: list[Region | None] = []
    token_pools: dict[int, int] = {}
    out_at: list[tuple[int, int]] = []

    def arg(spec: Shared | Token) -> RequestArgument:
        if isinstance(spec, Token):
            if spec.token not in token_pools:
                token_pools[spec.token] = len(pools)
                pools.append(MemoryPool(token=spec.token))
                regions.append(None)
            return RequestArgument(False, DataLocation(token_pools[spec.token], 0, 0), tuple(spec.dims))
        region = shared_memory(spec.data, spec.nbytes, spec.kind)
        pools.append(region.pool)
        regions.append(region)
        return RequestArgument(False, DataLocation(len(pools) - 1, 0, spec.nbytes), tuple(spec.dims))

    args_in = [arg(s) for s in inputs]
    args_out = []
    for s in outputs:
        a = arg(s)
        args_out.append(a)
        out_at.append((a.location.pool_index, 0))
    return Io(Request(args_in, args_out, pools), regions, out_at)


# --- inputs stay as they were ----------------------------------------------------------------------
def _output_spans(request: Request) -> dict[int, list[tuple[int, int]]]:
    """Per pool, the [start, end) regions of the request's outputs (an input overlapping one may change)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for arg in request.outputs:
        try:
            if not arg.has_no_value:
                loc = arg.location
                spans.setdefault(int(loc.pool_index), []).append((int(loc.offset), int(loc.offset) + int(loc.length)))
        except (AttributeError, TypeError, ValueError):
            continue
    return spans


class InputGuard:
    """The bytes of a request's input regions before an execution, to check afterwards that the driver
    wrote none of them (§2.2 rule 8). Regions the kit cannot map (a malformed pool, out of bounds, a
    driver buffer) or that overlap an output are left out."""

    def __init__(self, request: Request) -> None:
        self._regions: list[tuple[int, int, int, Any, bytes]] = []   # (input, pool, offset, mapping, bytes)
        try:
            inputs, pools, outputs = list(request.inputs), list(request.pools), _output_spans(request)
        except (AttributeError, TypeError):
            return
        mapped: dict[int, Any] = {}
        for k, arg in enumerate(inputs):
            try:
                if arg.has_no_value:
                    continue
                index, offset, length = int(arg.location.pool_index), int(arg.location.offset), int(arg.location.length)
                if not 0 <= index < len(pools) or pools[index].token is not None:
                    continue
                if index not in mapped:
                    mapped[index] = map_pool(pools[index])
                view = mapped[index]
                if length == 0 and isinstance(view, MappedImage):   # a non-BLOB buffer is used whole
                    offset, length = 0, view.size
                if offset < 0 or length <= 0 or offset + length > view.size:
                    continue
                if any(start < offset + length and offset < end for start, end in outputs.get(index, ())):
                    continue
                self._regions.append((k, index, offset, view, bytes(view.buffer[offset:offset + length])))
            except Exception:  # (whatever the kit cannot read back, it does not judge)
                continue

    def check(self, what: str) -> None:
        """Fail naming the first input whose region changed."""
        regions, self._regions = self._regions, []
        for k, pool, offset, view, before in regions:
            now = bytes(view.buffer[offset:offset + len(before)])
            if now != before:
                i = next(j for j in range(len(before)) if now[j] != before[j])
                raise Fail(f"{what}: input {k} was written (byte {i} of its {len(before)}-byte region at offset "
                           f"{offset} of pool {pool} went from 0x{before[i]:02x} to 0x{now[i]:02x}); a driver never "
                           "writes to an execution's inputs (§2.2 rule 8)")


@contextlib.contextmanager
def inputs_kept(request: Request, what: str) -> Iterator[None]:
    """Around a driver call that executes `request`: afterwards its input regions are unchanged."""
    guard = InputGuard(request)
    yield
    guard.check(what)


# --- executions -------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one execution gave, as the VTS reads it."""

    status: ErrorStatus
    shapes: list[OutputShape]
    timing: Timing
    message: str = ""
    #: The error was raised at launch (async / fenced / burst call), not reported afterwards.
    launch: bool = False
    fenced_timing: Timing | None = None

    def describe(self) -> str:
        text = status_name(self.status)
        if self.message:
            text += f" ({self.message})"
        return text


def _shapes(value: Any, what: str) -> list[OutputShape]:
    if value is None:
        return []
    try:
        shapes = list(value)
    except TypeError:
        raise Fail(f"{what} returned output shapes {value!r}, not a list of OutputShape") from None
    for s in shapes:
        if not hasattr(s, "dimensions") or not hasattr(s, "is_sufficient"):
            raise Fail(f"{what} returned output shapes {value!r}, not a list of OutputShape")
    return shapes


def _timing(value: Any, what: str) -> Timing:
    if not isinstance(value, Timing):
        raise Fail(f"{what} returned timing {value!r}, not a Timing")
    return value


def _pair(value: Any, what: str) -> tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"{what} returned {value!r}, expected (output shapes, timing)")
    return value[0], value[1]


def _error(e: NnError, launch: bool = False) -> Outcome:
    return Outcome(e.status, list(e.output_shapes or []), Timing(), e.message, launch)


def wait_fence(kit: Kit, fd: int, what: str) -> None:
    """Wait until a sync fence fd is signalled (readable), at most the kit's time limit (`Hangs`)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    ready: list[tuple[int, int]] = []

    def signalled(seconds: float) -> bool:
        ready[:] = poller.poll(max(1, int(seconds * 1000)))
        return bool(ready)

    try:
        ok, limit, note = kit.wait_until(signalled, f"the sync fence of {what}")
    except OSError as e:
        raise Fail(f"{what}: the returned sync fence {fd} cannot be waited on: {e}") from None
    if not ok:
        raise DriverHang(f"{what}: the returned sync fence {fd} was never signalled (waited {limit:g} s){note}")
    if any(events & select.POLLNVAL for _, events in ready):
        raise Fail(f"{what}: the returned sync fence {fd} is not an open file descriptor")


def execute(kit: Kit, prepared: Any, request: Request, executor: str, measure: MeasureTiming = MeasureTiming.NO,
            deadline: int | None = None, loop_timeout_ns: int | None = None) -> Outcome:
    """One execution of `request` on `prepared` through `executor` (see EXECUTORS); its inputs must be
    unchanged afterwards (`InputGuard`)."""
    guard = InputGuard(request)
    outcome = _execute(kit, prepared, request, executor, measure, deadline, loop_timeout_ns)
    guard.check(f"{executor} execution")
    return outcome


def _execute(kit: Kit, prepared: Any, request: Request, executor: str, measure: MeasureTiming,
             deadline: int | None, loop_timeout_ns: int | None) -> Outcome:
    if executor == "sync":
        what = "execute_synchronously"
        try:
            value = kit.call(what, prepared.execute_synchronously, request, measure, deadline, loop_timeout_ns)
        except NnError as e:
            return _error(e)
        shapes, timing = _pair(value, what)
        return Outcome(ErrorStatus.NONE, _shapes(shapes, what), _timing(timing, what))
    if executor == "async":
        return _execute_async(kit, prepared, request, measure, deadline, loop_timeout_ns)
    if executor == "fenced":
        return _execute_fenced(kit, prepared, request, measure, deadline, loop_timeout_ns)
    if executor == "burst":
        return _execute_burst(kit, prepared, request, measure, deadline, loop_timeout_ns)
    if executor == "reusable":
        return _execute_reusable(kit, prepared, request, measure, deadline, loop_timeout_ns)
    raise ValueError(f"unknown executor {executor!r}")


def _execute_async(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming, deadline: int | None,
                   loop_timeout_ns: int | None) -> Outcome:
    what = "execute (asynchronous)"
    done = threading.Event()
    got: list[tuple[Any, Any, Any]] = []

    def callback(status: Any = None, shapes: Any = None, timing: Any = None, *rest: Any) -> None:
        got.append((status, shapes, timing))
        done.set()

    try:
        kit.call(what, prepared.execute, request, measure, deadline, loop_timeout_ns, callback)
    except NnError as e:
        if got:
            raise Fail(f"{what} both called the callback ({status_name(got[0][0])}) and raised "
                       f"{status_name(e.status)} at launch") from None
        return _error(e, launch=True)
    kit.wait(done, f"the callback of {what}")
    status, shapes, timing = got[0]
    try:
        status = ErrorStatus(status)
    except (ValueError, TypeError):
        raise Fail(f"the callback of {what} was called with status {status!r}, not an ErrorStatus") from None
    return Outcome(status, _shapes(shapes, f"the callback of {what}"), _timing(timing, f"the callback of {what}"))


def _execute_fenced(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming, deadline: int | None,
                    loop_timeout_ns: int | None, wait_for: Sequence[int] = ()) -> Outcome:
    what = "execute_fenced"
    try:
        value = kit.call(what, prepared.execute_fenced, request, list(wait_for), measure, deadline,
                         loop_timeout_ns, None)
    except NnError as e:
        return _error(e, launch=True)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"{what} returned {value!r}, expected (sync fence fd, IFencedExecutionCallback)")
    fd, callback = value
    if not isinstance(fd, int) or fd < -1:
        raise Fail(f"{what} returned sync fence {fd!r}, expected an fd or -1")
    return _fenced_outcome(kit, fd, callback, what)


def _fenced_outcome(kit: Kit, fd: int, callback: Any, what: str, after_fence: Any = None) -> Outcome:
    """What a fenced execution reports: waits on its sync fence (after `after_fence(fd)`, a check that
    uses the fence first), then reads status and timings from its callback; closes the fence."""
    if callback is None or not hasattr(callback, "get_execution_info"):
        raise Fail(f"{what} returned {callback!r} instead of an IFencedExecutionCallback")
    try:
        if fd >= 0:
            if after_fence is not None:
                after_fence(fd)
            wait_fence(kit, fd, what)
        info = kit.call("IFencedExecutionCallback.get_execution_info", callback.get_execution_info)
    finally:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    if not isinstance(info, (tuple, list)) or len(info) != 3:
        raise Fail(f"get_execution_info returned {info!r}, expected (status, timing launched, timing fenced)")
    status, launched, fenced = info
    try:
        status = ErrorStatus(status)
    except (ValueError, TypeError):
        raise Fail(f"get_execution_info returned status {status!r}, not an ErrorStatus") from None
    return Outcome(status, [], _timing(launched, "get_execution_info"), "", False,
                   _timing(fenced, "get_execution_info"))


def _execute_burst(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming, deadline: int | None,
                   loop_timeout_ns: int | None) -> Outcome:
    burst = kit.call("configure_execution_burst", prepared.configure_execution_burst)
    if burst is None or not hasattr(burst, "execute_synchronously"):
        raise Fail(f"configure_execution_burst returned {burst!r}, not an IBurst")
    what = "IBurst.execute_synchronously"
    tokens = list(range(len(request.pools)))
    try:
        value = kit.call(what, burst.execute_synchronously, request, tokens, measure, deadline, loop_timeout_ns)
    except NnError as e:
        return _error(e, launch=True)
    finally:
        for t in tokens:
            kit.call("IBurst.release_memory_resource", burst.release_memory_resource, t)
    shapes, timing = _pair(value, what)
    return Outcome(ErrorStatus.NONE, _shapes(shapes, what), _timing(timing, what))


def _execute_reusable(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming, deadline: int | None,
                      loop_timeout_ns: int | None) -> Outcome:
    """A reusable execution of `request`, computed twice: when the first computation succeeds, the second,
    made after the kit overwrote every output region with 0xFF bytes, must succeed too and write the
    outputs again (its outcome is the one returned). With a deadline, one computation (a second one is
    later, against the same deadline); a failed first computation is the outcome."""
    what = "create_reusable_execution"
    create = getattr(prepared, what, None)
    if create is None:
        raise Fail(f"the prepared model has no {what} (IPreparedModel's default gives one)")
    try:
        execution = kit.call(what, create, request, measure, loop_timeout_ns)
    except NnError as e:
        return _error(e, launch=True)
    if execution is None or not hasattr(execution, "compute"):
        raise Fail(f"{what} returned {execution!r}, not an IExecution")
    outcome = None
    for attempt in range(1 if deadline is not None else 2):
        if attempt:
            if outcome.status != ErrorStatus.NONE:
                return outcome
            _poison_outputs(request)
        what = f"IExecution.compute ({'second' if attempt else 'first'} computation)"
        try:
            value = kit.call(what, execution.compute, deadline)
        except NnError as e:
            if attempt:
                raise Fail(f"a reusable execution computed once, then its second computation failed: "
                           f"{status_name(e.status)}: {e.message}") from None
            outcome = _error(e)
            continue
        shapes, timing = _pair(value, what)
        outcome = Outcome(ErrorStatus.NONE, _shapes(shapes, what), _timing(timing, what))
    return outcome


def _poison_outputs(request: Request) -> None:
    """Every output region of `request` the kit can map, overwritten with 0xFF bytes (NaN for floats)."""
    for index, spans in _output_spans(request).items():
        try:
            view = map_pool(request.pools[index])
            for start, end in spans:
                view.buffer[start:end] = b"\xff" * (end - start)
        except Exception:  # (what the kit cannot map, it leaves as it is)
            continue


def execute_fenced_after(kit: Kit, prepared: Any, request: Request, wait_for: Sequence[int],
                         measure: MeasureTiming = MeasureTiming.NO) -> Outcome:
    """A fenced execution that waits on `wait_for` first."""
    with inputs_kept(request, "fenced execution"):
        return _execute_fenced(kit, prepared, request, measure, None, None, wait_for)


def execute_fenced_chain(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming) -> Outcome:
    """VTS FENCED: execute_fenced; if it returns a sync fence, a second execute_fenced waiting on that fence
    must succeed too. The outcome is the first execution's."""
    with inputs_kept(request, "fenced execution"):
        return _fenced_chain(kit, prepared, request, measure)


def _fenced_chain(kit: Kit, prepared: Any, request: Request, measure: MeasureTiming) -> Outcome:
    what = "execute_fenced"
    try:
        value = kit.call(what, prepared.execute_fenced, request, [], measure, None, None, None)
    except NnError as e:
        return _error(e, launch=True)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], int):
        raise Fail(f"{what} returned {value!r}, expected (sync fence fd, IFencedExecutionCallback)")
    fd, callback = value

    def second_waits(fence: int) -> None:
        second = _execute_fenced(kit, prepared, request, MeasureTiming.NO, None, None, [fence])
        if second.status != ErrorStatus.NONE:
            raise Fail(f"a second execute_fenced waiting on the fence the first returned answered "
                       f"{second.describe()}, expected NONE")

    return _fenced_outcome(kit, fd, callback, what, second_waits)


# --- expectations -----------------------------------------------------------------------------------
def expect(outcome: Outcome, allowed: ErrorStatus | Sequence[ErrorStatus], what: str) -> None:
    """The status is one of `allowed`; on error there are no output shapes (except
    OUTPUT_INSUFFICIENT_SIZE) and no timing."""
    allowed = (allowed,) if isinstance(allowed, ErrorStatus) else tuple(allowed)
    if outcome.status not in allowed:
        raise Fail(f"{what}: the driver answered {outcome.describe()}, expected "
                   + " or ".join(status_name(s) for s in allowed))
    if outcome.status not in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE) and outcome.shapes:
        raise Fail(f"{what}: {status_name(outcome.status)} came with output shapes {outcome.shapes}")
    if outcome.status != ErrorStatus.NONE and (outcome.timing.time_on_device != NO_TIMING
                                               or outcome.timing.time_in_driver != NO_TIMING):
        raise Fail(f"{what}: {status_name(outcome.status)} came with a measured timing {outcome.timing}")


def expect_no_timing(outcome: Outcome, what: str) -> None:
    """MeasureTiming NO: both durations are UINT64_MAX."""
    if outcome.timing.time_on_device != NO_TIMING or outcome.timing.time_in_driver != NO_TIMING:
        raise Fail(f"{what}: timing was not requested but the driver reported {outcome.timing} "
                   "(both must be UINT64_MAX)")


def expect_timing_order(timing: Timing, what: str) -> None:
    """When both are reported, time on the device is at most the time in the driver."""
    if timing.time_on_device != NO_TIMING and timing.time_in_driver != NO_TIMING \
            and timing.time_on_device > timing.time_in_driver:
        raise Fail(f"{what}: time on device {timing.time_on_device} us > time in driver "
                   f"{timing.time_in_driver} us")


def prepare(kit: Kit, model: Model, what: str = "the model", **kwargs: Any) -> Any:
    """prepare_model with FAST_SINGLE_ANSWER, MEDIUM, no deadline, no cache; a failure of a fully
    supported model fails the check (the caller checks support first)."""
    from ...hal import ExecutionPreference, Priority
    preference = kwargs.pop("preference", ExecutionPreference.FAST_SINGLE_ANSWER)
    priority = kwargs.pop("priority", Priority.MEDIUM)
    try:
        prepared = kit.call("prepare_model", kit.driver.prepare_model, model, preference, priority,
                            kwargs.pop("deadline", None), kwargs.pop("cache", None), kwargs.pop("token", None))
    except NnError as e:
        raise Fail(f"prepare_model failed on {what}, which the driver reports as supported: "
                   f"{status_name(e.status)}: {e.message}") from None
    if prepared is None:
        raise Fail(f"prepare_model returned no prepared model for {what}")
    return prepared
