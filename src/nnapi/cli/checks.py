"""The `nnapi` commands' argument checks, made before any work: files that must be readable or
writable, the cache folder, device names, and the argparse types of numbers, priorities and
preferences. A failed check is a `CommandError` (one line on stderr, exit status 2).

It imports no other module of the command, so the certification kit checks its `--json` with it too.
"""
from __future__ import annotations

import argparse
import math
import os
import stat


class CommandError(Exception):
    """A bad argument or an unusable path: printed as one line, exit status 2."""


def output_file(path: str | None, option: str) -> str | None:
    """`path` if a file can be written there: its folder exists and is writable, it is not a folder.
    Writing is tried (`try_writing`): `os.access` says yes to root in /proc or /sys."""
    if path is None:
        return None
    if os.path.isdir(path):
        raise CommandError(f"{option} {path}: is a folder, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CommandError(f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise CommandError(f"{option} {path}: not writable")
    try:
        try_writing(path)
    except OSError as e:
        raise CommandError(f"{option} {path}: cannot be written ({e.strerror or e})") from None
    return path


def try_writing(path: str) -> None:
    """Open `path` for writing and leave it as it was: a regular file is opened without truncating, a
    new file is created and removed again; anything else (/dev/stdout, a fifo) is left to `os.access`."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.close(fd)
        os.unlink(path)
        return
    if stat.S_ISREG(mode):
        os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC))


def distinct_outputs(options: dict[str, str | None]) -> None:
    """Two output options naming one file would overwrite each other: an error before any work."""
    seen: dict[str, str] = {}
    for option, path in options.items():
        if path is None or (os.path.exists(path) and not os.path.isfile(path)):
            continue  # /dev/stdout and the like may be shared
        key = os.path.realpath(path)
        if key in seen:
            raise CommandError(f"{option} {path}: {seen[key]} names the same file")
        seen[key] = option


def input_file(path: str | None, option: str) -> str | None:
    """`path` if it is a readable regular file."""
    if path is None:
        return None
    if not os.path.exists(path):
        raise CommandError(f"{option} {path}: no such file")
    if os.path.isdir(path):
        raise CommandError(f"{option} {path}: is a folder, not a file")
    if not os.access(path, os.R_OK):
        raise CommandError(f"{option} {path}: not readable")
    return path


def cache_folder(path: str | None) -> str | None:
    """The cache folder, created when missing (as the compilation would): a file, a folder that cannot
    be created or one that cannot be written is an error before any work."""
    if path is None:
        return None
    path = os.path.expanduser(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise CommandError(f"--cache-dir {path}: not a folder")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise CommandError(f"--cache-dir {path}: cannot be created ({e.strerror or e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CommandError(f"--cache-dir {path}: not writable")
    return path


def plot_file(path: str | None) -> str | None:
    """--plot FILE: a writable .png/.svg/.pdf path, and matplotlib installed."""
    if path is None:
        return None
    if os.path.splitext(path)[1].lower() not in (".png", ".svg", ".pdf"):
        raise CommandError(f"--plot {path}: the file must end in .png, .svg or .pdf")
    output_file(path, "--plot")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CommandError("--plot needs matplotlib: pip install 'nnapi[plot]'") from None
    return path


def device_names(names: list[str | None]) -> None:
    """Each given device name (or comma-separated list of them) must be one `nnapi devices` lists."""
    from ..bench import device_list
    wanted = [n for text in names for n in (device_list(text) or ())]
    if not wanted:
        return
    from ..runtime import devices
    known = [d.name for d in devices()]
    for name in wanted:
        if name not in known:
            raise CommandError(f"--device {name}: no such device (devices: {', '.join(known) or 'none'})")


# --- argparse types -----------------------------------------------------------------------------------
def non_negative_int(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def milliseconds(text: str) -> float:
    """A finite number of milliseconds >= 0 (0: no timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be milliseconds (a number >= 0; 0: no timeout), got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be milliseconds >= 0 (0: no timeout), got {text!r}")
    return value


#: `--priority` names and their values.
PRIORITIES = {"low": 90, "medium": 100, "high": 110}

#: The help of `--preference`.
PREFERENCE_HELP = ("fast-single-answer (default), sustained-speed (xla: compile the optimised executable at "
                   "once) or low-power")


def priority_arg(text: str) -> int:
    """`--priority`: low, medium, high or their values 90, 100, 110."""
    value = text.strip().lower()
    if value in PRIORITIES:
        return PRIORITIES[value]
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}") from None
    if number not in PRIORITIES.values():
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}")
    return number


def preference_arg(text: str) -> int:
    """`--preference`: an ExecutionPreference by its command-line name (fast-single-answer, ...)."""
    from ..bench import preference_name
    from ..hal import ExecutionPreference
    names = {preference_name(p): int(p) for p in ExecutionPreference}
    value = text.strip().lower().replace("_", "-")
    if value not in names:
        raise argparse.ArgumentTypeError(f"preference must be one of {', '.join(names)}, got {text!r}")
    return names[value]
