"""The `nnapi` command: devices, cts (conformance vectors), run and bench (`.tflite` models), cache,
vts, serve, fleet and batch; one module per command, listed in `commands.COMMANDS`.

Every argument is checked before any work; an error is one line on stderr (`nnapi CMD: ...`) with a
non-zero exit (2: bad arguments, 1: the work failed), the traceback only with `--debug`. Progress
goes to stderr: a bar on a terminal, plain lines every few seconds otherwise (`console`). `-v` / `-vv`
turn on the `nnapi` loggers (INFO / DEBUG) through the standard `logging` module.

The names the command's single module used to give are still found here (`from nnapi.cli import
plot_bench`), imported when asked for: the benchmark library is `nnapi.bench`.
"""
from __future__ import annotations

from typing import Any

from .commands import main

#: Public names of the former single-module command, and the module that now holds each.
_MOVED = {
    **dict.fromkeys(("bench_model", "device_list", "plot_bench", "random_inputs", "warm_up_devices"), "nnapi.bench"),
    **dict.fromkeys(("PIPED_WIDTH", "Progress", "stdout_console"), "nnapi.cli.console"),
    **dict.fromkeys(("load_inputs", "read_inputs"), "nnapi.cli.inputs"),
    "CommandError": "nnapi.cli.checks",
}

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """A moved public name (see `_MOVED`), imported on first use so `import nnapi.cli` stays cheap."""
    if name not in _MOVED:
        raise AttributeError(f"module 'nnapi.cli' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_MOVED[name]), name)
