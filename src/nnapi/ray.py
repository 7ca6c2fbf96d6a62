"""Batch inference on Ray Data: `predict(dataset, model, ...)` (and the `nnapi batch` command, `nnapi.cli.batch`).

Built on `Dataset.map_batches` with a callable class: each actor holds one compiled `nnapi.load` session,
created in its `__init__` (with the app's cache folder, and a driver-side fleet tier when `fleet` names a
store, so a fleet of actors compiles each model once). Batches are numpy, zero-copy where Ray gives them so,
and run through `CompiledModel.run_batch` (several executions in flight). Each actor's model gets as many
threads as the actor has CPUs (at least one), so actors and model threads do not oversubscribe the machine.
`report` names a `Tally` actor (see `tally`) that hears each actor's cache outcome and load time and each
batch's rows and times, which is how `nnapi batch` reports without a pass over the output.

Rows: one sample each, in a column per model input (named by the input's signature name, tensor name or
`input_N`), holding the tensor without the model's batch dimension; an `id` column is kept as it comes.
A batch that does not match the model's batch size is split into model batches, the last one padded, and
the padding dropped from the output. The output has the `id` column and one column per model output, named
as the output is, holding that row's tensor. An actor killed mid-batch is restarted by Ray and its batch
run again, so every input row appears in the output once. Needs the extra `nnapi[ray]`.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Sequence

import numpy as np

#: The columns `predict(..., stats=True)` adds: which actor ran a row, and that actor's cache outcome.
ACTOR, CACHE = "_nnapi_actor", "_nnapi_cache"


class Tally:
    """What the actors of one `predict` tell (a Ray actor of its own, by name): each actor's cache outcome
    and load seconds, and each batch's rows and wall-clock start and end."""

    def __init__(self) -> None:
        self.actors: dict[str, dict] = {}
        self.batches: list[tuple[int, float, float]] = []

    def actor(self, actor: str, outcome: str, started: float, load_s: float) -> None:
        self.actors[actor] = {"outcome": outcome, "started": started, "load_s": load_s}

    def batch(self, rows: int, start: float, end: float) -> None:
        self.batches.append((rows, start, end))

    def report(self) -> dict:
        """{"actors": {id: {outcome, started, load_s}}, "batches": [(rows, start, end), ...]}."""
        return {"actors": dict(self.actors), "batches": list(self.batches)}


def tally(name: str) -> Any:
    """A new `Tally` actor named `name` (no CPU of its own), for `predict(..., report=name)`."""
    import ray
    return ray.remote(num_cpus=0)(Tally).options(name=name).remote()


class Predictor:
    """One Ray actor's compiled model (`nnapi.load` once, in `__init__`); called with numpy batches."""

    def __init__(self, model: str, devices: Sequence[str] | None, cache_dir: str | None, priority: Any,
                 fleet: str | None, stats: bool, threads: int | None = None, report: str | None = None) -> None:
        started = time.time()
        if fleet:
            os.environ["NNAPI_FLEET"] = fleet  # (read by the drivers of this actor's process)
        if threads and "NNAPI_OPENVINO_THREADS" not in os.environ:
            os.environ["NNAPI_OPENVINO_THREADS"] = str(threads)  # (this actor's CPUs, not the machine's)
        from .session import load
        self.session = load(model, devices, cache_dir=cache_dir, priority=priority)
        self.inputs = self.session.inputs
        self.stats = stats
        self.actor = uuid.uuid4().hex[:12]
        outcomes = [c.outcome for c in self.session.cache_outcomes]
        self.outcome = "compile" if not outcomes or "miss" in outcomes or "disabled" in outcomes else (
            "fleet" if "fleet" in outcomes else "hit")
        self.tally = None
        if report:
            import ray
            self.tally = ray.get_actor(report)
            self.tally.actor.remote(self.actor, self.outcome, started, time.time() - started)

    def _feeds(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Each model input's column of `batch`, by any of its names."""
        columns = []
        for k, info in enumerate(self.inputs):
            names = [n for n in (getattr(info, "signature_name", None), info.name, f"input_{k}") if n]
            name = next((n for n in names if n in batch), None)
            if name is None:
                raise KeyError(f"the batch has no column for model input {k} ({' / '.join(names)}); its columns: "
                               f"{', '.join(batch)}")
            column = np.asarray(batch[name]) if batch[name].dtype != object else np.stack(list(batch[name]))
            sample = tuple(info.shape[1:])
            if column.shape[1:] != sample and all(isinstance(d, int) for d in sample):  # (flat lists: Parquet)
                column = column.reshape((len(column), *sample))
            columns.append(column)
        return columns

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        columns = self._feeds(batch)
        rows = len(columns[0])
        model_batch = [info.shape[0] if info.shape and info.shape[0] else 1 for info in self.inputs]
        per_run = min(model_batch)
        began = time.time()
        starts = range(0, rows, per_run)
        feeds = []
        for start in starts:
            feed = []
            for column, info, b in zip(columns, self.inputs, model_batch):
                chunk = column[start:start + b]
                if len(chunk) < b:  # the last one, padded with copies of its last row
                    chunk = np.concatenate([chunk, np.repeat(chunk[-1:], b - len(chunk), axis=0)])
                feed.append(np.ascontiguousarray(chunk, dtype=np.dtype(info.dtype)))
            feeds.append(feed)
        outputs: dict[str, list[np.ndarray]] = {}
        for start, result in zip(starts, self.session.run_batch(feeds)):
            for name in result:
                outputs.setdefault(self._output_name(name), []).append(np.asarray(result[name])[:rows - start])
        out: dict[str, Any] = {name: np.concatenate(parts) for name, parts in outputs.items()}
        if self.tally is not None:
            self.tally.batch.remote(rows, began, time.time())
        if "id" in batch:
            out["id"] = batch["id"]
        if self.stats:
            out[ACTOR] = np.full(rows, self.actor)
            out[CACHE] = np.full(rows, self.outcome)
        return out

    def _output_name(self, name: str) -> str:
        for info in self.session.outputs:
            if info.name == name:
                return getattr(info, "signature_name", None) or info.name
        return name


def predict(dataset, model: str | os.PathLike, *, devices: Sequence[str] | str | None = None,
            cache_dir: str | os.PathLike | None = None, batch_size: int = 64, concurrency: int = 2,
            num_cpus: float = 1, priority: Any = "medium", fleet: str | None = None, stats: bool = False,
            report: str | None = None):
    """The model's outputs for every row of `dataset` (a `ray.data.Dataset`), as a `ray.data.Dataset`
    with the `id` column and one column per model output (see the module doc). `concurrency` actors,
    each with `num_cpus` (and that many model threads, rounded, at least one); `stats` adds the columns ACTOR and
    CACHE; `report` names a `Tally` actor (`tally(name)`) to tell instead (what `nnapi batch` reports).

    The model is checked here first: one that cannot be imported is one NnError naming it, not a
    traceback from every actor."""
    from .importers import load_tflite
    path = os.fspath(model)
    load_tflite(path)  # (cheap: parse and check; the actors compile)
    names = [devices] if isinstance(devices, str) else (list(devices) if devices else None)
    import ray.data
    # (Ray Data restarts a dead actor and runs its tasks again by default: max_restarts, max_task_retries -1)
    return dataset.map_batches(
        Predictor, batch_size=batch_size, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=num_cpus, zero_copy_batch=True,
        fn_constructor_args=(os.path.abspath(path), names, None if cache_dir is None else os.fspath(cache_dir),
                             priority, fleet, stats, max(1, round(num_cpus)), report))
