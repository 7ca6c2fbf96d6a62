"""Batch inference on a local Ray: `nnapi.ray.predict` and `nnapi batch` give what a plain `model.run` loop
gives, every input row once, also when an actor is killed mid-batch."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import nnapi
from nnapi.hal import NnError

pytestmark = pytest.mark.xdist_group("ray")

ray = pytest.importorskip("ray")  # (the extra nnapi[ray]; `make` installs it)

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")
MODEL = os.path.join(MODELS, "keras", "mobilenet_v2_int8.tflite")
TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def local_ray():
    os.environ["PYTHONPATH"] = os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])  # (for the actors)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _inputs(n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    x = np.load(os.path.join(MODELS, "reference", "mobilenet_v2_int8.npz"))["input_0"]
    rng = np.random.default_rng(5)
    rows = [np.clip(x[0].astype(np.int16) + rng.integers(-3, 4, x.shape[1:]), -128, 127).astype(np.int8)
            for _ in range(n)]
    return x, rows


def _plain(rows: list[np.ndarray]) -> list[np.ndarray]:
    model = nnapi.load(MODEL)
    return [np.asarray(list(model.run([row[None]]).values())[0])[0] for row in rows]


def test_predict_gives_the_plain_loops_outputs_by_id(local_ray):
    from nnapi.ray import predict
    _, rows = _inputs(21)
    ds = ray.data.from_items([{"id": f"img{k}", "keras_tensor": row} for k, row in enumerate(rows)])
    out = predict(ds, MODEL, batch_size=8, concurrency=2, num_cpus=0.5).take_all()
    assert sorted(r["id"] for r in out) == sorted(f"img{k}" for k in range(21))
    expected = _plain(rows)
    for r in out:
        np.testing.assert_array_equal(r["output_0"], expected[int(r["id"][3:])])


def test_a_model_that_cannot_be_loaded_is_one_error_naming_it(local_ray, tmp_path):
    from nnapi.ray import predict
    bad = tmp_path / "broken.tflite"
    bad.write_bytes(b"not a model")
    with pytest.raises(NnError) as e:
        predict(ray.data.from_items([{"id": "0"}]), bad)
    assert "broken.tflite" in e.value.message or "broken.tflite" in str(e.value)


def test_a_batch_that_does_not_match_the_model_batch_is_split_and_padded():
    """A model of batch 4 fed 10 rows: three runs, the last padded, the padding dropped."""
    from nnapi.ray import Predictor
    m = nnapi.Model()
    a = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4, 3))
    b = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4, 3))
    act = m.add_operand(nnapi.OperandType.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(nnapi.OperandType.TENSOR_FLOAT32, (4, 3))
    m.add_operation(nnapi.OperationType.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    predictor = Predictor(m, ["reference"], None, "medium", None, False)
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    result = predictor({"input_0": x, "input_1": x, "id": np.arange(10)})
    (name,) = [k for k in result if k != "id"]
    np.testing.assert_array_equal(result[name], 2 * x)
    assert list(result["id"]) == list(range(10))


class KillsItsFirstActor:
    """Wraps Predictor: the first actor to start dies (os._exit) in its first batch; Ray restarts it."""

    def __init__(self, marker: str, *args) -> None:
        from nnapi.ray import Predictor
        self.inner = Predictor(*args)
        self.doomed = not os.path.exists(marker) and not os.open(marker, os.O_CREAT | os.O_WRONLY) < 0

    def __call__(self, batch):
        if self.doomed:
            os._exit(1)
        return self.inner(batch)


def test_an_actor_killed_mid_batch_is_retried_and_every_row_appears_once(local_ray, tmp_path):
    _, rows = _inputs(24)
    ds = ray.data.from_items([{"id": f"img{k}", "keras_tensor": row} for k, row in enumerate(rows)])
    out = ds.map_batches(KillsItsFirstActor, batch_size=6, batch_format="numpy",
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.5,
                         fn_constructor_args=(str(tmp_path / "killed"), os.path.abspath(MODEL), None, None,
                                              "medium", None, False)).take_all()
    assert os.path.exists(tmp_path / "killed")  # (an actor did die)
    ids = [r["id"] for r in out]
    assert sorted(ids) == sorted(f"img{k}" for k in range(24)) and len(set(ids)) == 24
    expected = _plain(rows)
    for r in out:
        np.testing.assert_array_equal(r["output_0"], expected[int(r["id"][3:])])


@pytest.mark.parametrize("form", ["npy", "npz", "parquet"])
def test_nnapi_batch_over_a_folder_or_parquet(tmp_path, form):
    _, rows = _inputs(12)
    folder = tmp_path / "in"
    folder.mkdir()
    if form == "npy":
        for k, row in enumerate(rows):
            np.save(folder / f"img{k:02d}.npy", row[None])  # (with the model's batch dimension)
    elif form == "npz":
        for k, row in enumerate(rows):
            np.savez(folder / f"img{k:02d}.npz", keras_tensor=row)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"keras_tensor": [row.reshape(-1).tolist() for row in rows]}), folder / "in.parquet")
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "batch", MODEL, str(folder), "--output",
                          str(tmp_path / "out"), "--actors", "2", "--batch-size", "4"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert summary.startswith("12 rows in") and "rows/s" in summary and " compiles, " in summary, summary
    import pyarrow.parquet as pq
    table = pq.read_table(tmp_path / "out").to_pydict()
    ids = table["id"]
    assert len(ids) == 12 and len(set(map(str, ids))) == 12
    expected = _plain(rows)
    for rid, value in zip(ids, table["output_0"]):
        k = int(str(rid)[3:5]) if form != "parquet" else int(rid)
        np.testing.assert_array_equal(np.asarray(value).reshape(-1), expected[k].reshape(-1))


def test_the_actors_tell_a_tally_their_outcomes_and_batches(local_ray):
    from nnapi.ray import predict, tally
    _, rows = _inputs(10)
    told = tally("nnapi-test-tally")
    ds = ray.data.from_items([{"id": f"img{k}", "keras_tensor": row} for k, row in enumerate(rows)])
    out = predict(ds, MODEL, batch_size=4, concurrency=2, num_cpus=0.5, report="nnapi-test-tally").take_all()
    expected = _plain(rows)
    for r in out:  # (through run_batch: what one-by-one runs give)
        np.testing.assert_array_equal(r["output_0"], expected[int(r["id"][3:])])
    report = ray.get(told.report.remote())
    assert 1 <= len(report["actors"]) <= 2
    assert all(a["outcome"] in ("compile", "hit", "fleet") and a["load_s"] > 0 for a in report["actors"].values())
    assert sum(rows for rows, _, _ in report["batches"]) == 10
    assert all(start <= end for _, start, end in report["batches"])


def test_nnapi_batch_writes_where_the_time_went(tmp_path):
    import json
    _, rows = _inputs(6)
    folder = tmp_path / "in"
    folder.mkdir()
    for k, row in enumerate(rows):
        np.save(folder / f"img{k:02d}.npy", row)
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "batch", MODEL, str(folder), "--output",
                          str(tmp_path / "out"), "--actors", "1", "--batch-size", "4", "--timings",
                          str(tmp_path / "t.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1].startswith("6 rows in")
    timings = json.loads((tmp_path / "t.json").read_text())
    assert timings["rows"] == 6 and timings["actors"] == 1 and len(timings["actor_load_s"]) == 1
    assert timings["ray_init_s"] > 0 and 0 < timings["first_batch_done_s"] <= timings["last_batch_done_s"]
    assert timings["infer_busy_s"] > 0 and timings["run_s"] >= timings["last_batch_done_s"] - 1


@pytest.mark.parametrize("service", [False, True], ids=["in-process", "served"])
def test_sharded_certification_gives_the_counts_of_a_local_run(tmp_path, service):
    """`nnapi cts PATH --ray-address local`: the vectors sharded across Ray tasks, each hosting the driver
    in-process or behind its own `nnapi serve`; the same JSON results, in the same order, and last line."""
    import json
    cts = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "cts")

    def cts_run(*extra: str) -> tuple[str, dict]:
        out = subprocess.run([sys.executable, "-m", "nnapi.cli", "cts", cts, "--device", "reference", "-k",
                              "depth_to_space", "--json", str(tmp_path / "r.json"), *extra], capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1], json.load(open(tmp_path / "r.json"))

    local_line, local = cts_run()
    sharded_line, sharded = cts_run("--ray-address", "local", *(["--service"] if service else []))
    assert sharded_line == local_line and local["summary"]["total"] > 10, (sharded_line, local_line)
    assert [(r["name"], r["status"]) for r in sharded["results"]] == [(r["name"], r["status"]) for r in local["results"]]
