"""The `nnapi vts` command: certify one driver, by default hosted in a process of its own.

    nnapi vts (--device NAME | --driver MODULE:FACTORY) [--suite SUITE,...] [--json FILE] [-k TEXT]
              [--quick] [--vectors PATH] [--timeout SECONDS] [--in-process]

A progress bar on a terminal, plain progress lines otherwise; each failure is printed once, whole,
naming the check, the behaviour of VTS-BEHAVIOURS.md it mirrors and what the driver did instead; the
last line is `N passed, M failed, K skipped`; the exit status is 1 when anything failed. The JSON
report is written as the kit goes, so a killed run leaves a partial one; SIGINT, SIGTERM and SIGHUP
end the run with its summary line (exit status 128 + the signal).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Sequence

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
    p.add_argument("--show-failures", type=int, default=50, help="failures to print in full (default 50)")
    p.add_argument("--show-skips", action="store_true", help="also print every skipped check and its reason")
    p.set_defaults(func=main, check=_check)


def _check(args: argparse.Namespace) -> None:
    """Before any work: the --json file can be written (as `nnapi cts` checks it; a `CommandError`,
    one line and exit status 2)."""
    from .checks import output_file  # the command's own check
    output_file(args.json, "--json")


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


def _subject(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the Device under test, the `host.Host` running it or None). A device already served through
    NNAPI_SERVICE_DIR is used where it is; an installed driver or `--driver` is hosted unless
    `--in-process`. Raises NnError (no such device), HostError or Exception (a driver that fails to start)."""
    from ..hal import NnError
    from ..runtime import find_device
    from ..service.cli import installed_drivers
    from ..service.discovery import default_socket, service_dir
    from ..conformance.vts import device_for
    from ..conformance.vts.host import Host, HostError, load
    if args.driver:
        if args.in_process:
            return device_for(load(args.driver)), None
        host = Host(args.driver)
        return host.device, host
    served = service_dir() and os.path.exists(default_socket(args.device))
    if not served and not args.in_process and args.device in installed_drivers():
        try:
            host = Host(args.device)
        except HostError as e:   # the runtime may say why the plug-in is no device (what it reports)
            try:
                find_device(args.device)
            except NnError as why:
                raise HostError(f"{e}; {why.message}") from None
            raise
        return host.device, host
    return find_device(args.device), None


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


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from .console import stdout_console
    from ..hal import NnError
    from ..conformance.vts import claims as kit_claims, collect
    from ..conformance.vts.core import Kit, Options, run_checks
    from ..conformance.vts.corpus import find_corpus
    from ..conformance.vts.host import HostError

    suites = _suites(args.suite)
    try:
        vectors = find_corpus(args.vectors)
    except FileNotFoundError as e:
        print(f"nnapi vts: {e}", file=sys.stderr)
        return 2
    try:
        device, host = _subject(args)
    except NnError as e:
        print(f"nnapi vts: {e.message}", file=sys.stderr)
        return 2
    except HostError as e:
        print(f"nnapi vts: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a driver run in-process that fails to be created
        print(f"nnapi vts: the driver {args.driver or args.device} failed to start: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    where = host.where if host is not None else getattr(device, "where", "in-process")
    kit = Kit(device, Options(quick=args.quick, timeout=args.timeout, vectors=vectors))
    kit.supervisor = host
    err = Console(stderr=True, highlight=False, markup=False)
    out = stdout_console(highlight=False, markup=False)
    interactive = err.is_terminal
    start = time.perf_counter()
    failures: list = []
    counts = {"failed": 0, "skipped": 0}
    report = Report(args.json, {"device": device.name, "version": device.version, "where": where,
                                "quick": args.quick, "suites": suites})
    interrupted: Interrupted | None = None
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    for s in old:
        signal.signal(s, on_signal)
    checks: list = []
    try:
        report.write()
        checks = collect(kit, suites, args.k)
        report.head["planned"] = len(checks)
        err.print(f"nnapi vts: {len(checks)} checks on {device.name} {device.version} ({where}) "
                  f"({'quick' if args.quick else 'full'}; suites {','.join(suites)}; "
                  f"vectors {vectors if vectors else 'not found'})", soft_wrap=True)
        found = kit_claims.claims(kit)
        report.head["claims"] = [c.as_json() for c in found]
        err.print(f"nnapi vts: {kit_claims.describe(found)}", soft_wrap=True)
        last_line = [time.perf_counter()]

        with Progress(TextColumn("vts {task.fields[suite]}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("{task.description}"), console=err, transient=True,
                      disable=not interactive) as progress:
            task = progress.add_task("", total=len(checks), suite="")

            def step(result, done: int, total: int) -> None:
                report.add(result)
                if result.status == "failed":
                    failures.append(result)
                    counts["failed"] += 1
                    if len(failures) <= args.show_failures:
                        if interactive:   # the whole message comes once, in the list at the end
                            progress.console.print(Text.assemble(("FAILED", "red"), f" {result.id}"))
                        else:             # a piped log: once, whole, as it happens
                            out.print(result.describe(), soft_wrap=True)
                elif result.status == "skipped":
                    counts["skipped"] += 1
                progress.update(task, advance=1, suite=result.suite,
                                description=f"{counts['failed']} failed, {counts['skipped']} skipped")
                if not interactive:
                    now = time.perf_counter()
                    suite_done = done == total or checks[done].suite != result.suite
                    if suite_done or now - last_line[0] >= 10:
                        last_line[0] = now
                        err.print(f"vts: {done}/{total} checks ({result.suite}), {counts['failed']} failed, "
                                  f"{counts['skipped']} skipped, {now - start:.0f} s", soft_wrap=True)

            run_checks(kit, checks, step)
    except Interrupted as e:
        interrupted = e
    finally:
        try:
            kit.close()   # (and the driver's process)
        except Interrupted:
            pass
        for s, handler in old.items():
            signal.signal(s, handler)
    return _finish(args, out, err, report, failures, checks, interactive, interrupted, kit, host,
                   time.perf_counter() - start)


def _finish(args: argparse.Namespace, out: Any, err: Any, report: Report, failures: list, checks: Sequence,
            interactive: bool, interrupted: Interrupted | None, kit: Any, host: Any, elapsed: float) -> int:
    """The end of a run, whole or interrupted: failures not printed yet, the table, the final JSON and
    the summary line."""
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
    if kit.hangs.kinds:
        extra["hangs"] = kit.hangs.summary()
    if host is not None:
        extra["host"] = {"starts": host.starts, "deaths": host.deaths, "renewals": host.renewals, "notes": host.notes}
        for note in host.notes:
            out.print(f"nnapi vts: at the end of the run {note}", soft_wrap=True)
    if interrupted is not None:
        name = signal.Signals(interrupted.signum).name
        extra["interrupted"] = name
        err.print(f"nnapi vts: interrupted by {name} after {len(results)} of {len(checks)} checks", soft_wrap=True)
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
    return 1 if summary["failed"] or (host is not None and host.notes) else 0
