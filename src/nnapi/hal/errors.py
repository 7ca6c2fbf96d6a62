"""The one exception type of the stack: a HAL status plus a message naming what is wrong."""
from __future__ import annotations

from .enums import ErrorStatus, ResultCode

_CODE_FOR_STATUS = {
    ErrorStatus.NONE: ResultCode.NO_ERROR,
    ErrorStatus.DEVICE_UNAVAILABLE: ResultCode.UNAVAILABLE_DEVICE,
    ErrorStatus.GENERAL_FAILURE: ResultCode.OP_FAILED,
    ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: ResultCode.OUTPUT_INSUFFICIENT_SIZE,
    ErrorStatus.INVALID_ARGUMENT: ResultCode.BAD_DATA,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT: ResultCode.MISSED_DEADLINE_TRANSIENT,
    ErrorStatus.MISSED_DEADLINE_PERSISTENT: ResultCode.MISSED_DEADLINE_PERSISTENT,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ResultCode.RESOURCE_EXHAUSTED_PERSISTENT,
}
_STATUS_FOR_CODE = {
    ResultCode.BAD_DATA: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.UNEXPECTED_NULL: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.OUTPUT_INSUFFICIENT_SIZE: ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
    ResultCode.UNAVAILABLE_DEVICE: ErrorStatus.DEVICE_UNAVAILABLE,
    ResultCode.MISSED_DEADLINE_TRANSIENT: ErrorStatus.MISSED_DEADLINE_TRANSIENT,
    ResultCode.MISSED_DEADLINE_PERSISTENT: ErrorStatus.MISSED_DEADLINE_PERSISTENT,
    ResultCode.RESOURCE_EXHAUSTED_TRANSIENT: ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
    ResultCode.RESOURCE_EXHAUSTED_PERSISTENT: ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
}


def result_code_for(status: ErrorStatus) -> ResultCode:
    """The NDK result code the runtime reports for a HAL status (Android's convertErrorStatusToResultCode)."""
    return _CODE_FOR_STATUS.get(ErrorStatus(status), ResultCode.OP_FAILED)


def status_for(code: ResultCode) -> ErrorStatus:
    """The HAL status of an NDK result code (BAD_DATA -> INVALID_ARGUMENT, most others GENERAL_FAILURE)."""
    return _STATUS_FOR_CODE.get(ResultCode(code), ErrorStatus.GENERAL_FAILURE)


class NnError(Exception):
    """A failed call. `status` is the HAL `ErrorStatus`, `code` the NDK `ResultCode` the runtime reports,
    `message` names the operand, operation or field at fault."""

    def __init__(self, status: ErrorStatus | ResultCode, message: str, *,
                 output_shapes: list | None = None) -> None:
        if isinstance(status, ResultCode):
            self.code = status
            self.status = status_for(status)
        else:
            self.status = ErrorStatus(status)
            self.code = result_code_for(self.status)
        super().__init__(f"{self.code.name}: {message}" if isinstance(status, ResultCode)
                         else f"{self.status.name}: {message}")
        self.message = message
        #: Set with OUTPUT_INSUFFICIENT_SIZE: the `OutputShape` of every output.
        self.output_shapes = output_shapes

    def __reduce__(self):  # picklable, so an error can cross a process boundary
        return (_rebuild, (int(self.status), int(self.code), self.message, self.output_shapes))


def _rebuild(status: int, code: int, message: str, output_shapes: list | None) -> NnError:
    err = NnError(ErrorStatus(status), message, output_shapes=output_shapes)
    err.code = ResultCode(code)
    return err


def invalid(message: str) -> NnError:
    """Shorthand for the most common failure: `NnError(INVALID_ARGUMENT, message)`."""
    return NnError(ErrorStatus.INVALID_ARGUMENT, message)
