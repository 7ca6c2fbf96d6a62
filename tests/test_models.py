"""Real `.tflite` models (../shared/models) through the importer and the reference driver, against LiteRT.

Reference inputs and LiteRT 2.3.0 outputs come from ../shared/models/reference/<name>.npz (read there,
never copied). Float outputs must be within 1e-3 of the largest reference value (LiteRT's own kernel
sets differ that much). Int8 outputs: at least 99% of the values within ±2 LSB of LiteRT (XNNPACK or
its reference kernels, whichever is nearer) and the same top-1 class; where LiteRT's two kernel sets
themselves agree on fewer values than that (small outputs such as a 4-class softmax), the share
required is theirs. Models that cannot run yet are listed in UNSUPPORTED with the reason; the test
fails when one starts importing, so the list can only shrink (it is empty now).
selfie_segmentation has no LiteRT reference (stock LiteRT lacks MediaPipe's custom operator): its
transposed convolution is checked against a numpy computation of that layer, and its mask for
plausibility.
"""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

import nnapi
from nnapi.importers import UnsupportedOperatorsError, load_tflite

SHARED = pathlib.Path(os.environ.get("NNAPI_SHARED_MODELS",
                                     pathlib.Path(__file__).resolve().parents[2] / "shared" / "models"))
pytestmark = pytest.mark.skipif(not (SHARED / "models.json").exists(), reason=f"no shared models at {SHARED}")

#: Models that cannot run yet: name -> (the operator the importer refuses, why). Empty: every shared
#: model imports (selfie_segmentation's MediaPipe Convolution2DTransposeBias maps to TRANSPOSE_CONV_2D,
#: lstm_text_int8's full-integer sequence LSTMs to QUANTIZED_LSTM steps).
UNSUPPORTED: dict[str, tuple[str, str]] = {}


def _catalog() -> dict:
    if not (SHARED / "models.json").exists():
        return {}
    return json.loads((SHARED / "models.json").read_text())


CATALOG = _catalog()
#: Models with a LiteRT reference output that import.
RUNNABLE = sorted(name for name in CATALOG if name not in UNSUPPORTED and CATALOG[name]["reference_npz"])


def _share_within(a: np.ndarray, b: np.ndarray, lsb: int = 2) -> float:
    return float(np.mean(np.abs(a.astype(np.int64) - b.astype(np.int64)) <= lsb))


def check_output(name: str, k: int, got: np.ndarray, ref: np.lib.npyio.NpzFile) -> str:
    """Assert output k of model `name` matches LiteRT; returns a one-line accuracy summary."""
    want = ref[f"output_{k}"]
    got = np.asarray(got).reshape(want.shape)
    assert got.dtype == want.dtype, f"{name} output {k}: dtype {got.dtype}, LiteRT {want.dtype}"
    if want.dtype.kind == "f":
        scale = float(np.abs(want).max()) or 1.0
        err = float(np.abs(got.astype(np.float64) - want).max()) / scale
        assert err <= 1e-3, f"{name} output {k}: max error {err:.2e} of the largest reference value"
        return f"{name} output {k}: max error {err:.1e} of max |ref|"
    other = ref[f"output_{k}_refkernels"] if f"output_{k}_refkernels" in ref.files else want
    shares = {"xnnpack": _share_within(got, want), "refkernels": _share_within(got, other)}
    litert_self = _share_within(want, other)
    required = min(0.99, litert_self)
    best = max(shares.values())
    assert best >= required, (f"{name} output {k}: {best:.4f} of values within ±2 LSB of LiteRT "
                              f"(required {required:.4f}; LiteRT's kernel sets agree on {litert_self:.4f})")
    if want.ndim == 2 and want.shape[1] > 1:  # classifier: same top-1 class
        assert int(np.argmax(got)) == int(np.argmax(want)), f"{name} output {k}: top-1 differs from LiteRT"
    max_lsb = int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())
    return (f"{name} output {k}: within ±2 LSB {shares['xnnpack']:.4f} (XNNPACK) / {shares['refkernels']:.4f} "
            f"(reference kernels), max {max_lsb} LSB; LiteRT kernel sets agree {litert_self:.4f}")


@pytest.mark.parametrize("name", RUNNABLE)
def test_model_matches_litert(name):
    entry = CATALOG[name]
    imported = load_tflite(SHARED / entry["file"])
    ref = np.load(SHARED / entry["reference_npz"])
    assert [list(i.shape) for i in imported.inputs] == [i["shape"] for i in entry["inputs"]]
    assert [list(o.shape) for o in imported.outputs] == [o["shape"] for o in entry["outputs"]]
    inputs = [ref[f"input_{k}"] for k in range(len(imported.inputs))]
    compilation = nnapi.Compilation(imported.model, devices=["reference"]).finish()
    outputs = compilation.execute(inputs)
    lines = [check_output(name, k, got, ref) for k, got in enumerate(outputs)]
    print("\n".join(lines))


def test_every_model_imports_or_is_refused_with_its_reason():
    """Each shared model imports, or (listed in UNSUPPORTED) is refused naming exactly that operator."""
    for name, entry in sorted(CATALOG.items()):
        if name not in UNSUPPORTED:
            assert load_tflite(SHARED / entry["file"]).model is not None
            continue
        operator, why = UNSUPPORTED[name]
        with pytest.raises(UnsupportedOperatorsError) as info:
            load_tflite(SHARED / entry["file"])
        assert {p.operator for p in info.value.problems} == {operator}, info.value.message
        print(f"{name} cannot run yet: {operator} ({why})")


def test_weights_are_not_copied():
    """mobilenet_v2_f32 (14 MB): every weight is a region of the file mapping."""
    entry = CATALOG["mobilenet_v2_f32"]
    imported = load_tflite(SHARED / entry["file"])
    assert imported.referenced_bytes > 0.99 * entry["size_bytes"] - 100_000
    assert imported.copied_bytes < 10_000


def test_default_devices_compile_with_the_cache(tmp_path):
    """All devices, partitioned, with a cache directory: the second compilation hits the cache."""
    entry = CATALOG["face_detection_short_range"]
    imported = load_tflite(SHARED / entry["file"])
    ref = np.load(SHARED / entry["reference_npz"])
    outcomes = []
    for _ in range(2):
        compilation = nnapi.Compilation(imported.model, cache_dir=tmp_path, token=imported.token()).finish()
        outcomes.append([o.outcome for o in compilation.cache_outcomes])
        outputs = compilation.execute([ref["input_0"]])
        assert [o.shape for o in outputs] == [ref["output_0"].shape, ref["output_1"].shape]
    assert all(o == "miss" for o in outcomes[0]) and all(o == "hit" for o in outcomes[1])


#: The float models (float32, float16 and fp16 weights): the XLA driver must lower every operation.
FLOAT_MODELS = [name for name in RUNNABLE if CATALOG[name]["variant"].startswith("float")]


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_model_runs_whole_on_xla(name):
    """Issue 9: every operation of every float model (WHILE and its GRU body, sequence LSTMs,
    BATCH_MATMUL included) is lowered: one XLA partition, outputs within LiteRT's tolerance."""
    entry = CATALOG[name]
    imported = load_tflite(SHARED / entry["file"])
    ref = np.load(SHARED / entry["reference_npz"])
    compilation = nnapi.Compilation(imported.model, devices=["xla"]).finish()
    assert [s.device.name for s in compilation.steps] == ["xla"]
    outputs = compilation.execute([ref[f"input_{k}"] for k in range(len(imported.inputs))])
    print("\n".join(check_output(name, k, got, ref) for k, got in enumerate(outputs)))


# --- selfie_segmentation: MediaPipe's Convolution2DTransposeBias -----------------------------------------
def _selfie():
    """The imported model with its transposed convolution's input and output as extra outputs, the
    operator, and LiteRT-independent copies of its weights and bias read with the `tflite` bindings."""
    import tflite
    entry = CATALOG["selfie_segmentation"]
    raw = (SHARED / entry["file"]).read_bytes()
    model = tflite.Model.GetRootAs(raw, 0)
    graph = model.Subgraphs(0)
    producers = {int(graph.Operators(k).Outputs(0)): graph.Operators(k) for k in range(graph.OperatorsLength())}

    def fp16_constant(t: int) -> np.ndarray:
        """A DEQUANTIZE output's value: its float16 constant input, as float32."""
        source = graph.Tensors(int(producers[t].Inputs(0)))
        data = model.Buffers(source.Buffer()).DataAsNumpy().tobytes()
        return np.frombuffer(data, np.float16).astype(np.float32).reshape(source.ShapeAsNumpy())

    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        if model.OperatorCodes(op.OpcodeIndex()).CustomCode() == b"Convolution2DTransposeBias":
            x_t, w_t, b_t = (int(i) for i in op.InputsAsNumpy())
            y_t = int(op.Outputs(0))
            padding, stride_w, stride_h = np.frombuffer(op.CustomOptionsAsNumpy().tobytes()[:12], "<i4")
            outputs = [x_t, y_t, int(graph.Outputs(0))]
            return (load_tflite(SHARED / entry["file"], outputs=outputs), fp16_constant(w_t), fp16_constant(b_t),
                    (int(padding), int(stride_w), int(stride_h)))
    raise AssertionError("selfie_segmentation has no Convolution2DTransposeBias operator")


def _transpose_conv_bias(x, w, bias, padding, stride_w, stride_h) -> np.ndarray:
    """MediaPipe's kernel (transpose_conv_bias.cc) in numpy: bias, then each filter tap scatters the input."""
    n, in_h, in_w, _ = x.shape
    out_c, k_h, k_w, _ = w.shape
    pad_h = max(0, k_h - (in_h - 1) % stride_h - 1) if padding == 1 else 0
    pad_w = max(0, k_w - (in_w - 1) % stride_w - 1) if padding == 1 else 0
    out_h, out_w = stride_h * (in_h - 1) + k_h - pad_h, stride_w * (in_w - 1) + k_w - pad_w
    out = np.tile(bias.astype(np.float64), (n, out_h + k_h + stride_h * in_h, out_w + k_w + stride_w * in_w, 1))
    top, left = k_h, k_w   # a margin, so that every tap lands inside before cropping
    for fy in range(k_h):
        for fx in range(k_w):
            tap = x.astype(np.float64) @ w[:, fy, fx, :].astype(np.float64).T        # [n, in_h, in_w, out_c]
            oy, ox = top - pad_h // 2 + fy, left - pad_w // 2 + fx
            out[:, oy:oy + stride_h * in_h:stride_h, ox:ox + stride_w * in_w:stride_w] += tap
    return out[:, top:top + out_h, left:left + out_w]


def test_selfie_segmentation_transpose_conv_matches_numpy():
    """The imported Convolution2DTransposeBias (NNAPI TRANSPOSE_CONV_2D) against numpy on the layer's
    real input (the model run on the reference driver up to that layer)."""
    imported, w, bias, (padding, stride_w, stride_h) = _selfie()
    assert imported.operations["TRANSPOSE_CONV_2D"] == 1
    x_in = np.random.default_rng(42).uniform(0, 1, (1, 256, 256, 3)).astype(np.float32)
    x, y, _ = nnapi.Compilation(imported.model, devices=["reference"]).finish().execute([x_in])
    want = _transpose_conv_bias(x, w, bias, padding, stride_w, stride_h)
    assert y.shape == want.shape == (1, 256, 256, 1)
    scale = float(np.abs(want).max())
    assert float(np.abs(y - want).max()) <= 1e-5 * scale, float(np.abs(y - want).max()) / scale


def test_selfie_segmentation_mask_is_plausible():
    """The whole model on the reference driver: a [1, 256, 256, 1] mask, finite and in [0, 1], the
    LOGISTIC of the transposed convolution's output; a bright disk on a dark background is not
    everywhere the same."""
    imported, *_ = _selfie()
    compilation = nnapi.Compilation(imported.model, devices=["reference"]).finish()
    yy, xx = np.mgrid[0:256, 0:256]
    disk = ((yy - 110) ** 2 + (xx - 128) ** 2 < 70 ** 2).astype(np.float32)
    for image in (np.random.default_rng(42).uniform(0, 1, (1, 256, 256, 3)).astype(np.float32),
                  np.repeat(disk[None, :, :, None], 3, axis=3) * 0.8 + 0.1):
        _, logits, mask = compilation.execute([image.astype(np.float32)])
        assert mask.shape == (1, 256, 256, 1) and mask.dtype == np.float32
        assert np.isfinite(mask).all() and mask.min() >= 0.0 and mask.max() <= 1.0
        np.testing.assert_allclose(mask, 0.5 + 0.5 * np.tanh(logits.astype(np.float64) / 2), atol=1e-6)
    assert mask.std() > 0


# --- lstm_text_int8: full-integer sequence LSTMs ---------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors`")
def test_lstm_text_int8_layers_match_litert_exactly():
    """Both int8 UNIDIRECTIONAL_SEQUENCE_LSTM layers, unrolled into QUANTIZED_LSTM steps, give LiteRT's
    integer kernel's outputs value for value at every time step (the final softmax is checked against
    the reference output by test_model_matches_litert)."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (the bench extra) is not installed")
    entry = CATALOG["lstm_text_int8"]
    ref = np.load(SHARED / entry["reference_npz"])
    interpreter = litert.Interpreter(str(SHARED / entry["file"]), experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], ref["input_0"])
    interpreter.invoke()
    names = {t["name"]: t["index"] for t in interpreter.get_tensor_details()}
    layers = ["tfl.unidirectional_sequence_lstm", "tfl.unidirectional_sequence_lstm1"]
    imported = load_tflite(SHARED / entry["file"], outputs=layers)
    assert imported.operations["QUANTIZED_LSTM"] == 64 and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in imported.operations
    got = nnapi.Compilation(imported.model, devices=["reference"]).finish().execute([ref["input_0"]])
    for name, value in zip(layers, got):
        want = interpreter.get_tensor(names[name])
        assert value.shape == want.shape and len(np.unique(want)) > 50
        np.testing.assert_array_equal(value, want, err_msg=name)
