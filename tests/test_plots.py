"""Plots: `nnapi bench --plot FILE.png` and `benchmarks/qos.py --plot` (matplotlib, Agg backend)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest

from nnapi.cli import main, plot_bench
from test_tflite_import import B, add_options, f32, write_model

pytestmark = pytest.mark.timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _image(path) -> np.ndarray:
    """The picture's pixels; it must be a real drawing (a PNG of plausible size, not one colour)."""
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(str(path))
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 800
    assert float(pixels[..., :3].std()) > 0.05
    return pixels


def _colour_share(pixels: np.ndarray, rgb: tuple[float, float, float], tolerance: float = 0.06) -> float:
    """The fraction of pixels of about this colour (markers of one series)."""
    distance = np.abs(pixels[..., :3] - np.asarray(rgb)).max(axis=-1)
    return float((distance < tolerance).mean())


RED_X = (0.8392, 0.1529, 0.1569)      # matplotlib's tab:red
BLACK = (0.0, 0.0, 0.0)


def test_bench_plot_of_a_real_run(tmp_path, capsys):
    model = write_model(tmp_path / "add.tflite", [f32("x", (1, 8)), f32("w", (1, 8), np.arange(8)), f32("y", (1, 8))],
                        [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])
    path = tmp_path / "bench.png"
    assert main(["bench", str(model), "--device", "reference", "--runs", "20", "--warmup", "2",
                 "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"plot written to {path}" in out and json.loads(out.strip().splitlines()[-1])["runs"] == 20
    _image(path)


def _timeline(misses: int) -> list[dict]:
    rng = np.random.default_rng(0)
    events = [{"phase": "first", "t_s": 0.0, "ms": 40.0, "stage": "quick", "missed": False}]
    events += [{"phase": "warm-up", "t_s": 0.05 * (k + 1), "ms": 20.0, "stage": "quick", "missed": False}
               for k in range(3)]
    events.append({"phase": "optimizing", "t_s": 0.2, "duration_s": 1.0})
    events += [{"phase": "timed", "t_s": 1.2 + 0.01 * k, "ms": float(rng.uniform(4, 6)), "stage": "optimized",
                "missed": k < misses} for k in range(60)]
    return events


def _result(timeout_ms: float | None) -> dict:
    return {"model": "m.tflite", "device": "xla", "preference": "fast-single-answer", "warmup": 3, "runs": 60,
            "stage": "optimized", "execute_p50_ms": 5.0, "timeout_ms": timeout_ms, "prepare_cold_s": 0.8,
            "prepare_cached_s": 0.05, "cache": {"cold": ["miss"], "cached": ["hit"]}}


def test_bench_plot_marks_deadline_misses(tmp_path):
    """The same runs drawn twice: with deadline misses there are black crosses that are not there without."""
    with_misses, without = tmp_path / "misses.png", tmp_path / "none.png"
    plot_bench(_result(5.5), _timeline(misses=12), str(with_misses))
    plot_bench(_result(None), _timeline(misses=0), str(without))
    a, b = _image(with_misses), _image(without)
    assert _colour_share(a, BLACK, 0.1) > _colour_share(b, BLACK, 0.1)


def _qos_module():
    spec = importlib.util.spec_from_file_location("qos_benchmark", os.path.join(ROOT, "benchmarks", "qos.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Setup:
    def __init__(self, timeline):
        self.timeline = timeline


def test_qos_plot_draws_each_configuration_and_marks_high_runs_over_the_goal(tmp_path):
    qos = _qos_module()
    rng = np.random.default_rng(1)

    def timeline(high_ms: float, loaded: bool):
        events = [("HIGH", 0.01 * k, float(rng.uniform(0.8, 1.2) * high_ms)) for k in range(100)]
        return events + ([("LOW", 0.02 * k, float(rng.uniform(20, 40))) for k in range(50)] if loaded else [])

    alone = {"p99_ms": 1.2}
    calm = {"alone": _Setup(timeline(1, False)), "qos": _Setup(timeline(1, True)), "fifo": _Setup(timeline(1, True))}
    slow = {"alone": _Setup(timeline(1, False)), "qos": _Setup(timeline(1, True)), "fifo": _Setup(timeline(30, True))}
    refusals = list(rng.uniform(0.01, 0.05, 200))
    lags = list(rng.uniform(0.5, 3, 10))
    qos.plot(calm, alone, refusals, lags, 100.0, str(tmp_path / "calm.png"))
    qos.plot(slow, alone, refusals, lags, 100.0, str(tmp_path / "slow.png"))
    calm_px, slow_px = _image(tmp_path / "calm.png"), _image(tmp_path / "slow.png")
    assert _colour_share(slow_px, RED_X) > _colour_share(calm_px, RED_X)  # FIFO's HIGH runs over the goal: red


def test_qos_plot_argument_is_checked_before_the_benchmark_runs(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "qos.py"), "--plot", str(tmp_path / "a.jpg")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "the file must end in .png, .svg or .pdf" in out.stderr
    assert out.stdout == ""
