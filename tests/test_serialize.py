"""hal.serialize: round trips, malformed bytes fail cleanly, and random corruption never crashes validation."""
from __future__ import annotations

import ast
import pathlib
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import nnapi.hal.serialize as serialize
from nnapi.hal import (DataLocation, ErrorStatus, MemoryHandle, MemoryPool, Model, NnError, Operand,
                       OperandLifeTime as L, OperandType as T, Operation, OperationType as Op, Subgraph,
                       SymmPerChannelQuantParams)
from nnapi.hal.enums import OPERATION_TYPE_FUNDAMENTAL_MAX
from nnapi.hal.serialize import model_from_bytes, model_to_bytes
from nnapi.memory import allocate_ashmem, close_handle, map_handle
from nnapi.validation import validate_model

from conftest import fuzz_examples

pytestmark = pytest.mark.timing


def sample_model(pool: MemoryPool) -> Model:
    """in0 -RELU-> t1 -RELU6-> out0, out1 = OEM_OPERATION(t1, weight, act), plus an IF over two branches."""
    def f32(dims, lifetime=L.TEMPORARY_VARIABLE, consumers=0, location=DataLocation()):
        return Operand(T.TENSOR_FLOAT32, tuple(dims), consumers, lifetime=lifetime, location=location)

    def branch(op_type: Op) -> Subgraph:
        return Subgraph([f32((2, 3), L.SUBGRAPH_INPUT, 1), f32((2, 3), L.SUBGRAPH_OUTPUT)],
                        [Operation(op_type, (0,), (1,))], (0,), (1,))
    operands = [
        f32((2, 3), L.SUBGRAPH_INPUT, 1),
        f32((2, 3), L.TEMPORARY_VARIABLE, 3),
        f32((2, 3), L.SUBGRAPH_OUTPUT),
        Operand(T.INT32, (), 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 4, 4)),
        f32((2, 3), L.CONSTANT_REFERENCE, 1, DataLocation(0, 8, 24)),
        f32((2, 3), L.SUBGRAPH_OUTPUT),
        Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 1, 0)),
        f32((2, 3), L.SUBGRAPH_OUTPUT),
    ]
    operations = [Operation(Op.RELU, (0,), (1,)), Operation(Op.RELU6, (1,), (2,)),
                  Operation(Op.OEM_OPERATION, (1, 4, 3), (5,)), Operation(Op.IF, (6, 7, 8, 1), (9,))]
    main = Subgraph(operands, operations, (0, 6), (2, 5, 9))
    return Model(main, [branch(Op.RELU), branch(Op.RELU6)], struct.pack("<ii", 7, 0), [pool], True)


@pytest.fixture
def pool():
    handle = allocate_ashmem(64)
    map_handle(handle).view(8, 24)[:] = bytes(range(24))
    yield MemoryPool(handle=handle)
    close_handle(handle)


def expect_invalid(data, fragment: str = "") -> None:
    with pytest.raises(NnError) as info:
        model_from_bytes(data)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    assert fragment in info.value.message, info.value.message


def test_round_trip(pool):
    model = sample_model(pool)
    validate_model(model)
    data = model_to_bytes(model)
    assert data.startswith(serialize.MAGIC)
    back = model_from_bytes(data)
    assert back == model
    assert model_to_bytes(back) == data
    assert isinstance(back.main.operands[0].type, T) and isinstance(back.main.operations[3].type, Op)
    validate_model(back)


def test_round_trip_of_every_field(pool):
    cq = SymmPerChannelQuantParams((0.5, 0.25, 0.125), 1)
    operands = [Operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), 5, 0.0, 0, L.CONSTANT_COPY, DataLocation(0, 2, 6), cq),
                Operand(T.TENSOR_QUANT8_ASYMM, (0, 7), 0, 0.1, 128, L.SUBGRAPH_OUTPUT),
                Operand(T.FLOAT16, (), 2**32 - 1, 0.0, -(2**63), L.NO_VALUE, DataLocation(2**64 - 1, 3, 4))]
    model = Model(Subgraph(operands, [Operation(Op.RANK, (0, 2), (1,))], (), (1,)), [],
                  bytes(range(256)) * 3,
                  [pool, MemoryPool(token=2**64 - 1),
                   MemoryPool(handle=MemoryHandle("mmap_fd", (9,), (3, 2**32 - 1, -5), 4096)),
                   MemoryPool(handle=MemoryHandle("hardware_buffer", (), (), 0))], False)
    assert model_from_bytes(model_to_bytes(model)) == model


def test_serialization_is_deterministic(pool):
    assert model_to_bytes(sample_model(pool)) == model_to_bytes(sample_model(pool))


def test_pointer_pools_are_not_serialized(pool):
    model = sample_model(pool)
    model.pools.append(MemoryPool(pointer=bytearray(8)))
    with pytest.raises(NnError, match="pool 1 must be exactly one shared-memory handle or token"):
        model_to_bytes(model)


def test_unencodable_values_raise_nn_error(pool):
    model = sample_model(pool)
    model.main.operands[0].dimensions = (-1,)
    with pytest.raises(NnError, match="subgraph 0 operand 0 dimension -1 does not fit"):
        model_to_bytes(model)
    model.main.operands[0].dimensions = None
    with pytest.raises(NnError, match="cannot serialize model"):
        model_to_bytes(model)


def test_every_truncation_is_rejected(pool):
    data = model_to_bytes(sample_model(pool))
    for n in range(len(data)):
        expect_invalid(data[:n])


def test_trailing_bytes_magic_and_version(pool):
    data = model_to_bytes(sample_model(pool))
    expect_invalid(data + b"\0", "1 unexpected trailing bytes")
    expect_invalid(b"X" + data[1:], "bad magic")
    expect_invalid(data[:8] + struct.pack("<H", 99) + data[10:], "unsupported version 99")
    expect_invalid(data[:10] + struct.pack("<H", 6) + data[12:], "unknown flags 0x6")
    expect_invalid("not bytes", "must be bytes")


def test_huge_length_claims_fail_fast(pool):
    empty = Model(Subgraph([], [], (), ()), [], b"", [])
    data = model_to_bytes(empty)          # ... u64 values length (0), u32 pool count (0)
    start = time.monotonic()
    expect_invalid(data[:-12] + struct.pack("<QI", 2**40, 0), "operand_values length 1099511627776 exceeds")
    expect_invalid(data[:12] + struct.pack("<I", 2**32 - 1), "subgraph count 4294967295 exceeds")
    expect_invalid(data[:16] + struct.pack("<I", 2**31) + data[20:], "operand count 2147483648 exceeds")
    assert time.monotonic() - start < 1.0


def test_unknown_enum_codes_are_rejected(pool):
    model = sample_model(pool)
    model.main.operands[0].type = 16
    expect_invalid(model_to_bytes(model), "subgraph 0 operand 0 type has unknown code 16")
    model = sample_model(pool)
    invalid_code = OPERATION_TYPE_FUNDAMENTAL_MAX + 1
    model.main.operations[0] = Operation(invalid_code, (0,), (1,))
    expect_invalid(model_to_bytes(model), f"subgraph 0 operation 0 type has unknown code {invalid_code}")


def test_hal_serialize_imports_nothing_else_of_the_package():
    tree = ast.parse(pathlib.Path(serialize.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level in (0, 1), ast.dump(node)
            assert node.level == 1 or not (node.module or "").startswith("nnapi"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("nnapi") for a in node.names)


_MUTATION = st.tuples(st.sampled_from(["flip", "insert", "delete", "overwrite"]),
                      st.integers(min_value=0, max_value=2**16), st.integers(min_value=0, max_value=255))


def _mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for kind, position, value in mutations:
        i = position % (len(buf) + 1)
        if kind == "insert":
            buf[i:i] = bytes([value])
        elif buf and i < len(buf):
            if kind == "flip":
                buf[i] ^= 1 << (value % 8)
            elif kind == "delete":
                del buf[i]
            else:
                buf[i] = value
    return bytes(buf)


@settings(max_examples=fuzz_examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_MUTATION, min_size=1, max_size=6))
def test_random_corruption_raises_only_nn_error(pool, mutations):
    data = _mutate(model_to_bytes(sample_model(pool)), mutations)
    try:
        model = model_from_bytes(data)
        validate_model(model)
    except NnError as e:
        assert e.status == ErrorStatus.INVALID_ARGUMENT
