"""The app-facing runtime: model building, compilation settings, executions, partitioning."""
from __future__ import annotations

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op, ResultCode
from nnapi.hal import OperandLifeTime

from conftest import add_relu_model


def test_reference_device_is_discovered_through_entry_points():
    names = [d.name for d in nnapi.devices()]
    assert "reference" in names
    assert names[-1] == "reference"  # the fallback comes last


def test_add_relu_computes(add_relu):
    c = nnapi.Compilation(add_relu).finish()
    a = np.array([1, -5, 2, 0.5], np.float32)
    b = np.array([1, 1, -3, 0.25], np.float32)
    (y,) = c.execute([a, b])
    np.testing.assert_array_equal(y, np.maximum(a + b, 0))


@pytest.mark.parametrize("device", ["reference", "xla", "openvino"])
def test_execute_gives_fresh_outputs_and_takes_any_array(add_relu, device):
    """`Compilation.execute` (its common case runs without an Execution object) returns new arrays on
    every call, converts inputs of another dtype or layout, and honours its timeout."""
    if device not in [d.name for d in nnapi.devices()]:
        pytest.skip(f"{device} is not installed")
    c = nnapi.Compilation(add_relu, devices=[device]).finish()
    a = np.array([1, -5, 2, 0.5], np.float32)
    b = np.array([1, 1, -3, 0.25], np.float32)
    (first,) = c.execute([a, b])
    (second,) = c.execute([b, b])
    assert first is not second and first.shape == (4,) and first.dtype == np.float32
    np.testing.assert_array_equal(first, np.maximum(a + b, 0))  # not overwritten by the second call
    np.testing.assert_array_equal(second, np.maximum(b + b, 0))
    strided = np.array([1, 9, -5, 9, 2, 9, 0.5, 9], np.float32)[::2]
    for x in (a.astype(np.float64), strided, [1, -5, 2, 0.5]):
        (y,) = c.execute([x, b], timeout=10.0)
        np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    with pytest.raises(nnapi.NnError, match="invalid timeout"):
        c.execute([a, b], timeout=-1)
    with pytest.raises(nnapi.NnError, match="1 inputs given, the model has 2"):
        c.execute([a])


def test_large_value_moves_to_shared_pool_at_finish():
    m = add_relu_model(64, large_constant=True)
    hal_model = m.to_hal()
    refs = [o for o in hal_model.main.operands if o.lifetime == OperandLifeTime.CONSTANT_REFERENCE]
    assert len(refs) == 1 and refs[0].location.length == 256
    pool = nnapi.memory.map_pool(hal_model.pools[refs[0].location.pool_index])
    np.testing.assert_array_equal(np.frombuffer(pool.view(refs[0].location.offset, 256), np.float32),
                                  np.arange(64, dtype=np.float32))
    small = [o for o in hal_model.main.operands if o.lifetime == OperandLifeTime.CONSTANT_COPY]
    assert all(o.location.length <= 128 for o in small)
    (y,) = nnapi.Compilation(m).finish().execute([np.ones(64, np.float32), -np.ones(64, np.float32)])
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32))


def test_model_is_frozen_after_finish(add_relu):
    with pytest.raises(nnapi.NnError) as e:
        add_relu.add_operand(T.TENSOR_FLOAT32, (1,))
    assert e.value.code == ResultCode.BAD_STATE


def test_model_rejects_bad_operand_index_and_size():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (2,))
    with pytest.raises(nnapi.NnError) as e:
        m.set_operand_value(7, np.zeros(2, np.float32))
    assert e.value.code == ResultCode.BAD_DATA and "operand index 7" in e.value.message
    with pytest.raises(nnapi.NnError) as e:
        m.set_operand_value(a, np.zeros(3, np.float32))
    assert e.value.code == ResultCode.BAD_DATA and "needs 8 bytes" in e.value.message


@pytest.mark.parametrize("kind, dims, value, says", [
    (T.INT32, (), 3.5, "3.5 is not a whole number"),
    (T.INT32, (), float("nan"), "nan is not a whole number"),
    (T.INT32, (), 2**40, "out of range [-2147483648, 2147483647]"),
    (T.UINT32, (), -1, "-1 is out of range [0, 4294967295]"),
    (T.TENSOR_INT32, (2,), np.array([1.0, np.inf]), "inf is not a whole number"),
    (T.TENSOR_QUANT8_ASYMM, (2,), [0, 256], "256 is out of range [0, 255]"),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), np.array([-129, 0]), "-129 is out of range [-128, 127]"),
    (T.FLOAT32, (), 1e40, "beyond the range of float32"),
    (T.TENSOR_FLOAT16, (1,), np.array([70000.0], np.float32), "beyond the range of float16"),
])
def test_a_value_the_operand_type_cannot_hold_is_refused_not_wrapped(kind, dims, value, says):
    """numpy would wrap, truncate or overflow to infinity (with at most a warning): the model would
    hold another number than the app gave."""
    m = nnapi.Model()
    a = m.add_operand(kind, dims, 0.5 if kind.is_quantized else 0.0)
    with pytest.raises(nnapi.NnError) as e:
        m.set_operand_value(a, value)
    assert e.value.code == ResultCode.BAD_DATA and f"operand {a} ({kind.name})" in e.value.message
    assert says in e.value.message


def test_values_the_operand_types_hold_are_taken_in_any_numeric_form():
    """A float64 array for a float32 tensor, a whole float for an INT32 scalar: converted exactly."""
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (2,))
    c = m.add_operand(T.TENSOR_FLOAT32, (2,))
    m.set_operand_value(c, np.array([0.1, 2.0]))  # float64
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 1.0)  # RELU, as a whole float
    out = m.add_operand(T.TENSOR_FLOAT32, (2,))
    m.add_operation(Op.ADD, [x, c, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    (got,) = nnapi.Compilation(m, devices=["reference"]).finish().execute([np.array([1.0, -5.0], np.float32)])
    np.testing.assert_array_equal(got, np.array([1.0, 0.0], np.float32) + np.array([np.float32(0.1), 0], np.float32))


def test_an_input_the_operand_type_cannot_hold_is_refused_not_wrapped():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_INT32, (2,))
    b = m.add_operand(T.TENSOR_INT32, (2,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(T.TENSOR_INT32, (2,))
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    c = nnapi.Compilation(m, devices=["reference"]).finish()
    for bad, says in (([1.5, 2.0], "1.5 is not a whole number"), (np.array([2**40, 0]), "out of range"),
                      ([np.nan, 0.0], "nan is not a whole number")):
        e = nnapi.Execution(c)
        with pytest.raises(nnapi.NnError) as err:
            e.set_input(0, bad)
        assert err.value.code == ResultCode.BAD_DATA and "input 0 (TENSOR_INT32)" in err.value.message
        assert says in err.value.message
    (y,) = c.execute([[1.0, 2.0], np.array([3, 4], np.int64)])  # whole numbers in other types are taken
    np.testing.assert_array_equal(y, np.array([4, 6], np.int32))


def test_model_finish_reports_validation_errors_as_bad_data():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (2,))
    out = m.add_operand(T.TENSOR_INT32, (2,))
    m.add_operation(Op.RELU, [a], [out])          # RELU output must have the input's type
    m.identify_inputs_and_outputs([a], [out])
    with pytest.raises(nnapi.NnError) as e:
        m.finish()
    assert e.value.code == ResultCode.BAD_DATA and "RELU" in e.value.message


def test_compilation_settings_are_checked_and_frozen(add_relu):
    with pytest.raises(nnapi.NnError) as e:
        nnapi.Compilation(add_relu, cache_dir="/tmp", token=b"short")
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as e:
        nnapi.Compilation(add_relu, priority=55)
    assert e.value.code == ResultCode.BAD_DATA
    c = nnapi.Compilation(add_relu).finish()
    with pytest.raises(nnapi.NnError) as e:
        c.set_priority(nnapi.Priority.HIGH)
    assert e.value.code == ResultCode.BAD_STATE


def test_execution_arguments_are_set_once_and_checked(add_relu):
    c = nnapi.Compilation(add_relu).finish()
    e = nnapi.Execution(c)
    e.set_input(0, np.ones(4, np.float32))
    with pytest.raises(nnapi.NnError) as err:
        e.set_input(0, np.ones(4, np.float32))
    assert err.value.code == ResultCode.BAD_STATE
    with pytest.raises(nnapi.NnError) as err:
        e.set_input(1, np.ones(5, np.float32))
    assert err.value.code == ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as err:
        e.set_input(9, np.ones(4, np.float32))
    assert err.value.code == ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as err:
        e.compute()                                  # input 1 and output 0 unset
    assert err.value.code == ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as err:
        e.get_output_shape(0)
    assert err.value.code == ResultCode.BAD_STATE


def test_async_and_shared_memory_execution(add_relu):
    c = nnapi.Compilation(add_relu).finish()
    mem_in = nnapi.Memory.ashmem(16)
    mem_in.array(np.float32, (4,))[:] = [1, 2, 3, -9]
    mem_out = nnapi.Memory.ashmem(32)
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, mem_in, 0, 16)
    e.set_input(1, np.ones(4, np.float32))
    e.set_output_from_memory(0, mem_out, 16, 16)
    e.start_compute().wait()
    np.testing.assert_array_equal(mem_out.array(np.float32, (4,), offset=16), [2, 3, 4, 0])
    assert e.get_output_shape(0) == (4,)
    e2 = nnapi.Execution(c)
    with pytest.raises(nnapi.NnError) as err:
        e2.set_input_from_memory(0, mem_in, 8, 16)   # past the end
    assert err.value.code == ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as err:
        e.compute()                                  # an execution runs once
    assert err.value.code == ResultCode.BAD_STATE


def test_unknown_output_shape_and_insufficient_size():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (0,))       # unknown length
    out = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.RELU, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    c = nnapi.Compilation(m).finish()
    e = nnapi.Execution(c)
    e.set_input(0, np.array([-1, 2, 3], np.float32))
    e.set_output(0, np.zeros(2, np.float32))
    with pytest.raises(nnapi.NnError) as err:
        e.compute()
    assert err.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert e.get_output_shape(0) == (3,)
    (y,) = c.execute([np.array([-1, 2, 3, 4, -5], np.float32)])   # grows its buffers itself
    np.testing.assert_array_equal(y, [0, 2, 3, 4, 0])


def test_second_compilation_hits_the_cache(tmp_path, add_relu):
    token = nnapi.model_token(add_relu)
    first = nnapi.Compilation(add_relu, cache_dir=tmp_path, token=token).finish()
    assert [o.outcome for o in first.cache_outcomes] == ["miss"]
    names = sorted(p.name for p in tmp_path.iterdir())
    n_model, n_data = first.steps[0].device.cache_files   # model files end 1<i>, data files 2<i>
    assert [n[-2:] for n in names] == [f"1{i}" for i in range(n_model)] + [f"2{i}" for i in range(n_data)], names
    second = nnapi.Compilation(add_relu, cache_dir=tmp_path, token=token).finish()
    assert [o.outcome for o in second.cache_outcomes] == ["hit"]
    x = np.array([1, -2, 3, -4], np.float32)
    np.testing.assert_array_equal(second.execute([x, x])[0], first.execute([x, x])[0])


def test_corrupted_cache_is_a_miss_that_rewrites_it(tmp_path, add_relu):
    token = nnapi.model_token(add_relu)
    nnapi.Compilation(add_relu, cache_dir=tmp_path, token=token).finish()
    (path,) = [p for p in tmp_path.iterdir() if p.name.endswith("10")]   # the model cache
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    again = nnapi.Compilation(add_relu, cache_dir=tmp_path, token=token).finish()
    assert again.cache_outcomes[0].outcome == "rejected"
    assert "integrity" in again.cache_outcomes[0].reason
    assert nnapi.Compilation(add_relu, cache_dir=tmp_path, token=token).finish().cache_outcomes[0].outcome == "hit"


def test_changed_model_with_reused_token_misses(tmp_path):
    token = bytes(32)
    nnapi.Compilation(add_relu_model(64, True), cache_dir=tmp_path, token=token).finish()
    other = nnapi.Compilation(add_relu_model(65, True), cache_dir=tmp_path, token=token).finish()
    assert other.cache_outcomes[0].outcome == "miss"


def test_a_missing_cache_directory_is_created_and_used(tmp_path, add_relu):
    cache = tmp_path / "not" / "yet"
    token = nnapi.model_token(add_relu)
    assert nnapi.Compilation(add_relu, cache_dir=cache, token=token).finish().cache_outcomes[0].outcome == "miss"
    assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700
    assert nnapi.Compilation(add_relu, cache_dir=cache, token=token).finish().cache_outcomes[0].outcome == "hit"


@pytest.mark.parametrize("bad", ["file", "/proc/nope/cache", ""])
def test_an_unusable_cache_directory_is_a_clear_error(tmp_path, add_relu, bad):
    if bad == "file":
        bad = tmp_path / "file"
        bad.write_text("not a directory")
    with pytest.raises(nnapi.NnError) as err:
        nnapi.Compilation(add_relu, cache_dir=bad, token=bytes(32))
    assert err.value.code == nnapi.ResultCode.BAD_DATA and "cache_dir" in err.value.message
