"""The conformance kit: runs Android's generated NNAPI test vectors through the public runtime API."""
from .runner import VectorResult, run_vectors
from .vectors import TestModel, load_vectors

__all__ = ["VectorResult", "run_vectors", "TestModel", "load_vectors"]
