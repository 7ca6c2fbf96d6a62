"""The `nnapi vts` command: certify one driver, by default hosted in a process of its own.

    nnapi vts (--device NAME | --driver MODULE:FACTORY) [--suite SUITE,...] [--json FILE] [-k TEXT]
              [--quick] [--vectors PATH] [--timeout SECONDS] [--in-process] [--ray-address ADDR]

A progress bar on a terminal, plain progress lines otherwise; each failure is printed once, whole,
naming the check, the behaviour of VTS-BEHAVIOURS.md it mirrors and what the driver did instead; the
last line is `N passed, M failed, K skipped`; the exit status is 1 when anything failed. The JSON
report is written as the kit goes, so a killed run leaves a partial one; SIGINT, SIGTERM and SIGHUP
end the run with its summary line (exit status 128 + the signal).

With `--ray-address` the checks are sharded across Ray tasks, each with a kit of its own
(`conformance.vts.sharded`): a progress line as each shard ends; the same JSON results, last line and
exit status as a local run, in its order.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

from ..conformance.vts.core import SUITES

#: Seconds between two writes of the JSON report while the kit runs.
WRITE_EVERY_S = 1.0


def add_parser(sub: Any) -> None:
    """Register `vts` on the `nnapi` command's subparsers."""
    p = sub.add_parser("vts", help="certify one driver (VTS-style HAL suites plus runtime checks)",
                       description="Run the certification kit on one driver: " + ", ".join(SUITES) + ". The "
                                   "driver runs in a process of its own (as `nnapi serve` hosts it), so its exit, "
                                   "crash, fork or a process it leaves behind is a reported failure.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--device", help="the device to certify (a name from `nnapi devices`)")
    which.add_argument("--driver", metavar="MODULE:FACTORY",
                       help="certify the driver FACTORY() of MODULE returns (a driver not installed as a plug-in)")
    p.add_argument("--suite", help=f"comma-separated suites (default all: {','.join(SUITES)})")
    p.add_argument("--json", help="write every check's result to this file (rewritten as the kit goes)")
    p.add_argument("-k", help="only checks whose id contains this text")
    p.add_argument("--quick", action="store_true",
                   help="a stratified sample of the vector corpus and fewer repetitions (minutes, not a quarter hour)")
    p.add_argument("--vectors", help="the test-vector corpus folder (default: $NNAPI_CTS_DIR or ../shared/cts)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a driver call or awaited callback may take before it fails (default 60); after "
                        "a first hang, calls of that kind fail fast, naming it")
    p.add_argument("--in-process", action="store_true",
                   help="run the driver in the kit's own process (faster to start, and the only way to certify "
                        "a driver object; but an exit or crash of the driver then ends the kit, and forks and "
                        "processes it leaves behind go unseen)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="shard the checks across Ray tasks on this cluster, each with a kit and a driver of its own "
                        "('local': a Ray started for the run); same JSON, last line and exit status")
    p.add_argument("--show-failures", type=int, default=50, help="failures to print in full (default 50)")
    p.add_argument("--show-skips", action="store_true", help="also print every skipped check and its reason")
    p.set_defaults(func=main, check=_check)


def _check(args: argparse.Namespace) -> None:
    """Before any work: the --json file can be written (as `nnapi cts` checks it) and Ray can be used at
    --ray-address (a `CommandError`, one line and exit status 2)."""
    from .checks import CommandError, output_file  # the command's own check
    output_file(args.json, "--json")
    if args.ray_address:
        from ..conformance.sharded import RayUnusable, check_address
        try:
            check_address(args.ray_address)
        except RayUnusable as e:
            raise CommandError(str(e)) from None


def _suites(text: str | None) -> list[str]:
    if not text:
        return list(SUITES)
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SUITES]
    if unknown:
        raise SystemExit(f"nnapi vts: unknown suite {', '.join(unknown)} (suites: {', '.join(SUITES)})")
    return wanted


class Interrupted(BaseException):
    """A signal asked the run to end (BaseException: no check's handler takes it for the driver's)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class SubjectError(Exception):
    """The driver under test could not be opened: the text says why (one line, exit status 2)."""


def _subject(device: str | None, driver: str | None, in_process: bool) -> tuple[Any, Any]:
    """(the Device under test, the `host.Host` running it or None). A device already served through
    NNAPI_SERVICE_DIR is used where it is; an installed driver or `--driver` is hosted unless
    `--in-process`. Raises SubjectError: no such device, or a driver that fails to start."""
    from ..hal import NnError
    from ..conformance.vts.host import HostError
    try:
        return _open_subject(device, driver, in_process)
    except NnError as e:
        raise SubjectError(e.message) from None
    except HostError as e:
        raise SubjectError(str(e)) from None
    except Exception as e:  # a driver run in-process that fails to be created
        raise SubjectError(f"the driver {driver or device} failed to start: {type(e).__name__}: {e}") from None


def _open_subject(device: str | None, driver: str | None, in_process: bool) -> tuple[Any, Any]:
    """`_subject`'s work; raises NnError (no such device), HostError or Exception (a driver that fails to start)."""
    from ..hal import NnError
    from ..runtime import find_device
    from ..service.cli import installed_drivers
    from ..service.discovery import default_socket, service_dir
    from ..conformance.vts import device_for
    from ..conformance.vts.host import Host, HostError, load
    if driver:
        if in_process:
            return device_for(load(driver)), None
        host = Host(driver)
        return host.device, host
    served = service_dir() and os.path.exists(default_socket(device))
    if not served and not in_process and device in installed_drivers():
        try:
            host = Host(device)
        except HostError as e:   # the runtime may say why the plug-in is no device (what it reports)
            try:
                find_device(device)
            except NnError as why:
                raise HostError(f"{e}; {why.message}") from None
            raise
        return host.device, host
    return find_device(device), None


class Report:
    """The JSON report, rewritten (atomically) by a thread of its own at most every `WRITE_EVERY_S` while
    results come, so a run killed at any moment leaves the results it had then (`close` writes the last)."""

    def __init__(self, path: str | None, head: dict[str, Any]) -> None:
        self.path = path
        self.head = head
        self.results: list[Any] = []
        self._dirty = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        if path:
            threading.Thread(target=self._loop, name="nnapi-vts-report", daemon=True).start()

    def add(self, result: Any) -> None:
        self.results.append(result)
        self._dirty.set()

    def _loop(self) -> None:
        while not self._done.is_set():
            if self._dirty.wait(0.5):
                self._dirty.clear()
                self.write(last=False)
                self._done.wait(WRITE_EVERY_S)

    def write(self, last: bool = True, **final: Any) -> None:
        """Write the report now (`last=False`: unless `close` has written the last one)."""
        from ..conformance.vts.core import per_suite, summarize
        if not self.path:
            return
        with self._lock:
            if not last and self._done.is_set():
                return
            results = list(self.results)
            summary = summarize(results) | self.head | {"per_suite": per_suite(results), "complete": False} | final
            data = {"summary": summary,
                    "results": [{"id": r.id, "suite": r.suite, "behaviour": r.behaviour, "status": r.status,
                                 "message": r.message, "seconds": r.seconds, **({"detail": r.detail} if r.detail else {})}
                                for r in results]}
            tmp = f"{self.path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)

    def close(self, **final: Any) -> None:
        """Stop the writing thread and write the report a last time with `final` in its summary."""
        self._done.set()
        self.write(**final)


class Tally:
    """The results as they come: into the report, counted, and each failure printed once, whole: as it
    comes on a pipe, at the end on a terminal (where only its id shows as it comes)."""

    def __init__(self, args: argparse.Namespace, report: Report, out: Any, interactive: bool) -> None:
        self.show = args.show_failures
        self.report, self.out, self.interactive = report, out, interactive
        self.failures: list = []
        self.counts = {"failed": 0, "skipped": 0}

    def add(self, result: Any, console: Any) -> None:
        """Record `result`; on a terminal `console` (the progress bar's) prints a failure's id."""
        from rich.text import Text
        self.report.add(result)
        if result.status == "failed":
            self.failures.append(result)
            self.counts["failed"] += 1
            if len(self.failures) <= self.show:
                if self.interactive:   # the whole message comes once, in the list at the end
                    console.print(Text.assemble(("FAILED", "red"), f" {result.id}"))
                else:                  # a piped log: once, whole, as it happens
                    self.out.print(result.describe(), soft_wrap=True)
        elif result.status == "skipped":
            self.counts["skipped"] += 1

    @property
    def line(self) -> str:
        return f"{self.counts['failed']} failed, {self.counts['skipped']} skipped"


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP raise `Interrupted` (the run ends with its summary)."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    for s in old:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _consoles() -> tuple[Any, Any, bool]:
    """(stderr's console, stdout's, whether stderr is a terminal)."""
    from rich.console import Console

    from .console import stdout_console
    err = Console(stderr=True, highlight=False, markup=False)
    return err, stdout_console(highlight=False, markup=False), err.is_terminal


def _header(err: Any, report: Report, args: argparse.Namespace, planned: int, vectors: Any) -> None:
    """The first line: how many checks on which device, where it runs, the options."""
    head = report.head
    head["planned"] = planned
    err.print(f"nnapi vts: {planned} checks on {head['device']} {head['version']} ({head['where']}) "
              f"({'quick' if args.quick else 'full'}; suites {','.join(head['suites'])}; "
              f"vectors {vectors if vectors else 'not found'})", soft_wrap=True)
    if not vectors and {"validation", "execution", "vectors"} & set(head["suites"]):
        err.print("nnapi vts: warning: no test-vector corpus was found (--vectors PATH, $NNAPI_CTS_DIR, or "
                  "shared/cts beside the working directory or this checkout): every check of a corpus model is "
                  "skipped", soft_wrap=True)


def _claims(err: Any, report: Report, claims: list[dict[str, Any]], line: str) -> None:
    """The second line: what the driver claims of the kit's models."""
    report.head["claims"] = claims
    err.print(f"nnapi vts: {line}", soft_wrap=True)


def main(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..conformance.vts import claims as kit_claims, collect
    from ..conformance.vts.core import Kit, Options, run_checks
    from ..conformance.vts.corpus import find_corpus
    from ..conformance.vts.sharded import supervision, where

    suites = _suites(args.suite)
    try:
        vectors = find_corpus(args.vectors)
    except FileNotFoundError as e:
        print(f"nnapi vts: {e}", file=sys.stderr)
        return 2
    if args.ray_address:
        return _main_sharded(args, suites, vectors)
    try:
        device, host = _subject(args.device, args.driver, args.in_process)
    except SubjectError as e:
        print(f"nnapi vts: {e}", file=sys.stderr)
        return 2
    kit = Kit(device, Options(quick=args.quick, timeout=args.timeout, vectors=vectors))
    kit.supervisor = host
    err, out, interactive = _consoles()
    start = time.perf_counter()
    report = Report(args.json, {"device": device.name, "version": device.version, "where": where(device, host),
                                "quick": args.quick, "suites": suites})
    tally = Tally(args, report, out, interactive)
    interrupted: Interrupted | None = None
    checks: list = []
    with _signals():
        try:
            report.write()
            checks = collect(kit, suites, args.k)
            _header(err, report, args, len(checks), vectors)
            found = kit_claims.claims(kit)
            _claims(err, report, [c.as_json() for c in found], kit_claims.describe(found))
            last_line = [time.perf_counter()]

            with Progress(TextColumn("vts {task.fields[suite]}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("{task.description}"), console=err, transient=True,
                          disable=not interactive) as progress:
                task = progress.add_task("", total=len(checks), suite="")

                def step(result: Any, done: int, total: int) -> None:
                    tally.add(result, progress.console)
                    progress.update(task, advance=1, suite=result.suite, description=tally.line)
                    if not interactive:
                        now = time.perf_counter()
                        suite_done = done == total or checks[done].suite != result.suite
                        if suite_done or now - last_line[0] >= 10:
                            last_line[0] = now
                            err.print(f"vts: {done}/{total} checks ({result.suite}), {tally.line}, "
                                      f"{now - start:.0f} s", soft_wrap=True)

                run_checks(kit, checks, step)
        except Interrupted as e:
            interrupted = e
        finally:
            try:
                kit.close()   # (and the driver's process)
            except Interrupted:
                pass
    return _finish(args, out, err, report, tally.failures, len(checks), interactive, interrupted,
                   kit.hangs.summary(), supervision(host), time.perf_counter() - start)


def _main_sharded(args: argparse.Namespace, suites: list[str], vectors: Any) -> int:
    """`--ray-address`: the checks in shards, each a Ray task with a kit of its own (`conformance.vts.sharded`);
    a progress line as each shard ends, then what a local run prints, in its order."""
    from ..conformance.sharded import RayUnusable
    from ..conformance.vts.core import Options
    from ..conformance.vts.sharded import KitNotStarted, Shard, merge, run_kit_sharded

    err, out, interactive = _consoles()
    start = time.perf_counter()
    subject = args.device or args.driver
    report = Report(args.json, {"device": subject, "version": "", "where": "", "quick": args.quick,
                                "suites": suites, "ray_address": args.ray_address})
    tally = Tally(args, report, out, interactive)
    shards: list[Shard] = []

    def done(shard: Shard) -> None:
        if not shards:   # the first to end says what the kit found
            report.head |= {"device": shard.device, "version": shard.version, "shards": shard.count,
                            "where": f"{shard.count} Ray tasks at {args.ray_address}, each with a kit of its own: "
                                     f"{shard.where}"}
            _header(err, report, args, shard.planned, vectors)
        if shard.claims is not None:
            _claims(err, report, shard.claims, shard.claims_line)
        shards.append(shard)
        for result in shard.results:
            tally.add(result, err)
        ran = sum(len(s.results) for s in shards)
        err.print(f"vts: shard {len(shards)}/{shard.count} done ({len(shard.results)} checks): {ran}/{shard.planned} "
                  f"checks, {tally.line}, {time.perf_counter() - start:.0f} s", soft_wrap=True)

    err.print(f"nnapi vts: the kit on {subject}, sharded across Ray tasks at {args.ray_address}", soft_wrap=True)
    interrupted: Interrupted | None = None
    with _signals():
        try:
            report.write()
            run_kit_sharded(args.ray_address, functools.partial(_subject, args.device, args.driver, args.in_process),
                            Options(quick=args.quick, timeout=args.timeout, vectors=vectors), suites, args.k, done=done)
        except Interrupted as e:
            interrupted = e
        except (RayUnusable, KitNotStarted) as e:
            print(f"nnapi vts: {e}", file=sys.stderr)
            report.close(error=str(e))
            return 2
    run = merge(shards)
    report.results = run.results   # (in the local run's order)
    return _finish(args, out, err, report, [r for r in run.results if r.status == "failed"], run.planned,
                   interactive, interrupted, run.hangs, run.host, time.perf_counter() - start)


def _finish(args: argparse.Namespace, out: Any, err: Any, report: Report, failures: list, planned: int,
            interactive: bool, interrupted: Interrupted | None, hangs: list[dict[str, Any]],
            host: dict[str, Any] | None, elapsed: float) -> int:
    """The end of a run, whole or interrupted: failures not printed yet, the table, the final JSON and
    the summary line (`hangs`: what hung; `host`: the driver's process(es), `sharded.supervision`)."""
    from rich.table import Table

    from ..conformance.vts.core import per_suite, summarize
    results = report.results
    if interactive:
        for r in failures[:args.show_failures]:
            out.print(r.describe(), soft_wrap=True)
    if len(failures) > args.show_failures:
        out.print(f"... and {len(failures) - args.show_failures} more failures (see --json)")
    if args.show_skips:
        for r in results:
            if r.status == "skipped":
                out.print(r.describe(), soft_wrap=True)
    extra: dict[str, Any] = {"seconds": round(elapsed, 2), "complete": interrupted is None}
    if hangs:
        extra["hangs"] = hangs
    if host is not None:
        extra["host"] = host
        for note in host["notes"]:
            out.print(f"nnapi vts: at the end of the run {note}", soft_wrap=True)
    if interrupted is not None:
        name = signal.Signals(interrupted.signum).name
        extra["interrupted"] = name
        err.print(f"nnapi vts: interrupted by {name} after {len(results)} of {planned} checks", soft_wrap=True)
    title = f"nnapi vts on {report.head['device']} ({'quick' if args.quick else 'full'}, {elapsed:.0f} s)"
    table = Table(title=title)
    for col in ("suite", "passed", "failed", "skipped"):
        table.add_column(col, justify="left" if col == "suite" else "right")
    for suite, c in per_suite(results).items():
        table.add_row(suite, str(c["passed"]), str(c["failed"]), str(c["skipped"]))
    out.print(table)
    report.close(**extra)
    summary = summarize(results)
    print(f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped", flush=True)
    if interrupted is not None:
        return 128 + interrupted.signum
    return 1 if summary["failed"] or (host is not None and host["notes"]) else 0
