"""The old path of `nnapi.importers.tflite.schema` (the `.tflite` file's validated records), kept for
code that imports it from here."""
from .tflite.schema import (FlatModel, FlatOperator, FlatSignature, FlatSubgraph, FlatTensor, Quant, SparseLevel,
                            Sparsity, load_flat_model)

__all__ = ["FlatModel", "FlatOperator", "FlatSignature", "FlatSubgraph", "FlatTensor", "Quant", "SparseLevel",
           "Sparsity", "load_flat_model"]
