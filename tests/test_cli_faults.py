"""Faults of the `nnapi` command and `make run`, each checked where it was found: output paths that
cannot be written (found only after the work), `.npy` and unreadable `--inputs`, input keys that name
two inputs, `nnapi cache` given a file, and the main job's cache folder left behind."""
from __future__ import annotations

import json
import os
import pickle
import runpy
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from nnapi.cli import main
from test_cli import _one_line_error, model, no_work  # noqa: F401 (fixtures)
from test_tflite_import import B, add_options, f32, write_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's own checks
        return e.code


def _two_inputs(path, names=("x", "w")):
    """y = a + b, a and b float32 [1, 8] named `names`."""
    return write_model(path, [f32(names[0], (1, 8)), f32(names[1], (1, 8)), f32("y", (1, 8))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0, 1], [2])


# --- output paths: checked by writing, before any work -------------------------------------------------------
@pytest.mark.parametrize("argv, option, path", [
    (["run", "{model}", "--save-outputs", "/proc/out.npz"], "--save-outputs", "/proc/out.npz"),
    (["run", "{model}", "--trace", "/proc/trace.json"], "--trace", "/proc/trace.json"),
    (["bench", "{model}", "--json", "/proc/bench.json"], "--json", "/proc/bench.json"),
    (["bench", "{model}", "--plot", "/proc/bench.png"], "--plot", "/proc/bench.png"),
    (["bench", "{model}", "--trace", "/sys/trace.json"], "--trace", "/sys/trace.json"),
    (["cts", "{tmp}", "--json", "/proc/cts.json"], "--json", "/proc/cts.json"),
    (["cts", "{tmp}", "--trace", "/proc/cts-trace.json"], "--trace", "/proc/cts-trace.json"),
])
def test_an_output_path_that_cannot_be_written_fails_before_any_work(argv, option, path, model, tmp_path, capsys,
                                                                     no_work):
    """/proc and /sys take no new files, yet `os.access` says yes to root: the file is tried."""
    argv = [a.format(model=model, tmp=tmp_path) for a in argv]
    assert _code(argv) == 2
    line = _one_line_error(capsys, f"nnapi {argv[0]}: {option} {path}: ")
    assert "cannot be written" in line or "not writable" in line


def test_trying_an_output_path_leaves_nothing_and_changes_nothing(model, tmp_path, capsys, no_work):
    new, old = tmp_path / "new.npz", tmp_path / "old.json"
    old.write_text("kept")
    assert main(["run", str(model), "--save-outputs", str(new), "--trace", str(old), "--device", "nope"]) == 2
    assert not new.exists() and old.read_text() == "kept"


def test_two_output_options_naming_one_file_are_refused(model, tmp_path, capsys, no_work):
    path = tmp_path / "both.json"
    assert main(["bench", str(model), "--json", str(path), "--trace", str(path)]) == 2
    _one_line_error(capsys, f"nnapi bench: --json {path}: --trace names the same file")


def test_save_outputs_writes_the_path_given(model, tmp_path, capsys):
    """numpy adds ".npz" to a name without it; the outputs go where the command says they went."""
    path = tmp_path / "outputs"
    assert main(["run", str(model), "--device", "reference", "--save-outputs", str(path)]) == 0
    assert f"outputs saved to {path}" in capsys.readouterr().out
    assert not (tmp_path / "outputs.npz").exists()
    assert np.load(path)["output_0"].shape == (1, 8)


# --- --inputs: .npy and .npz, never unpickled ----------------------------------------------------------------
def test_inputs_from_an_npy_feed_the_one_input(model, tmp_path, capsys):
    path = tmp_path / "x.npy"
    np.save(path, np.full((1, 8), 2, np.float32))
    assert main(["run", str(model), "--device", "reference", "--inputs", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"][0]["source"] == str(path)
    assert report["outputs"][0]["min"] == 2 and report["outputs"][0]["max"] == 9


def test_an_npy_for_a_model_of_several_inputs_is_an_error(tmp_path, capsys):
    two = _two_inputs(tmp_path / "two.tflite")
    path = tmp_path / "x.npy"
    np.save(path, np.ones((1, 8), np.float32))
    assert main(["run", str(two), "--device", "reference", "--inputs", str(path)]) == 2
    line = _one_line_error(capsys, f"nnapi run: --inputs {path}: an .npy file holds one array and the model has 2")
    assert "x, w" in line


def _write_bad_inputs(kind: str, path) -> None:
    if kind == "junk":
        path.write_bytes(b"\0not numpy at all")
    elif kind == "pickle":
        path.write_bytes(pickle.dumps({"x": [1, 2, 3]}))
    elif kind == "object npy":
        with open(path, "wb") as f:  # a file object: numpy adds no suffix to the name
            np.save(f, np.array([1, "a", None], dtype=object), allow_pickle=True)
    elif kind == "object in npz":
        with open(path, "wb") as f:
            np.savez(f, x=np.array([1, None], dtype=object), w=np.ones(2))
    elif kind == "text in npz":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.npy", b"garbage, not an array")
    elif kind == "broken zip":
        path.write_bytes(b"PK\x03\x04" + b"\xff" * 40)
    elif kind == "truncated npy":
        with open(path, "wb") as f:
            np.save(f, np.ones((100,), np.float32))
        path.write_bytes(path.read_bytes()[:200])


@pytest.mark.parametrize("kind, says", [
    ("junk", "not an .npy or .npz file"),
    ("pickle", "a Python pickle, not an .npy or .npz file"),
    ("object npy", "holds Python objects (dtype object)"),
    ("object in npz", "array 'x': holds Python objects (dtype object)"),
    ("text in npz", "array 'x': not a valid .npy array"),
    ("broken zip", "not a readable .npz file"),
    ("truncated npy", "not a valid .npy array"),
])
def test_unreadable_inputs_are_one_line_naming_the_file_before_any_work(kind, says, model, tmp_path, capsys,
                                                                        no_work):
    path = tmp_path / "in.data"
    _write_bad_inputs(kind, path)
    assert main(["run", str(model), "--inputs", str(path)]) == 2
    line = _one_line_error(capsys, f"nnapi run: --inputs {path}: {says}")
    assert "allow_pickle" not in line and "unsafe" not in line


# --- input names ---------------------------------------------------------------------------------------------
def test_input_keys_by_name_or_position(tmp_path, capsys):
    two = _two_inputs(tmp_path / "two.tflite")
    path = tmp_path / "in.npz"
    np.savez(path, w=np.full((1, 8), 3, np.float32), input_0=np.full((1, 8), 1, np.float32))
    assert main(["run", str(two), "--device", "reference", "--inputs", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [i["source"] for i in report["inputs"]] == [f"{path}:input_0", f"{path}:w"]
    assert report["outputs"][0]["min"] == report["outputs"][0]["max"] == 4


def test_a_key_naming_one_input_and_placing_another_is_refused(tmp_path, capsys):
    """Keras names inputs input_1, input_2: key `input_1` is the name of input 0 and the position of input 1."""
    two = _two_inputs(tmp_path / "keras.tflite", ("input_1", "input_2"))
    path = tmp_path / "in.npz"
    np.savez(path, input_0=np.ones((1, 8), np.float32), input_1=np.ones((1, 8), np.float32))
    assert main(["run", str(two), "--device", "reference", "--inputs", str(path)]) == 2
    _one_line_error(capsys, f"nnapi run: --inputs {path}: key 'input_1' is the name of input 0 and the position of "
                            f"input 1: use the input names as keys (input_1, input_2)")


def test_two_keys_for_one_input_are_refused(model, tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, x=np.ones((1, 8), np.float32), input_0=np.zeros((1, 8), np.float32))
    assert main(["run", str(model), "--device", "reference", "--inputs", str(path)]) == 2
    _one_line_error(capsys, f"nnapi run: --inputs {path}: keys 'x' and 'input_0' both give input 0 (x)")


def test_a_model_input_named_like_a_position_takes_its_name(tmp_path, capsys):
    """MediaPipe's models have one input named `input_1`: that key is its name, not a second input."""
    one = write_model(tmp_path / "mp.tflite", [f32("input_1", (1, 8)), f32("w", (1, 8), np.arange(8)),
                                               f32("y", (1, 8))],
                      [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])
    path = tmp_path / "in.npz"
    np.savez(path, input_1=np.ones((1, 8), np.float32))
    assert main(["run", str(one), "--device", "reference", "--inputs", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["source"] == f"{path}:input_1"


# --- nnapi cache given a file ----------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["ls", "verify", "prune"])
def test_cache_commands_given_a_file_say_it_is_not_a_folder(action, model, capsys):
    assert main(["cache", action, str(model)]) == 2
    line = _one_line_error(capsys, f"nnapi cache: not a folder: {model}")
    assert "no such" not in line


# --- make run ------------------------------------------------------------------------------------------------
def test_the_main_job_removes_its_cache_folder(tmp_path, monkeypatch, capsys):
    """`make run`: a cold miss then a cached hit, and no cache folder left behind; with NNAPI_CACHE_DIR
    the job works in a subfolder of it and leaves what was there alone."""
    import tempfile
    monkeypatch.delenv("NNAPI_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    job = os.path.join(ROOT, "examples", "main_job.py")
    runpy.run_path(job, run_name="__main__")
    out = capsys.readouterr().out
    assert "cache miss" in out and "cache hit" in out
    assert list((tmp_path / "tmp").iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("the user's")
    monkeypatch.setenv("NNAPI_CACHE_DIR", str(mine))
    runpy.run_path(job, run_name="__main__")
    assert "cache hit" in capsys.readouterr().out
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]



def test_verbose_logs_why_each_partition_went_where_and_why_the_cache_missed(tmp_path):
    """`nnapi -v run` says, through `logging`, how the placement was decided (each device's claims and
    each plan's estimated cost) and each partition's cache outcome with its reason."""
    model = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "face_detection_short_range.tflite")
    cache = str(tmp_path / "cache")
    runs = [subprocess.run([sys.executable, "-m", "nnapi.cli", "-v", "run", model, "--cache-dir", cache],
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    first, second = (r.stderr for r in runs)
    assert "INFO nnapi.runtime: placement of 90 operations" in first and "supports 90" in first, first
    assert "estimated cost of each plan" in first and "chosen:" in first, first
    assert "cache miss (cache files missing)" in first, first
    assert "cache hit" in second, second


def test_device_takes_a_comma_separated_list(tmp_path):
    """`--device mine,reference`: placement over those devices only, so an author sees their own
    driver's partitions; every name must be a device."""
    model = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "face_detection_short_range.tflite")
    run = subprocess.run([sys.executable, "-m", "nnapi.cli", "run", model, "--device", "xla,reference", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert {p["device"] for p in json.loads(run.stdout)["partitions"]} <= {"xla", "reference"}
    bad = subprocess.run([sys.executable, "-m", "nnapi.cli", "run", model, "--device", "xla,nosuch"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--device nosuch: no such device" in bad.stderr, bad.stderr
    cts = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "cts")
    vectors = subprocess.run([sys.executable, "-m", "nnapi.cli", "cts", cts, "--device", "openvino,reference",
                              "-k", "add_"], capture_output=True, text=True, timeout=300)
    assert vectors.returncode == 0 and " 0 failed" in vectors.stdout.strip().splitlines()[-1], vectors.stdout[-500:]
