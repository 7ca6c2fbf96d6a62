"""Model and request validation: VTS-style mutations of small valid models (VTS-BEHAVIOURS 2.2, 5)."""
from __future__ import annotations

import copy
import dataclasses
import struct
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nnapi.hal import (DataLocation, ErrorStatus, MemoryPool, Model, NnError, Operand, OperandLifeTime as L,
                       OperandType as T, Operation, OperationType as Op, Request, RequestArgument, Subgraph,
                       SymmPerChannelQuantParams)
from nnapi.hal.enums import OPERATION_TYPE_FUNDAMENTAL_MAX
from nnapi.memory import allocate_ashmem, close_handle, map_handle
from nnapi.ops import OperationRegistration, UnknownValue
from nnapi.validation import (RequestChecker, build_operation_context, infer_model_shapes, validate_model, validate_preference,
                              validate_priority, validate_request)
from nnapi.validation import shapes as shapes_module

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)


# --- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
def pool():
    handle = allocate_ashmem(64)
    map_handle(handle).view(8, 24)[:] = WEIGHT.tobytes()
    yield MemoryPool(handle=handle)
    close_handle(handle)


def f32(dims, lifetime=L.TEMPORARY_VARIABLE, consumers=0, location=DataLocation()):
    return Operand(T.TENSOR_FLOAT32, tuple(dims), consumers, lifetime=lifetime, location=location)


@pytest.fixture
def model(pool) -> Model:
    """in0 -RELU-> t1 -RELU6-> out0;  out1 = OEM_OPERATION(t1, weight, act).

    Operand 3 (act) is an INT32 CONSTANT_COPY, operand 4 (weight) a CONSTANT_REFERENCE into an
    ashmem pool. OEM_OPERATION is never registered, so its signature is never checked.
    """
    operands = [
        f32((2, 3), L.SUBGRAPH_INPUT, 1),                                    # 0 in0
        f32((2, 3), L.TEMPORARY_VARIABLE, 2),                                # 1 t1
        f32((2, 3), L.SUBGRAPH_OUTPUT, 0),                                   # 2 out0
        Operand(T.INT32, (), 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 4, 4)),  # 3 act
        f32((2, 3), L.CONSTANT_REFERENCE, 1, DataLocation(0, 8, 24)),        # 4 weight
        f32((2, 3), L.SUBGRAPH_OUTPUT, 0),                                   # 5 out1
    ]
    operations = [Operation(Op.RELU, (0,), (1,)), Operation(Op.RELU6, (1,), (2,)),
                  Operation(Op.OEM_OPERATION, (1, 4, 3), (5,))]
    values = struct.pack("<ii", 7, 0)  # act (value 0) lives at offset 4
    return Model(Subgraph(operands, operations, (0,), (2, 5)), [], values, [pool])


@pytest.fixture
def cf_model() -> Model:
    """out = IF(cond, then: RELU, else: RELU6, x), both branches [2] -> [2]."""
    def branch(op_type: Op) -> Subgraph:
        return Subgraph([f32((2,), L.SUBGRAPH_INPUT, 1), f32((2,), L.SUBGRAPH_OUTPUT)],
                        [Operation(op_type, (0,), (1,))], (0,), (1,))
    operands = [
        Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),                         # 0 cond
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),    # 1 then
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 1, 0)),    # 2 else
        f32((2,), L.SUBGRAPH_INPUT, 1),                                                      # 3 x
        f32((2,), L.SUBGRAPH_OUTPUT),                                                        # 4 out
    ]
    main = Subgraph(operands, [Operation(Op.IF, (0, 1, 2, 3), (4,))], (0, 3), (4,))
    return Model(main, [branch(Op.RELU), branch(Op.RELU6)])


def mutated(model: Model, fn: Callable[[Model], None]) -> Model:
    """A deep copy of `model` changed by `fn` (pools keep the same fds)."""
    m = copy.deepcopy(model)
    fn(m)
    return m


def expect_invalid(fn: Callable[[], None], *fragments: str) -> NnError:
    with pytest.raises(NnError) as info:
        fn()
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message
    return info.value


def expect_invalid_model(model: Model, *fragments: str) -> NnError:
    return expect_invalid(lambda: validate_model(model), *fragments)


def set_operand(m: Model, index: int, **changes) -> None:
    m.main.operands[index] = dataclasses.replace(m.main.operands[index], **changes)


def set_op(m: Model, index: int, **changes) -> None:
    m.main.operations[index] = dataclasses.replace(m.main.operations[index], **changes)


def add_operand(m: Model, operand: Operand) -> int:
    m.main.operands.append(operand)
    return len(m.main.operands) - 1


# --- valid models --------------------------------------------------------------------------------
def test_valid_models_are_accepted(model, cf_model):
    validate_model(model)
    validate_model(model, runtime=True)
    validate_model(cf_model)


def test_registered_fixture_operations_exist():
    from nnapi.ops import find_operation
    assert find_operation(Op.RELU) and find_operation(Op.RELU6)
    assert find_operation(Op.OEM_OPERATION) is None


def test_validation_does_not_mutate_the_model(model):
    def unknown(m):
        set_operand(m, 1, dimensions=(0, 0))
        set_operand(m, 2, dimensions=())
    m = mutated(model, unknown)
    before = copy.deepcopy(m.main.operands)
    validate_model(m)
    assert m.main.operands == before


def test_infer_model_shapes_carries_inferred_dims(model):
    def unknown(m):
        set_operand(m, 1, dimensions=(0, 0))
        set_operand(m, 2, dimensions=())
    shapes = infer_model_shapes(mutated(model, unknown))
    assert shapes[1] == (2, 3) and shapes[2] == (2, 3)
    assert shapes[5] == (2, 3) and shapes[3] == ()  # OEM output keeps its declared shape


def test_infer_model_shapes_of_referenced_subgraph(cf_model):
    def unknown(m):
        m.referenced[0].operands[1] = f32((0,), L.SUBGRAPH_OUTPUT)
    assert infer_model_shapes(mutated(cf_model, unknown), 0) == [(2,), (2,)]


def test_operation_context_carries_constants(model):
    ctx = build_operation_context(model, model.main, model.main.operations[2])
    assert ctx.op == Op.OEM_OPERATION and ctx.compile_time
    t1, weight, act = ctx.inputs
    assert t1.value is None and t1.dims == (2, 3)
    np.testing.assert_array_equal(weight.value, WEIGHT)
    assert act.value.shape == () and act.value.dtype == np.int32 and ctx.scalar(2) == 0
    assert not weight.value.flags.writeable


def test_omitted_operand_context(model):
    m = mutated(model, lambda m: set_operand(m, 3, lifetime=L.NO_VALUE, location=DataLocation()))
    ctx = build_operation_context(m, m.main, m.main.operations[2])
    assert ctx.inputs[2].omitted and not ctx.has_input(2)


# --- 5.1 mutation classes --------------------------------------------------------------------------
def test_cycle_is_rejected():
    """VTS CycleTest: opnd3 = OP(opnd0, opnd4); opnd4 = OP(opnd1, opnd3); opnd5 = OP(opnd4, opnd0)."""
    operands = [f32((1,), L.SUBGRAPH_INPUT, 2), f32((1,), L.SUBGRAPH_INPUT, 1), f32((1,), L.SUBGRAPH_INPUT, 0),
                f32((1,), consumers=1), f32((1,), consumers=2), f32((1,), L.SUBGRAPH_OUTPUT)]
    ops = [Operation(Op.OEM_OPERATION, (0, 4), (3,)), Operation(Op.OEM_OPERATION, (1, 3), (4,)),
           Operation(Op.OEM_OPERATION, (4, 0), (5,))]
    expect_invalid_model(Model(Subgraph(operands, ops, (0, 1, 2), (5,))),
                         "operation 0 (OEM_OPERATION): input 1 (operand 4) is read before it is written")


def test_operation_out_of_topological_order(model):
    def reorder(m):
        m.main.operations.insert(0, m.main.operations.pop(1))  # RELU6 before the RELU that writes its input
    expect_invalid_model(mutated(model, reorder), "operation 0 (RELU6): input 0 (operand 1) is read before")


def test_writer_moved_to_the_end(model):
    expect_invalid_model(mutated(model, lambda m: m.main.operations.append(m.main.operations.pop(0))),
                         "operation 0 (RELU6)", "read before it is written")


@pytest.mark.parametrize("index,delta", [(1, +1), (1, -1), (3, +1), (0, -1)])
def test_number_of_consumers_off_by_one(model, index, delta):
    def change(m):
        set_operand(m, index, number_of_consumers=m.main.operands[index].number_of_consumers + delta)
    expect_invalid_model(mutated(model, change), f"operand {index}: number_of_consumers")


def test_number_of_consumers_of_unread_operand(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 2, number_of_consumers=1)),
                         "operand 2: number_of_consumers is 1 but 0")


def test_operand_written_twice(model):
    def add_writer(m):
        m.main.operations.append(m.main.operations[0])
        set_operand(m, 0, number_of_consumers=2)
    expect_invalid_model(mutated(model, add_writer),
                         "operation 3 (RELU): output 0 (operand 1) is written more than once")


@pytest.mark.parametrize("code", [16, 9999, 10002, 0xFFFFFFFF, -1])
def test_operand_type_out_of_range(model, code):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, type=code)),
                         f"operand 0: invalid operand type {code}")


@pytest.mark.parametrize("code", [T.OEM, T.TENSOR_OEM_BYTE])
def test_oem_operand_types_are_rejected(model, code):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, type=code)), "operand 0: OEM operand type")


def test_scalar_with_rank(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, dimensions=(0,))),
                         "operand 3: scalar INT32 must have rank 0")


@pytest.mark.parametrize("op_type,scale,fragment", [
    (T.TENSOR_FLOAT32, 1.0, "TENSOR_FLOAT32 scale must be 0"),
    (T.TENSOR_INT32, -1.0, "TENSOR_INT32 scale must be >= 0"),
    (T.TENSOR_QUANT8_ASYMM, 0.0, "TENSOR_QUANT8_ASYMM scale must be > 0"),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, 0.0, "TENSOR_QUANT8_ASYMM_SIGNED scale must be > 0"),
    (T.TENSOR_QUANT16_SYMM, float("nan"), "TENSOR_QUANT16_SYMM scale must be > 0"),
    (T.TENSOR_BOOL8, 1.0, "TENSOR_BOOL8 scale must be 0"),
])
def test_operand_scale_rules(model, op_type, scale, fragment):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, type=op_type, scale=scale)),
                         f"operand 0: {fragment}")


def test_scalar_scale_must_be_zero(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, scale=1.0)), "operand 3: INT32 scale must be 0")


@pytest.mark.parametrize("op_type,zero_point", [
    (T.TENSOR_QUANT8_ASYMM, -1), (T.TENSOR_QUANT8_ASYMM, 256), (T.TENSOR_QUANT8_SYMM, 1),
    (T.TENSOR_QUANT8_SYMM, -129), (T.TENSOR_QUANT16_ASYMM, 65536), (T.TENSOR_QUANT16_SYMM, -32769),
    (T.TENSOR_QUANT16_SYMM, 1), (T.TENSOR_QUANT8_ASYMM_SIGNED, 128), (T.TENSOR_FLOAT32, 1),
    (T.TENSOR_INT32, 1),
])
def test_operand_zero_point_rules(model, op_type, zero_point):
    scale = 0.0 if op_type in (T.TENSOR_FLOAT32, T.TENSOR_INT32) else 0.5
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, type=op_type, scale=scale,
                                                              zero_point=zero_point)),
                         f"operand 0: {op_type.name} zero_point must be", f"got {zero_point}")


def per_channel(scales, channel_dim):
    return dict(type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                channel_quant=SymmPerChannelQuantParams(tuple(scales), channel_dim))


@pytest.mark.parametrize("scales,channel_dim,fragment", [
    ((1.0, 1.0), 1, "channel_quant has 2 scales but channel dimension 1 has size 3"),
    ((1.0, 1.0), 2, "channel_quant.channel_dim 2 must be < rank 2"),
    ((1.0, 0.0, 1.0), 1, "channel_quant.scales[1] must be > 0"),
    ((1.0, -2.0), 0, "channel_quant.scales[1] must be > 0"),
])
def test_per_channel_parameters(model, scales, channel_dim, fragment):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 4, **per_channel(scales, channel_dim))),
                         f"operand 4: {fragment}")


def test_per_channel_needs_parameters(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 4, type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL)),
                         "operand 4: TENSOR_QUANT8_SYMM_PER_CHANNEL needs channel_quant")


def test_channel_quant_on_other_type(model):
    cq = SymmPerChannelQuantParams((1.0, 1.0), 0)
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 4, channel_quant=cq)),
                         "operand 4: TENSOR_FLOAT32 must not have channel_quant")


def test_written_operand_becomes_subgraph_input(model):
    def change(m):
        set_operand(m, 1, lifetime=L.SUBGRAPH_INPUT)
        m.main.input_indexes = (0, 1)
    expect_invalid_model(mutated(model, change),
                         "operation 0 (RELU): output 0 (operand 1) has lifetime SUBGRAPH_INPUT")


def test_written_operand_becomes_constant(model):
    def change(m):
        set_operand(m, 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, len(m.operand_values), 24))
        m.operand_values += bytes(24)
    expect_invalid_model(mutated(model, change),
                         "operation 0 (RELU): output 0 (operand 1) has lifetime CONSTANT_COPY")


@pytest.mark.parametrize("index", [3, 4])
def test_constant_becomes_temporary(model, index):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, index, lifetime=L.TEMPORARY_VARIABLE,
                                                              location=DataLocation())),
                         f"operand {index}: TEMPORARY_VARIABLE operand is never written",
                         "(read by operation 2 (OEM_OPERATION) input")


def test_constant_becomes_unlisted_subgraph_input(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, lifetime=L.SUBGRAPH_INPUT,
                                                              location=DataLocation())),
                         "operand 3: lifetime SUBGRAPH_INPUT but it is not listed in the subgraph input indexes")


def test_listed_input_becomes_constant(model):
    def change(m):
        set_operand(m, 0, lifetime=L.CONSTANT_COPY, location=DataLocation(0, len(m.operand_values), 24))
        m.operand_values += bytes(24)
    expect_invalid_model(mutated(model, change),
                         "subgraph input 0: operand 0 has lifetime CONSTANT_COPY, expected SUBGRAPH_INPUT")


def test_listed_output_becomes_temporary(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 2, lifetime=L.TEMPORARY_VARIABLE)),
                         "subgraph output 0: operand 2 has lifetime TEMPORARY_VARIABLE, expected SUBGRAPH_OUTPUT")


def test_temporary_becomes_unlisted_output(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 1, lifetime=L.SUBGRAPH_OUTPUT)),
                         "operand 1: lifetime SUBGRAPH_OUTPUT but it is not listed")


@pytest.mark.parametrize("code", [OPERATION_TYPE_FUNDAMENTAL_MAX + 1, 9999, 10001, -1])
def test_operation_type_out_of_range(model, code):
    expect_invalid_model(mutated(model, lambda m: set_op(m, 1, type=code)),
                         f"operation 1 ({code}): invalid operation type {code}")


@pytest.mark.parametrize("kind", ["inputs", "outputs"])
def test_operation_operand_index_out_of_range(model, kind):
    expect_invalid_model(mutated(model, lambda m: set_op(m, 1, **{kind: (6,)})),
                         f"operation 1 (RELU6): {kind[:-1]} 0 index 6 out of range (6 operands)")


def test_operation_write_removed(model):
    """mutateOperationRemoveWriteTest: the RELU writes a new operand, so t1 is never written."""
    def redirect(m):
        set_op(m, 0, outputs=(add_operand(m, f32((2, 3))),))
    expect_invalid_model(mutated(model, redirect), "operand 1: TEMPORARY_VARIABLE operand is never written")


def remove_operand(m: Model, index: int) -> None:
    """VTS removeOperand: drop the operand and its uses, shifting greater indexes down."""
    def shift(indexes):
        return tuple(i - (i > index) for i in indexes if i != index)
    del m.main.operands[index]
    m.main.operations = [Operation(op.type, shift(op.inputs), shift(op.outputs)) for op in m.main.operations]
    m.main.input_indexes = shift(m.main.input_indexes)
    m.main.output_indexes = shift(m.main.output_indexes)


def test_operand_removed(model):
    expect_invalid_model(mutated(model, lambda m: remove_operand(m, 1)),
                         "operation 0 (RELU): expected 1 outputs, got 0")


def test_operation_removed(model):
    def remove(m):
        del m.main.operations[1]
        set_operand(m, 1, number_of_consumers=1)
    expect_invalid_model(mutated(model, remove), "operand 2: SUBGRAPH_OUTPUT operand is never written")


def test_operation_input_removed(model):
    def remove(m):
        set_op(m, 1, inputs=())
        set_operand(m, 1, number_of_consumers=1)
    expect_invalid_model(mutated(model, remove), "operation 1 (RELU6): expected 1 inputs, got 0")


def test_operation_input_added(model):
    def add(m):
        extra = add_operand(m, Operand(T.INT32, (), 1, lifetime=L.SUBGRAPH_INPUT))
        m.main.input_indexes = (*m.main.input_indexes, extra)
        set_op(m, 1, inputs=(1, extra))
    expect_invalid_model(mutated(model, add), "operation 1 (RELU6): expected 1 inputs, got 2")


def test_operation_output_added(model):
    def add(m):
        extra = add_operand(m, Operand(T.INT32, (), 0, lifetime=L.SUBGRAPH_OUTPUT))
        m.main.output_indexes = (*m.main.output_indexes, extra)
        set_op(m, 0, outputs=(1, extra))
    expect_invalid_model(mutated(model, add), "operation 0 (RELU): expected 1 outputs, got 2")


def test_operation_output_removed(model):
    expect_invalid_model(mutated(model, lambda m: set_op(m, 1, outputs=())),
                         "operand 2: SUBGRAPH_OUTPUT operand is never written")


def test_operand_type_checked_by_registry(model):
    """mutateOperationOperandTypeTest: a locally well-formed type the operation does not accept."""
    def change(m):
        for i in (0, 1, 2):
            set_operand(m, i, type=T.TENSOR_INT32)
    expect_invalid_model(mutated(model, change), "operation 0 (RELU): input 0 has type TENSOR_INT32")


def test_output_quantization_checked_by_registry(model):
    def change(m):
        for i in (0, 1, 2):
            set_operand(m, i, type=T.TENSOR_QUANT8_ASYMM, scale=0.5)
        set_operand(m, 2, scale=0.25)
    expect_invalid_model(mutated(model, change), "operation 1 (RELU6): input 0 and output 0 differ")


def test_omitted_operand_not_allowed(model):
    def omit(m):
        set_operand(m, 0, lifetime=L.NO_VALUE)
        m.main.input_indexes = ()
    expect_invalid_model(mutated(model, omit), "operation 0 (RELU): input 0 (operand 0) is omitted")


# --- locations ---------------------------------------------------------------------------------------
def test_constant_copy_outside_operand_values(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, location=DataLocation(0, 6, 4))),
                         "operand 3: CONSTANT_COPY location [6, 10) is outside operand_values (8 bytes)")


def test_constant_copy_with_pool_index(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, location=DataLocation(1, 4, 4))),
                         "operand 3: CONSTANT_COPY location must have pool_index 0")


def test_constant_copy_wrong_length(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, location=DataLocation(0, 0, 8))),
                         "operand 3: CONSTANT_COPY location length 8 != 4 bytes")


@pytest.mark.parametrize("location,fragment", [
    (DataLocation(1, 8, 24), "pool_index 1 out of range (1 pools)"),
    (DataLocation(0, 48, 24), "location [48, 72) is outside pool 0 (64 bytes)"),
    (DataLocation(0, 2**64 - 1, 24), "location [18446744073709551615, 18446744073709551639) is outside pool 0"),
    (DataLocation(0, 8, 20), "location length 20 != 24 bytes"),
])
def test_constant_reference_location(model, location, fragment):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 4, location=location)),
                         f"operand 4: CONSTANT_REFERENCE {fragment}")


def test_constant_with_unknown_dimension(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 4, dimensions=(2, 0))),
                         "operand 4: constant tensor (CONSTANT_REFERENCE) has an unknown dimension")


def test_no_value_operand_with_location(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 3, lifetime=L.NO_VALUE)),
                         "operand 3: NO_VALUE operand must have no location")


def test_temporary_with_location(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 1, location=DataLocation(0, 0, 4))),
                         "operand 1: TEMPORARY_VARIABLE operand must have no location")


@pytest.mark.parametrize("pool,fragment", [
    (MemoryPool(token=3), "model pool 0: a driver-managed buffer (token) cannot hold model constants"),
    (MemoryPool(), "model pool 0: exactly one of handle, token or pointer must be set (got none)"),
])
def test_bad_model_pool(model, pool, fragment):
    expect_invalid_model(mutated(model, lambda m: m.pools.__setitem__(0, pool)), fragment)


def test_pool_with_handle_and_token(model):
    expect_invalid_model(mutated(model, lambda m: m.pools.__setitem__(0, dataclasses.replace(m.pools[0], token=1))),
                         "model pool 0: exactly one of handle, token or pointer must be set (got handle, token)")


# --- subgraph lists --------------------------------------------------------------------------------
@pytest.mark.parametrize("inputs,fragment", [
    ((6,), "subgraph input 0: operand index 6 out of range (6 operands)"),
    ((0, 0), "subgraph input 1: operand 0 is listed more than once"),
])
def test_subgraph_input_indexes(model, inputs, fragment):
    def change(m):
        m.main.input_indexes = inputs
    expect_invalid_model(mutated(model, change), fragment)


def test_subgraph_output_listed_twice(model):
    def change(m):
        m.main.output_indexes = (2, 5, 2)
    expect_invalid_model(mutated(model, change), "subgraph output 2: operand 2 is listed more than once")


def test_subgraph_without_operations(model):
    def change(m):
        m.main.operations = []
    expect_invalid_model(mutated(model, change), "main subgraph: has no operations")


# --- shape propagation -------------------------------------------------------------------------------
def test_declared_output_shape_mismatch(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 1, dimensions=(2, 4))),
                         "operation 0 (RELU): output 0 (operand 1) is declared with dimensions [2, 4] "
                         "but its inputs give [2, 3]")


def test_inferred_shapes_are_carried_forward(model):
    """t1 has unknown dimensions; RELU's inferred [2, 3] reaches RELU6, whose output says [2, 4]."""
    def change(m):
        set_operand(m, 1, dimensions=())
        set_operand(m, 2, dimensions=(0, 4))
    expect_invalid_model(mutated(model, change), "operation 1 (RELU6): output 0 (operand 2)", "[0, 4]")


def test_declared_output_rank_mismatch(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 2, dimensions=(2, 3, 1))),
                         "operation 1 (RELU6): output 0 (operand 2) is declared with dimensions [2, 3, 1]")


def test_registry_rank_check_on_inferred_input(model):
    def change(m):
        for i in (0, 1, 2):
            set_operand(m, i, dimensions=(1, 1, 1, 1, 2))
    expect_invalid_model(mutated(model, change), "operation 0 (RELU): input 0 has rank 5")


def fake_registration(validate=None, prepare=None) -> OperationRegistration:
    return OperationRegistration(Op.RELU, validate or (lambda ctx: None), prepare or (lambda ctx: [ctx.inputs[0].dims]),
                                 lambda ctx: [])


def patch_registry(monkeypatch, reg: OperationRegistration) -> None:
    real = shapes_module.find_operation
    monkeypatch.setattr(shapes_module, "find_operation", lambda t: reg if t == Op.RELU else real(t))


def test_crash_in_validate_becomes_invalid_argument(model, monkeypatch):
    patch_registry(monkeypatch, fake_registration(validate=lambda ctx: 1 // 0))
    expect_invalid_model(model, "operation 0 (RELU): ZeroDivisionError")


def test_crash_in_prepare_becomes_invalid_argument(model, monkeypatch):
    patch_registry(monkeypatch, fake_registration(prepare=lambda ctx: {}["missing"]))
    expect_invalid_model(model, "operation 0 (RELU): KeyError")


def test_malformed_prepare_result_becomes_invalid_argument(model, monkeypatch):
    patch_registry(monkeypatch, fake_registration(prepare=lambda ctx: [(2, 3), (2, 3)]))
    expect_invalid_model(model, "operation 0 (RELU): shape inference gave [(2, 3), (2, 3)] for 1 outputs")
    patch_registry(monkeypatch, fake_registration(prepare=lambda ctx: [("a",)]))
    expect_invalid_model(model, "operation 0 (RELU): shape inference gave ('a',) for output 0")


def test_data_dependent_prepare_result_is_not_an_error(model, monkeypatch):
    patch_registry(monkeypatch, fake_registration(prepare=lambda ctx: None))
    validate_model(model)


def test_unknown_value_in_prepare_is_not_an_error(model, monkeypatch):
    def prepare(ctx):
        raise UnknownValue("not constant")
    patch_registry(monkeypatch, fake_registration(prepare=prepare))
    validate_model(model)


def test_prepare_error_names_the_operation(model, monkeypatch):
    def prepare(ctx):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "RELU: something is off")
    patch_registry(monkeypatch, fake_registration(prepare=prepare))
    err = expect_invalid_model(model, "operation 0 (RELU): something is off")
    assert "RELU: RELU" not in err.message


def test_malformed_plain_data_never_crashes(model):
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, dimensions=None)),
                         "operand 0: dimensions must be a sequence of integers")
    expect_invalid_model(mutated(model, lambda m: set_operand(m, 0, scale="x")), "operand 0: scale must be a number")
    expect_invalid_model(mutated(model, lambda m: setattr(m, "main", None)), "expected a Subgraph")
    expect_invalid_model(mutated(model, lambda m: m.main.operations.append(None)), "operation 3")


# --- control flow and referenced subgraphs --------------------------------------------------------------
def test_subgraph_operand_out_of_range(cf_model):
    expect_invalid_model(mutated(cf_model, lambda m: set_operand(m, 2, location=DataLocation(0, 5, 0))),
                         "operand 2: SUBGRAPH operand refers to subgraph 5, but the model has 2")


def test_subgraph_type_and_lifetime_go_together(cf_model):
    expect_invalid_model(mutated(cf_model, lambda m: set_operand(m, 1, lifetime=L.CONSTANT_COPY)),
                         "operand 1: type SUBGRAPH cannot have lifetime CONSTANT_COPY")


def test_circular_subgraph_reference(cf_model):
    def recurse(m):
        # The then-branch calls IF on itself.
        then = m.referenced[0]
        then.operands[0] = f32((2,), L.SUBGRAPH_INPUT, 2)
        then.operands += [Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),
                          Operand(T.SUBGRAPH, (), 2, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),
                          f32((2,), L.SUBGRAPH_OUTPUT)]
        then.operations.append(Operation(Op.IF, (2, 3, 3, 0), (4,)))
        then.input_indexes = (0, 2)
        then.output_indexes = (1, 4)
    expect_invalid_model(mutated(cf_model, recurse), "referenced subgraph 0: circular subgraph reference")


def test_referenced_subgraph_is_validated(cf_model):
    def change(m):
        m.referenced[1].operands[0] = f32((2,), L.SUBGRAPH_INPUT, 3)
    expect_invalid_model(mutated(cf_model, change), "referenced subgraph 1: operand 0: number_of_consumers is 3")


def test_referenced_subgraph_signature_checked(cf_model):
    def change(m):
        then = m.referenced[0]
        then.operations[0] = Operation(Op.RELU, (0, 0), (1,))
        then.operands[0] = dataclasses.replace(then.operands[0], number_of_consumers=2)
    expect_invalid_model(mutated(cf_model, change),
                         "referenced subgraph 0: operation 0 (RELU): expected 1 inputs, got 2")


def test_if_branch_type_mismatch(cf_model):
    def change(m):
        for i in (0, 1):
            m.referenced[0].operands[i] = dataclasses.replace(m.referenced[0].operands[i], type=T.TENSOR_INT32)
    expect_invalid_model(mutated(cf_model, change),
                         "operation 0 (IF): then branch input 0: type TENSOR_INT32 != TENSOR_FLOAT32")


def test_if_condition_must_be_bool_singleton(cf_model):
    expect_invalid_model(mutated(cf_model, lambda m: set_operand(m, 0, dimensions=(2,))),
                         "operation 0 (IF): input 0 (condition) must be a TENSOR_BOOL8 of shape [1]")


def test_if_branch_signature_mismatch(cf_model):
    def change(m):
        m.referenced[1].operands[0] = f32((3,), L.SUBGRAPH_INPUT, 1)
        m.referenced[1].operands[1] = f32((3,), L.SUBGRAPH_OUTPUT)
    expect_invalid_model(mutated(cf_model, change),
                         "operation 0 (IF): else branch input 0: dimensions [3] and [2] are incompatible")


def test_if_branch_input_count(cf_model):
    def change(m):
        set_op(m, 0, inputs=(0, 1, 2))
        set_operand(m, 3, number_of_consumers=0)
    expect_invalid_model(mutated(cf_model, change), "operation 0 (IF): then branch has 1 inputs")


def test_while_loop_signature(cf_model):
    """A WHILE whose condition model returns a float tensor instead of TENSOR_BOOL8 [1]."""
    def to_while(m):
        set_op(m, 0, type=Op.WHILE, inputs=(1, 2, 3))
        set_operand(m, 0, number_of_consumers=0)
    expect_invalid_model(mutated(cf_model, to_while),
                         "operation 0 (WHILE): condition model output 0 must be a TENSOR_BOOL8 of shape [1]")


# --- preference and priority ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [-1, 3, 1.0, None])
def test_bad_preference_and_priority(value):
    expect_invalid(lambda: validate_preference(value), "invalid execution preference")
    expect_invalid(lambda: validate_priority(value), "invalid priority")


@pytest.mark.parametrize("value", [0, 1, 2])
def test_good_preference_and_priority(value):
    validate_preference(value)
    validate_priority(value)


# --- requests (VTS-BEHAVIOURS 2.2, 5.2) -------------------------------------------------------------------
@pytest.fixture
def io_pool():
    handle = allocate_ashmem(72)
    yield MemoryPool(handle=handle)
    close_handle(handle)


@pytest.fixture
def request_(io_pool) -> Request:
    return Request([RequestArgument(location=DataLocation(0, 0, 24))],
                   [RequestArgument(location=DataLocation(0, 24, 24)),
                    RequestArgument(location=DataLocation(0, 48, 24))], [io_pool])


def changed(request: Request, **changes) -> Request:
    return dataclasses.replace(request, **{k: list(v) for k, v in changes.items()})


def arg(pool=0, offset=0, length=24, dims=(), no_value=False) -> RequestArgument:
    return RequestArgument(no_value, DataLocation(pool, offset, length), tuple(dims))


def test_valid_requests(model, request_):
    validate_request(request_, model)
    validate_request(changed(request_, inputs=[arg(dims=(2, 3))]), model, allow_unspecified_output=False)
    with_token = changed(request_, outputs=[request_.outputs[0], arg(pool=1, length=0)],
                         pools=[*request_.pools, MemoryPool(token=5)])
    validate_request(with_token, model)
    pointer = changed(request_, inputs=[arg(pool=1)], pools=[*request_.pools, MemoryPool(pointer=bytearray(24))])
    validate_request(pointer, model)


def test_request_input_removed(model, request_):
    expect_invalid(lambda: validate_request(changed(request_, inputs=[]), model),
                   "request has 0 inputs but the model has 1")


def test_request_output_removed(model, request_):
    expect_invalid(lambda: validate_request(changed(request_, outputs=request_.outputs[:1]), model),
                   "request has 1 outputs but the model has 2")


@pytest.mark.parametrize("argument,fragment", [
    (arg(no_value=True), "request input 0: has_no_value but the location is not empty"),
    (arg(length=0, dims=(2, 3), no_value=True), "request input 0: has_no_value but dimensions [2, 3]"),
    (arg(pool=1), "request input 0: pool_index 1 out of range (1 pools)"),
    (arg(offset=2**64 - 1), "request input 0: region [18446744073709551615, "),
    (arg(offset=2**64 - 8, length=16), "is outside pool 0 (72 bytes)"),
    (arg(offset=60), "request input 0: region [60, 84) is outside pool 0 (72 bytes)"),
    (arg(length=20), "request input 0: length 20 != 24 bytes"),
    (arg(length=0), "request input 0: length 0 != 24 bytes"),
    (arg(offset=-4), "request input 0: location fields must be non-negative integers"),
    (arg(dims=(2, 3, 1)), "request input 0: dimensions [2, 3, 1] have rank 3 but operand 0 has rank 2"),
    (arg(dims=(2, 4)), "request input 0: dimension 1 is 4 but operand 0 has 3"),
])
def test_bad_request_input(model, request_, argument, fragment):
    expect_invalid(lambda: validate_request(changed(request_, inputs=[argument]), model), fragment)


def test_unspecified_input_dimensions(model, request_):
    m = mutated(model, lambda m: set_operand(m, 0, dimensions=(0, 3)))
    expect_invalid(lambda: validate_request(request_, m),
                   "request input 0: operand 0 dimension 0 is unknown and the request gives no dimensions")
    expect_invalid(lambda: validate_request(changed(request_, inputs=[arg(dims=(0, 3))]), m),
                   "request input 0: dimension 0 is 0")
    validate_request(changed(request_, inputs=[arg(dims=(2, 3))]), m)
    m = mutated(model, lambda m: set_operand(m, 0, dimensions=()))
    expect_invalid(lambda: validate_request(request_, m), "request input 0: operand 0 has unknown rank")


def test_unspecified_output_dimensions(model, request_):
    m = mutated(model, lambda m: set_operand(m, 2, dimensions=(0, 3)))
    validate_request(request_, m)
    validate_request(changed(request_, outputs=[arg(offset=24, dims=(0, 3)), request_.outputs[1]]), m)
    expect_invalid(lambda: validate_request(request_, m, allow_unspecified_output=False),
                   "request output 0: operand 2 dimension 0 is unknown",
                   "this execution needs fully specified outputs")
    validate_request(changed(request_, outputs=[arg(offset=24, dims=(2, 3)), request_.outputs[1]]), m,
                     allow_unspecified_output=False)


@pytest.mark.parametrize("pool,argument,fragment", [
    (MemoryPool(token=0), arg(pool=1, length=0), "request pool 1: token must be a positive integer, got 0"),
    (MemoryPool(token=-3), arg(pool=1, length=0), "request pool 1: token must be a positive integer"),
    (MemoryPool(token=5), arg(pool=1, offset=4, length=0), "request output 1: region [4, 4) is outside pool 1 (0 bytes)"),
    (MemoryPool(token=5), arg(pool=1, length=24), "request output 1: region [0, 24) is outside pool 1 (0 bytes)"),
    (MemoryPool(), arg(pool=1), "request pool 1: exactly one of handle, token or pointer must be set (got none)"),
    (MemoryPool(token=5, pointer=bytearray(4)), arg(pool=1),
     "request pool 1: exactly one of handle, token or pointer must be set (got token, pointer)"),
    (MemoryPool(pointer=bytes(24)), arg(pool=1), "request output 1: pool 1 is a read-only buffer"),
    (MemoryPool(pointer=object()), arg(pool=1), "request pool 1: pointer is not a buffer"),
])
def test_bad_request_pool(model, request_, pool, argument, fragment):
    request = changed(request_, outputs=[request_.outputs[0], argument], pools=[*request_.pools, pool])
    expect_invalid(lambda: validate_request(request, model), fragment)


def test_bad_request_handles(model, request_):
    from nnapi.hal import MemoryHandle
    for handle, fragment in [
        (MemoryHandle("bogus", (3,), (), 24), "request pool 0: unknown memory kind 'bogus'"),
        (MemoryHandle("ashmem", (-1,), (), 24), "request pool 0: invalid file descriptor"),
        (MemoryHandle("ashmem", (3, 4), (), 24), "request pool 0: ashmem handle must hold exactly 1 file descriptor"),
        (MemoryHandle("ashmem", (3,), (), 0), "request pool 0: ashmem pool size must be > 0"),
        (MemoryHandle("mmap_fd", (3,), (3, 0), 24), "request pool 0: mmap_fd handle needs 3 ints"),
        (MemoryHandle("mmap_fd", (3,), (0x10, 0, 0), 24), "request pool 0: mmap_fd prot 0x10"),
    ]:
        expect_invalid(lambda: validate_request(changed(request_, pools=[MemoryPool(handle=handle)]), model), fragment)


def test_non_blob_hardware_buffer_needs_whole_buffer(model, request_):
    from nnapi.hal import MemoryHandle
    pool = MemoryPool(handle=MemoryHandle("hardware_buffer", (3,), (2, 3, 1), 24))
    validate_request(changed(request_, inputs=[arg(pool=1, length=0)], pools=[*request_.pools, pool]), model)
    expect_invalid(lambda: validate_request(changed(request_, inputs=[arg(pool=1)], pools=[*request_.pools, pool]),
                                            model), "request input 0: region [0, 24) is outside pool 1 (0 bytes)")
    expect_invalid_model(mutated(model, lambda m: m.pools.__setitem__(0, pool)),
                         "model pool 0: a non-BLOB hardware buffer cannot hold model constants")


def test_request_scalar_operand_with_dimensions(model, request_):
    def scalar_input(m):
        set_operand(m, 3, lifetime=L.SUBGRAPH_INPUT, location=DataLocation())
        m.main.input_indexes = (0, 3)
    m = mutated(model, scalar_input)
    validate_model(m)
    good = changed(request_, inputs=[request_.inputs[0], arg(offset=64, length=4)])
    validate_request(good, m)
    expect_invalid(lambda: validate_request(changed(good, inputs=[good.inputs[0], arg(offset=64, length=4, dims=(1,))]),
                                            m), "request input 1: operand 3 is a scalar INT32")


def test_malformed_request_never_crashes(model, request_):
    expect_invalid(lambda: validate_request(changed(request_, inputs=[None]), model),
                   "request input 0: expected a RequestArgument")
    expect_invalid(lambda: validate_request(changed(request_, inputs=[arg(dims=("a",))]), model),
                   "request input 0: dimensions must be 32-bit unsigned integers")
    expect_invalid(lambda: validate_request(None, model), "expected a Request")


# --- the fast check of plain requests -----------------------------------------------------------------
def _outcome(fn: Callable[[], None]) -> str | None:
    try:
        fn()
        return None
    except NnError as e:
        assert e.status == ErrorStatus.INVALID_ARGUMENT
        return e.message


_FIELD_VALUES = {"pool_index": [1, 2, 3, -1], "offset": [4, -4, 2**64], "length": [0, 20, 28, 24.0, True],
                 "dimensions": [(2, 3), [2, 3], (3, 2), (2, 3, 1), (0, 3)], "has_no_value": [True]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(sorted(_FIELD_VALUES)), st.integers(0, 4)),
                      max_size=2),
       pool_edit=st.sampled_from(["none", "read-only", "bytearray", "short", "strided", "token", "memoryview",
                                  "read-only memoryview", "ashmem", "short ashmem", "bad handle"]))
def test_the_fast_request_check_agrees_with_validate_request(model, edits, pool_edit):
    """`RequestChecker` passes exactly the requests `validate_request` passes, and refuses the others
    with its message (the fast path only ever says yes)."""
    arrays = [np.zeros(6, np.float32) for _ in range(3)]
    pools = [MemoryPool(pointer=a) for a in arrays]
    fields = [{"has_no_value": False, "pool_index": k, "offset": 0, "length": 24, "dimensions": ()} for k in range(3)]
    for k, field, choice in edits:
        values = _FIELD_VALUES[field]
        fields[k][field] = values[choice % len(values)]
    args = [RequestArgument(f["has_no_value"], DataLocation(f["pool_index"], f["offset"], f["length"]),
                            f["dimensions"]) for f in fields]
    if pool_edit == "read-only":
        arrays[1].flags.writeable = False
    elif pool_edit == "bytearray":
        pools[2] = MemoryPool(pointer=bytearray(24))
    elif pool_edit == "short":
        pools[0] = MemoryPool(pointer=np.zeros(5, np.float32))
    elif pool_edit == "strided":
        pools[1] = MemoryPool(pointer=np.zeros(12, np.float32)[::2])
    elif pool_edit == "token":
        pools[2] = MemoryPool(token=7)
    elif pool_edit == "memoryview":
        pools[1] = MemoryPool(pointer=memoryview(bytearray(24)))
    elif pool_edit == "read-only memoryview":
        pools[2] = MemoryPool(pointer=memoryview(bytes(24)))
    elif pool_edit in ("ashmem", "short ashmem"):
        pools[1] = MemoryPool(handle=allocate_ashmem(24 if pool_edit == "ashmem" else 20))
    elif pool_edit == "bad handle":
        from nnapi.hal import MemoryHandle
        pools[0] = MemoryPool(handle=MemoryHandle("ashmem", (-1,), (), 24))
    request = Request(args[:1], args[1:], pools)
    try:
        assert _outcome(lambda: RequestChecker(model)(request)) == _outcome(lambda: validate_request(request, model))
    finally:
        if pools[1].handle is not None:
            close_handle(pools[1].handle)


def test_the_fast_request_check_takes_the_plain_case(model):
    request = Request([RequestArgument(location=DataLocation(0, 0, 24))],
                      [RequestArgument(location=DataLocation(k, 0, 24)) for k in (1, 2)],
                      [MemoryPool(pointer=np.zeros(6, np.float32)) for _ in range(3)])
    checker = RequestChecker(model)
    assert checker._plain(request)
    request.pools[1].pointer.flags.writeable = False  # an output into a read-only array
    assert not checker._plain(request)
    with pytest.raises(NnError, match="request output 0: pool 1 is a read-only buffer"):
        checker(request)
