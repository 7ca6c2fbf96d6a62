"""The one exception type of the stack: a HAL status plus a message naming what is wrong."""
from __future__ import annotations

from .enums import ErrorStatus


class NnError(Exception):
    """A failed call: `status` is the HAL `ErrorStatus`, `message` names the operand, operation or field at fault."""

    def __init__(self, status: ErrorStatus, message: str, *, output_shapes: list | None = None) -> None:
        super().__init__(f"{status.name}: {message}")
        self.status = ErrorStatus(status)
        self.message = message
        #: Set with OUTPUT_INSUFFICIENT_SIZE: the `OutputShape` of every output.
        self.output_shapes = output_shapes

    def __reduce__(self):  # picklable, so an error can cross a process boundary
        return (_rebuild, (int(self.status), self.message, self.output_shapes))


def _rebuild(status: int, message: str, output_shapes: list | None) -> NnError:
    return NnError(ErrorStatus(status), message, output_shapes=output_shapes)


def invalid(message: str) -> NnError:
    """Shorthand for the most common failure: `NnError(INVALID_ARGUMENT, message)`."""
    return NnError(ErrorStatus.INVALID_ARGUMENT, message)
