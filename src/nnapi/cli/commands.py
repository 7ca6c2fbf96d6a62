"""The table of `nnapi` subcommands and `main`: parse the arguments, check them, run the command.

Each command lives in a module of its own, imported only when that command runs: `nnapi --help`
lists the table's names and help without importing any, and `nnapi devices` imports no other
command. A module of this package gives `add_arguments(parser)`, `run(args)` and, optionally,
`check(args)` (run first: argument checks before any work); `serve` (which lives with the service)
and `vts` give `add_parser(subparsers)` and make their parsers themselves.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .checks import CommandError
from .console import error_text


@dataclass(frozen=True)
class Command:
    """One `nnapi` subcommand: its name, the help `nnapi --help` lists and the module that defines it
    (`own_parser`: the module's `add_parser(subparsers)` makes its parser itself)."""

    name: str
    help: str
    module: str
    own_parser: bool = False

    def register(self, sub: Any, common: argparse.ArgumentParser) -> None:
        """Import the module and add the command's parser with all its arguments to `sub`."""
        module = importlib.import_module(self.module)
        if self.own_parser:
            module.add_parser(sub)
            return
        parser = sub.add_parser(self.name, help=self.help, parents=[common])
        module.add_arguments(parser)
        parser.set_defaults(func=module.run, check=getattr(module, "check", None))

    def listed(self, sub: Any) -> None:
        """Add the command to `sub` by name and help only (a command that does not run)."""
        sub.add_parser(self.name, help=self.help, add_help=False)


#: Every `nnapi` subcommand, in the order `nnapi --help` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("devices", "list devices and their capabilities", "nnapi.cli.devices"),
    Command("cts", "run NNAPI conformance test vectors", "nnapi.cli.cts"),
    Command("run", "import a .tflite model, compile and run it once", "nnapi.cli.run"),
    Command("bench", "time a .tflite model: import, cold and cached prepare, executions", "nnapi.cli.bench"),
    Command("cache", "list, verify or prune compilation caches", "nnapi.cli.cache"),
    Command("vts", "certify one driver (VTS-style HAL suites plus runtime checks)", "nnapi.cli.vts",
            own_parser=True),
    Command("serve", "host one driver in its own process, on a Unix socket", "nnapi.service.cli", own_parser=True),
    Command("fleet", "the fleet tier of the compilation cache: keys and the shared store", "nnapi.cli.fleet"),
    Command("batch", "batch inference over a data set on Ray (a local Ray by default)", "nnapi.cli.batch"),
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (`nnapi run: argument --runs: ...`), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _add_common(parser: argparse.ArgumentParser, verbose_default: Any, debug_default: Any) -> None:
    """-v / --verbose and --debug, before the command (`nnapi -v run ...`) or after it."""
    parser.add_argument("-v", "--verbose", action="count", default=verbose_default,
                        help="log what nnapi does on stderr (-vv: debug detail)")
    parser.add_argument("--debug", action="store_true", default=debug_default,
                        help="print the traceback of an error")


def _chosen(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the options before the command
    take no value); None when there is none."""
    return next((word for word in argv if not word.startswith("-")), None)


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The `nnapi` parser: every command listed, the one `argv` names with all its arguments."""
    from .._version import __version__
    parser = ArgumentParser(prog="nnapi", description="Android Neural Networks API stack in Python")
    parser.add_argument("--version", action="version", version=f"nnapi {__version__} (Python {sys.version.split()[0]})")
    _add_common(parser, 0, False)
    common = ArgumentParser(add_help=False)
    _add_common(common, argparse.SUPPRESS, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    chosen = _chosen(argv)
    for command in COMMANDS:
        if command.name == chosen:
            command.register(sub, common)
        else:
            command.listed(sub)
    return parser


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


def _dispatch(args: argparse.Namespace) -> int:
    """Check the arguments, run the command; every error is one line on stderr (traceback: --debug)."""
    import traceback

    from ..hal import NnError
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
        print(f"{prog}: {e.code.name}: {error_text(e.message)}", file=sys.stderr)
        return 1
    except Exception as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: {type(e).__name__}: {error_text(str(e))}" + ("" if debug else " (--debug shows the traceback)"),
              file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """The `nnapi` command: its exit status (2: bad arguments, 1: the work failed)."""
    own = argv is None  # (the process's own command, not a call from Python code)
    argv = sys.argv[1:] if argv is None else argv
    args = parser_for(argv).parse_args(argv)
    with _logging(getattr(args, "verbose", 0)):
        code = _dispatch(args)
    if own and code == 130:
        _interrupted_exit()
    return code


def _interrupted_exit() -> None:
    """End a command stopped by Ctrl-C with 130 once the exit handlers ran (the driver threads waited for,
    the backends closed: `qos.threads`), skipping the interpreter's teardown of half-used backend modules:
    XLA, stopped in the middle of a cold compile, crashed there (a segfault at exit, about 1 in 6 tries)."""
    import atexit

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    flush()
    atexit._run_exitfuncs()  # (logging's shutdown among them)
    flush()
    os._exit(130)
