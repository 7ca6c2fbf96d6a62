"""The certification kit sharded across Ray tasks (`nnapi vts (--device D | --driver M:F) --ray-address ADDR`).

Each task opens a kit of its own (`open_subject()`, the command's choice of where the driver runs: in a
process of its own by default, as a local run hosts it, or in the task's process with `--in-process`; a
`--driver MODULE:FACTORY` must be importable where the tasks run), collects the checks a local run would
(the same suites, `-k` and `Options`: collecting reads the options and the corpus, never the driver, so
every task gets the same list, which `merge` verifies), runs its share of them (every `count`-th one from
its index: `conformance.sharded.share`) and sends back plain data (`Shard`). There is one shard per CPU
of the cluster, not two as for the vectors: each pays for a driver process and a read of the corpus, and
the stride already mixes the suites' cheap and dear checks evenly. `merge` puts the results
back in the local run's order, each check exactly once (Ray runs a shard again when its worker dies,
and only that run's results come back). ADDR and the Ray plumbing are `conformance.sharded.run_shards`'.

Which checks ran before a check in the same kit does not change its outcome, so the checks are shared
one by one, not in groups. The kit-wide fixtures are `Kit.memo`'s models and prepared models, made by
whichever check first needs them (each shard makes its own); cache folders are `Kit.scratch(name)`, made
afresh by the check that names them; cache tokens are unique to each kit. Measured on the quick kit
(reference driver, the template driver, and broken drivers that cache nothing, raise in `supported()`
and write their inputs), in one kit forward, reversed, and in 3 and 8 stride shards each with a fresh
kit and driver: no status differed, except the checks that race the driver (a TOCTOU swap, a 5 ms
deadline), which flip between two runs of the same order too. What may differ is text: a fixture's
failure names the check that met it first ("met in ..."), which is the first of its shard. Budgets are
per kit, so per shard: the hang budget (`Hangs`: after a hang, that kind of call fails fast) and, for a
hosted driver, its restarts and renewals; a driver that hangs or dies is still failed where it does, but
may be asked (and fail) more often than in a local run. Shards run at once on one host: a driver must
bear several instances of itself (its state folder included), as it must beside apps anyway.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ...runtime import Device
from ..sharded import interleave, run_shards, share
from .core import CheckResult, Kit, Options, Supervisor, run_checks

#: Opens the subject of a shard's kit: (its Device, the Supervisor hosting it or None); raises an
#: exception whose text says why it could not (`nnapi vts` gives a partial of its `_subject`).
OpenSubject = Callable[[], "tuple[Device, Supervisor | None]"]


class KitNotStarted(RuntimeError):
    """A shard could not open its kit (no such device, the driver failed to start): the text says why."""


@dataclass
class Shard:
    """What one task sends back (plain data): its results in the order of the whole list, what the kit
    saw of the driver, and the digest of the checks it collected (every shard's must be the same)."""

    index: int
    count: int
    error: str = ""                 # the kit could not be opened: why (nothing else is set then)
    planned: int = 0                # the checks of the whole selection
    plan: str = ""                  # a digest of their ids
    results: list[CheckResult] = field(default_factory=list)
    device: str = ""
    version: str = ""
    where: str = ""
    claims: list[dict[str, Any]] | None = None   # what the driver claims of the kit's models (shard 0 only)
    claims_line: str = ""           # `claims.describe` of them
    hangs: list[dict[str, Any]] = field(default_factory=list)
    host: dict[str, Any] | None = None


@dataclass
class KitRun:
    """The shards' results merged: the checks in the local run's order, the hangs and the driver's
    processes of every shard (`host`: None when no shard hosted the driver)."""

    results: list[CheckResult]
    planned: int
    complete: bool
    hangs: list[dict[str, Any]]
    host: dict[str, Any] | None


def where(device: Device, supervisor: Supervisor | None) -> str:
    """Where the driver under test runs, for the header and the report."""
    return getattr(supervisor, "where", None) or getattr(device, "where", "in-process")


def supervision(supervisor: Supervisor | None) -> dict[str, Any] | None:
    """The report's `host`: the driver's process starts, deaths, renewals and notes (None: not hosted)."""
    if supervisor is None or not hasattr(supervisor, "starts"):
        return None
    return {"starts": supervisor.starts, "deaths": list(supervisor.deaths),
            "renewals": list(supervisor.renewals), "notes": list(supervisor.notes)}


def _digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def run_shard(open_subject: OpenSubject, options: Options, suites: Sequence[str], k: str | None, index: int,
              count: int) -> Shard:
    """Shard `index` of `count`, in its Ray task: its own kit, its share of the checks (module doc)."""
    from . import claims, collect
    try:
        device, supervisor = open_subject()
    except Exception as e:   # (the subject's own text says why)
        return Shard(index, count, error=str(e) or type(e).__name__)
    kit = Kit(device, options)
    kit.supervisor = supervisor
    try:
        checks = collect(kit, suites, k)
        found = claims.claims(kit) if index == 0 else None   # (the same answer from every shard's driver)
        results = run_checks(kit, share(checks, index, count))
    finally:
        kit.close()
    return Shard(index, count, planned=len(checks), plan=_digest([c.id for c in checks]), results=results,
                 device=device.name, version=device.version, where=where(device, supervisor),
                 claims=None if found is None else [c.as_json() for c in found],
                 claims_line="" if found is None else claims.describe(found),
                 hangs=kit.hangs.summary(), host=supervision(supervisor))


def run_kit_sharded(address: str, open_subject: OpenSubject, options: Options, suites: Sequence[str],
                    k: str | None, *, done: Callable[[Shard], None] | None = None) -> KitRun:
    """The kit's checks of `suites` (whose id contains `k`) in shards on the Ray cluster at `address`,
    merged (`merge`); `done(shard)` as each ends. `KitNotStarted` when a shard could not open its kit
    (the others are cancelled); `conformance.sharded.RayUnusable` when Ray cannot run them."""
    finished: list[Shard] = []

    def ended(_: int, shard: Shard) -> None:
        if shard.error:
            raise KitNotStarted(shard.error)
        finished.append(shard)
        if done is not None:
            done(shard)

    run_shards(address, functools.partial(run_shard, open_subject, options, list(suites), k), per_cpu=1, done=ended)
    return merge(finished)


def merge(shards: Sequence[Shard]) -> KitRun:
    """The results of `shards` (all of them, or those that ended before an interruption) in the local
    run's order; every check exactly once when all ended (a RuntimeError if not, or if the shards
    collected different checks: a corpus that differs between the cluster's hosts)."""
    if not shards:
        return KitRun([], 0, False, [], None)
    count, planned = shards[0].count, shards[0].planned
    if len({s.plan for s in shards}) > 1:
        raise RuntimeError("the shards collected different checks (is the corpus the same on every host of the "
                           "cluster?): " + ", ".join(f"shard {s.index}: {s.planned}" for s in shards))
    by_index = {s.index: s.results for s in shards}
    results = interleave([by_index.get(i, []) for i in range(count)])
    complete = len(by_index) == count
    if complete and _digest([r.id for r in results]) != shards[0].plan:
        raise RuntimeError(f"the shards gave {len(results)} results, not one for each of the {planned} checks in "
                           "their order")
    hosts = [s.host for s in shards if s.host is not None]
    host = None if not hosts else {
        "starts": sum(h["starts"] for h in hosts),
        **{key: [x for h in hosts for x in h[key]] for key in ("deaths", "renewals", "notes")}}
    return KitRun(results, planned, complete, [h | {"shard": s.index} for s in shards for h in s.hangs], host)
