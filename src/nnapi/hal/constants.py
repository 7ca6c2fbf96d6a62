"""Constants of NN HAL 1.2/1.3 and the NDK that the stack mirrors exactly."""

BYTE_SIZE_OF_CACHE_TOKEN = 32
MAX_NUMBER_OF_CACHE_FILES = 32
MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES = 128
LOOP_TIMEOUT_DEFAULT_NS = 2_000_000_000
LOOP_TIMEOUT_MAXIMUM_NS = 15_000_000_000
#: "Not measured / not available" in `Timing`.
NO_TIMING = 2**64 - 1
#: The largest deadline value: means "no deadline" and must not overflow.
NO_DEADLINE = 2**64 - 1
