"""Operations: one module per family, each registering validate / prepare / execute.

Shared maths lives in helper modules whose names start with an underscore
(`_quant`, `_activation`, `_padding`, ...), so the registry does not import them as operations.
"""
from .context import OpContext, UnknownValue
from .registry import OperationRegistration, find_operation, register, registered_operations, resolve
from .tensor import Tensor, numpy_dtype

__all__ = ["OpContext", "UnknownValue", "OperationRegistration", "find_operation", "register",
           "registered_operations", "resolve", "Tensor", "numpy_dtype"]
