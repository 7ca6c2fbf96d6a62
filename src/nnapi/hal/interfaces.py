"""The driver interfaces: IDevice, IPreparedModel, IBuffer, IFencedExecutionCallback.

Shaped like Android's single AIDL interface (no `_1_x` suffixes). Every argument and
result is plain data from `types` / `enums` (or a file descriptor), so each call can
cross a process boundary. Failures raise `NnError`. Deadlines are absolute
`time.monotonic_ns()` values; None (or NO_DEADLINE) means none.

Quality of service: `prepare_model`, `prepare_model_from_cache` and the three execute calls also
take an optional keyword `client` (a `ClientId`, the caller's user id; None: the calling process,
or for executions the client that prepared the model). Drivers schedule per client; callers that
do not need it (the in-process runtime) leave it out, so drivers without QoS need not accept it.
Deadline and resource errors: MISSED_DEADLINE_PERSISTENT (passed at the call, or impossible even
on an idle device), MISSED_DEADLINE_TRANSIENT (waiting work made it miss, or aborted while
running), RESOURCE_EXHAUSTED_TRANSIENT (queue full), RESOURCE_EXHAUSTED_PERSISTENT (the model
needs more than the driver has).
"""
from __future__ import annotations

import abc
from typing import Callable, Sequence

from .enums import ErrorStatus, ExecutionPreference, MeasureTiming, Priority
from .types import (BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DeviceInfo, MemoryHandle,
                    Model, OutputShape, Request, Timing)

#: Called once when an asynchronous execution ends: status, output shapes, timing.
ExecutionCallback = Callable[[ErrorStatus, list[OutputShape], Timing], None]


class IBuffer(abc.ABC):
    """A driver-managed buffer (memory domain), reached by its token or by copies."""

    @abc.abstractmethod
    def copy_to(self, dst: MemoryHandle) -> None:
        """Copy the whole buffer into shared memory of exactly its size."""

    @abc.abstractmethod
    def copy_from(self, src: MemoryHandle, dimensions: Sequence[int]) -> None:
        """Fill the buffer from shared memory, fixing its dimensions."""


class IFencedExecutionCallback(abc.ABC):
    @abc.abstractmethod
    def get_execution_info(self) -> tuple[ErrorStatus, Timing, Timing]:
        """Status, timing since launch, timing since the wait fences were signalled."""


class IBurst(abc.ABC):
    """A channel of consecutive synchronous executions of one prepared model (Android's IBurst).

    The caller names each request pool with a memory identifier token (>= 0; -1: not cached), so a
    driver (and a service in between) may keep the pool mapped under that token across executions
    instead of receiving and mapping it again; `release_memory_resource` forgets one token.
    """

    @abc.abstractmethod
    def execute_synchronously(self, request: Request, memory_identifier_tokens: Sequence[int],
                              measure: MeasureTiming, deadline: int | None, loop_timeout_ns: int | None, *,
                              client: ClientId | None = None) -> tuple[list[OutputShape], Timing]:
        """As `IPreparedModel.execute_synchronously`; one token per request pool (INVALID_ARGUMENT
        when the counts differ or a token < -1)."""

    @abc.abstractmethod
    def release_memory_resource(self, token: int) -> None:
        """Forget the pool cached under `token` (an unknown token is ignored)."""


class SimpleBurst(IBurst):
    """A burst that caches nothing: each execution goes to `execute_synchronously` of its prepared
    model. What `IPreparedModel.configure_execution_burst` gives by default."""

    def __init__(self, prepared: "IPreparedModel") -> None:
        self.prepared = prepared

    def execute_synchronously(self, request, memory_identifier_tokens, measure, deadline, loop_timeout_ns, *,
                              client=None):
        check_burst_tokens(request, memory_identifier_tokens)
        kwargs = {} if client is None else {"client": client}
        return self.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns, **kwargs)

    def release_memory_resource(self, token: int) -> None:
        return None


def check_burst_tokens(request: Request, tokens: Sequence[int]) -> None:
    """INVALID_ARGUMENT unless there is one integer token >= -1 per request pool."""
    from .errors import invalid
    if len(tokens) != len(request.pools):
        raise invalid(f"burst: {len(tokens)} memory identifier tokens for {len(request.pools)} request pools")
    for k, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) or t < -1:
            raise invalid(f"burst: memory identifier token {k} is {t!r}, expected an integer >= -1")


class IExecution(abc.ABC):
    """One request bound to a prepared model once, computed again and again (Android's IExecution, made by
    `IPreparedModel.create_reusable_execution`): the driver may check and map the request once; each
    computation reads the request's memory as it is then and writes its outputs there. One computation
    at a time."""

    @abc.abstractmethod
    def compute(self, deadline: int | None = None) -> tuple[list[OutputShape], Timing]:
        """Run the bound request to completion (as `IPreparedModel.execute_synchronously`)."""


class SimpleExecution(IExecution):
    """A reusable execution that keeps nothing: each computation is an `execute_synchronously` of its
    prepared model. What `IPreparedModel.create_reusable_execution` gives by default."""

    def __init__(self, prepared: "IPreparedModel", request: Request, measure: MeasureTiming,
                 loop_timeout_ns: int | None, client: ClientId | None = None) -> None:
        self.prepared, self.request, self.measure, self.loop_timeout_ns = prepared, request, measure, loop_timeout_ns
        self._kwargs = {} if client is None else {"client": client}

    def compute(self, deadline: int | None = None) -> tuple[list[OutputShape], Timing]:
        return self.prepared.execute_synchronously(self.request, self.measure, deadline, self.loop_timeout_ns,
                                                   **self._kwargs)


class IPreparedModel(abc.ABC):
    """A model compiled for one device."""

    def configure_execution_burst(self) -> IBurst:
        """A burst for consecutive executions of this model (default: one that caches nothing)."""
        return SimpleBurst(self)

    def create_reusable_execution(self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None,
                                  *, client: ClientId | None = None) -> IExecution:
        """`request` bound once for many computations (Android's createReusableExecution); an invalid
        request may be refused here (INVALID_ARGUMENT). Default: one that keeps nothing."""
        return SimpleExecution(self, request, measure, loop_timeout_ns, client)

    @abc.abstractmethod
    def execute(self, request: Request, measure: MeasureTiming, deadline: int | None,
                loop_timeout_ns: int | None, callback: ExecutionCallback, *, client: ClientId | None = None) -> None:
        """Launch asynchronously; launch errors (an invalid request) raise, everything else, a missed
        deadline included, reaches `callback`."""

    @abc.abstractmethod
    def execute_synchronously(self, request: Request, measure: MeasureTiming, deadline: int | None,
                              loop_timeout_ns: int | None, *, client: ClientId | None = None
                              ) -> tuple[list[OutputShape], Timing]:
        """Run to completion. OUTPUT_INSUFFICIENT_SIZE carries the shapes in `NnError.output_shapes`."""

    @abc.abstractmethod
    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: MeasureTiming,
                       deadline: int | None, loop_timeout_ns: int | None,
                       timeout_after_fence_ns: int | None, *, client: ClientId | None = None
                       ) -> tuple[int, IFencedExecutionCallback]:
        """Run after every fence in `wait_for` (eventfd-style sync fences) is signalled.

        Returns a sync fence fd (-1 when already done) and a callback for status and timing.
        """


class IDevice(abc.ABC):
    """One driver's device."""

    @abc.abstractmethod
    def get_info(self) -> DeviceInfo:
        """Name, version string, device type and feature level."""

    @abc.abstractmethod
    def get_capabilities(self) -> Capabilities:
        ...

    @abc.abstractmethod
    def get_supported_operations(self, model: Model) -> list[bool]:
        """One flag per operation of the main subgraph; INVALID_ARGUMENT for an invalid model."""

    @abc.abstractmethod
    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        """(model cache files, data cache files), each at most MAX_NUMBER_OF_CACHE_FILES."""

    @abc.abstractmethod
    def prepare_model(self, model: Model, preference: ExecutionPreference, priority: Priority,
                      deadline: int | None, cache: CacheHandles | None, token: bytes | None, *,
                      client: ClientId | None = None) -> IPreparedModel:
        ...

    @abc.abstractmethod
    def prepare_model_from_cache(self, deadline: int | None, cache: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> IPreparedModel:
        """The priority comes with the cache (Q2)."""

    @abc.abstractmethod
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple[IBuffer, int]:
        """A driver-managed buffer and its token (> 0) for the given roles."""
