"""`.tflite` → `nnapi.Model`: TFLite flatbuffers mapped to NNAPI operations the way TFLite's NNAPI delegate does.

    imported = nnapi.importers.load_tflite("model.tflite")
    compilation = nnapi.Compilation(imported.model, cache_dir=..., token=imported.token()).finish()

What the importer does:
- tensors become operands with their quantization: per-tensor uint8/int8/int16, per-channel int8
  weights (TENSOR_QUANT8_SYMM_PER_CHANNEL), int32 biases scaled input scale × filter scale; rank-0
  tensors become shape [1], as NNAPI has no rank-0 tensors;
- weights are CONSTANT_REFERENCE regions of one read-only memory mapping of the `.tflite` file
  (`Memory.from_fd`): nothing is copied, except values of at most 128 bytes (CONSTANT_COPY, as
  NNAPI does) and constants the importer computes (see below);
- builtin operators map to NNAPI operations with their fused activations, padding schemes and
  layouts: one function per operator family in `operators/`, registered with `@register(name, ...)`
  in `registry` and called with the graph being built (`graph.Graph`); DEQUANTIZE of constant
  float16 (or int8) weights is folded into float32 constants and DENSIFY of sparse weights is done
  at import; WHILE and IF bodies become referenced models;
- operators NNAPI 1.3 lacks are decomposed (SQUARED_DIFFERENCE, GELU, LEAKY_RELU, quantized
  operations NNAPI only has in float through DEQUANTIZE → float → QUANTIZE, FULLY_CONNECTED with
  per-channel weights as a 1×1 CONV_2D, the full-integer UNIDIRECTIONAL_SEQUENCE_LSTM as one
  QUANTIZED_LSTM per time step) or mapped to the later NNAPI operation (BATCH_MATMUL); MediaPipe's
  custom Convolution2DTransposeBias is TRANSPOSE_CONV_2D with its bias;
- a model with operators that cannot be mapped raises one `UnsupportedOperatorsError` naming
  every such operator with its subgraph, index and inputs;
- the file is read through a validating layer (`flatbuffer.py`, `schema.py`): whatever is
  malformed (an offset, a length, an index, an enum, an options table, a shape, quantization arrays,
  sparsity metadata, a control-flow reference, a signature) is one `NnError(BAD_DATA)` naming the
  tensor, operator or field at fault, raised before anything is allocated from it;
- inputs and outputs keep their tensor names (`TensorInfo.name`) and, where the file has a
  SignatureDef for the main subgraph ("serving_default" first), the names it gives them
  (`TensorInfo.signature_name`, e.g. "image", "output_0"); `ImportedModel.input_names` /
  `output_names` prefer the signature names.
"""
from __future__ import annotations

import importlib

from ...lazy import exports
from .imported import (IMPORTER_VERSION, INTERNAL_ERROR, ImportedModel, Problem, TensorInfo,
                       UnsupportedOperatorsError)

#: What is imported on first use (PEP 562): the reader, the schema and every operator family cost tens of
#: milliseconds, which `import nnapi` does not pay until a `.tflite` is loaded.
_LAZY = {"load_tflite": "load", "register": "registry", "register_custom": "registry",
         "registered_operators": "registry"}


def _operators() -> None:
    importlib.import_module(".operators", __name__)  # every family registers its operators: the table is complete


__getattr__ = exports(__name__, {name: f".{module}" for name, module in _LAZY.items()}, before=_operators)

__all__ = ["IMPORTER_VERSION", "INTERNAL_ERROR", "ImportedModel", "Problem", "TensorInfo", "UnsupportedOperatorsError",
           "load_tflite", "register", "register_custom", "registered_operators"]
