"""Model and request validation shared by the runtime and every driver.

Every check raises `NnError(INVALID_ARGUMENT, message)` where the message names the operand,
operation, argument or pool at fault; malformed input never raises anything else.
"""
from ..lazy import exports

#: Each export and the submodule that defines it, imported on first use (`nnapi.lazy`).
_EXPORTS = {
    "validate_model": ".model",
    "validate_preference": ".model",
    "validate_priority": ".model",
    "RequestChecker": ".request",
    "validate_request": ".request",
    "ConstantReader": ".shapes",
    "build_operation_context": ".shapes",
    "infer_model_shapes": ".shapes",
    "optional_input_fed_by_request": ".shapes",
}
__getattr__ = exports(__name__, _EXPORTS)

__all__ = ["RequestChecker", "validate_model", "validate_preference", "validate_priority", "validate_request",
           "ConstantReader", "build_operation_context", "infer_model_shapes", "optional_input_fed_by_request"]
