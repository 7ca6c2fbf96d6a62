"""The public parameter resolver `nnapi.ops.resolve(ctx)`: each operation's parameters read once from
its compile-time context (padding explicit, axes non-negative, flags decoded, output shapes), as
frozen dataclasses; invalid parameters are INVALID_ARGUMENT naming the operation and input, and a
parameter that is not constant yet is UnknownValue."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nnapi.hal import ErrorStatus, FusedActivationFunc as Act, NnError, OperandType as T, OperationType as Op
from nnapi.ops import (OpContext, Tensor, UnknownValue, WindowParams, activation_range, find_operation,
                       registered_operations, resolve)

F32, F16, I32, Q8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM
SAME, VALID = 1, 2


def t(dims, typ=F32, scale=0.0, zp=0) -> Tensor:
    """A tensor known only by its shape (a model input at compile time)."""
    return Tensor(typ, tuple(dims), scale, zp)


def c(value, typ=F32, scale=0.0, zp=0) -> Tensor:
    """A constant tensor."""
    v = np.asarray(value, Tensor(typ, ()).dtype)
    return Tensor(typ, v.shape, scale, zp, value=v)


def s(value, typ=T.INT32) -> Tensor:
    return Tensor(typ, (), value=np.array(value, Tensor(typ, ()).dtype))


def unknown(typ=T.INT32) -> Tensor:
    """A scalar model input: no value at compile time."""
    return Tensor(typ, ())


def params(op: Op, ins: list[Tensor], n_out: int = 1, out=F32):
    """resolve() on a compile-time context, after the operation's own validation."""
    outs = [Tensor(out, ()) for _ in range(n_out)]
    ctx = OpContext(op, ins, outs, compile_time=True)
    find_operation(op).validate(ctx)
    return resolve(ctx)


def invalid(op: Op, ins: list[Tensor], *words: str, n_out: int = 1) -> None:
    with pytest.raises(NnError) as e:
        resolve(OpContext(op, ins, [Tensor(F32, ()) for _ in range(n_out)], compile_time=True))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    for w in (op.name,) + words:
        assert w in e.value.message, e.value.message


def test_results_are_frozen_and_operations_without_parameters_say_so():
    p = params(Op.SOFTMAX, [t((2, 5)), s(1.0, T.FLOAT32)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.axis = 0
    with pytest.raises(LookupError):
        resolve(OpContext(Op.ABS, [t((2,))], [t((2,))], compile_time=True))
    resolved = {op for op in registered_operations() if find_operation(op).params is not None}
    assert {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.AVERAGE_POOL_2D, Op.ADD, Op.MEAN,
            Op.SOFTMAX, Op.LSTM, Op.BIDIRECTIONAL_SEQUENCE_LSTM} <= resolved


def test_depthwise_resolves_same_padding_and_the_multiplier():
    ins = [t((1, 5, 5, 2)), c(np.ones((1, 3, 3, 4))), c(np.zeros(4)), s(SAME), s(2), s(2), s(2), s(Act.RELU6)]
    p = params(Op.DEPTHWISE_CONV_2D, ins)
    assert isinstance(p.params, WindowParams)
    assert (p.params.pad_top, p.params.pad_bottom, p.params.pad_left, p.params.pad_right) == (1, 1, 1, 1)
    assert (p.multiplier, p.channels_in, p.channels_out, p.out_h, p.out_w) == (2, 2, 4, 3, 3)
    assert p.params.activation == Act.RELU6
    ins[7] = unknown()  # the activation is a model input: not known at compile time
    with pytest.raises(UnknownValue):
        resolve(OpContext(Op.DEPTHWISE_CONV_2D, ins, [t(())], compile_time=True))


def test_fully_connected_flattens_to_batch_by_input_size():
    p = params(Op.FULLY_CONNECTED, [t((2, 3, 4)), c(np.ones((5, 12))), c(np.zeros(5)), s(Act.RELU)])
    assert (p.batch, p.input_size, p.num_units, p.activation) == (2, 12, 5, Act.RELU)
    invalid(Op.FULLY_CONNECTED, [t((2, 5)), c(np.ones((5, 12))), c(np.zeros(5)), s(0)], "input 0", "12")


def test_pooling_counts_exclude_padding():
    p = params(Op.AVERAGE_POOL_2D, [t((1, 3, 3, 1)), s(SAME), s(1), s(1), s(3), s(3), s(0)])
    assert (p.out_h, p.out_w, p.filter_h, p.filter_w) == (3, 3, 3, 3)
    assert p.window_counts()[:, :, 0].tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]


def test_arithmetic_broadcasts_and_decodes_the_activation():
    p = params(Op.ADD, [t((2, 1, 3)), t((4, 1)), s(Act.RELU1)])
    assert (p.out_dims, p.activation) == ((2, 4, 3), Act.RELU1)
    assert activation_range(p.activation) == (-1.0, 1.0)
    invalid(Op.ADD, [t((2, 3)), t((4, 3)), s(0)], "cannot be broadcast")
    invalid(Op.ADD, [t((2,), I32), t((2,), I32), s(Act.RELU)], "input 2", "NONE")
    assert params(Op.MAXIMUM, [t((3, 1)), t((1, 2))]).out_dims == (3, 2)


def test_reductions_normalise_sort_and_dedupe_axes():
    p = params(Op.MEAN, [t((2, 3, 4)), c([-1, 0, 2], I32), s(1)])
    assert (p.axes, p.keep_dims, p.out_dims) == ((0, 2), True, (1, 3, 1))
    p = params(Op.REDUCE_MAX, [t((2, 3, 4)), c([1], I32), s(False, T.BOOL)])
    assert (p.axes, p.out_dims) == ((1,), (2, 4))
    invalid(Op.REDUCE_SUM, [t((2, 3)), c([2], I32), s(False, T.BOOL)], "input 1")


def test_softmax_and_log_softmax_axes():
    assert params(Op.SOFTMAX, [t((2, 5)), s(0.5, T.FLOAT32)]).axis == 1
    p = params(Op.LOG_SOFTMAX, [t((2, 5, 3)), s(2.0, T.FLOAT32), s(-2)])
    assert (p.beta, p.axis) == (2.0, 1)
    invalid(Op.SOFTMAX, [t((2, 5)), s(-1.0, T.FLOAT32)], "input 1", "beta")


def test_shape_operations():
    assert params(Op.RESHAPE, [t((2, 6)), c([3, -1], I32)]).out_dims == (3, 4)
    p = params(Op.SQUEEZE, [t((1, 3, 1)), c([-1], I32)])
    assert (p.out_dims, p.axes) == ((1, 3), (2,))
    assert params(Op.SQUEEZE, [t((1, 3, 1)), Tensor(I32, (), omitted=True)]).axes == (0, 2)
    p = params(Op.EXPAND_DIMS, [t((2, 3)), s(-1)])
    assert (p.out_dims, p.axes) == ((2, 3, 1), (2,))
    p = params(Op.CONCATENATION, [t((2, 3)), t((2, 5)), s(-1)])
    assert (p.axis, p.n_inputs, p.out_dims) == (1, 2, (2, 8))
    p = params(Op.TRANSPOSE, [t((2, 3, 4)), Tensor(I32, (), omitted=True)])
    assert (p.perm, p.out_dims) == ((2, 1, 0), (4, 3, 2))
    invalid(Op.TRANSPOSE, [t((2, 3)), c([0, 0], I32)], "input 1", "perm")


def test_pad_value_of_a_quantized_pad_is_the_zero_point():
    ctx = OpContext(Op.PAD, [t((2, 3), Q8, 0.5, 7), c([[1, 0], [0, 2]], I32)], [Tensor(Q8, (), 0.5, 7)],
                    compile_time=True)
    p = resolve(ctx)
    assert (p.paddings, p.value, p.out_dims) == (((1, 0), (0, 2)), 7, (3, 5))
    p = params(Op.PAD_V2, [t((2,)), c([[1, 1]], I32), s(-2.5, T.FLOAT32)])
    assert (p.paddings, p.value) == (((1, 1),), -2.5)
    invalid(Op.PAD, [t((2,)), c([[1, -1]], I32)], "input 1", "negative")


def test_slicing_operations():
    p = params(Op.SLICE, [t((4, 5)), c([1, 2], I32), c([-1, 2], I32)])
    assert (p.begins, p.sizes, p.out_dims) == ((1, 2), (3, 2), (3, 2))
    # begin_mask on dimension 0, shrink dimension 1, negative stride on dimension 2
    p = params(Op.STRIDED_SLICE, [t((4, 3, 5)), c([2, 1, -1], I32), c([4, 2, 0], I32), c([1, 1, -2], I32),
                                  s(1), s(0), s(2)])
    assert (p.begins, p.strides, p.extents, p.shrink, p.out_dims) == (
        (0, 1, 4), (1, 1, -2), (4, 1, 2), (False, True, False), (4, 2))
    p = params(Op.SPLIT, [t((2, 6)), s(-1), s(3)], n_out=3)
    assert (p.axis, p.num_splits, p.out_dims) == (1, 3, (2, 2))
    p = params(Op.GATHER, [t((5, 2)), s(0), c([[4, 0, 1]], I32)])
    assert (p.axis, p.out_dims) == (0, (1, 3, 2))
    invalid(Op.GATHER, [t((5, 2)), s(0), c([5], I32)], "input 2", "out of range")
    p = params(Op.TILE, [t((2, 3)), c([2, 1], I32)])
    assert (p.multiples, p.out_dims) == ((2, 1), (4, 3))


def test_image_rearrangements():
    p = params(Op.RESIZE_BILINEAR, [t((1, 4, 6, 3)), s(1.5, T.FLOAT32), s(0.5, T.FLOAT32)])
    assert (p.out_h, p.out_w, p.out_dims, p.nchw) == (2, 9, (1, 2, 9, 3), False)
    p = params(Op.RESIZE_NEAREST_NEIGHBOR, [t((1, 3, 4, 4)), s(8), s(6), s(True, T.BOOL), s(True, T.BOOL)])
    assert (p.out_dims, p.align_corners, p.half_pixel_centers) == ((1, 3, 6, 8), True, False)
    p = params(Op.DEPTH_TO_SPACE, [t((1, 2, 3, 8)), s(2)])
    assert (p.block, p.out_dims) == (2, (1, 4, 6, 2))
    p = params(Op.SPACE_TO_BATCH_ND, [t((1, 3, 4, 2)), c([2, 2], I32), c([[1, 0], [0, 0]], I32)])
    assert (p.block_h, p.block_w, p.paddings, p.out_dims) == (2, 2, (1, 0, 0, 0), (4, 2, 2, 2))
    p = params(Op.CHANNEL_SHUFFLE, [t((2, 6)), s(3), s(-1)])
    assert (p.groups, p.axis) == (3, 1)
    invalid(Op.CHANNEL_SHUFFLE, [t((2, 6)), s(4), s(1)], "num_groups")


def test_transposed_and_grouped_convolutions():
    # implicit padding from the requested output shape, NHWC
    ins = [t((1, 2, 2, 1)), c(np.ones((3, 3, 3, 1))), c(np.zeros(3)), c([1, 4, 4, 3], I32), s(SAME), s(2), s(2),
           s(0), s(False, T.BOOL)]
    p = params(Op.TRANSPOSE_CONV_2D, ins)
    assert (p.params.pad_top, p.params.pad_bottom, p.out_h, p.out_w, p.channels_out) == (0, 1, 4, 4, 3)
    ins = [t((1, 4, 4, 4)), c(np.ones((6, 1, 1, 2))), c(np.zeros(6)), s(VALID), s(1), s(1), s(2), s(0),
           s(False, T.BOOL)]
    p = params(Op.GROUPED_CONV_2D, ins)
    assert (p.groups, p.channels_out, p.out_h) == (2, 6, 4)


def test_normalizations_and_activations():
    p = params(Op.L2_NORMALIZATION, [t((2, 3))])
    assert (p.axis, p.epsilon) == (1, pytest.approx(1e-6))
    p = params(Op.INSTANCE_NORMALIZATION, [t((1, 2, 2, 3)), s(2.0, T.FLOAT32), s(0.5, T.FLOAT32),
                                           s(1e-3, T.FLOAT32), s(True, T.BOOL)])
    assert (p.gamma, p.beta, p.nchw) == (2.0, 0.5, True)
    assert params(Op.ELU, [t((2,), F16), s(0.1, T.FLOAT16)], out=F16).alpha == float(np.float16(0.1))
    assert params(Op.RELU6, [t((2,))]).high == 6.0
    assert params(Op.HARD_SWISH, [t((2,))]).quant is None
    assert params(Op.BATCH_MATMUL, [t((2, 3, 4)), t((2, 5, 4)), s(False, T.BOOL), s(True, T.BOOL)]).out_dims \
        == (2, 3, 5)
    p = params(Op.FILL, [c([2, 3], I32), s(1.5, T.FLOAT32)])
    assert (p.out_dims, p.value) == ((2, 3), 1.5)
    assert params(Op.ARGMAX, [t((2, 3)), s(-1)], out=I32).out_dims == (2,)


def test_recurrent_cells_carry_their_operand_positions():
    n_batch, n_input, n_cell = 2, 3, 4
    w_in, w_rec, vec = c(np.ones((n_cell, n_input))), c(np.ones((n_cell, n_cell))), c(np.ones(n_cell))
    none = Tensor(F32, (), omitted=True)
    ins = [t((n_batch, n_input)), w_in, w_in, w_in, w_in, w_rec, w_rec, w_rec, w_rec, none, none, none,
           vec, vec, vec, vec, none, none, t((n_batch, n_cell)), t((n_batch, n_cell)), s(4), s(0.0, T.FLOAT32),
           s(0.0, T.FLOAT32)]
    p = params(Op.LSTM, ins, n_out=4)
    assert (p.cell.index.input_to_input, p.cell.index.output_state_in, p.cell.index.cell_state_in) == (1, 18, 19)
    assert (p.cell.config.n_cell, p.cell.config.use_cifg, p.cell.config.use_peephole, p.cell.activation) == (
        4, False, False, 4)
    assert p.out_dims == ((2, 16), (2, 4), (2, 4), (2, 4))
    p = params(Op.RNN, [t((2, 3)), c(np.ones((5, 3))), c(np.ones((5, 5))), c(np.ones(5)), t((2, 5)), s(1)],
               n_out=2)
    assert (p.activation, p.num_units, p.out_dims) == (1, 5, ((2, 5), (2, 5)))


def test_the_operation_index_names_the_module_of_every_registration():
    """`ops.index.MODULES` (what a lookup imports) is the registrations' own record: every operation, each
    in the module that registers it (python -c "from nnapi.ops.registry import write_index; write_index()")."""
    from nnapi.ops.index import MODULES
    from nnapi.ops.registry import index_of_registrations
    assert MODULES == index_of_registrations()


def test_a_lookup_imports_only_the_module_of_its_operation():
    import subprocess
    import sys
    code = ("import sys; from nnapi.ops import find_operation; from nnapi.hal import OperationType as Op; "
            "assert find_operation(Op.ADD).type == Op.ADD; "
            "print(sorted(m for m in sys.modules if m.startswith('nnapi.ops.') and not m.split('.')[-1].startswith('_')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = eval(out.stdout.strip())
    assert "nnapi.ops.broadcast" in loaded and "nnapi.ops.conv2d" not in loaded, loaded
