"""The basic RNN cell shared by RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN.

Android's RNN::RNNStep: output = activation(bias + input * W^T [+ aux_input * W_aux^T]
+ hidden_state * R^T), where W is [num_units, input_size], R is [num_units, num_units].
Kernels compute in float32 (float16 tensors are widened, then narrowed by the caller).
"""
from __future__ import annotations

import numpy as np

from ._activation import apply_cell_activation
from .context import OpContext


def rnn_step(x: np.ndarray, hidden: np.ndarray, weights: np.ndarray, recurrent: np.ndarray,
             bias: np.ndarray, activation: int, aux_x: np.ndarray | None = None,
             aux_weights: np.ndarray | None = None, xp=np) -> np.ndarray:
    """One step for a batch: x [batch, input_size], hidden [batch, num_units] -> [batch, num_units];
    `xp` is numpy or jax.numpy (the XLA driver traces the same step)."""
    out = x @ weights.T + bias
    if aux_x is not None and aux_weights is not None:
        out = out + aux_x @ aux_weights.T
    out = out + hidden @ recurrent.T
    return apply_cell_activation(out.astype(np.float32), activation, xp)


def f32(ctx: OpContext, i: int) -> np.ndarray:
    """Input `i` widened to float32."""
    return np.asarray(ctx.input(i), dtype=np.float32)


def check_cell_shapes(ctx: OpContext, *, input_size: int, batch: int, weights: int, recurrent: int,
                      bias: int, hidden: int, prefix: str = "") -> int:
    """Check one cell's weights / recurrent weights / bias / hidden state dims; returns num_units.

    `prefix` ("forward ", "backward ") qualifies the messages of bidirectional cells.
    """
    dims = {i: ctx.inputs[i].dims for i in (weights, recurrent, bias, hidden)}
    for i, rank, what in ((weights, 2, "weights"), (recurrent, 2, "recurrent weights"),
                          (bias, 1, "bias"), (hidden, 2, "hidden state")):
        if len(dims[i]) != rank:
            raise ctx.fail(f"input {i} ({prefix}{what}) has rank {len(dims[i])}, expected {rank}")
    num_units = dims[weights][0]
    if input_size is not None and dims[weights][1] != input_size:
        raise ctx.fail(f"input {weights} ({prefix}weights) has {dims[weights][1]} columns, "
                       f"expected the input size {input_size}")
    if dims[bias][0] != num_units:
        raise ctx.fail(f"input {bias} ({prefix}bias) has {dims[bias][0]} elements, expected num_units {num_units}")
    if dims[recurrent] != (num_units, num_units):
        raise ctx.fail(f"input {recurrent} ({prefix}recurrent weights) has shape {dims[recurrent]}, "
                       f"expected ({num_units}, {num_units})")
    if dims[hidden] != (batch, num_units):
        raise ctx.fail(f"input {hidden} ({prefix}hidden state) has shape {dims[hidden]}, "
                       f"expected ({batch}, {num_units})")
    return num_units
