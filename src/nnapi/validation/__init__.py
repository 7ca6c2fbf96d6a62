"""Model and request validation shared by the runtime and every driver.

Every check raises `NnError(INVALID_ARGUMENT, message)` where the message names the operand,
operation, argument or pool at fault; malformed input never raises anything else.
"""
from .model import validate_model, validate_preference, validate_priority
from .request import RequestChecker, validate_request
from .shapes import ConstantReader, build_operation_context, infer_model_shapes, optional_input_fed_by_request

__all__ = ["RequestChecker", "validate_model", "validate_preference", "validate_priority", "validate_request",
           "ConstantReader", "build_operation_context", "infer_model_shapes", "optional_input_fed_by_request"]
