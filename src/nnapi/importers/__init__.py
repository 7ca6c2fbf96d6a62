"""Importers: models from other formats as `nnapi.Model`s (`.tflite` today)."""
from .tflite import ImportedModel, Problem, TensorInfo, UnsupportedOperatorsError, load_tflite

__all__ = ["ImportedModel", "Problem", "TensorInfo", "UnsupportedOperatorsError", "load_tflite"]
