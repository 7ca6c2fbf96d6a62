"""`nnapi.load`: a compiled model run by input name, with exact input checks and conversions on request."""
from __future__ import annotations

import json

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from test_tflite_import import B, add_options, f32, write_model


@pytest.fixture
def add_tflite(tmp_path):
    """y = x + w (w = 0..7), x and y float32 [1, 8], named as in the file."""
    return write_model(tmp_path / "add.tflite",
                       [f32("pixels", (1, 8)), f32("w", (1, 8), np.arange(8)), f32("scores", (1, 8))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])


def two_input_model(dims=(2,), type=T.TENSOR_FLOAT32, scale=0.0, zero_point=0) -> nnapi.Model:
    m = nnapi.Model()
    a = m.add_operand(type, dims, scale, zero_point)
    b = m.add_operand(type, dims, scale, zero_point)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(type, dims, scale, zero_point)
    m.add_operation(Op.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def test_a_tflite_model_runs_by_name_and_returns_named_outputs(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    assert [(i.name, i.shape, i.dtype) for i in model.inputs] == [("pixels", (1, 8), np.float32)]
    assert [(o.name, o.shape, o.dtype) for o in model.outputs] == [("scores", (1, 8), np.float32)]
    assert model.devices == ["reference"] and "pixels float32[1, 8]" in repr(model)
    x = np.ones((1, 8), np.float32)
    out = model.run({"pixels": x})
    assert list(out) == ["scores"]
    np.testing.assert_array_equal(out["scores"], x + np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(model.run([x])["scores"], out["scores"])     # a list in input order
    np.testing.assert_array_equal(model.run(x)["scores"], out["scores"])       # one input: the array alone


def test_a_model_built_in_python_gets_positional_names():
    model = nnapi.load(two_input_model(), devices=["reference"])
    assert model.input_names == ["input_0", "input_1"] and model.output_names == ["output_0"]
    out = model.run({"input_1": np.full(2, 2, np.float32), "input_0": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["output_0"], [3, 3])
    unfinished = nnapi.Model()
    with pytest.raises(nnapi.NnError, match="must be finished"):
        nnapi.load(unfinished)
    with pytest.raises(nnapi.NnError, match="expects a .tflite path"):
        nnapi.load(42)


def test_keys_must_name_inputs_exactly(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    x = np.ones((1, 8), np.float32)
    with pytest.raises(nnapi.NnError, match=r"no input named 'pixel'; the inputs are: pixels") as e:
        model.run({"pixel": x})
    assert e.value.code == nnapi.ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError, match=r"input 'pixels' not given"):
        model.run({})
    with pytest.raises(nnapi.NnError, match=r"2 inputs given, the model has 1 \(pixels\)"):
        model.run([x, x])
    with pytest.raises(nnapi.NnError, match="dict or a list"):
        model.run("pixels")
    two = nnapi.load(two_input_model(), devices="reference")
    with pytest.raises(nnapi.NnError, match="the model has 2 inputs"):
        two.run(np.ones(2, np.float32))


@pytest.mark.parametrize("given", [np.uint8, np.float64, np.int32])
def test_a_wrong_dtype_is_an_error_naming_input_expected_and_given(add_tflite, given):
    model = nnapi.load(add_tflite, devices="reference")
    with pytest.raises(nnapi.NnError) as e:
        model.run({"pixels": np.ones((1, 8), given)})
    message = e.value.message
    assert "'pixels'" in message and "float32 [1, 8]" in message and f"got {np.dtype(given)} [1, 8]" in message
    assert "cast=True" in message


def test_a_wrong_shape_is_an_error_and_cast_only_adds_or_drops_sizes_of_one(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    with pytest.raises(nnapi.NnError, match=r"'pixels' expects shape \[1, 8\], got \[8\]"):
        model.run({"pixels": np.ones(8, np.float32)})
    arrays, notes = model.prepare({"pixels": np.arange(8.0)}, cast=True)          # float64 [8]
    assert arrays[0].dtype == np.float32 and arrays[0].shape == (1, 8)
    assert notes == {"pixels": "shape [8] -> [1, 8]; float64 -> float32"}
    out = model.run({"pixels": np.arange(8.0)}, cast=True)
    np.testing.assert_array_equal(out["scores"], 2 * np.arange(8, dtype=np.float32)[None])
    with pytest.raises(nnapi.NnError, match="only adds or drops sizes of 1"):
        model.run({"pixels": np.ones((2, 4), np.float32)}, cast=True)
    assert model.prepare({"pixels": np.ones((1, 8), np.float32)}, cast=True)[1] == {}   # nothing to convert


def test_cast_quantizes_floats_and_refuses_values_that_do_not_fit():
    m = two_input_model((4,), T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=10)
    model = nnapi.load(m, devices="reference")
    assert (model.inputs[0].dtype, model.inputs[0].scale, model.inputs[0].zero_point) == (np.uint8, 0.5, 10)
    x = np.array([0.0, 1.0, 2.5, 200.0], np.float32)
    with pytest.raises(nnapi.NnError, match="expects uint8"):
        model.run([x, x])
    arrays, notes = model.prepare([x, np.zeros(4, np.uint8)], cast=True)
    np.testing.assert_array_equal(arrays[0], [10, 12, 15, 255])                  # round(x / 0.5) + 10, clipped
    assert notes == {"input_0": "float32 quantized to uint8 (scale 0.5, zero point 10)"}
    with pytest.raises(nnapi.NnError, match="values from 0 to 300 do not fit"):
        model.prepare([np.array([0, 1, 2, 300]), np.zeros(4, np.uint8)], cast=True)
    ints = nnapi.load(two_input_model((2,), T.TENSOR_INT32), devices="reference")
    with pytest.raises(nnapi.NnError, match="not whole numbers"):
        ints.prepare([np.array([1.5, 2.0]), np.zeros(2, np.int32)], cast=True)
    out = ints.run([np.array([1.0, 2.0]), np.array([3, 4], np.int64)], cast=True)
    np.testing.assert_array_equal(out["output_0"], [4, 6])


def test_unknown_dimensions_show_as_none_and_take_any_size():
    model = nnapi.load(two_input_model((0, 2)), devices="reference")
    assert model.inputs[0].shape == (None, 2) and "[?, 2]" in str(
        pytest.raises(nnapi.NnError, model.run, [np.ones(2, np.float32)] * 2).value)
    out = model.run([np.ones((3, 2), np.float32)] * 2)
    assert out["output_0"].shape == (3, 2)


def test_cache_dir_without_token_derives_one_and_is_created(add_tflite, tmp_path):
    cache = tmp_path / "missing" / "cache"                                      # created on first use
    first = nnapi.load(add_tflite, devices="reference", cache_dir=cache)
    assert [c.outcome for c in first.cache_outcomes] == ["miss"] and cache.is_dir()
    assert [c.outcome for c in nnapi.load(add_tflite, devices="reference", cache_dir=cache).cache_outcomes] == ["hit"]
    built = nnapi.load(two_input_model(), devices="reference", cache_dir=cache)  # nnapi.model_token(model)
    assert [c.outcome for c in built.cache_outcomes] == ["miss"]
    again = nnapi.load(two_input_model(), devices="reference", cache_dir=cache)
    assert [c.outcome for c in again.cache_outcomes] == ["hit"]
    (tmp_path / "file").write_text("")
    with pytest.raises(nnapi.NnError, match="not a directory"):
        nnapi.load(add_tflite, cache_dir=tmp_path / "file")


def test_priority_preference_and_devices_by_name(add_tflite):
    model = nnapi.load(add_tflite, devices=["reference"], priority="high", preference="sustained-speed")
    assert model.compilation.priority == nnapi.Priority.HIGH
    assert model.compilation.preference == nnapi.ExecutionPreference.SUSTAINED_SPEED
    with pytest.raises(nnapi.NnError, match="priority must be low, medium or high"):
        nnapi.load(add_tflite, priority="urgent")
    with pytest.raises(nnapi.NnError, match="preference must be one of low-power, fast-single-answer, sustained-speed"):
        nnapi.load(add_tflite, preference="fastest")
    with pytest.raises(nnapi.NnError, match="cannot open"):
        nnapi.load(add_tflite.parent / "nope.tflite")


def test_run_takes_a_timeout_and_missing_deadlines_are_errors(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    out = model.run({"pixels": np.zeros((1, 8), np.float32)}, timeout=10.0)
    np.testing.assert_array_equal(out["scores"], np.arange(8, dtype=np.float32)[None])
    with pytest.raises(nnapi.NnError, match="invalid timeout"):
        model.run({"pixels": np.zeros((1, 8), np.float32)}, timeout=-1)


def test_loading_a_file_is_traced_as_an_import(add_tflite, tmp_path):
    path = tmp_path / "trace.json"
    with nnapi.trace(path):
        nnapi.load(add_tflite, devices="reference").run({"pixels": np.zeros((1, 8), np.float32)})
    events = json.loads(path.read_text())["traceEvents"]
    (imported,) = [e for e in events if e["name"] == "import"]
    (prepare,) = [e for e in events if e["name"] == "prepare"]
    assert imported["ph"] == "X" and imported["args"]["path"] == str(add_tflite)
    assert imported["ts"] + imported["dur"] <= prepare["ts"] + 1e-3


def test_run_batch_gives_each_feeds_outputs_in_order_as_one_by_one_runs(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    feeds = [{"pixels": np.full((1, 8), k, np.float32)} for k in range(9)]
    expected = [model.run(feed)["scores"] for feed in feeds]
    for in_flight in (1, 3, 16):
        outs = model.run_batch(feeds, in_flight=in_flight)
        assert len(outs) == 9 and all(list(o) == ["scores"] for o in outs)
        for out, want in zip(outs, expected):
            np.testing.assert_array_equal(out["scores"], want)
            np.testing.assert_array_equal(out["output_0"], want)           # the names `run` answers to
    stream = model.stream(iter([[f["pixels"]] for f in feeds]))           # an iterator in, one out
    np.testing.assert_array_equal(next(stream)["scores"], expected[0])
    assert [o["scores"][0, 0] for o in stream] == [k for k in range(1, 9)]
    assert model.run_batch([]) == []


def test_run_batch_errors_name_the_feed_index(add_tflite):
    model = nnapi.load(add_tflite, devices="reference")
    good = np.zeros((1, 8), np.float32)
    with pytest.raises(nnapi.NnError, match=r"run_batch: feed 2: run: input 'pixels' expects float32") as e:
        model.run_batch([good, good, good.astype(np.float64), good])
    assert e.value.code == nnapi.ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError, match=r"run_batch: feed 1: run: no input named 'image'"):
        model.run_batch([{"pixels": good}, {"image": good}])
    outs = model.run_batch([good.astype(np.float64)], cast=True)            # cast as `run` does
    np.testing.assert_array_equal(outs[0]["scores"], np.arange(8, dtype=np.float32)[None])
    with pytest.raises(nnapi.NnError, match="in_flight must be"):
        model.run_batch([good], in_flight=0)
    with pytest.raises(nnapi.NnError, match=r"run_batch: feed 0: .*invalid timeout"):   # the run's own errors
        model.run_batch([good, good], timeout=-1)


def test_run_batch_with_sizes_known_only_at_run_time():
    model = nnapi.load(two_input_model((0, 2)), devices="reference")
    feeds = [[np.ones((n, 2), np.float32)] * 2 for n in (1, 3, 2)]
    assert [o["output_0"].shape for o in model.run_batch(feeds)] == [(1, 2), (3, 2), (2, 2)]
