"""What the `nnapi` commands print: progress on stderr (a bar on a terminal, plain lines otherwise),
results on stdout (tables as wide as they need when piped), the `nnapi.cli` logger and `--trace`.

It imports no other module of the command, so the certification kit (`nnapi vts`) prints with it too.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from rich.console import Console

#: The logger of the `nnapi` command (`-v` shows its INFO lines).
log = logging.getLogger("nnapi.cli")

#: Seconds between plain progress lines when stderr is not a terminal.
PROGRESS_INTERVAL_S = float(os.environ.get("NNAPI_PROGRESS_INTERVAL", "2"))

#: The width of `stdout_console` when stdout is not a terminal (wide enough that no table folds).
PIPED_WIDTH = 1000


def stdout_console(**options: Any) -> "Console":
    """A rich console for the command's results on stdout. Piped or redirected (scripts, CI logs), it
    is as wide as its tables need: rich would otherwise fold them to 80 columns and cut cells short
    ("in-proce…"), losing exactly what a script reads."""
    from rich.console import Console
    console = Console(**options)
    if not console.is_terminal:
        console = Console(width=PIPED_WIDTH, **options)
    return console


def error_text(message: str) -> str:
    """A message as one line (a multi-line NnError, e.g. every unsupported operator, joined by '; ')."""
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


class Progress:
    """Progress on stderr: a rich bar (or spinner when `total` is None) on a terminal; otherwise a plain
    line every `PROGRESS_INTERVAL_S` seconds while the work goes on (`label: done/total note, N s`)."""

    def __init__(self, label: str, total: int | None = None, interactive: bool | None = None) -> None:
        from rich.console import Console
        self.label, self.total, self.done, self.note = label, total, 0, ""
        self.console = Console(stderr=True, highlight=False, markup=False)
        self.interactive = self.console.is_terminal if interactive is None else interactive
        self.start = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "Progress":
        if self.interactive:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)
            columns = [TextColumn(self.label), BarColumn(), MofNCompleteColumn()] if self.total is not None else [
                SpinnerColumn(), TextColumn(self.label)]
            self._bar = Bar(*columns, TimeElapsedColumn(), TextColumn("{task.description}"), console=self.console,
                            transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("", total=self.total)
        else:
            self._thread = threading.Thread(target=self._tick, daemon=True, name="nnapi-progress")
            self._thread.start()
        return self

    def line(self) -> str:
        """The plain progress line: `label: done/total note, N s`."""
        count = f" {self.done}/{self.total}" if self.total is not None else ""
        note = f" {self.note}" if self.note else ""
        return f"{self.label}:{count}{note}, {time.perf_counter() - self.start:.0f} s"

    def _tick(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.console.print(self.line())

    def update(self, advance: int = 0, note: str | None = None) -> None:
        """`advance` more steps done; `note` (when given) replaces the text after the count."""
        self.done += advance
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.update(self._task, advance=advance, description=self.note)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)


@contextlib.contextmanager
def tracing(path: str | None) -> Iterator[None]:
    """Record a Chrome / Perfetto trace of the block into `path` (nothing when None): `--trace FILE`."""
    if path is None:
        yield
        return
    from ..tracing import trace
    with trace(path):
        yield
    log.info("trace written to %s", path)
