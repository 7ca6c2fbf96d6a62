"""Work sharded across Ray tasks: the conformance vectors here (`nnapi cts PATH... --ray-address ADDR`),
the certification kit in `vts.sharded` (`nnapi vts ... --ray-address ADDR`).

`run_shards` is what both share: it reaches the cluster at `ADDR` (a Ray address, or `local` for a Ray
started for the run; `RayUnusable`, one line, when it cannot), runs `work(index, count)` as one Ray task
per shard (`num_cpus=1`, retried by Ray `RETRIES` times when its worker dies, so each shard's result comes
back exactly once) and gives the results in shard order. A shard takes every `count`-th item of the
whole list from its `index` (`share`); `interleave` puts the shards' results back in the local order.

For the vectors each task reads the vectors itself (the paths must be readable where the tasks run: one
host, or a shared folder), takes its share, and runs them with its own driver: in the task's process, or
behind an `nnapi serve` of its own (`served`: the command's `run_served`). The results come back as the
runner's `VectorResult`s, so the JSON and the last line are those of a local run.
"""
from __future__ import annotations

import contextlib
import functools
import signal
import socket
import threading
from typing import Callable, Iterator, Sequence, TypeVar

from .runner import VectorResult

T = TypeVar("T")
#: How many times Ray runs a shard again when the worker running it dies.
RETRIES = 2
#: Seconds to wait for the cluster's address to take a connection before calling it unreachable (Ray
#: itself waits minutes before it gives up on an address where nothing listens).
REACH_TIMEOUT_S = 5.0
#: Seconds a wait on the shards lasts at most: a signal noted meanwhile is delivered after it (`_Signals`).
WAIT_S = 0.5

#: How a shard is run behind a service of its own: `served(device, work)` serves the device's driver,
#: calls `work()` and returns its status (`nnapi cts --service` gives its `run_served`).
Served = Callable[[str | None, Callable[[], int]], int]


class RayUnusable(RuntimeError):
    """Ray cannot run the shards: not installed, a malformed address, or no cluster at the address."""


def share(items: Sequence[T], index: int, count: int) -> list[T]:
    """Shard `index`'s items of `count` shards: every `count`-th one from `index`."""
    return list(items[index::count])


def interleave(shards: Sequence[Sequence[T]]) -> list[T]:
    """The items of `share`'s shards back in the order of the whole list (item n is shard n % count's
    entry n // count)."""
    ordered: list[T] = []
    longest = max((len(s) for s in shards), default=0)
    for position in range(longest):
        for shard in shards:
            if position < len(shard):
                ordered.append(shard[position])
    return ordered


def check_address(address: str) -> None:
    """`RayUnusable` unless Ray is installed and, for a `host:port` address, something there takes a TCP
    connection (`local`, `auto` and `ray://` addresses are left to Ray): before any work, and in a second
    rather than Ray's minutes."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RayUnusable("--ray-address needs Ray (the nnapi[ray] extra)") from None
    if address in ("local", "auto") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")   # ([::1]:6379)
    if not host or not port.isdigit():
        raise RayUnusable(f"--ray-address {address}: not a Ray address (HOST:PORT of a cluster's head, or 'local')")
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as e:
        raise RayUnusable(f"--ray-address {address}: no Ray cluster there ({e.strerror or e}); start one with "
                          "`ray start --head`, or use --ray-address local") from None


class _Signals:
    """The caller's handlers of SIGINT, SIGTERM and SIGHUP, kept through Ray: `ray.init` puts in its own (which
    end the process with a stack dump), and a handler that raises inside a wait in Ray's C++ comes out as a
    SystemError. While Ray works (`held`) a signal is only noted; `deliver` then hands it to the caller's
    handler in plain Python. (Signal handlers belong to the main thread: elsewhere nothing is done.)"""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        self.kept = {s: signal.getsignal(s) for s in self.SIGNALS} if main else {}
        self.caught: list[int] = []

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        for s in self.kept:
            signal.signal(s, lambda signum, frame: self.caught.append(signum))
        try:
            yield
        finally:
            for s, handler in self.kept.items():
                if handler is not None:
                    signal.signal(s, handler)

    def deliver(self) -> None:
        if self.caught:
            signum = self.caught[0]
            self.caught.clear()
            signal.raise_signal(signum)


def _run(work: Callable[[int, int], T], index: int, count: int) -> T:
    """One shard, in its Ray task."""
    return work(index, count)


def run_shards(address: str, work: Callable[[int, int], T], *, per_cpu: int = 2,
               done: Callable[[int, T], None] | None = None) -> list[T]:
    """`work(index, count)` for each of `count` shards (`per_cpu` per CPU of the cluster), each a Ray task on
    the cluster at `address` (see the module doc); the results in shard order. `done(index, result)` is called
    as each shard ends; an exception from it (or from a task, or a signal) cancels the shards still running.
    `work` must be picklable by reference where the tasks run (a module-level function, or a partial of one)."""
    check_address(address)
    import ray
    signals = _Signals()
    started = not ray.is_initialized()
    if started:
        with signals.held():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ValueError, ConnectionError, RuntimeError) as e:
                raise RayUnusable(f"--ray-address {address}: {e}") from None
    try:
        signals.deliver()
        count = max(1, per_cpu * int(ray.cluster_resources().get("CPU", 1)))
        task = ray.remote(num_cpus=1, max_retries=RETRIES)(_run)
        pending = {task.remote(work, i, count): i for i in range(count)}
        results: dict[int, T] = {}
        try:
            while pending:
                with signals.held():
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
                    ended = [(pending.pop(ref), ray.get(ref)) for ref in ready]
                signals.deliver()
                for index, result in ended:
                    results[index] = result
                    if done is not None:
                        done(index, result)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()
    return [results[i] for i in range(count)]


def _shard(paths: Sequence[str], k: str | None, device: str | None, served: Served | None, index: int,
           count: int) -> list[VectorResult]:
    from .runner import run_vectors
    from .vectors import load_vectors
    tests = share(list(load_vectors(list(paths), k)), index, count)
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
    work = functools.partial(_shard, list(paths), k, device, served)
    return interleave(run_shards(address, work, done=None if progress is None else lambda _, r: progress(r)))
