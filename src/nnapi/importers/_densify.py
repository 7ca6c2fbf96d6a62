"""The old path of `nnapi.importers.tflite.densify` (DENSIFY at import time), kept for code that
imports it from here."""
from .tflite.densify import densify

__all__ = ["densify"]
