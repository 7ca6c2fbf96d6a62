"""Operations: one module per family, each registering validate / prepare / execute / params.

Shared maths lives in helper modules whose names start with an underscore
(`_quant`, `_activation`, `_padding`, ...), so the registry does not import them as operations;
what a driver outside `ops` may use from them is re-exported here under a public name.

Resolved parameters (for lowering tables)
-----------------------------------------
`resolve(ctx)` returns one operation's parameters, read once from its compile-time `OpContext`
(as `validation.build_operation_context` builds it: constants carry their values, dimensions the
inferred shapes): padding made explicit, axes non-negative, flags decoded, output shapes computed.
The result is a frozen dataclass; the operation's own `params` function produces it, the same one
its validation and reference kernel use, so a driver never re-derives a fact. It raises
INVALID_ARGUMENT (NnError, naming the operation and input) for invalid parameters, `UnknownValue`
while a parameter it needs is not a constant, and LookupError for an operation without parameters
(ABS, CAST, LOGISTIC, ...: nothing to resolve). 0 in a size means unknown at compile time. The
result is remembered on the context (a context is never changed once built), so calling `resolve`
again on it costs nothing.

    from nnapi.ops import resolve
    p = resolve(ctx)            # e.g. Conv2dParams for a CONV_2D context
    p.params.pad_top, p.out_h   # fields are documented on each dataclass

Where each family's fields are (module.Class):
- convolutions: conv2d.Conv2dParams, depthwise_conv2d.DepthwiseConv2dParams,
  grouped_conv2d.GroupedConv2dParams, transpose_conv2d.TransposeConv2dParams; pooling
  (AVERAGE / MAX / L2_POOL_2D): pooling.Pool2dParams (`window_counts()`: real elements per window).
  Each has `.params`, a `WindowParams` (pad_left/right/top/bottom, stride_w/h, dilation_w/h,
  activation, nchw, extras), plus sizes (batches, filter_h/w, out_h/w, channels...).
- FULLY_CONNECTED: fully_connected.FullyConnectedParams (batch, input_size, num_units, activation).
- ADD / SUB / MUL / DIV: broadcast.BroadcastParams (out_dims, activation); MAXIMUM, MINIMUM, POW,
  PRELU, comparisons, LOGICAL_AND / OR: the same class (activation NONE).
- RELU / RELU1 / RELU6: activation.ReluParams. Any fused activation code -> float clamp:
  `activation_range(code)`.
- MEAN, REDUCE_*: reduce.ReduceParams (axes, keep_dims, out_dims); ARGMAX / ARGMIN:
  argminmax.ArgMinMaxParams.
- SOFTMAX, LOG_SOFTMAX: softmax.SoftmaxParams (beta, axis).
- RESHAPE, SQUEEZE, EXPAND_DIMS: reshape.ReshapeParams (out_dims, axes); CONCATENATION:
  concatenation.ConcatenationParams; PAD / PAD_V2: pad.PadParams (paddings, value, out_dims);
  TRANSPOSE: transpose.TransposeParams; SLICE: slice.SliceParams; STRIDED_SLICE:
  strided_slice.StridedSliceParams; SPLIT: split.SplitParams; GATHER: gather.GatherParams;
  TILE: tile.TileParams; FILL: fill.FillParams; TOPK_V2: topk_v2.TopKParams.
- RESIZE_*: resize.ResizeParams (source indices / weights: resize.nearest_indices,
  resize.bilinear_terms); DEPTH_TO_SPACE / SPACE_TO_DEPTH: depth_space.DepthSpaceParams;
  SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND: space_batch.SpaceBatchParams; CHANNEL_SHUFFLE:
  channel_shuffle.ChannelShuffleParams.
- BATCH_MATMUL: batch_matmul.BatchMatmulParams; L2_NORMALIZATION:
  l2_normalization.L2NormalizationParams; LOCAL_RESPONSE_NORMALIZATION:
  local_response_normalization.LocalResponseNormalizationParams (radius clamped to the depth);
  INSTANCE_NORMALIZATION: instance_normalization.InstanceNormalizationParams; ELU: elu.EluParams;
  HARD_SWISH: hard_swish.HardSwishParams.
- LSTM: lstm.LstmParams; UNIDIRECTIONAL / BIDIRECTIONAL_SEQUENCE_LSTM:
  sequence_lstm.SequenceLstmParams / BidirectionalLstmParams. Each cell is an `LstmCellParams`
  (`index`: a CellIndex of operand positions, `config`: a CellConfig of sizes and flags, activation,
  clips; `weights(ctx, value=...)` loads the operands, `lstm_step` runs one step with numpy or
  jax.numpy). QUANTIZED_LSTM: quantized_lstm.QuantizedLstmParams (with its operand positions).
  RNN / UNIDIRECTIONAL_SEQUENCE_RNN: rnn.RnnParams (one step: `rnn_step`);
  BIDIRECTIONAL_SEQUENCE_RNN: sequence_rnn.BidirectionalRnnParams.
"""
from ..lazy import exports

#: Each export and the submodule that defines it, imported on first use (`nnapi.lazy`): an app that
#: loads a model from a cache imports none of them.
_EXPORTS = {
    "activation_range": "._activation", "apply_cell_activation": "._activation",
    "WindowParams": "._conv",
    "CellConfig": "._lstm_cell", "CellIndex": "._lstm_cell", "CellWeights": "._lstm_cell",
    "LstmCellParams": "._lstm_cell", "lstm_step": "._lstm_cell:step",
    "join_dims": "._padding", "split_dims": "._padding",
    "rnn_step": "._rnn",
    "OpContext": ".context", "UnknownValue": ".context",
    "OperationRegistration": ".registry", "find_operation": ".registry", "register": ".registry",
    "registered_operations": ".registry", "resolve": ".registry",
    "Tensor": ".tensor", "numpy_dtype": ".tensor",
}
__getattr__ = exports(__name__, _EXPORTS)

__all__ = ["OpContext", "UnknownValue", "OperationRegistration", "find_operation", "register",
           "registered_operations", "resolve", "Tensor", "numpy_dtype", "WindowParams", "activation_range",
           "apply_cell_activation", "CellConfig", "CellIndex", "CellWeights", "LstmCellParams", "lstm_step",
           "rnn_step", "join_dims", "split_dims"]
