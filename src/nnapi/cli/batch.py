"""`nnapi batch MODEL INPUT --output OUT`: batch inference on Ray Data (`nnapi.ray.predict`).

    nnapi batch MODEL INPUT --output OUT [--ray-address ADDR] [--actors N] [--batch-size B]
                [--device NAME[,NAME...]] [--cache-dir DIR] [--fleet URL]

INPUT is a folder of `.npy` files (one array each: the model's one input) or `.npz` files (one array per
input, keyed by the input's signature name, tensor name or `input_N`), whose file names are the rows'
ids; or a Parquet file or folder, with a column per input (and an `id` column, else the row's index).
An array may hold the model's batch dimension (1) or not. OUT is Parquet: the `id` column and one
column per model output. Without `--ray-address` a local Ray is started (and stopped). Ray Data shows
its progress; the last line is the summary: rows, rows/s, compiles, local hits, fleet hits.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np


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


def _fail(message: str) -> int:
    print(f"nnapi batch: {message}", file=sys.stderr)
    return 2


def _decode(row: dict, names: list[list[str]], shapes: list[tuple]) -> dict:
    """One .npy/.npz file's bytes as a row: its id (the file name) and one column per model input."""
    name = os.path.basename(row["path"])
    try:
        loaded = np.load(io.BytesIO(row["bytes"]), allow_pickle=False)
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


def _batched_npy(files: list[str], shapes: list[tuple]) -> bool:
    """Whether every file is a .npy of the one input's shape with its batch dimension of 1 (checked on the
    first file's header): Ray's reader then gives one row per file."""
    if len(shapes) != 1 or not shapes[0] or shapes[0][0] != 1 or not all(f.endswith(".npy") for f in files):
        return False
    try:
        return tuple(np.load(files[0], mmap_mode="r", allow_pickle=False).shape) == tuple(shapes[0])
    except (ValueError, OSError):
        return False


def run(args: argparse.Namespace) -> int:
    """Predict over the input on Ray, write the Parquet output and print the summary line."""
    try:
        import ray
        import ray.data
    except ImportError:
        return _fail("needs Ray: pip install 'nnapi[ray]'")
    from ..hal import NnError
    from ..importers import load_tflite
    from ..ray import ACTOR, CACHE, predict
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
    ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
             **({} if args.ray_address else {"num_cpus": os.cpu_count() or 2}))
    try:
        start = time.perf_counter()
        files = sorted(os.path.join(args.input, f) for f in os.listdir(args.input)) if os.path.isdir(args.input) \
            else [args.input]
        arrays = [f for f in files if f.endswith((".npy", ".npz"))]
        if arrays and _batched_npy(arrays, shapes):  # (Ray's own reader: one row per file, in blocks)
            ds = ray.data.read_numpy(arrays, include_paths=True).map_batches(
                lambda b: {"id": np.array([os.path.basename(p) for p in b["path"]]), names[0][0]: b["data"]},
                batch_format="numpy")
        elif arrays:
            ds = ray.data.read_binary_files(arrays, include_paths=True).map(
                lambda row: _decode(row, names, shapes))
        else:
            import pyarrow.parquet as pq
            table = pq.read_table(args.input)
            if "id" not in table.column_names:
                table = table.append_column("id", [list(range(table.num_rows))])
            ds = ray.data.from_arrow(table)
        devices = [d.strip() for d in args.device.split(",")] if args.device else None
        # The actors share the CPUs, one kept for reading and decoding the input (each actor's model uses
        # the threads it is given: an actor per CPU would leave none to read with, and Ray would wait).
        cpus = float(ray.cluster_resources().get("CPU", 1))
        per_actor = max(0.01, (cpus - 1) / args.actors) if cpus > 1 else cpus / (args.actors + 1)
        out = predict(ds, args.model, devices=devices, cache_dir=args.cache_dir, batch_size=args.batch_size,
                      concurrency=args.actors, num_cpus=per_actor, fleet=args.fleet, stats=True).materialize()
        rows = out.count()
        actors = {(r[ACTOR], r[CACHE]) for r in out.select_columns([ACTOR, CACHE]).iter_rows()}
        out.drop_columns([ACTOR, CACHE]).write_parquet(args.output)
        elapsed = time.perf_counter() - start
    except (ray.exceptions.RayError, ValueError, OSError, NnError) as e:
        return _fail(str(e).strip().splitlines()[-1][:500])
    finally:
        if started:
            ray.shutdown()
    outcomes = [o for _, o in actors]
    print(f"{rows} rows in {elapsed:.1f} s: {rows / elapsed:.1f} rows/s; {len(actors)} actors: "
          f"{outcomes.count('compile')} compiles, {outcomes.count('hit')} local hits, "
          f"{outcomes.count('fleet')} fleet hits; outputs in {args.output}")
    return 0
