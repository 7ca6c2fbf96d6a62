"""Placement starts from each device's calibration: measured in interleaved rounds until the rounds agree,
so that one busy moment does not decide where every model runs; `nnapi devices --calibrate` measures
again."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from nnapi.drivers.base import calibration

pytestmark = pytest.mark.timing


class _Fake:
    """A timed model whose median time per round is read from a list."""

    def __init__(self, times: list[float]) -> None:
        self.times = iter(times)

    def median_s(self, n: int) -> float:
        return next(self.times)


def test_rounds_stop_once_they_agree_and_the_median_round_decides():
    device = _Fake([0.1, 0.1, 0.1, 0.1, 0.1] + [9.0] * 20)
    reference = _Fake([1.0] * 25)
    result = calibration._ratio(device, reference)
    assert result["rounds"] == calibration.MIN_ROUNDS and result["ratio"] == pytest.approx(0.1)


def test_a_busy_round_does_not_decide_and_noisy_rounds_go_on():
    # every third round the machine was busy for the device only: the median round still says 0.1
    device = _Fake([0.1, 0.1, 2.0] * 10)
    reference = _Fake([1.0] * 30)
    result = calibration._ratio(device, reference)
    assert result["rounds"] > calibration.MIN_ROUNDS and result["ratio"] == pytest.approx(0.1)


def test_nnapi_devices_calibrate_measures_again(tmp_path):
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    env.pop("NNAPI_SERVICE_DIR", None)

    def devices(*flags: str) -> dict[str, dict]:
        out = subprocess.run([sys.executable, "-m", "nnapi.cli", "devices", *flags], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return {os.path.basename(p): json.load(open(p)) for p in glob.glob(str(tmp_path / "calibration-*.json"))}

    first = devices()
    assert {name.split("-")[1] for name in first} >= {"openvino", "xla"}
    for data in first.values():
        assert data["float32"]["rounds"] >= calibration.MIN_ROUNDS and data["float32"]["ratio"] > 0
    assert devices() == first  # read back, not measured again
    again = devices("--calibrate")
    assert set(again) == set(first) and again != first
