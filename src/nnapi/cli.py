"""The `nnapi` command: devices, cts (conformance vectors), run and bench (`.tflite` models).

Every argument is checked before any work; an error is one line on stderr (`nnapi CMD: ...`) with a
non-zero exit (2: bad arguments, 1: the work failed), the traceback only with `--debug`. Progress
goes to stderr: a bar on a terminal, plain lines every few seconds otherwise. `-v` / `-vv` turn on
the `nnapi` loggers (INFO / DEBUG) through the standard `logging` module.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

log = logging.getLogger("nnapi.cli")

#: Seconds between plain progress lines when stderr is not a terminal.
PROGRESS_INTERVAL_S = float(os.environ.get("NNAPI_PROGRESS_INTERVAL", "2"))


# --- errors, argument checks, logging, progress --------------------------------------------------------
class CommandError(Exception):
    """A bad argument or an unusable path: printed as one line, exit status 2."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (`nnapi run: argument --runs: ...`), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _output_file(path: str | None, option: str) -> str | None:
    """`path` if a file can be written there: its folder exists and is writable, it is not a folder.
    Writing is tried (`_try_writing`): `os.access` says yes to root in /proc or /sys."""
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
        _try_writing(path)
    except OSError as e:
        raise CommandError(f"{option} {path}: cannot be written ({e.strerror or e})") from None
    return path


def _try_writing(path: str) -> None:
    """Open `path` for writing and leave it as it was: a regular file is opened without truncating, a
    new file is created and removed again; anything else (/dev/stdout, a fifo) is left to `os.access`."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.close(fd)
        os.unlink(path)
        return
    if stat.S_ISREG(mode):
        os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC))


def _distinct_outputs(options: dict[str, str | None]) -> None:
    """Two output options naming one file would overwrite each other: an error before any work."""
    seen: dict[str, str] = {}
    for option, path in options.items():
        if path is None or (os.path.exists(path) and not os.path.isfile(path)):
            continue  # /dev/stdout and the like may be shared
        key = os.path.realpath(path)
        if key in seen:
            raise CommandError(f"{option} {path}: {seen[key]} names the same file")
        seen[key] = option


def _input_file(path: str | None, option: str) -> str | None:
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


def _cache_folder(path: str | None) -> str | None:
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


def device_list(text: str | None) -> list[str] | None:
    """A `--device` value as device names: one name, or a comma-separated list (None: all devices)."""
    if not text:
        return None
    return [name.strip() for name in text.split(",") if name.strip()] or None


def _device_names(names: list[str | None]) -> None:
    """Each given device name (or comma-separated list of them) must be one `nnapi devices` lists."""
    wanted = [n for text in names for n in (device_list(text) or ())]
    if not wanted:
        return
    from .runtime import devices
    known = [d.name for d in devices()]
    for name in wanted:
        if name not in known:
            raise CommandError(f"--device {name}: no such device (devices: {', '.join(known) or 'none'})")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be milliseconds (a number >= 0; 0: no timeout), got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be milliseconds >= 0 (0: no timeout), got {text!r}")
    return value


def _plot_file(path: str | None) -> str | None:
    """--plot FILE: a writable .png/.svg/.pdf path, and matplotlib installed."""
    if path is None:
        return None
    if os.path.splitext(path)[1].lower() not in (".png", ".svg", ".pdf"):
        raise CommandError(f"--plot {path}: the file must end in .png, .svg or .pdf")
    _output_file(path, "--plot")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CommandError("--plot needs matplotlib: pip install 'nnapi[plot]'") from None
    return path


@contextlib.contextmanager
def _logging(verbosity: int) -> Iterator[None]:
    """With -v (INFO) or -vv (DEBUG), the `nnapi` loggers (drivers log on `nnapi.drivers`, the runtime on
    `nnapi.runtime`) print on stderr while the command runs; restored afterwards, so `main` can be called
    from Python. Without -v logging is left as it is: warnings reach stderr through Python's default
    (and a command that configures logging itself, like `nnapi serve --log-level`, is not overruled)."""
    if verbosity <= 0:
        yield
        return
    root = logging.getLogger("nnapi")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    previous = root.level, root.propagate
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
    root.propagate = False  # printed once, by this handler
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous[0])
        root.propagate = previous[1]


def _error_text(message: str) -> str:
    """A message as one line (a multi-line NnError, e.g. every unsupported operator, joined by '; ')."""
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


def stdout_console(**options: Any) -> "Console":
    """A rich console for the command's results on stdout. Piped or redirected (scripts, CI logs), it
    is as wide as its tables need: rich would otherwise fold them to 80 columns and cut cells short
    ("in-proce…"), losing exactly what a script reads."""
    from rich.console import Console
    console = Console(**options)
    if not console.is_terminal:
        console = Console(width=PIPED_WIDTH, **options)
    return console


#: The width of `stdout_console` when stdout is not a terminal (wide enough that no table folds).
PIPED_WIDTH = 1000


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
        count = f" {self.done}/{self.total}" if self.total is not None else ""
        note = f" {self.note}" if self.note else ""
        return f"{self.label}:{count}{note}, {time.perf_counter() - self.start:.0f} s"

    def _tick(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.console.print(self.line())

    def update(self, advance: int = 0, note: str | None = None) -> None:
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
def _tracing(path: str | None) -> Iterator[None]:
    """Record a Chrome / Perfetto trace of the block into `path` (nothing when None)."""
    if path is None:
        yield
        return
    from .tracing import trace
    with trace(path):
        yield
    log.info("trace written to %s", path)


def _cmd_devices(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .runtime import devices
    from .runtime.devices import dropped_devices
    if args.calibrate:
        from .drivers.base import calibration
        calibration.forget()
        log.info("stored calibrations dropped: every device measures again")
    devs = devices()
    if args.json:
        print(json.dumps([{"name": d.name, "version": d.version, "type": d.type.name,
                           "feature_level": d.feature_level, "cache_files": list(d.cache_files),
                           "location": d.location, "pid": d.pid, "socket": d.socket,
                           "performance": {p.type.name: {"exec_time": p.info.exec_time,
                                                         "power_usage": p.info.power_usage}
                                           for p in d.capabilities.operand_performance}} for d in devs], indent=2))
        return 0
    table = Table(title="nnapi devices")
    for col in ("name", "version", "type", "feature level", "cache files (model, data)", "float32 exec time",
                "where"):
        table.add_column(col)
    from .hal import OperandType
    for d in devs:
        table.add_row(d.name, d.version, d.type.name, str(d.feature_level), str(d.cache_files),
                      f"{d.capabilities.performance(OperandType.TENSOR_FLOAT32).exec_time:g}", d.where)
    console = stdout_console()
    console.print(table)
    for name, why in sorted(dropped_devices().items()):  # (installed, but not a device: why)
        console.print(f"left out: {name}: {why}", markup=False)
    return 0


def _cmd_cts(args: argparse.Namespace) -> int:
    if getattr(args, "service", False) and not getattr(args, "ray_address", None):  # (sharded: one per task)
        from .service.cli import run_served
        return run_served(args.device, lambda: _cmd_cts(argparse.Namespace(**{**vars(args), "service": False})))
    from rich.table import Table

    from .conformance.runner import run_vectors, summarize
    from .conformance.vectors import load_vectors

    try:
        tests = list(load_vectors(args.paths, args.k))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CommandError(f"cannot read the test vectors: {type(e).__name__}: {e}") from None
    log.info("%d test vectors from %s", len(tests), ", ".join(args.paths))
    start = time.perf_counter()
    failures = []
    tally = {"failed": 0, "skipped": 0}
    with _tracing(args.trace), Progress("cts", total=len(tests)) as progress:
        def step(r) -> None:
            if r.status == "failed":
                failures.append(r)
            if r.status in tally:
                tally[r.status] += 1
            progress.update(1, f"{tally['failed']} failed, {tally['skipped']} skipped")

        if getattr(args, "ray_address", None):
            from .conformance.sharded import run_sharded
            results = run_sharded(args.paths, args.k, args.device, args.ray_address, service=args.service,
                                  progress=lambda shard: [step(r) for r in shard])
        else:
            results = run_vectors(tests, args.device, step)
    elapsed = time.perf_counter() - start
    summary = summarize(results)
    out = stdout_console()
    for r in failures[:args.show_failures]:
        out.print(f"[red]FAILED[/red] {r.name} ({r.source}): {r.reason}", markup=True, highlight=False)
    if len(failures) > args.show_failures:
        out.print(f"... and {len(failures) - args.show_failures} more failures")
    table = Table(title=f"per operation ({args.device or 'all devices'})")
    for col in ("operation", "passed", "failed", "skipped"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    for op, counts in summary["operations"].items():
        table.add_row(op, str(counts.get("passed", 0)), str(counts.get("failed", 0)), str(counts.get("skipped", 0)))
    out.print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": {k: summary[k] for k in ("passed", "failed", "skipped", "total")}
                       | {"device": args.device, "seconds": round(elapsed, 2)},
                       "results": [{"name": r.name, "source": r.source, "status": r.status, "reason": r.reason,
                                    "operations": r.operations} for r in results]}, f, indent=1)
    print(f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped")
    return 1 if summary["failed"] else 0


# --- run and bench: a `.tflite` model end to end -----------------------------------------------------
_PRIORITIES = {"low": 90, "medium": 100, "high": 110}
_PREFERENCE_HELP = ("fast-single-answer (default), sustained-speed (xla: compile the optimised executable at "
                    "once) or low-power")


def _preference_name(preference: int) -> str:
    """The command-line name of an ExecutionPreference: its name in lower case with dashes."""
    from .hal import ExecutionPreference
    return ExecutionPreference(preference).name.lower().replace("_", "-")


def _preference_arg(text: str) -> int:
    from .hal import ExecutionPreference
    names = {_preference_name(p): int(p) for p in ExecutionPreference}
    value = text.strip().lower().replace("_", "-")
    if value not in names:
        raise argparse.ArgumentTypeError(f"preference must be one of {', '.join(names)}, got {text!r}")
    return names[value]


def _priority_arg(text: str) -> int:
    value = text.strip().lower()
    if value in _PRIORITIES:
        return _PRIORITIES[value]
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}") from None
    if number not in _PRIORITIES.values():
        raise argparse.ArgumentTypeError(f"priority must be low, medium, high or 90/100/110, got {text!r}")
    return number


def random_inputs(infos, seed: int = 0) -> list:
    """Random data for each input: floats in [-1, 1), integers in [0, 10) (valid token ids for
    embedding models), quantized values over their whole range."""
    import numpy as np
    rng = np.random.default_rng(seed)
    arrays = []
    for info in infos:
        dt = np.dtype(info.dtype)
        if dt.kind == "f":
            arrays.append(rng.uniform(-1, 1, info.shape).astype(dt))
        elif dt == np.bool_:
            arrays.append(rng.integers(0, 2, info.shape).astype(dt))
        elif info.scale:
            limits = np.iinfo(dt)
            arrays.append(rng.integers(limits.min, int(limits.max) + 1, info.shape).astype(dt))
        else:
            arrays.append(rng.integers(0, 10, info.shape).astype(dt))
    return arrays


def read_inputs(path: str, option: str = "--inputs") -> np.ndarray | dict[str, np.ndarray]:
    """The array of an .npy file or the {key: array} of an .npz, read without ever unpickling (numpy's
    own errors advise `allow_pickle`): CommandError naming the file and what is wrong with it."""
    import zipfile
    with open(path, "rb") as f:
        head = f.read(6)
        if head == b"\x93NUMPY":
            f.seek(0)
            return _npy_array(f, f"{option} {path}")
    if head[:1] == b"\x80":
        raise CommandError(f"{option} {path}: a Python pickle, not an .npy or .npz file (nnapi never unpickles)")
    if head[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise CommandError(f"{option} {path}: not an .npy or .npz file (numpy.save / numpy.savez write them)")
    arrays = {}
    try:
        with zipfile.ZipFile(path) as z:
            for member in z.namelist():
                key = member[:-4] if member.endswith(".npy") else member
                with z.open(member) as f:
                    arrays[key] = _npy_array(f, f"{option} {path}: array {key!r}")
    except (zipfile.BadZipFile, NotImplementedError, EOFError, OSError) as e:
        raise CommandError(f"{option} {path}: not a readable .npz file ({e})") from None
    return arrays


def _npy_array(f: BinaryIO, what: str) -> np.ndarray:
    """One .npy array from the open file `f`; an array of Python objects (a pickle) is refused."""
    import numpy as np
    from numpy.lib import format as npy
    try:
        version = npy.read_magic(f)
        _, _, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(f)
        if dtype.hasobject:
            raise CommandError(f"{what}: holds Python objects (dtype {dtype}), which only unpickling could read; "
                               f"nnapi reads numeric arrays only")
        f.seek(0)
        return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise CommandError(f"{what}: not a valid .npy array ({_error_text(str(e))})") from None


def load_inputs(path: str | None, infos, names: list[str] | None = None) -> tuple[list, list[str], list[str]]:
    """Inputs from an .npy (the model's one input) or an .npz (keys: input names, signature names or
    input_0, input_1, ...), random where absent. Returns the values in input order (as stored:
    `nnapi.load`'s checks convert them), per input where it came from, and the keys no input took.
    `infos` give the random data's shapes and the signature names, `names` the input names."""
    arrays = random_inputs(infos)
    sources = ["random"] * len(infos)
    if path is None:
        return arrays, sources, []
    names = names or [info.name for info in infos]
    stored = read_inputs(path)
    if not isinstance(stored, dict):
        if len(names) != 1:
            raise CommandError(f"--inputs {path}: an .npy file holds one array and the model has {len(names)} "
                               f"inputs ({', '.join(names)}): give an .npz with one array per input")
        return [stored], [path], []
    keys = _input_keys(stored, names, path, [getattr(info, "signature_name", None) for info in infos])
    for k, key in keys.items():
        arrays[k] = stored[key]
        sources[k] = f"{path}:{key}"
    return arrays, sources, [key for key in stored if key not in keys.values()]


def _input_keys(stored: dict, names: list[str], path: str,
                signature_names: list[str | None] | None = None) -> dict[int, str]:
    """{input position: its .npz key}: input k is named `names[k]`, `signature_names[k]` (the name the
    model's signature gives it, where it has one) or `input_k`. A key that would give two inputs (one's
    name, another's signature name or position) or two keys for one input is an error naming them."""
    keys: dict[int, str] = {}
    signature_names = list(signature_names or [])
    for key in stored:
        named = names.index(key) if key in names else None
        signed = signature_names.index(key) if key in signature_names else None
        if named is not None and signed is not None and named != signed:
            raise CommandError(f"--inputs {path}: key {key!r} is the name of input {named} and the signature name "
                               f"of input {signed}: use the tensor names as keys ({', '.join(names)})")
        named = named if named is not None else signed
        placed = int(key[6:]) if re.fullmatch(r"input_(0|[1-9][0-9]*)", key) and int(key[6:]) < len(names) else None
        if named is not None and placed is not None and named != placed:
            raise CommandError(f"--inputs {path}: key {key!r} is the name of input {named} and the position of "
                               f"input {placed}: use the input names as keys ({', '.join(names)})")
        k = named if named is not None else placed
        if k is not None:
            if k in keys:
                raise CommandError(f"--inputs {path}: keys {keys[k]!r} and {key!r} both give input {k} "
                                   f"({names[k]})")
            keys[k] = key
    return keys


def _partitions(compilation) -> list[dict]:
    """Where each partition ran: device, operation count and kinds, cache outcome."""
    from collections import Counter
    rows = []
    for k, step in enumerate(compilation.steps):
        ops = Counter(step.model.main.operations[i].type.name for i in range(len(step.model.main.operations)))
        cache = step.cache
        rows.append({"partition": k, "device": step.device.name, "operations": len(step.operations),
                     "kinds": dict(ops.most_common()),
                     "cache": getattr(cache, "outcome", None), "reason": getattr(cache, "reason", "")})
    return rows


def _compile(imported, devices, cache_dir, priority=100, timeout=None, preference=1):
    from .runtime import Compilation
    start = time.perf_counter()
    compilation = Compilation(imported.model, devices=devices, priority=priority, preference=preference,
                              cache_dir=cache_dir, token=imported.token() if cache_dir else None,
                              timeout=timeout).finish()
    return compilation, time.perf_counter() - start


def _real(array, info):
    """An output's values as float64, dequantized with its scale and zero point."""
    import numpy as np
    real = np.asarray(array).reshape(-1).astype(np.float64)
    return (real - info.zero_point) * info.scale if info.scale else real


def _summary(array, info, top: int = 5) -> str:
    import numpy as np
    real = _real(array, info)
    if not real.size:
        return f"{info.label} {np.asarray(array).dtype}{list(np.shape(array))}: empty"
    order = np.argsort(-real, kind="stable")[:top]
    tops = ", ".join(f"[{int(i)}] {real[i]:.4g}" for i in order)
    return (f"{info.label} {np.asarray(array).dtype}{list(np.shape(array))}: min {real.min():.4g} "
            f"max {real.max():.4g} mean {real.mean():.4g}; top {min(top, real.size)}: {tops}")


def _check_run(args: argparse.Namespace) -> None:
    """`nnapi run` / `nnapi bench` arguments, before any work."""
    _input_file(args.model, "model")
    if _input_file(getattr(args, "inputs", None), "--inputs"):
        read_inputs(args.inputs)
    json_file = getattr(args, "json", None)
    outputs = {"--save-outputs": getattr(args, "save_outputs", None), "--trace": getattr(args, "trace", None),
               "--json": json_file if isinstance(json_file, str) else None}
    for option, path in outputs.items():
        _output_file(path, option)
    _plot_file(getattr(args, "plot", None))
    _distinct_outputs(outputs | {"--plot": getattr(args, "plot", None)})
    args.cache_dir = _cache_folder(args.cache_dir)
    _device_names([args.device])


def _import(path: str, relaxed: bool = False):
    """The `.tflite` file as an ImportedModel (the importer traces it as the "import" slice); `relaxed`:
    float32 may be computed in float16 (`--relaxed`)."""
    from .importers import load_tflite
    return load_tflite(path, relaxed=relaxed)


@contextlib.contextmanager
def _compiling(devices: list[str] | None) -> Iterator[None]:
    """A spinner (terminal) or plain lines every few seconds while a compilation runs."""
    with Progress(f"prepare ({', '.join(devices) if devices else 'all devices'})") as progress:
        progress.update(note="compiling")
        yield


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from .runtime import devices as all_devices
    from .session import check_inputs, describe, load
    report: dict[str, Any] = {"model": args.model}
    say = (lambda *_: None) if args.json else print
    with _tracing(args.trace):
        start = time.perf_counter()
        imported = _import(args.model, getattr(args, "relaxed", False))
        import_s = time.perf_counter() - start
        say(f"model {args.model}: {len(imported.inputs)} inputs, {len(imported.outputs)} outputs, "
            f"{sum(imported.operators.values())} TFLite operators -> {sum(imported.operations.values())} NNAPI "
            f"operations; weights: {imported.referenced_bytes} bytes referenced in the file, "
            f"{imported.copied_bytes} bytes computed at import; import {import_s * 1000:.1f} ms")
        infos, out_infos = describe(imported)
        feed, sources, unused = load_inputs(args.inputs, imported.inputs, [i.name for i in infos])
        for key in unused:
            print(f"nnapi run: warning: --inputs {args.inputs}: key {key!r} matches no input and is not used "
                  f"(inputs: {', '.join(i.label for i in infos)}, or input_0, input_1, ...)", file=sys.stderr)
        inputs, converted = check_inputs(infos, feed, cast=True)
        for info, source in zip(infos, sources):
            extra = f" (converted: {converted[info.name]})" if info.name in converted else ""
            say(f"  input  {info}  <- {source}{extra}")
        start = time.perf_counter()
        found = all_devices()  # driver discovery happens once per process: not part of the prepare time
        say(f"devices: {', '.join(d.name for d in found)} (discovered in {(time.perf_counter() - start) * 1000:.1f} ms)")
        devices = device_list(args.device)
        timeout = args.timeout_ms / 1000 if args.timeout_ms else None
        start = time.perf_counter()
        with _compiling(devices):
            compiled = load(imported, devices, cache_dir=args.cache_dir, priority=args.priority,
                            preference=args.preference)
        prepare_s = time.perf_counter() - start
        say(f"prepare {prepare_s * 1000:.1f} ms")
        partitions = _partitions(compiled.compilation)
        for row in partitions:
            kinds = ", ".join(f"{k}x{n}" for k, n in row["kinds"].items())
            cache = f"cache {row['cache']}" + (f" ({row['reason']})" if row["reason"] else "")
            say(f"  partition {row['partition']} on {row['device']}: {row['operations']} operations ({kinds}); "
                f"{cache}")
        start = time.perf_counter()
        outputs = compiled.run(inputs, timeout=timeout)
        execute_s = time.perf_counter() - start
    say(f"execute {execute_s * 1000:.1f} ms")
    for info, value in zip(out_infos, outputs.values()):
        say(f"  output {_summary(value, info)}")
    if args.save_outputs:
        with open(args.save_outputs, "wb") as f:  # a file object: numpy would add ".npz" to another name
            np.savez(f, **_saved_outputs(out_infos, list(outputs.values())))
        say(f"outputs saved to {args.save_outputs}")
    if args.json:
        report.update(
            inputs=[{"name": i.name, **_signature_field(i), "shape": list(a.shape), "dtype": str(a.dtype),
                     "source": src, "converted": converted.get(i.name)} for i, a, src in zip(infos, inputs, sources)],
            unused_input_keys=unused, devices=[d.name for d in found],
            partitions=[{k: row[k] for k in ("device", "operations", "kinds", "cache", "reason")}
                        for row in partitions],
            import_ms=round(import_s * 1000, 3), prepare_ms=round(prepare_s * 1000, 3),
            execute_ms=round(execute_s * 1000, 3), timeout_ms=args.timeout_ms or None,
            outputs=[_output_report(value, info) for info, value in zip(out_infos, outputs.values())],
            saved_outputs=args.save_outputs, trace=args.trace)
        print(json.dumps(report))
    return 0


def _signature_field(info) -> dict:
    """`signature_name` for --json, where the model's signature names the input or output."""
    signature = getattr(info, "signature_name", None)
    return {"signature_name": signature} if signature else {}


def _saved_outputs(infos, values: list) -> dict:
    """The `--save-outputs` arrays: `output_0`, `output_1`, ... in output order, and each output's
    signature name too where the model has one that no other key already is."""
    saved = {f"output_{k}": value for k, value in enumerate(values)}
    for info, value in zip(infos, values):
        signature = getattr(info, "signature_name", None)
        if signature and signature not in saved:
            saved[signature] = value
    return saved


def _output_report(array, info, top: int = 5) -> dict:
    """An output as JSON: name (and signature_name), dtype, shape, min / max / mean and the top values
    (dequantized)."""
    import numpy as np
    real = _real(array, info)
    order = np.argsort(-real, kind="stable")[:top]
    return {"name": info.name, **_signature_field(info), "dtype": str(np.asarray(array).dtype),
            "shape": list(np.shape(array)),
            "min": float(real.min()) if real.size else None, "max": float(real.max()) if real.size else None,
            "mean": float(real.mean()) if real.size else None,
            "top": [[int(i), float(real[i])] for i in order]}


def _percentile(values: list[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(values), q))


def warm_up_devices(names: list[str] | None = None) -> None:
    """Compile and run a one-operation model (ADD of two float32 [2]) on each device (all when
    `names` is None), so a process's one-time costs are paid before anything is timed."""
    import numpy as np
    from .hal import OperandType as T, OperationType as Op
    from .runtime import Compilation, Model, devices as all_devices
    for device in (names or [d.name for d in all_devices()]):
        m = Model()
        a, b = m.add_operand(T.TENSOR_FLOAT32, (2,)), m.add_operand(T.TENSOR_FLOAT32, (2,))
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        out = m.add_operand(T.TENSOR_FLOAT32, (2,))
        m.add_operation(Op.ADD, [a, b, act], [out])
        m.identify_inputs_and_outputs([a, b], [out])
        m.finish()
        Compilation(m, devices=[device]).finish().execute([np.ones(2, np.float32)] * 2)


def _stages(compilation) -> list[str | None]:
    """Per partition, the stage of its executable ("quick", "optimized" on xla); None for drivers with
    one stage only."""
    return [getattr(step.prepared, "stage", None) for step in compilation.steps]


def _wait_optimized(compilation, timeout_s: float = 600.0) -> float:
    """Bring every partition that has a quick executable to its optimised one (xla: compile it now and
    wait, as `NNAPI_XLA_OPTIMIZE_AFTER` executions would); returns the seconds waited."""
    start = time.perf_counter()
    for step in compilation.steps:
        prepared = step.prepared
        if getattr(prepared, "stage", None) != "quick":
            continue
        if hasattr(prepared, "optimize_now"):
            prepared.optimize_now()
        elif hasattr(prepared, "wait_optimized"):
            prepared.wait_optimized(max(0.0, timeout_s - (time.perf_counter() - start)))
        if getattr(prepared, "stage", None) != "optimized":
            log.warning("partition on %s stays at its quick executable (%s)", step.device.name,
                        getattr(prepared, "optimize_error", None) or "the optimised one did not arrive in time")
    return time.perf_counter() - start


def _stage_text(stages: list[str | None]) -> str:
    staged = [s for s in stages if s is not None]
    return "single" if not staged else staged[0] if len(set(staged)) == 1 else "mixed"


def bench_model(path: str, device: str | None = None, cache_dir: str | None = None, runs: int = 50,
                warmup: int = 5, priority=100, timeout_ms: float | None = None, preference: int = 1,
                wait_optimized: bool = True, timeline: list[dict] | None = None,
                progress: Callable[[int, str], None] | None = None, relaxed: bool = False) -> dict:
    """Import, prepare cold (empty cache) and cached, run first / `warmup` / `runs` timed executions.
    With `wait_optimized` the timed runs start once every partition runs its optimised executable (xla
    compiles a quick one first). Returns the figures `nnapi bench` prints (times in seconds or
    milliseconds as named); `timeline` receives every execution (phase, start, milliseconds, stage,
    missed), `progress(advance, note)` hears of each step."""
    import shutil
    import tempfile

    from .hal import NnError, ResultCode
    from .importers.tflite import _graph_class
    from .runtime import Execution
    if runs < 1 or warmup < 0:
        raise ValueError(f"bench_model: runs must be >= 1 and warmup >= 0, got {runs} and {warmup}")
    tell = progress or (lambda advance, note: None)
    timeline = timeline if timeline is not None else []
    # Driver discovery, module imports and a compiler's own start-up happen once per process: not
    # part of the figures.
    tell(0, "starting the devices")
    warm_up_devices(device_list(device))
    _graph_class()
    start = time.perf_counter()
    imported = _import(path, relaxed)
    import_s = time.perf_counter() - start
    inputs = random_inputs(imported.inputs)
    devices = device_list(device)
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="nnapi-bench-", dir=cache_dir)
    timeout = None if not timeout_ms else timeout_ms / 1000
    missed = {"transient": 0, "persistent": 0}
    origin = time.perf_counter()

    def execute(compilation, phase: str, deadline: float | None = None) -> float | None:
        """One timed execution; None when it missed its deadline."""
        begin = time.perf_counter()
        stage = _stage_text(_stages(compilation))
        try:
            Execution(compilation).run(inputs, timeout=deadline)
        except NnError as e:
            if e.code not in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT):
                raise
            missed["transient" if e.code == ResultCode.MISSED_DEADLINE_TRANSIENT else "persistent"] += 1
            timeline.append({"phase": phase, "t_s": begin - origin, "ms": (time.perf_counter() - begin) * 1000,
                             "stage": stage, "missed": True})
            return None
        ms = (time.perf_counter() - begin) * 1000
        timeline.append({"phase": phase, "t_s": begin - origin, "ms": ms, "stage": stage, "missed": False})
        return ms

    try:
        tell(0, "cold prepare")
        cold, cold_s = _compile(imported, devices, scratch, priority, preference=preference)
        tell(0, "cached prepare")
        cached, cached_s = _compile(imported, devices, scratch, priority, preference=preference)
        origin = time.perf_counter()
        tell(0, "first execution")
        first_ms = execute(cached, "first")
        tell(1, "warm-up")
        for _ in range(warmup):
            execute(cached, "warm-up")
            tell(1, "warm-up")
        waited_s = 0.0
        if wait_optimized and "quick" in _stages(cached):
            tell(0, "waiting for the optimised executable")
            begin = time.perf_counter()
            waited_s = _wait_optimized(cached)
            timeline.append({"phase": "optimizing", "t_s": begin - origin, "duration_s": waited_s})
        timed_stages = _stages(cached)
        tell(0, f"timed runs ({_stage_text(timed_stages)} executable)")
        times = []
        for _ in range(runs):
            ms = execute(cached, "timed", timeout)
            if ms is not None:
                times.append(ms)
            tell(1, f"timed runs ({_stage_text(timed_stages)} executable)")
        stages_after = _stages(cached)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    partitions = _partitions(cached)
    return {
        "model": os.path.basename(path),
        "device": "+".join(dict.fromkeys(row["device"] for row in partitions)),
        "import_s": round(import_s, 6),
        "prepare_cold_s": round(cold_s, 6),
        "prepare_cached_s": round(cached_s, 6),
        "first_execute_ms": None if first_ms is None else round(first_ms, 4),
        "execute_p50_ms": round(_percentile(times, 50), 4) if times else None,
        "execute_p90_ms": round(_percentile(times, 90), 4) if times else None,
        "runs": len(times),
        "warmup": warmup,
        "stage": _stage_text(timed_stages),
        "stages": [{"device": row["device"], "stage": stage} for row, stage in zip(partitions, timed_stages)],
        "stage_changed": stages_after != timed_stages,
        "optimize_wait_s": round(waited_s, 4),
        "priority": priority,
        "preference": _preference_name(preference),
        "timeout_ms": timeout_ms or None,
        "deadline_miss_rate": round((missed["transient"] + missed["persistent"]) / runs, 4),
        "missed_transient": missed["transient"],
        "missed_persistent": missed["persistent"],
        "cache": {"cold": [row["cache"] for row in _partitions(cold)], "cached": [row["cache"] for row in partitions]},
        "partitions": [{"device": row["device"], "operations": row["operations"]} for row in partitions],
    }


def plot_bench(result: dict, timeline: list[dict], path: str) -> None:
    """A PNG (or SVG/PDF) of one `nnapi bench`: every execution's latency over time (phase by colour,
    deadline misses as crosses), the histogram of the timed runs with p50/p90, and cold vs cached
    preparation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, (ax_time, ax_hist, ax_prep) = plt.subplots(1, 3, figsize=(15, 4.6),
                                                    gridspec_kw={"width_ratios": [2.2, 1.4, 1]})
    colours = {"first": "tab:red", "warm-up": "tab:orange", "timed": "tab:blue"}
    for phase, colour in colours.items():
        runs = [e for e in timeline if e["phase"] == phase and not e["missed"]]
        if runs:
            ax_time.plot([e["t_s"] for e in runs], [e["ms"] for e in runs], "o", ms=3.5, color=colour,
                         label=f"{phase} ({len(runs)})", alpha=0.8)
    for e in timeline:
        if e["phase"] == "optimizing":
            ax_time.axvspan(e["t_s"], e["t_s"] + e["duration_s"], color="gold", alpha=0.25,
                            label=f"waiting for the optimised executable ({e['duration_s']:.1f} s)")
    misses = [e for e in timeline if e.get("missed")]
    if misses:
        ax_time.plot([e["t_s"] for e in misses], [e["ms"] for e in misses], "x", color="black", ms=6,
                     label=f"deadline missed ({len(misses)})")
    timed = [e for e in timeline if e["phase"] == "timed"]
    if timed:
        ax_time.axvline(timed[0]["t_s"], color="grey", ls=":", lw=1)
        ax_time.annotate(f" timed runs: {result['stage']} executable", (timed[0]["t_s"], 0.02), rotation=90,
                         xycoords=("data", "axes fraction"), fontsize=8, ha="right", va="bottom", color="dimgrey")
    if result.get("timeout_ms"):
        ax_time.axhline(result["timeout_ms"], color="black", ls="--", lw=1, label=f"timeout {result['timeout_ms']:g} ms")
    ax_time.set_yscale("log")
    from matplotlib.ticker import FuncFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax_time.yaxis.set_major_formatter(plain)
    ax_time.yaxis.set_minor_formatter(plain)
    ax_time.tick_params(axis="y", which="minor", labelsize=7)
    ax_time.set_xlabel("seconds since the first execution")
    ax_time.set_ylabel("latency (ms, log scale)")
    ax_time.set_title("every execution over time")
    ax_time.legend(fontsize=8, loc="best")
    ax_time.grid(True, which="both", alpha=0.3)
    values = np.asarray([e["ms"] for e in timed if not e["missed"]])
    if values.size:
        ax_hist.hist(values, bins=min(40, max(5, values.size // 3)), color="tab:blue", alpha=0.8)
        for q, style in ((50, "-"), (90, "--")):
            v = float(np.percentile(values, q))
            ax_hist.axvline(v, color="black", ls=style, lw=1, label=f"p{q} {v:.3g} ms")
        ax_hist.legend(fontsize=8)
    ax_hist.set_xlabel("latency (ms)")
    ax_hist.set_ylabel("runs")
    ax_hist.set_title(f"timed runs ({values.size} in time of {len(timed)})" if values.size < len(timed)
                      else f"timed runs ({values.size})")
    prep = [result["prepare_cold_s"] * 1000, result["prepare_cached_s"] * 1000]
    bars = ax_prep.bar(["cold", "cached"], prep, color=["tab:red", "tab:green"])
    for bar, value, outcome in zip(bars, prep, (result["cache"]["cold"], result["cache"]["cached"])):
        ax_prep.annotate(f"{value:.1f} ms\n{', '.join(o or '-' for o in outcome)}", (bar.get_x() + bar.get_width() / 2,
                         value), ha="center", va="bottom", fontsize=8)
    ax_prep.set_ylabel("prepare (ms)")
    ax_prep.set_ylim(0, max(prep) * 1.25 or 1)
    ax_prep.set_title("preparation: cold vs cached")
    p50 = result["execute_p50_ms"]
    fig.suptitle(f"nnapi bench {result['model']} on {result['device']} ({result['preference']}, warm-up "
                 f"{result['warmup']}, p50 {'-' if p50 is None else f'{p50:.3g}'} ms)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cmd_bench(args: argparse.Namespace) -> int:
    from rich.table import Table

    timeline: list[dict] = []
    with _tracing(args.trace), Progress("bench", total=1 + args.warmup + args.runs) as progress:
        result = bench_model(args.model, args.device, args.cache_dir, args.runs, warmup=args.warmup,
                             priority=args.priority, timeout_ms=args.timeout_ms, preference=args.preference,
                             wait_optimized=not args.no_wait_optimized, timeline=timeline,
                             progress=lambda advance, note: progress.update(advance, note), relaxed=args.relaxed)
    stages = ", ".join(f"{s['device']} {s['stage'] or 'single-stage'}" for s in result["stages"])
    table = Table(title=f"nnapi bench {result['model']} on {result['device']} ({result['runs']} runs)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    first = "deadline missed" if result["first_execute_ms"] is None else f"{result['first_execute_ms']:.3f} ms"
    rows = [("import (load)", f"{result['import_s'] * 1000:.2f} ms"),
            ("prepare, cold cache", f"{result['prepare_cold_s'] * 1000:.2f} ms ({', '.join(result['cache']['cold'])})"),
            ("prepare, cached", f"{result['prepare_cached_s'] * 1000:.2f} ms ({', '.join(result['cache']['cached'])})"),
            ("first execute", first),
            ("warm-up runs", str(result["warmup"])),
            ("executable timed", stages + (" (changed during the runs)" if result["stage_changed"] else "")
             + (f"; waited {result['optimize_wait_s']:.2f} s for it" if result["optimize_wait_s"] else "")),
            ("execute p50", f"{result['execute_p50_ms']} ms"),
            ("execute p90", f"{result['execute_p90_ms']} ms"),
            ("deadline misses", f"{result['deadline_miss_rate']:.1%}" + (
                f" (timeout {result['timeout_ms']} ms)" if result["timeout_ms"] else " (no timeout)"))]
    for name, value in rows:
        table.add_row(name, value)
    stdout_console().print(table)
    if args.plot:
        plot_bench(result, timeline, args.plot)
        print(f"plot written to {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    """`nnapi cache ls|verify|prune`: app cache directories and drivers' caching engines."""
    from rich.table import Table

    from .runtime.cache_admin import list_cache, prune_cache, verify_cache
    try:
        if args.action == "ls":
            result = list_cache(args.dir, engine=args.engine)
        elif args.action == "verify":
            result = verify_cache(args.dir, engine=args.engine)
        else:
            result = prune_cache(args.dir, engine=args.engine, max_size=args.max_size, dry_run=args.dry_run)
    except (ValueError, FileNotFoundError, NotADirectoryError) as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    elif args.action == "prune":
        for entry in result["removed"]:
            print(f"{'would remove' if args.dry_run else 'removed'} {entry.get('name')}: {entry.get('reason')}")
        print(f"{result['size_before']} -> {result['size_after']} bytes, {result['kept']} entries kept")
        for reg in result["registry"]:
            if "error" in reg:
                print(f"{reg['driver']} integrity registry: unusable ({reg['error']})")
            else:
                print(f"{reg['driver']} integrity registry: {reg['rows']} rows kept, {reg['other_versions']} of "
                      f"older driver versions and {reg['unused']} unused rows removed")
    else:
        table = Table(title=f"nnapi cache {args.action} {args.dir or args.engine}")
        columns = ["model (token)", "kind", "device", "cache files", "size", "last used", "state"] + (
            ["ok", "stage", "reason"] if args.action == "verify" else [])
        for col in columns:
            table.add_column(col, justify="right" if col == "size" else "left")
        for entry in result:
            table.add_row(*_cache_row(entry, args.action == "verify"))
        stdout_console().print(table)
    if args.action == "verify" and any(not e.get("ok") for e in result):
        return 1
    return 0


def _cache_row(entry: dict, verified: bool) -> list[str]:
    """One `nnapi cache ls|verify` table row: the entry's name (which encodes its token), kind, device,
    model / data cache files, size, last use (local time) and state; verify adds ok, stage, reason."""
    files = (f"{entry['model_files']} model, {entry['data_files']} data" if entry["model_files"] is not None
             else "1 engine entry")
    row = [entry["name"], entry["kind"], entry.get("device") or "-", files, _size_text(entry["size"]),
           time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["last_used"])), entry["state"]]
    if verified:
        row += [str(entry["ok"]), entry.get("stage") or "-", entry.get("reason") or ""]
    return row


def _size_text(size: int) -> str:
    """Bytes as `512 B`, `14.0 KiB`, `13.7 MiB`, ..."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _add_common(parser: argparse.ArgumentParser, verbose_default: Any, debug_default: Any) -> None:
    """-v / --verbose and --debug, before the command (`nnapi -v run ...`) or after it."""
    parser.add_argument("-v", "--verbose", action="count", default=verbose_default,
                        help="log what nnapi does on stderr (-vv: debug detail)")
    parser.add_argument("--debug", action="store_true", default=debug_default,
                        help="print the traceback of an error")


def _check_cts(args: argparse.Namespace) -> None:
    """`nnapi cts` arguments, before any work."""
    for path in args.paths:
        if not os.path.exists(path):
            raise CommandError(f"{path}: no such file or folder")
        if not os.access(path, os.R_OK):
            raise CommandError(f"{path}: not readable")
    _output_file(args.json, "--json")
    _output_file(args.trace, "--trace")
    _distinct_outputs({"--json": args.json, "--trace": args.trace})
    if not getattr(args, "service", False):  # a served device is checked where the service starts
        _device_names([args.device])


def _dispatch(args: argparse.Namespace) -> int:
    """Check the arguments, run the command; every error is one line on stderr (traceback: --debug)."""
    import traceback

    from .hal import NnError
    prog = f"nnapi {args.command}"
    debug = getattr(args, "debug", False)
    try:
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe (`nnapi devices --json | head`) shows here, not at exit
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to write, nor at exit
        return 141
    except KeyboardInterrupt:
        return 130
    except CommandError as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except NnError as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: {e.code.name}: {_error_text(e.message)}", file=sys.stderr)
        return 1
    except Exception as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: {type(e).__name__}: {_error_text(str(e))}" + ("" if debug else " (--debug shows the traceback)"),
              file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    from ._version import __version__
    parser = _ArgumentParser(prog="nnapi", description="Android Neural Networks API stack in Python")
    parser.add_argument("--version", action="version", version=f"nnapi {__version__} (Python {sys.version.split()[0]})")
    _add_common(parser, 0, False)
    common = _ArgumentParser(add_help=False)
    _add_common(common, argparse.SUPPRESS, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    p = sub.add_parser("devices", help="list devices and their capabilities", parents=[common])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--calibrate", action="store_true",
                   help="measure every device's performance again (the figures placement starts from)")
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("cts", help="run NNAPI conformance test vectors", parents=[common])
    p.add_argument("paths", nargs="+", help="vector files or folders (e.g. ../shared/cts)")
    p.add_argument("--device", help="run on this device only, or partitioned over a comma-separated list of "
                                    "them (default: all devices, partitioned)")
    p.add_argument("--json", help="write per-vector results to this file")
    p.add_argument("-k", help="only vectors whose name contains this text")
    p.add_argument("--show-failures", type=_non_negative_int, default=50, help="failures to print (default 50)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome / Perfetto trace of the run to this file")
    p.add_argument("--service", action="store_true", help="run --device's driver behind `nnapi serve` (started in a "
                                                          "temporary NNAPI_SERVICE_DIR, stopped at the end)")
    p.add_argument("--ray-address", metavar="ADDR", help="shard the vectors across Ray tasks on this cluster ('local': "
                                                         "a Ray started for the run); same JSON and last line")
    p.set_defaults(func=_cmd_cts, check=_check_cts)
    p = sub.add_parser("run", help="import a .tflite model, compile and run it once", parents=[common])
    p.add_argument("model", help="a .tflite file")
    p.add_argument("--device", help="run on this device only, or partitioned over a comma-separated list of "
                                    "them (default: all devices, partitioned)")
    p.add_argument("--cache-dir", help="compilation cache directory (a second run hits the cache)")
    p.add_argument("--priority", type=_priority_arg, default=100, help="low, medium (default) or high")
    p.add_argument("--relaxed", action="store_true", help="float32 may be computed in float16 "
                                                          "(relax_computation_float32_to_float16)")
    p.add_argument("--timeout-ms", type=_milliseconds, help="execution deadline in milliseconds (0: no timeout, "
                                                            "the default)")
    p.add_argument("--preference", type=_preference_arg, default=1, help=_PREFERENCE_HELP)
    p.add_argument("--inputs", help=".npy with the model's one input, or .npz with the inputs (keys: input tensor "
                                    "names, signature names or input_0, input_1, ...); random data where absent")
    p.add_argument("--save-outputs", help="write the outputs to this .npz (output_0, output_1, ... in the order "
                                          "printed, where their names are, and their signature names)")
    p.add_argument("--json", action="store_true", help="print one JSON object (inputs, partitions, times, outputs)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome / Perfetto trace of the run to this file")
    p.set_defaults(func=_cmd_run, check=_check_run)
    p = sub.add_parser("bench", help="time a .tflite model: import, cold and cached prepare, executions",
                       parents=[common])
    p.add_argument("model", help="a .tflite file")
    p.add_argument("--device", help="run on this device only, or partitioned over a comma-separated list of "
                                    "them (default: all devices, partitioned)")
    p.add_argument("--cache-dir", help="where the cold / cached prepare writes its cache (a fresh subfolder)")
    p.add_argument("--runs", type=_positive_int, default=50, help="timed executions (default 50)")
    p.add_argument("--warmup", type=_non_negative_int, default=5, help="untimed executions first (default 5)")
    p.add_argument("--no-wait-optimized", action="store_true",
                   help="time the executable as prepared (xla: the quick one) instead of waiting for the optimised one")
    p.add_argument("--priority", type=_priority_arg, default=100, help="low, medium (default) or high")
    p.add_argument("--relaxed", action="store_true", help="float32 may be computed in float16 "
                                                          "(relax_computation_float32_to_float16)")
    p.add_argument("--timeout-ms", type=_milliseconds, help="deadline of each timed execution in milliseconds; "
                                                            "misses are counted (0: no timeout, the default)")
    p.add_argument("--preference", type=_preference_arg, default=1, help=_PREFERENCE_HELP)
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--plot", metavar="FILE.png", help="draw every run's latency over time, its histogram and cold vs "
                                                     "cached preparation (needs matplotlib: nnapi[plot])")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome / Perfetto trace of the benchmark to this file")
    p.set_defaults(func=_cmd_bench, check=_check_run)
    p = sub.add_parser("cache", help="list, verify or prune compilation caches", parents=[common])
    p.add_argument("action", choices=("ls", "verify", "prune"))
    p.add_argument("dir", nargs="?", help="an app cache directory or a caching-engine directory")
    p.add_argument("--engine", metavar="DRIVER", help="the caching engine of this driver")
    p.add_argument("--max-size", type=int, help="prune: evict least recently used entries down to BYTES")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_cache)
    from .conformance.vts.cli import add_parser as add_vts_parser
    add_vts_parser(sub)
    from .service.cli import add_parser as add_serve_parser
    add_serve_parser(sub)
    from .caching.fleet_cli import add_parser as add_fleet_parser
    add_fleet_parser(sub)
    from .batch_cli import add_parser as add_batch_parser
    add_batch_parser(sub, common)
    args = parser.parse_args(argv)
    with _logging(getattr(args, "verbose", 0)):
        return _dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
