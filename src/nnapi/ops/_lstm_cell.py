"""The float LSTM cell shared by LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM.

Follows Android's LSTMCell (frameworks/ml/nn/common/operations/LSTM.cpp): optional CIFG (no input
gate: input gate = 1 - forget gate), peephole connections, layer normalization (gate biases are
added after the normalization), projection with optional bias and clipping, cell clipping, and
an auxiliary input (BIDIRECTIONAL_SEQUENCE_LSTM cross-linking). float16 operands are computed in
float32 and cast back by the callers, as Android's LSTMEvalFloat16 does.

Each operation describes where its operands live with a `CellIndex` (input operand positions);
`check_cell` does Android's CheckInputTensorDimensions and `run_sequence` evaluates the cell
over a time-major sequence, carrying the states from step to step in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._activation import apply_cell_activation
from .context import OpContext

#: NNAPI LSTM activation codes (TfLiteFusedActivation): NONE, RELU, RELU6, TANH, SIGMOID.
VALID_ACTIVATIONS = (0, 1, 3, 4, 6)
#: tflite::tensor_utils::MeanStddevNormalization's kNormalizationConstant.
LAYER_NORM_EPSILON = 1e-8


@dataclass(frozen=True)
class CellIndex:
    """Input positions of one cell's operands; -1 where the operation has no such operand."""

    input_to_input: int
    input_to_forget: int
    input_to_cell: int
    input_to_output: int
    recurrent_to_input: int
    recurrent_to_forget: int
    recurrent_to_cell: int
    recurrent_to_output: int
    cell_to_input: int
    cell_to_forget: int
    cell_to_output: int
    input_gate_bias: int
    forget_gate_bias: int
    cell_gate_bias: int
    output_gate_bias: int
    projection_weights: int
    projection_bias: int
    output_state_in: int
    cell_state_in: int
    input_layer_norm: int = -1
    forget_layer_norm: int = -1
    cell_layer_norm: int = -1
    output_layer_norm: int = -1
    aux_to_input: int = -1
    aux_to_forget: int = -1
    aux_to_cell: int = -1
    aux_to_output: int = -1

    @staticmethod
    def standard(first: int = 1, output_state: int = 18, cell_state: int = 19,
                 layer_norm: int = -1, aux: int = -1) -> "CellIndex":
        """The usual layout: 16+1 weight/bias tensors from `first`, 4 layer norm from `layer_norm`."""
        ln = [layer_norm + k if layer_norm >= 0 else -1 for k in range(4)]
        ax = [aux + k if aux >= 0 else -1 for k in range(4)]
        return CellIndex(*range(first, first + 17), output_state, cell_state, *ln, *ax)


@dataclass(frozen=True)
class CellConfig:
    """One cell's sizes and variant flags (Android's CheckInputTensorDimensions)."""

    n_input: int
    n_cell: int
    n_output: int
    use_cifg: bool
    use_peephole: bool
    use_layer_norm: bool
    use_projection: bool
    use_projection_bias: bool


def _has(ctx: OpContext, i: int) -> bool:
    return i >= 0 and ctx.has_input(i)


def check_cell(ctx: OpContext, ix: CellIndex, n_input: int, *, name: str = "",
               n_aux_input: int | None = None) -> CellConfig:
    """Android's CheckInputTensorDimensions for one cell; returns sizes and the variant flags.

    `n_aux_input` is the auxiliary input size when auxiliary weights are expected.
    """
    pre = f"{name} " if name else ""

    def dims(i: int) -> tuple[int, ...]:
        return ctx.inputs[i].dims

    def need(field: str) -> None:
        i = getattr(ix, field)
        if not _has(ctx, i):
            raise ctx.fail(f"required input {i} ({pre}{field.replace('_', ' ')}) is omitted")

    def shape(field: str, *want: int) -> None:
        i = getattr(ix, field)
        if not _has(ctx, i):
            return
        d = dims(i)
        if len(d) != len(want) or any(w != g for w, g in zip(want, d)):
            raise ctx.fail(f"input {i} ({pre}{field.replace('_', ' ')}) has shape {list(d)}, "
                           f"expected {list(want)}")

    for f in ("input_to_forget", "input_to_cell", "input_to_output", "recurrent_to_forget",
              "recurrent_to_cell", "recurrent_to_output", "forget_gate_bias", "cell_gate_bias",
              "output_gate_bias", "output_state_in", "cell_state_in"):
        need(f)
    i2o = dims(ix.input_to_output)
    if len(i2o) != 2:
        raise ctx.fail(f"input {ix.input_to_output} ({pre}input to output weights) must have rank 2")
    n_cell = i2o[0]
    r2o = dims(ix.recurrent_to_output)
    if len(r2o) != 2 or r2o[0] != n_cell:
        raise ctx.fail(f"input {ix.recurrent_to_output} ({pre}recurrent to output weights) has shape "
                       f"{list(r2o)}, expected [{n_cell}, n_output]")
    n_output = r2o[1]
    for f in ("input_to_input", "input_to_forget", "input_to_cell", "input_to_output"):
        shape(f, n_cell, n_input)
    for f in ("recurrent_to_input", "recurrent_to_forget", "recurrent_to_cell"):
        shape(f, n_cell, n_output)
    use_cifg = not _has(ctx, ix.input_to_input)
    if _has(ctx, ix.recurrent_to_input) == use_cifg:
        raise ctx.fail(f"{pre}input to input and recurrent to input weights must be both present "
                       "or both omitted (CIFG)")
    for f in ("cell_to_input", "cell_to_forget", "cell_to_output"):
        shape(f, n_cell)
    pi, pf, po = (_has(ctx, ix.cell_to_input), _has(ctx, ix.cell_to_forget),
                  _has(ctx, ix.cell_to_output))
    if not (((pi or use_cifg) and pf and po) or not (pi or pf or po)):
        raise ctx.fail(f"{pre}peephole weights (cell to input/forget/output) must be all present or all omitted")
    if use_cifg:
        if _has(ctx, ix.input_gate_bias):
            raise ctx.fail(f"input {ix.input_gate_bias} ({pre}input gate bias) must be omitted with CIFG")
    else:
        need("input_gate_bias")
        shape("input_gate_bias", n_cell)
    for f in ("forget_gate_bias", "cell_gate_bias", "output_gate_bias"):
        shape(f, n_cell)
    shape("projection_weights", n_output, n_cell)
    shape("projection_bias", n_output)
    use_projection = _has(ctx, ix.projection_weights)
    if not use_projection and _has(ctx, ix.projection_bias):
        raise ctx.fail(f"input {ix.projection_bias} ({pre}projection bias) is present without projection weights")
    if not use_projection and n_output != n_cell:
        raise ctx.fail(f"{pre}n_output {n_output} differs from n_cell {n_cell} without projection weights")
    for f in ("input_layer_norm", "forget_layer_norm", "cell_layer_norm", "output_layer_norm"):
        shape(f, n_cell)
    li, lf, lc, lo = (_has(ctx, ix.input_layer_norm), _has(ctx, ix.forget_layer_norm),
                      _has(ctx, ix.cell_layer_norm), _has(ctx, ix.output_layer_norm))
    if use_cifg:
        if li:
            raise ctx.fail(f"input {ix.input_layer_norm} ({pre}input layer norm weights) is present while CIFG is used")
        if not (lf == lc == lo):
            raise ctx.fail(f"{pre}layer norm weights must be all present or all omitted")
    elif not (li == lf == lc == lo):
        raise ctx.fail(f"{pre}layer norm weights must be all present or all omitted")
    if n_aux_input is not None:
        for f in ("aux_to_input", "aux_to_forget", "aux_to_cell", "aux_to_output"):
            shape(f, n_cell, n_aux_input)
    return CellConfig(n_input, n_cell, n_output, use_cifg, pf and po, lo, use_projection,
                      _has(ctx, ix.projection_bias))


def check_state_shapes(ctx: OpContext, ix: CellIndex, cfg: CellConfig, n_batch: int, name: str = "") -> None:
    """The state inputs must be [n_batch, n_output] and [n_batch, n_cell]."""
    pre = f"{name} " if name else ""
    for i, want, what in ((ix.output_state_in, (n_batch, cfg.n_output), "output state in"),
                          (ix.cell_state_in, (n_batch, cfg.n_cell), "cell state in")):
        if tuple(ctx.inputs[i].dims) != want:
            raise ctx.fail(f"input {i} ({pre}{what}) has shape {list(ctx.inputs[i].dims)}, expected {list(want)}")


@dataclass(frozen=True)
class LstmCellParams:
    """One LSTM cell of an operation: where each of its operands sits among the operation's inputs
    (`index`, -1 where the operation has no such operand), its sizes and variant flags (`config`),
    the activation code (0, 1, 3, 4, 6: NONE, RELU, RELU6, TANH, SIGMOID) and the cell / projection
    clips (0: no clipping). `weights` loads the operands; `step` runs one time step."""

    index: CellIndex
    config: CellConfig
    activation: int
    cell_clip: float
    proj_clip: float

    def weights(self, ctx: OpContext, *, use_aux: bool = False, value=None) -> "CellWeights":
        """The cell's weights (`value(i)` reads input i; default its float32 value in `ctx`)."""
        return load_weights(ctx, self.index, self.config, self.activation, self.cell_clip, self.proj_clip,
                            use_aux=use_aux, value=value)


def check_params(ctx: OpContext, activation: int, cell_clip: int, proj_clip: int) -> tuple[int, float, float]:
    """The fused activation and clipping parameters, checked (UnknownValue when not constant)."""
    act = ctx.scalar(activation)
    if act not in VALID_ACTIVATIONS:
        raise ctx.fail(f"input {activation} (activation) {act} is not one of {list(VALID_ACTIVATIONS)}")
    clips = []
    for i, what in ((cell_clip, "cell clip"), (proj_clip, "projection clip")):
        v = ctx.scalar(i)
        if v is None or not v >= 0.0:
            raise ctx.fail(f"input {i} ({what}) must be >= 0, got {v}")
        clips.append(float(np.float32(v)))
    return act, clips[0], clips[1]


@dataclass
class CellWeights:
    """One cell's weights as float32 arrays (None when omitted) and its parameters."""

    cfg: CellConfig
    activation: int
    cell_clip: float
    proj_clip: float
    w_in: list  # input-to-{input,forget,cell,output}: [n_cell, n_input]
    w_rec: list  # recurrent-to-{...}: [n_cell, n_output]
    w_aux: list  # aux-input-to-{...}: [n_cell, n_aux] or None
    peephole: list  # cell-to-{input,forget,output}: [n_cell]
    bias: list  # {input,forget,cell,output} gate bias: [n_cell]
    layer_norm: list  # {input,forget,cell,output}: [n_cell]
    proj_w: np.ndarray | None
    proj_b: np.ndarray | None


def load_weights(ctx: OpContext, ix: CellIndex, cfg: CellConfig, activation: int, cell_clip: float,
                 proj_clip: float, *, use_aux: bool = False, value=None) -> CellWeights:
    """The cell's weights; `value(i)` reads input i (default: its float32 value in the context)."""
    read = value if value is not None else (lambda i: ctx.input(i).astype(np.float32))

    def get(i: int) -> np.ndarray | None:
        return read(i) if _has(ctx, i) else None

    return CellWeights(
        cfg, activation, cell_clip, proj_clip,
        [get(i) for i in (ix.input_to_input, ix.input_to_forget, ix.input_to_cell, ix.input_to_output)],
        [get(i) for i in (ix.recurrent_to_input, ix.recurrent_to_forget, ix.recurrent_to_cell,
                          ix.recurrent_to_output)],
        [get(i) if use_aux else None for i in (ix.aux_to_input, ix.aux_to_forget, ix.aux_to_cell,
                                               ix.aux_to_output)],
        [get(i) for i in (ix.cell_to_input, ix.cell_to_forget, ix.cell_to_output)],
        [get(i) for i in (ix.input_gate_bias, ix.forget_gate_bias, ix.cell_gate_bias, ix.output_gate_bias)],
        [get(i) for i in (ix.input_layer_norm, ix.forget_layer_norm, ix.cell_layer_norm,
                          ix.output_layer_norm)],
        get(ix.projection_weights) if cfg.use_projection else None,
        get(ix.projection_bias) if cfg.use_projection_bias else None,
    )


def _sigmoid(x: np.ndarray, xp=np) -> np.ndarray:
    return 1.0 / (1.0 + xp.exp(-x))


def _mean_stddev_normalization(x: np.ndarray, xp=np) -> np.ndarray:
    """tflite MeanStddevNormalization over the last axis (per batch)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / xp.sqrt(var + LAYER_NORM_EPSILON)


def step(w: CellWeights, x: np.ndarray, aux: np.ndarray | None, h: np.ndarray, c: np.ndarray, xp=np
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One LSTMStep: (output [B, n_output], cell state [B, n_cell], scratch [B, 3|4 * n_cell]).

    With numpy (`xp`) it computes in float64 and the caller stores states as float32 like
    Android's buffers; with jax.numpy (the XLA driver's lowering) it computes in float32.
    """
    cfg = w.cfg
    wide = np.float64 if xp is np else np.float32
    x = x.astype(wide)
    h = h.astype(wide)
    c = c.astype(wide)
    gates = []
    for g in range(4):  # input, forget, cell, output
        if g == 0 and cfg.use_cifg:
            gates.append(None)
            continue
        acc = x @ w.w_in[g].T.astype(wide) + h @ w.w_rec[g].T.astype(wide)
        if aux is not None and w.w_aux[g] is not None:
            acc = acc + aux.astype(wide) @ w.w_aux[g].T.astype(wide)
        if not cfg.use_layer_norm:
            acc = acc + w.bias[g]
        gates.append(acc)
    i_gate, f_gate, cell, o_gate = gates
    if not cfg.use_cifg:
        if cfg.use_peephole:
            i_gate = i_gate + w.peephole[0] * c
        if cfg.use_layer_norm:
            i_gate = _mean_stddev_normalization(i_gate, xp) * w.layer_norm[0] + w.bias[0]
        i_gate = _sigmoid(i_gate, xp)
    if cfg.use_peephole:
        f_gate = f_gate + w.peephole[1] * c
    if cfg.use_layer_norm:
        f_gate = _mean_stddev_normalization(f_gate, xp) * w.layer_norm[1] + w.bias[1]
    f_gate = _sigmoid(f_gate, xp)
    if cfg.use_layer_norm:
        cell = _mean_stddev_normalization(cell, xp) * w.layer_norm[2] + w.bias[2]
    cell = apply_cell_activation(cell, w.activation, xp)
    new_c = f_gate * c + cell * ((1.0 - f_gate) if cfg.use_cifg else i_gate)
    if w.cell_clip > 0.0:
        new_c = xp.clip(new_c, -w.cell_clip, w.cell_clip)
    new_c = new_c.astype(np.float32).astype(wide)
    if cfg.use_peephole:
        o_gate = o_gate + w.peephole[2] * new_c
    if cfg.use_layer_norm:
        o_gate = _mean_stddev_normalization(o_gate, xp) * w.layer_norm[3] + w.bias[3]
    o_gate = _sigmoid(o_gate, xp)
    act_c = apply_cell_activation(new_c, w.activation, xp)
    hidden = o_gate * act_c
    if cfg.use_projection:
        out = hidden @ w.proj_w.T.astype(wide)
        if w.proj_b is not None:
            out = out + w.proj_b
        if w.proj_clip > 0.0:
            out = xp.clip(out, -w.proj_clip, w.proj_clip)
    else:
        out = hidden
    # Scratch as Android leaves it: [input gate,] cell (activated state), forget (1 - f with CIFG), output.
    parts = ([] if cfg.use_cifg else [i_gate]) + [act_c, (1.0 - f_gate) if cfg.use_cifg else f_gate, hidden]
    scratch = xp.concatenate(parts, axis=-1)
    return out.astype(np.float32), new_c.astype(np.float32), scratch.astype(np.float32)


def run_sequence(w: CellWeights, x: np.ndarray, aux: np.ndarray | None, h0: np.ndarray, c0: np.ndarray,
                 *, forward: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run over a time-major sequence x [T, B, n_input]; returns (outputs [T, B, n_output],
    final output state, final cell state, final scratch)."""
    steps = range(x.shape[0]) if forward else range(x.shape[0] - 1, -1, -1)
    h = h0.astype(np.float32)
    c = c0.astype(np.float32)
    outs = np.zeros((x.shape[0], x.shape[1], w.cfg.n_output), np.float32)
    scratch = np.zeros((x.shape[1], (3 if w.cfg.use_cifg else 4) * w.cfg.n_cell), np.float32)
    for t in steps:
        h, c, scratch = step(w, x[t], None if aux is None else aux[t], h, c)
        outs[t] = h
    return outs, h, c, scratch
