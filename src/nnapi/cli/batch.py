"""`nnapi batch MODEL INPUT --output OUT`: batch inference on Ray Data (`nnapi.ray.predict`).

    nnapi batch MODEL INPUT --output OUT [--ray-address ADDR] [--actors N] [--batch-size B]
                [--device NAME[,NAME...]] [--cache-dir DIR] [--fleet URL] [--timings FILE]

INPUT is a folder of `.npy` files (one array each: the model's one input) or `.npz` files (one array per
input, keyed by the input's signature name, tensor name or `input_N`), whose file names are the rows'
ids; or a Parquet file or folder, with a column per input (and an `id` column, else the row's index).
An array may hold the model's batch dimension (1) or not. OUT is Parquet: the `id` column and one
column per model output. Without `--ray-address` a local Ray is started (and stopped). Ray Data shows
its progress; the last line is the summary: rows, rows/s, compiles, local hits, fleet hits. The files
are read a block of many at a time, the output is written as it streams (the summary's counts come from
the actors, through a `nnapi.ray.Tally`), and `--timings FILE` writes where the time went as JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid

import numpy as np


#: Input files per Ray block: big enough that a block's task costs little beside its reading, small
#: enough that blocks stream to the actors (256 of mobilenet's 150 KB inputs: 38 MB).
FILES_PER_BLOCK = 256
#: The CPU share a read (or write) task asks Ray for: reading, decoding and writing cost a few per cent
#: of inference (mobilenet: 0.3 ms a file against 4-8 ms a run), so the actors get the rest of the CPUs
#: (a write task asking a whole CPU would wait for the actors to end, and the outputs pile up).
READ_CPUS = 0.25


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi batch`."""
    p.add_argument("model", help="a .tflite file")
    p.add_argument("input", help="a folder of .npy/.npz files, or Parquet")
    p.add_argument("--output", required=True, help="where to write the outputs (Parquet)")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local Ray)")
    p.add_argument("--actors", type=int, default=2, help="actors, each with one compiled model (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="rows per Ray batch (default 64)")
    p.add_argument("--device", help="a device name or a comma-separated list (default: all devices)")
    p.add_argument("--cache-dir", help="the actors' compilation cache folder")
    p.add_argument("--fleet", metavar="URL", help="a fleet store for the actors' drivers (as NNAPI_FLEET)")
    p.add_argument("--timings", metavar="FILE", help="write where the time went as JSON (ray.init, actors' "
                                                      "loads, batches, the whole run)")


def _fail(message: str) -> int:
    print(f"nnapi batch: {message}", file=sys.stderr)
    return 2


def _decode(path: str, names: list[list[str]], shapes: list[tuple]) -> dict:
    """One .npy/.npz file as a row: its id (the file name) and one array per model input."""
    name = os.path.basename(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise ValueError(f"{name}: not a .npy or .npz file of arrays: {e}") from None
    arrays = {"input_0": loaded} if isinstance(loaded, np.ndarray) else {k: loaded[k] for k in loaded.files}
    out: dict = {"id": name}
    for k, (aliases, shape) in enumerate(zip(names, shapes)):
        key = next((a for a in aliases if a in arrays), None)
        if key is None:
            raise ValueError(f"{name}: no array for model input {k} ({' / '.join(aliases)})")
        array = arrays[key]
        if tuple(array.shape) == tuple(shape) and shape and shape[0] == 1:
            array = array[0]  # (the model's batch dimension, given)
        out[aliases[0]] = array
    return out


def _read_files(batch: dict[str, np.ndarray], names: list[list[str]], shapes: list[tuple]) -> dict[str, np.ndarray]:
    """A batch of file paths read into rows: the `id` column and one stacked column per model input."""
    rows = [_decode(str(path), names, shapes) for path in batch["path"]]
    columns = {"id": np.array([r["id"] for r in rows])}
    for aliases in names:
        try:
            columns[aliases[0]] = np.stack([r[aliases[0]] for r in rows])
        except ValueError as e:
            raise ValueError(f"input {aliases[0]}: the files' arrays differ in shape: {e}") from None
    return columns


def _files(ray_data, files: list[str], names: list[list[str]], shapes: list[tuple], batch_size: int):
    """The rows of many small .npy/.npz files: their paths in blocks of FILES_PER_BLOCK (one Ray read task
    per file, or per few, costs more than the file), each read and decoded a batch at a time."""
    blocks = max(1, math.ceil(len(files) / FILES_PER_BLOCK))
    paths = ray_data.from_items([{"path": f} for f in files], override_num_blocks=blocks)
    return paths.map_batches(_read_files, batch_size=batch_size, batch_format="numpy", num_cpus=READ_CPUS,
                             fn_args=(names, shapes))


def run(args: argparse.Namespace) -> int:
    """Predict over the input on Ray, write the Parquet output and print the summary line."""
    try:
        import ray
        import ray.data
    except ImportError:
        return _fail("needs Ray: pip install 'nnapi[ray]'")
    from ..hal import NnError
    from ..importers import load_tflite
    from ..ray import predict, tally
    for option, value in (("--actors", args.actors), ("--batch-size", args.batch_size)):
        if value < 1:
            return _fail(f"{option} must be at least 1, got {value}")
    if not os.path.exists(args.input):
        return _fail(f"{args.input}: no such file or folder")
    try:
        imported = load_tflite(args.model)
    except (NnError, OSError) as e:
        return _fail(f"{args.model}: {getattr(e, 'message', None) or e}")
    infos = imported.inputs
    names = [[n for n in (i.signature_name, i.name, f"input_{k}") if n] for k, i in enumerate(infos)]
    shapes = [tuple(i.shape) for i in infos]
    started = not args.ray_address
    begun = time.time()
    ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
             **({} if args.ray_address else {"num_cpus": os.cpu_count() or 2}))
    timings: dict = {"process_started": begun, "ray_init_s": time.time() - begun}
    try:
        start = time.perf_counter()
        files = sorted(os.path.join(args.input, f) for f in os.listdir(args.input)) if os.path.isdir(args.input) \
            else [args.input]
        arrays = [f for f in files if f.endswith((".npy", ".npz"))]
        if arrays:
            ds = _files(ray.data, arrays, names, shapes, args.batch_size)
        else:
            import pyarrow.parquet as pq
            table = pq.read_table(args.input)
            if "id" not in table.column_names:
                table = table.append_column("id", [list(range(table.num_rows))])
            ds = ray.data.from_arrow(table)
        devices = [d.strip() for d in args.device.split(",")] if args.device else None
        # The actors share the CPUs but a read task's share (each actor's model gets threads for its
        # share, rounded: the actors' threads and the machine's cores match, and reading still runs).
        cpus = float(ray.cluster_resources().get("CPU", 1))
        per_actor = max(0.01, (cpus - READ_CPUS) / args.actors)
        name = f"nnapi-batch-{uuid.uuid4().hex[:12]}"
        told = tally(name)
        before = _parquet_files(args.output)
        predict(ds, args.model, devices=devices, cache_dir=args.cache_dir, batch_size=args.batch_size,
                concurrency=args.actors, num_cpus=per_actor, fleet=args.fleet, report=name
                ).write_parquet(args.output, ray_remote_args={"num_cpus": READ_CPUS})  # (streamed: no copy)
        elapsed = time.perf_counter() - start
        report = ray.get(told.report.remote())
        rows = _rows_written(args.output, before)
    except (ray.exceptions.RayError, ValueError, OSError, NnError) as e:
        return _fail(str(e).strip().splitlines()[-1][:500])
    finally:
        if started:
            ray.shutdown()
    outcomes = [a["outcome"] for a in report["actors"].values()]
    if args.timings:
        with open(args.timings, "w") as f:
            json.dump(_timings(timings, report, rows, elapsed, start_wall=begun + timings["ray_init_s"]), f)
    print(f"{rows} rows in {elapsed:.1f} s: {rows / elapsed:.1f} rows/s; {len(outcomes)} actors: "
          f"{outcomes.count('compile')} compiles, {outcomes.count('hit')} local hits, "
          f"{outcomes.count('fleet')} fleet hits; outputs in {args.output}")
    return 0


def _parquet_files(output: str) -> set[str]:
    """The Parquet files at `output` now (a folder's, or the file itself)."""
    if os.path.isdir(output):
        return {os.path.join(output, f) for f in os.listdir(output) if f.endswith(".parquet")}
    return {output} if os.path.exists(output) else set()


def _rows_written(output: str, before: set[str]) -> int:
    """The rows of the Parquet files this run wrote (not those `before` it): their metadata, nothing read."""
    import pyarrow.parquet as pq
    return sum(pq.read_metadata(p).num_rows for p in sorted(_parquet_files(output) - before))


def _timings(timings: dict, report: dict, rows: int, elapsed: float, start_wall: float) -> dict:
    """Where the run's time went, from the Tally's report: ray.init, the actors' start and model loads,
    the batches (the actors' busy seconds, the first batch's end) and the steady rows/s once every
    actor is up; plus the whole run (reading, inference and writing overlap in Ray Data's stream)."""
    actors = list(report["actors"].values())
    batches = sorted(report["batches"], key=lambda b: b[2])
    up = max((a["started"] + a["load_s"] for a in actors), default=start_wall)
    steady = [b for b in batches if b[1] >= up]
    span = (steady[-1][2] - steady[0][1]) if steady else 0.0
    return dict(timings, rows=rows, run_s=round(elapsed, 3),
                actors=len(actors), actor_load_s=[round(a["load_s"], 3) for a in actors],
                actors_started_s=round(min((a["started"] for a in actors), default=start_wall) - start_wall, 3),
                actors_up_s=round(up - start_wall, 3),
                first_batch_done_s=round(batches[0][2] - start_wall, 3) if batches else None,
                last_batch_done_s=round(batches[-1][2] - start_wall, 3) if batches else None,
                infer_busy_s=round(sum(b[2] - b[1] for b in batches), 3),
                steady_rows_s=round(sum(b[0] for b in steady) / span, 1) if span > 0 else None)
