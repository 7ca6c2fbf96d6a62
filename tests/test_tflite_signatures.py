"""SignatureDef names: a `.tflite` with a signature names its inputs and outputs as LiteRT does ("tokens",
"probs"), and the tensor names and `input_N` / `output_N` work alike, in the importer, `nnapi.load` and
`nnapi run`; signature data that is malformed is BAD_DATA naming the signature, never another error.

The models are the real Keras ones of ../shared/models (their `serving_default` signature maps input
`tokens` to `serving_default_tokens:0` and output `probs` to `StatefulPartitionedCall:0`); MediaPipe's
have no signature. Signatures with other content are appended to a real file: a new signature_defs
vector after its end, the model's field pointed at it (flatbuffer offsets only point forward)."""
from __future__ import annotations

import json
import os
import pathlib
import struct

import flatbuffers
import numpy as np
import pytest
import tflite

import nnapi
from nnapi.cli import main
from nnapi.hal import NnError, ResultCode
from nnapi.importers import load_tflite
from nnapi.importers.tflite import INTERNAL_ERROR
from nnapi.importers.tflite.schema import load_flat_model

SHARED = pathlib.Path(os.environ.get("NNAPI_SHARED_MODELS",
                                     pathlib.Path(__file__).resolve().parents[2] / "shared" / "models"))
LSTM = SHARED / "keras" / "lstm_text_f32.tflite"          # tokens -> probs
RESNET = SHARED / "keras" / "resnet_mini_int8.tflite"     # image -> output_0
GRU = SHARED / "keras" / "gru_text_f32.tflite"            # two subgraphs (WHILE)
FACE = SHARED / "mediapipe" / "face_detection_short_range.tflite"
pytestmark = pytest.mark.skipif(not LSTM.exists(), reason=f"the shared models are not at {SHARED}")

_U32 = struct.Struct("<I")


def tokens(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, (1, 32)).astype(np.int32)


# --- building files with other signatures ------------------------------------------------------------------------
def _signature_vector(signatures: list[dict]) -> bytes:
    """A standalone flatbuffer whose root is a vector of SignatureDefs: dicts of key, subgraph, inputs and
    outputs (lists of (name, tensor index))."""
    b = flatbuffers.Builder(256)
    tables = []
    for sig in signatures:
        maps = []
        for pairs in (sig.get("inputs", []), sig.get("outputs", [])):
            entries = []
            for name, index in pairs:
                text = b.CreateString(name)
                tflite.TensorMapStart(b)
                tflite.TensorMapAddName(b, text)
                tflite.TensorMapAddTensorIndex(b, index)
                entries.append(tflite.TensorMapEnd(b))
            b.StartVector(4, len(entries), 4)
            for entry in reversed(entries):
                b.PrependUOffsetTRelative(entry)
            maps.append(b.EndVector())
        key = b.CreateString(sig.get("key", "serving_default"))
        tflite.SignatureDefStart(b)
        tflite.SignatureDefAddInputs(b, maps[0])
        tflite.SignatureDefAddOutputs(b, maps[1])
        tflite.SignatureDefAddSignatureKey(b, key)
        tflite.SignatureDefAddSubgraphIndex(b, sig.get("subgraph", 0))
        tables.append(tflite.SignatureDefEnd(b))
    b.StartVector(4, len(tables), 4)
    for table in reversed(tables):
        b.PrependUOffsetTRelative(table)
    b.Finish(b.EndVector())
    return bytes(b.Output())


def with_signatures(source: pathlib.Path, target: pathlib.Path, signatures: list[dict]) -> pathlib.Path:
    """`source` with its signature_defs (Model field 7) replaced by `signatures`."""
    data = bytearray(source.read_bytes())
    model = tflite.Model.GetRootAsModel(data, 0)
    slot = model._tab.Pos + model._tab.Offset(18)   # field 7: vtable slot 4 + 2 * 7
    assert slot > model._tab.Pos, "the file has no signature_defs field to point elsewhere"
    data += bytes(-len(data) % 8)
    blob = _signature_vector(signatures)
    vector = len(data) + _U32.unpack_from(blob, 0)[0]
    data += blob
    _U32.pack_into(data, slot, vector - slot)
    target.write_bytes(bytes(data))
    return target


def _signature_tables(data: bytes):
    """The keras file's one SignatureDef and its output TensorMap, as the generated classes read them."""
    sd = tflite.Model.GetRootAsModel(data, 0).SignatureDefs(0)
    return sd, sd.Outputs(0)


def _bad_data(path, *needles: str) -> str:
    with pytest.raises(NnError) as e:
        load_tflite(path)
    assert e.value.code == ResultCode.BAD_DATA and INTERNAL_ERROR not in e.value.message, e.value.message
    for needle in needles:
        assert needle in e.value.message, e.value.message
    return e.value.message


# --- the importer ------------------------------------------------------------------------------------------------
def test_a_keras_model_has_its_signature_names_and_keeps_its_tensor_names():
    imported = load_tflite(LSTM)
    assert imported.signature_key == "serving_default"
    assert imported.input_names == ["tokens"] and imported.output_names == ["probs"]
    assert [(i.name, i.signature_name) for i in imported.inputs] == [("serving_default_tokens:0", "tokens")]
    assert [(o.name, o.signature_name) for o in imported.outputs] == [("StatefulPartitionedCall:0", "probs")]
    assert str(imported.inputs[0]) == "serving_default_tokens:0 (signature: tokens) int32[1, 32]"
    flat = load_flat_model(LSTM)
    flat.close_fd()
    (sig,) = flat.signatures
    assert (sig.key, sig.subgraph, sig.inputs, sig.outputs) == ("serving_default", 0, (("tokens", 0),),
                                                                (("probs", 37),))
    resnet = load_tflite(RESNET)
    assert resnet.input_names == ["image"] and resnet.output_names == ["output_0"]


def test_a_model_without_a_signature_is_named_by_its_tensors():
    face = load_tflite(FACE)
    assert face.signature_key is None and face._flat.signatures == []
    assert face.input_names == ["input"] and face.output_names == ["regressors", "classificators"]
    assert all(i.signature_name is None for i in face.inputs + face.outputs)


def test_serving_default_comes_first_and_only_the_main_subgraphs_signature_names(tmp_path):
    two = with_signatures(LSTM, tmp_path / "two.tflite", [
        {"key": "other", "inputs": [("ids", 0)], "outputs": [("scores", 37)]},
        {"key": "serving_default", "inputs": [("tokens", 0)], "outputs": [("probs", 37)]}])
    imported = load_tflite(two)
    assert imported.signature_key == "serving_default" and imported.input_names == ["tokens"]
    first = with_signatures(LSTM, tmp_path / "first.tflite", [
        {"key": "a", "inputs": [("ids", 0)], "outputs": []}, {"key": "b", "inputs": [("x", 0)]}])
    assert load_tflite(first).input_names == ["ids"]
    assert load_tflite(first).output_names == ["StatefulPartitionedCall:0"]   # a signature may name some only
    body = tflite.Model.GetRootAsModel(GRU.read_bytes(), 0).Subgraphs(1)
    elsewhere = with_signatures(GRU, tmp_path / "body.tflite", [
        {"key": "body", "subgraph": 1, "inputs": [("step", body.Inputs(0))]}])
    imported = load_tflite(elsewhere)
    assert imported.signature_key is None and imported.input_names == ["serving_default_tokens:0"]


@pytest.mark.parametrize("signature, says", [
    ({"subgraph": 3, "inputs": [("tokens", 0)]}, "signature 0 'serving_default': subgraph_index 3 out of range"),
    ({"inputs": [("tokens", 5)]}, "signature 0 'serving_default': input 0 'tokens' is tensor 5, not an input"),
    ({"outputs": [("probs", 99999)]}, "output 0 'probs' is tensor 99999, not an output of subgraph 0"),
    ({"inputs": [("tokens", 0), ("tokens", 0)]}, "inputs 0 and 1 both name 'tokens'"),
    ({"inputs": [("a", 0), ("b", 0)]}, "inputs 0 and 1 both name tensor 0"),
    ({"inputs": [("", 0)]}, "input 0 (tensor 0) has no name"),
])
def test_signature_content_that_is_wrong_is_bad_data_naming_it(tmp_path, signature, says):
    path = with_signatures(LSTM, tmp_path / "bad.tflite", [signature])
    assert _bad_data(path, says).startswith("bad.tflite: ")


def test_corrupted_signature_bytes_are_refused_cleanly(tmp_path, capsys):
    """Offsets and indexes of the file's own signature table overwritten: BAD_DATA naming the signature, from
    the importer, `nnapi.load` and `nnapi run` (one line, exit status 1)."""
    data = LSTM.read_bytes()
    sd, output = _signature_tables(data)
    index_at = output._tab.Pos + output._tab.Offset(6)       # TensorMap.tensor_index (37)
    name_at = output._tab.Pos + output._tab.Offset(4)        # TensorMap.name's offset
    model = tflite.Model.GetRootAsModel(data, 0)
    vector_at = model._tab.Vector(model._tab.Offset(18)) - 4  # signature_defs' length
    for at, word, says in [(index_at, 5, "output 0 'probs' is tensor 5"),
                           (index_at, 0xFFFFFFFF, "is tensor 4294967295"),
                           (name_at, 0x7FFFFFF0, "signature 0 'serving_default' output 0: field 'name' points to offset"),
                           (vector_at, 0x40000000, "field 'signature_defs' is a vector of 1073741824")]:
        bad = bytearray(data)
        _U32.pack_into(bad, at, word)
        path = tmp_path / "corrupt.tflite"
        path.write_bytes(bytes(bad))
        _bad_data(path, says)
        with pytest.raises(NnError, match="signature"):
            nnapi.load(path, devices="reference")
    assert main(["run", str(path), "--device", "reference"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnapi run: BAD_DATA: corrupt.tflite: "), err


def test_every_byte_of_the_signature_overwritten_gives_a_model_or_bad_data(tmp_path):
    """Each byte from the SignatureDef table to its strings set to 0xFF, then to 0x00: the file reads or is
    BAD_DATA, never another exception."""
    data = LSTM.read_bytes()
    sd, output = _signature_tables(data)
    tables = [sd._tab.Pos, sd.Inputs(0)._tab.Pos, output._tab.Pos]
    start, end = min(tables) - 16, max(tables) + 24    # the vtables before, the last name after
    path = tmp_path / "mutant.tflite"
    for at in range(start, end):
        for value in (0xFF, 0x00):
            bad = bytearray(data)
            bad[at] = value
            path.write_bytes(bytes(bad))
            try:
                load_flat_model(path).close_fd()
            except NnError as e:
                assert e.code == ResultCode.BAD_DATA, e.message


# --- nnapi.load ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lstm():
    return nnapi.load(LSTM, devices="reference")


def test_the_session_runs_by_signature_name_tensor_name_and_position(lstm):
    x = tokens()
    assert lstm.input_names == ["tokens"] and lstm.output_names == ["probs"]
    by_signature = lstm.run({"tokens": x})
    assert list(by_signature) == ["StatefulPartitionedCall:0"]            # the keys as before: tensor names
    expected = by_signature["StatefulPartitionedCall:0"]
    for feed in ({"serving_default_tokens:0": x}, {"input_0": x}, [x], (x,), x):
        out = lstm.run(feed)
        for key in ("probs", "StatefulPartitionedCall:0", "output_0"):
            np.testing.assert_array_equal(out[key], expected)
            assert key in out and out.get(key) is out[key]
    assert len(out) == 1 and "input_0" not in out and out.get("nope", 7) == 7
    assert dict(out).keys() == {"StatefulPartitionedCall:0"}


def test_unknown_keys_name_the_key_and_every_accepted_name(lstm):
    x = tokens()
    with pytest.raises(NnError, match=r"no input named 'token'; the inputs are: tokens \(or "
                                      r"serving_default_tokens:0, input_0\)") as e:
        lstm.run({"token": x})
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(NnError, match=r"keys 'tokens' and 'input_0' both give input 0 \(tokens\)"):
        lstm.run({"tokens": x, "input_0": x})
    with pytest.raises(NnError, match=r"input 'tokens' not given"):
        lstm.run({})
    out = lstm.run([x])
    with pytest.raises(KeyError, match=r"no output named 'prob'; the outputs are: probs \(or "
                                       r"StatefulPartitionedCall:0, output_0\)"):
        out["prob"]


# --- nnapi run -------------------------------------------------------------------------------------------------------
def test_nnapi_run_takes_signature_keys_and_saves_signature_names(lstm, tmp_path, capsys):
    x = tokens(3)
    inputs, saved = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, tokens=x)
    assert main(["run", str(LSTM), "--device", "reference", "--inputs", str(inputs), "--save-outputs", str(saved),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(i["source"], i["signature_name"]) for i in report["inputs"]] == [(f"{inputs}:tokens", "tokens")]
    assert report["outputs"][0]["signature_name"] == "probs"
    stored = np.load(saved)
    assert sorted(stored.files) == ["output_0", "probs"]
    np.testing.assert_array_equal(stored["probs"], stored["output_0"])
    np.testing.assert_array_equal(stored["probs"], lstm.run({"tokens": x})["probs"])


def test_nnapi_run_refuses_a_signature_key_and_a_tensor_name_for_one_input(tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, tokens=tokens(), **{"serving_default_tokens:0": tokens()})
    assert main(["run", str(LSTM), "--device", "reference", "--inputs", str(inputs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"nnapi run: --inputs {inputs}: keys 'tokens' and 'serving_default_tokens:0' both give "
                   f"input 0 (serving_default_tokens:0)"), err


def test_saved_signature_names_never_replace_a_positional_key(tmp_path):
    """A signature may call output 1 `output_0`: `output_0` stays output 0 and that name is not written."""
    from nnapi.cli.run import saved_outputs as _saved_outputs
    from nnapi.importers import TensorInfo
    infos = [TensorInfo("a", (1,), np.float32, signature_name="output_1"),
             TensorInfo("b", (1,), np.float32, signature_name="output_0"),
             TensorInfo("c", (1,), np.float32, signature_name="scores")]
    saved = _saved_outputs(infos, ["A", "B", "C"])
    assert saved == {"output_0": "A", "output_1": "B", "output_2": "C", "scores": "C"}


def test_nnapi_vts_checks_its_json_path_before_any_work(capsys):
    assert main(["vts", "--device", "reference", "--json", "/proc/vts.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnapi vts: --json /proc/vts.json: "), err
