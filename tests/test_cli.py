"""The `nnapi` command: arguments checked before any work, one-line errors, --version, run --json,
progress lines, -v logging, --trace files, bench stages and warm-up, a closed stdout pipe."""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from nnapi import bench
from nnapi.cli import console, main
from nnapi.cli import devices as devices_command
from test_tflite_import import B, add_options, f32, write_model

CTS = os.environ.get("NNAPI_CTS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "cts"))


@pytest.fixture
def model(tmp_path):
    """y = x + w (w = 0..7), x and y float32 [1, 8]."""
    return write_model(tmp_path / "add.tflite", [f32("x", (1, 8)), f32("w", (1, 8), np.arange(8)), f32("y", (1, 8))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])


@pytest.fixture
def no_work(monkeypatch):
    """Any import, compilation or test-vector loading fails the test: the checks must stop first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")
    monkeypatch.setattr(bench, "import_model", forbidden)
    monkeypatch.setattr(bench, "bench_model", forbidden)
    import nnapi.conformance.vectors as vectors
    monkeypatch.setattr(vectors, "load_vectors", forbidden)


def _one_line_error(capsys, prefix: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    assert "Traceback" not in err
    return lines[0]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    from nnapi import __version__
    assert capsys.readouterr().out.startswith(f"nnapi {__version__} (Python ")


@pytest.mark.parametrize("argv, message", [
    (["cts", "{tmp}/nosuchdir"], "nnapi cts: {tmp}/nosuchdir: no such file or folder"),
    (["cts", "{tmp}", "--json", "{tmp}/missing/out.json"], "nnapi cts: --json {tmp}/missing/out.json: folder"),
    (["run", "{tmp}"], "nnapi run: model {tmp}: is a folder, not a file"),
    (["run", "{tmp}/none.tflite"], "nnapi run: model {tmp}/none.tflite: no such file"),
    (["run", "{model}", "--cache-dir", "{model}"], "nnapi run: --cache-dir {model}: not a folder"),
    (["run", "{model}", "--cache-dir", "/proc/nope"], "nnapi run: --cache-dir /proc/nope: cannot be created"),
    (["run", "{model}", "--save-outputs", "{tmp}/missing/out.npz"],
     "nnapi run: --save-outputs {tmp}/missing/out.npz: folder {tmp}/missing does not exist"),
    (["run", "{model}", "--save-outputs", "{tmp}"], "nnapi run: --save-outputs {tmp}: is a folder"),
    (["run", "{model}", "--inputs", "{model}"], "nnapi run: --inputs {model}: not an .npy or .npz file"),
    (["run", "{model}", "--trace", "{tmp}/missing/t.json"], "nnapi run: --trace {tmp}/missing/t.json: folder"),
    (["run", "{model}", "--timeout-ms", "-5"], "nnapi run: argument --timeout-ms: must be milliseconds >= 0"),
    (["run", "{model}", "--timeout-ms", "nan"], "nnapi run: argument --timeout-ms: must be milliseconds >= 0"),
    (["run", "{model}", "--device", "nope"], "nnapi run: --device nope: no such device (devices: "),
    (["run", "{model}", "--priority", "urgent"], "nnapi run: argument --priority: priority must be low"),
    (["bench", "{model}", "--runs", "0"], "nnapi bench: argument --runs: must be >= 1, got 0"),
    (["bench", "{model}", "--warmup", "-1"], "nnapi bench: argument --warmup: must be >= 0, got -1"),
    (["bench", "{model}", "--plot", "{tmp}/plot.jpg"], "nnapi bench: --plot {tmp}/plot.jpg: the file must end in"),
    (["bench", "{model}", "--plot", "{tmp}/missing/plot.png"], "nnapi bench: --plot {tmp}/missing/plot.png: folder"),
    (["bench", "{model}", "--json", "{tmp}/missing/b.json"], "nnapi bench: --json {tmp}/missing/b.json: folder"),
    (["nosuchcommand"], "nnapi: argument command: invalid choice: 'nosuchcommand'"),
])
def test_bad_arguments_are_one_line_before_any_work(argv, message, model, tmp_path, capsys, no_work):
    fill = {"tmp": str(tmp_path), "model": str(model)}
    argv = [a.format(**fill) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own checks (types, choices)
        code = e.code
    assert code == 2
    _one_line_error(capsys, message.format(**fill))


def test_errors_during_the_work_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\0" * 64)
    assert main(["run", str(junk)]) == 1
    assert "not a TFLite model" in _one_line_error(capsys, "nnapi run: BAD_DATA: ")

    def boom(args):
        raise RuntimeError("first line\nsecond line")
    monkeypatch.setattr(devices_command, "run", boom)
    assert main(["devices"]) == 1
    line = _one_line_error(capsys, "nnapi devices: RuntimeError: first line; second line")
    assert "--debug" in line
    assert main(["devices", "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().endswith("RuntimeError: first line; second line")


def test_run_json_reports_inputs_conversions_unused_keys_and_outputs(model, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones(8), y_typo=np.zeros(3))              # float64 [8] for float32 [1, 8]
    out = tmp_path / "out.npz"
    assert main(["run", str(model), "--device", "reference", "--inputs", str(inputs), "--json", "--timeout-ms", "0",
                 "--save-outputs", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)                                # stdout is the JSON object alone
    assert report["inputs"] == [{"name": "x", "shape": [1, 8], "dtype": "float32", "source": f"{inputs}:x",
                                 "converted": "shape [8] -> [1, 8]; float64 -> float32"}]
    assert report["unused_input_keys"] == ["y_typo"] and report["timeout_ms"] is None
    assert report["partitions"][0]["device"] == "reference" and report["partitions"][0]["kinds"] == {"ADD": 1}
    (output,) = report["outputs"]
    assert output["name"] == "y" and output["shape"] == [1, 8] and output["top"][0] == [7, 8.0]
    np.testing.assert_array_equal(np.load(out)["output_0"], np.arange(1, 9, dtype=np.float32)[None])
    assert "key 'y_typo' matches no input and is not used (inputs: x" in captured.err


def test_run_text_names_the_conversion(model, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, input_0=np.ones((1, 8), np.float64))
    assert main(["run", str(model), "--device", "reference", "--inputs", str(inputs)]) == 0
    assert f"input  x float32[1, 8]  <- {inputs}:input_0 (converted: float64 -> float32)" in capsys.readouterr().out


@pytest.mark.timing
def test_devices_json_into_a_closed_pipe_is_quiet():
    """`nnapi devices --json | head`: the reader is gone before nnapi writes; no BrokenPipeError."""
    proc = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "devices", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"BrokenPipe" not in err and b"Traceback" not in err, err.decode()
    assert proc.returncode == 141


def test_devices_piped_shows_every_cell_whole():
    """Piped (a script, a CI log), the table is not folded to 80 columns: each device's row holds its
    whole version and where it lives, as `--json` says them."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    table = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices"], capture_output=True, text=True, env=env,
                           timeout=300, check=True).stdout
    listed = json.loads(subprocess.run([sys.executable, "-m", "nnapi.cli", "devices", "--json"], capture_output=True,
                                       text=True, env=env, timeout=300, check=True).stdout)
    rows = {line.split()[1]: line for line in table.splitlines() if line.startswith("│")}
    assert set(rows) == {d["name"] for d in listed}
    for d in listed:
        assert d["version"] in rows[d["name"]] and "…" not in rows[d["name"]], rows[d["name"]]
        assert d["location"] == "in-process" and "in-process" in rows[d["name"]]


def test_verbose_turns_on_the_nnapi_loggers(capsys, monkeypatch):
    vectors = os.path.join(CTS, "V1_0", "add.json")
    assert main(["-v", "cts", vectors, "--device", "reference"]) == 0
    assert "INFO nnapi.cli: 2 test vectors from" in capsys.readouterr().err
    seen = {}

    def devices(args):  # a driver logging while a command runs
        seen["level"] = logging.getLogger("nnapi.drivers.reference").getEffectiveLevel()
        logging.getLogger("nnapi.drivers").info("a driver's message")
        logging.getLogger("nnapi.drivers").debug("a driver's detail")
        return 0
    monkeypatch.setattr(devices_command, "run", devices)
    assert main(["devices", "-vv"]) == 0
    err = capsys.readouterr().err
    assert seen["level"] == logging.DEBUG
    assert "INFO nnapi.drivers: a driver's message" in err and "DEBUG nnapi.drivers: a driver's detail" in err
    assert main(["devices", "-v"]) == 0
    err = capsys.readouterr().err
    assert seen["level"] == logging.INFO and "a driver's message" in err and "detail" not in err
    assert main(["devices"]) == 0                                    # no -v: warnings only
    assert seen["level"] == logging.WARNING and capsys.readouterr().err == ""
    assert logging.getLogger("nnapi").level == logging.NOTSET        # restored after the command
    assert logging.getLogger("nnapi").propagate


@pytest.mark.timing
def test_cts_prints_progress_lines_when_not_on_a_terminal(capsys, monkeypatch):
    import time

    import nnapi.conformance.runner as runner
    real = runner.run_one

    def slow(test, devices):
        time.sleep(0.15)
        return real(test, devices)
    monkeypatch.setattr(runner, "run_one", slow)
    monkeypatch.setattr(console, "PROGRESS_INTERVAL_S", 0.05)
    vectors = [os.path.join(CTS, "V1_0", name) for name in ("add.json", "mul.json", "relu_float_1.json")]
    assert main(["cts", *vectors, "--device", "reference"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("cts: ")]
    from nnapi.conformance.vectors import load_vectors
    total = len(list(load_vectors(vectors)))
    assert len(lines) >= total, captured.err                         # 0.15 s per vector, a line every 0.05 s
    matches = [re.match(rf"cts: (\d+)/{total}( 0 failed, 0 skipped)?, \d+ s$", line) for line in lines]
    assert all(matches), lines
    done = [int(m.group(1)) for m in matches]
    assert done == sorted(done) and 0 < done[-1] <= total
    assert captured.out.strip().splitlines()[-1] == f"{total} passed, 0 failed, 0 skipped"


def _trace_events(path) -> list[dict]:
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "i", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert e["ts"] >= 0 and isinstance(e["cat"], str)
        if e["ph"] == "X":
            assert e["dur"] >= 0
    return events


def _inside(inner: dict, outer: dict) -> bool:
    return outer["ts"] <= inner["ts"] + 1e-3 and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


def test_run_and_bench_write_traces(model, tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["run", str(model), "--device", "reference", "--cache-dir", str(tmp_path / "c"),
                 "--trace", str(path)]) == 0
    events = _trace_events(path)
    names = [e["name"] for e in events if e["ph"] == "X"]
    (imported,) = [e for e in events if e["name"] == "import"]
    (prepare,) = [e for e in events if e["name"] == "prepare"]
    (execute,) = [e for e in events if e["name"] == "execute"]
    assert imported["args"]["path"] == str(model) and prepare["args"]["outcome"] == "miss"
    assert imported["ts"] + imported["dur"] <= prepare["ts"] + 1e-3 <= execute["ts"] + 1e-3
    # (a fresh state directory also calibrates the devices: their workloads' operations come before)
    (op,) = [e for e in events if e.get("cat") == "operation" and _inside(e, execute)]
    assert op["name"] == "0 ADD" and "partition" in names
    bench = tmp_path / "bench.json"
    assert main(["bench", str(model), "--device", "reference", "--runs", "2", "--warmup", "1",
                 "--trace", str(bench)]) == 0
    events = _trace_events(bench)
    outcomes = [e["args"]["outcome"] for e in events if e["name"] == "prepare"]
    assert outcomes[-2:] == ["miss", "hit"]                         # cold, then cached
    assert len([e for e in events if e["name"] == "execute"]) >= 1 + 1 + 2


def test_cts_writes_a_trace(tmp_path, capsys):
    path = tmp_path / "cts.json"
    assert main(["cts", os.path.join(CTS, "V1_0", "add.json"), "--device", "reference", "--trace", str(path)]) == 0
    events = _trace_events(path)
    assert {"prepare", "execute"} <= {e["name"] for e in events}


def test_bench_waits_for_the_optimised_xla_executable_and_says_so(model, capsys):
    assert main(["bench", str(model), "--device", "xla", "--runs", "3", "--warmup", "2"]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["stage"] == "optimized" and figures["stages"] == [{"device": "xla", "stage": "optimized"}]
    assert (figures["warmup"], figures["runs"], figures["stage_changed"]) == (2, 3, False)
    assert "xla optimized" in out
    assert main(["bench", str(model), "--device", "xla", "--runs", "3", "--warmup", "0", "--no-wait-optimized"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["stage"] == "quick" and figures["optimize_wait_s"] == 0
    assert main(["bench", str(model), "--device", "reference", "--runs", "2"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["stage"] == "single" and figures["stages"] == [{"device": "reference", "stage": None}]
