"""Plain-data HAL types: everything a HAL call carries, so it can cross a process boundary."""
from __future__ import annotations

from dataclasses import dataclass, field

from .enums import DeviceType, OperandLifeTime, OperandType, OperationType
from .shapes import byte_size, is_fully_specified


@dataclass(frozen=True)
class DataLocation:
    """Where a constant or an argument lives: pool index (or operand-values blob), offset, length."""

    pool_index: int = 0
    offset: int = 0
    length: int = 0


@dataclass(frozen=True)
class SymmPerChannelQuantParams:
    """Per-channel scales of a TENSOR_QUANT8_SYMM_PER_CHANNEL operand."""

    scales: tuple[float, ...]
    channel_dim: int


@dataclass
class Operand:
    """One operand of a subgraph. A 0 in `dimensions` is unknown; `()` is a scalar or unknown rank."""

    type: OperandType
    dimensions: tuple[int, ...] = ()
    number_of_consumers: int = 0
    scale: float = 0.0
    zero_point: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = field(default_factory=DataLocation)
    channel_quant: SymmPerChannelQuantParams | None = None

    @property
    def is_fully_specified(self) -> bool:
        """True when the size is known: scalars always, tensors with a known rank and no 0 dimension."""
        return is_fully_specified(self.type, self.dimensions)

    def byte_size(self, dimensions: tuple[int, ...] | None = None) -> int:
        """Bytes of the value for these (or the declared) dimensions; 0 when unknown."""
        return byte_size(self.type, self.dimensions if dimensions is None else dimensions)


@dataclass(frozen=True)
class Operation:
    """One operation: its type and the operand indexes it reads and writes."""

    type: OperationType
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass
class Subgraph:
    """Operands, operations in execution order, and the subgraph's inputs and outputs."""

    operands: list[Operand]
    operations: list[Operation]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


@dataclass(frozen=True)
class MemoryHandle:
    """A shared-memory handle: pool kind name, file descriptors, integers, size in bytes.

    Kinds (M3): "ashmem" (memfd), "mmap_fd" (ints: prot, offset low 32, offset high 32),
    "hardware_buffer_blob" and "hardware_buffer" (ints: the buffer's metadata).
    """

    name: str
    fds: tuple[int, ...]
    ints: tuple[int, ...]
    size: int


@dataclass(frozen=True)
class MemoryPool:
    """A pool of a model or a request: shared memory (`handle`), a driver buffer (`token`), or,
    in-process only, a caller's buffer used in place (`pointer`, Android's POINTER arguments).
    Exactly one is set; the service proxy turns pointers into shared memory.
    """

    handle: MemoryHandle | None = None
    token: int | None = None
    pointer: object | None = None  # a writable buffer object (memoryview / numpy array)

    @property
    def size(self) -> int:
        if self.handle is not None:
            return self.handle.size
        if self.pointer is not None:
            return memoryview(self.pointer).nbytes
        return 0


@dataclass
class Model:
    """A model: main subgraph, referenced subgraphs (IF/WHILE bodies), constant data and pools."""

    main: Subgraph
    referenced: list[Subgraph] = field(default_factory=list)
    operand_values: bytes = b""
    pools: list[MemoryPool] = field(default_factory=list)
    relax_computation_float32_to_float16: bool = False

    def subgraph(self, index: int | None) -> Subgraph:
        """The main subgraph (None) or referenced subgraph `index`."""
        return self.main if index is None else self.referenced[index]

    def all_subgraphs(self) -> list[Subgraph]:
        return [self.main, *self.referenced]


@dataclass(frozen=True)
class RequestArgument:
    """One input or output of a request; `dimensions` may refine the operand's unknown ones."""

    has_no_value: bool = False
    location: DataLocation = field(default_factory=DataLocation)
    dimensions: tuple[int, ...] = ()


@dataclass
class Request:
    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    pools: list[MemoryPool]


@dataclass(frozen=True)
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


@dataclass(frozen=True)
class Timing:
    """Microseconds on the device and in the driver; NO_TIMING (UINT64_MAX) when not measured."""

    time_on_device: int = 2**64 - 1
    time_in_driver: int = 2**64 - 1


@dataclass(frozen=True)
class PerformanceInfo:
    """Ratio to the CPU reference (lower is better): execution time and power usage."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass(frozen=True)
class OperandPerformance:
    type: OperandType
    info: PerformanceInfo


@dataclass(frozen=True)
class Capabilities:
    """What a device reports of its speed; `operand_performance` is sorted by type, without SUBGRAPH."""

    relaxed_float32_to_float16_performance_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: tuple[OperandPerformance, ...] = ()
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()

    def performance(self, operand_type: OperandType) -> PerformanceInfo:
        """Performance for one operand type; FLT_MAX for a type the device did not list."""
        for entry in self.operand_performance:
            if entry.type == operand_type:
                return entry.info
        return PerformanceInfo(3.4028234663852886e38, 3.4028234663852886e38)


@dataclass(frozen=True)
class BufferDesc:
    """Properties of a driver-managed buffer requested with `IDevice.allocate`."""

    dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class BufferRole:
    """A role of a driver-managed buffer: input or output `io_index` of prepared model `model_index`."""

    model_index: int
    io_index: int
    frequency: float = 1.0


@dataclass(frozen=True)
class CacheHandles:
    """File descriptors of the model-cache and data-cache files of one compilation."""

    model_cache: tuple[int, ...] = ()
    data_cache: tuple[int, ...] = ()


@dataclass(frozen=True)
class DeviceInfo:
    """Identity of a device, as `IDevice` reports it."""

    name: str
    version: str
    type: DeviceType
    feature_level: int = 30


@dataclass(frozen=True)
class ClientId:
    """Who calls a driver: the app's user id (Android's calling uid), which QoS schedules by (Q5).

    HAL calls take it as an optional `client` keyword; None means the calling process's uid. A
    driver service in another process fills it in from the connection's peer credentials.
    """

    uid: int

    @staticmethod
    def current() -> "ClientId":
        """The calling process's identity."""
        import os
        return ClientId(os.getuid())
