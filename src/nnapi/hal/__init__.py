"""nnapi.hal: the contract between the runtime and drivers. Imports nothing else of the package."""
from .constants import (BYTE_SIZE_OF_CACHE_TOKEN, LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS,
                        MAX_NUMBER_OF_CACHE_FILES, MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES, NO_DEADLINE,
                        NO_TIMING)
from .enums import (DeviceType, ErrorStatus, ExecutionPreference, FusedActivationFunc, HalVersion,
                    MeasureTiming, OperandLifeTime, OperandType, OperationType, PaddingScheme, Priority,
                    ResultCode)
from .errors import NnError, invalid, result_code_for, status_for
from .identity import calling_client, current_client
from .interfaces import (ExecutionCallback, IBuffer, IBurst, IDevice, IExecution, IFencedExecutionCallback,
                         IPreparedModel, SimpleBurst, SimpleExecution, check_burst_tokens)
from .shapes import byte_size, combine_dims, is_fully_specified, is_int, is_scalar_type, numpy_dtype
from .types import (BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DataLocation, DeviceInfo,
                    MemoryHandle, MemoryPool, Model, Operand, OperandPerformance, Operation, OutputShape,
                    PerformanceInfo, Request, RequestArgument, Subgraph, SymmPerChannelQuantParams, Timing)

__all__ = [name for name in dir() if not name.startswith("_")]
