"""Importers: models from other formats as `nnapi.Model`s (`.tflite` today). The readers are imported
when first used (`load_tflite`), not with `nnapi`."""
from typing import Any

from .tflite.imported import ImportedModel, Problem, TensorInfo, UnsupportedOperatorsError


def __getattr__(name: str) -> Any:
    if name == "load_tflite":
        from .tflite import load_tflite
        return load_tflite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ImportedModel", "Problem", "TensorInfo", "UnsupportedOperatorsError", "load_tflite"]
