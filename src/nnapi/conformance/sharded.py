"""The conformance vectors sharded across Ray tasks (`nnapi cts PATH... --ray-address ADDR`).

Each task reads the vectors itself (the paths must be readable where the tasks run: one host, or a
shared folder), takes every `count`-th one from its `index`, and runs them with its own driver: in the
task's process, or behind an `nnapi serve` of its own (`served`: the command's `run_served`). The
results come back as the runner's `VectorResult`s, so the JSON and the last line are those of a local
run. `ADDR` is a Ray address, or `local` for a Ray started for the run.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .runner import VectorResult

#: How a shard is run behind a service of its own: `served(device, work)` serves the device's driver,
#: calls `work()` and returns its status (`nnapi cts --service` gives its `run_served`).
Served = Callable[[str | None, Callable[[], int]], int]


def _shard(paths: Sequence[str], k: str | None, device: str | None, index: int, count: int,
           served: Served | None) -> list[VectorResult]:
    from .runner import run_vectors
    from .vectors import load_vectors
    tests = list(load_vectors(list(paths), k))[index::count]
    if served is None:
        return run_vectors(tests, device)
    box: list[list[VectorResult]] = []
    served(device, lambda: box.append(run_vectors(tests, device)) or 0)
    return box[0] if box else []


def run_sharded(paths: Sequence[str], k: str | None, device: str | None, address: str, *,
                served: Served | None = None,
                progress: Callable[[list[VectorResult]], None] | None = None) -> list[VectorResult]:
    """Every vector of `paths`, run in shards on the Ray cluster at `address` (see the module doc), in
    the order a local run gives them; each shard behind `served` when given; `progress(results)` as
    each shard ends."""
    import ray
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        count = max(1, 2 * int(ray.cluster_resources().get("CPU", 1)))
        task = ray.remote(num_cpus=1, max_retries=2)(_shard)
        pending = {task.remote(list(paths), k, device, i, count, served): i for i in range(count)}
        by_shard: dict[int, list[VectorResult]] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                by_shard[pending.pop(ref)] = results = ray.get(ref)
                if progress is not None:
                    progress(results)
    finally:
        if started:
            ray.shutdown()
    ordered: list[VectorResult] = []
    longest = max((len(r) for r in by_shard.values()), default=0)
    for position in range(longest):  # (vector n is shard n % count's entry n // count)
        for index in range(count):
            if position < len(by_shard.get(index, ())):
                ordered.append(by_shard[index][position])
    return ordered
