"""Enumerations of NN HAL 1.0-1.3, merged into one version (values as in Android's types.hal)."""
from __future__ import annotations

import enum


class HalVersion(enum.IntEnum):
    """The NN HAL version that introduced an operation or operand type."""

    V1_0 = 10
    V1_1 = 11
    V1_2 = 12
    V1_3 = 13
    #: The stable AIDL HAL (NNAPI feature level 6 and later): operations added after RANK.
    AIDL = 20

    def __str__(self) -> str:
        if self == HalVersion.AIDL:
            return "AIDL"
        return f"{self.value // 10}.{self.value % 10}"


class OperandType(enum.IntEnum):
    """Operand types; OEM types exist for completeness and are never supported."""

    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    SUBGRAPH = 15
    OEM = 10000
    TENSOR_OEM_BYTE = 10001

    @property
    def is_scalar(self) -> bool:
        return self in _SCALAR_TYPES

    @property
    def is_tensor(self) -> bool:
        return not self.is_scalar and self not in (OperandType.SUBGRAPH, OperandType.OEM)

    @property
    def is_quantized(self) -> bool:
        return self in _QUANT_TYPES

    @property
    def is_float(self) -> bool:
        return self in (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16,
                        OperandType.FLOAT32, OperandType.FLOAT16)

    @property
    def element_size(self) -> int:
        """Bytes per element (SUBGRAPH counts as 4, OEM tensors as 1)."""
        return _ELEMENT_SIZE[self]


_SCALAR_TYPES = frozenset({OperandType.FLOAT32, OperandType.INT32, OperandType.UINT32,
                           OperandType.BOOL, OperandType.FLOAT16, OperandType.OEM})
_QUANT_TYPES = frozenset({OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
                          OperandType.TENSOR_QUANT8_SYMM, OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                          OperandType.TENSOR_QUANT16_ASYMM, OperandType.TENSOR_QUANT16_SYMM})
_ELEMENT_SIZE = {
    OperandType.FLOAT32: 4, OperandType.INT32: 4, OperandType.UINT32: 4,
    OperandType.TENSOR_FLOAT32: 4, OperandType.TENSOR_INT32: 4, OperandType.TENSOR_QUANT8_ASYMM: 1,
    OperandType.BOOL: 1, OperandType.TENSOR_QUANT16_SYMM: 2, OperandType.TENSOR_FLOAT16: 2,
    OperandType.TENSOR_BOOL8: 1, OperandType.FLOAT16: 2, OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: 1,
    OperandType.TENSOR_QUANT16_ASYMM: 2, OperandType.TENSOR_QUANT8_SYMM: 1,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: 1, OperandType.SUBGRAPH: 4, OperandType.OEM: 1,
    OperandType.TENSOR_OEM_BYTE: 1,
}

#: The valid ranges of operand types (`OperandTypeRange` in types.hal).
OPERAND_TYPE_FUNDAMENTAL_MAX = 15
OPERAND_TYPE_OEM_MIN, OPERAND_TYPE_OEM_MAX = 10000, 10001


class OperationType(enum.IntEnum):
    """All 102 operation types of NN HAL 1.3, BATCH_MATMUL of the AIDL HAL (NNAPI feature level 6, which
    TFLite models need), and OEM_OPERATION; `.hal_version` tells where each appeared."""

    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    BATCH_MATMUL = 102
    OEM_OPERATION = 10000

    @property
    def hal_version(self) -> HalVersion:
        """The NN HAL version that introduced this operation."""
        if self == OperationType.OEM_OPERATION or self.value <= 28:
            return HalVersion.V1_0
        if self.value <= 37:
            return HalVersion.V1_1
        if self.value <= 94:
            return HalVersion.V1_2
        if self.value <= 101:
            return HalVersion.V1_3
        return HalVersion.AIDL


#: The valid ranges of operation types (`OperationTypeRange` in types.hal: 0..101 there; BATCH_MATMUL,
#: 102 in the AIDL HAL, extends the fundamental range here, so FUNDAMENTAL_MAX + 1 is still the first
#: invalid code).
OPERATION_TYPE_FUNDAMENTAL_MAX = 102
OPERATION_TYPE_OEM_MIN = OPERATION_TYPE_OEM_MAX = 10000


class OperandLifeTime(enum.IntEnum):
    """Where an operand's value comes from (HAL 1.3 names: SUBGRAPH_INPUT/OUTPUT)."""

    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class ErrorStatus(enum.IntEnum):
    """HAL 1.3 error status."""

    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8


class ResultCode(enum.IntEnum):
    """NDK result codes (`ANEURALNETWORKS_*`), what the app-facing runtime reports."""

    NO_ERROR = 0
    OUT_OF_MEMORY = 1
    INCOMPLETE = 2
    UNEXPECTED_NULL = 3
    BAD_DATA = 4
    OP_FAILED = 5
    BAD_STATE = 6
    UNMAPPABLE = 7
    OUTPUT_INSUFFICIENT_SIZE = 8
    UNAVAILABLE_DEVICE = 9
    MISSED_DEADLINE_TRANSIENT = 10
    MISSED_DEADLINE_PERSISTENT = 11
    RESOURCE_EXHAUSTED_TRANSIENT = 12
    RESOURCE_EXHAUSTED_PERSISTENT = 13
    DEAD_OBJECT = 14


class Priority(enum.IntEnum):
    """HAL priority of a prepared model relative to the app's other models."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2


class ExecutionPreference(enum.IntEnum):
    """What the app wants the compilation optimised for."""

    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


class DeviceType(enum.IntEnum):
    """Kind of device behind a driver (`ANEURALNETWORKS_DEVICE_*`)."""

    UNKNOWN = 0
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


class FusedActivationFunc(enum.IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


class PaddingScheme(enum.IntEnum):
    """Implicit padding of convolution and pooling operations."""

    SAME = 1
    VALID = 2
