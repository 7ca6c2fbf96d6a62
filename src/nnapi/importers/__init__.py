"""Importers: models from other formats as `nnapi.Model`s (`.tflite` today). The readers are imported
when first used (`load_tflite`), not with `nnapi`."""
from ..lazy import exports
from .tflite.imported import ImportedModel, Problem, TensorInfo, UnsupportedOperatorsError

__getattr__ = exports(__name__, {"load_tflite": ".tflite"})


__all__ = ["ImportedModel", "Problem", "TensorInfo", "UnsupportedOperatorsError", "load_tflite"]
