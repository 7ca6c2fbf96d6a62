"""The old path of `nnapi.importers.tflite.flatbuffer` (bounds-checked flatbuffer reading), kept for
code that imports it from here."""
from .tflite.flatbuffer import BadModel, Table, options

__all__ = ["BadModel", "Table", "options"]
