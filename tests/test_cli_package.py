"""The `nnapi` command as a package: a table of subcommands whose modules are imported only when their
command runs (`nnapi --help` and `nnapi devices` import no other), `serve` and `vts` in the same table,
`console` / `checks` usable by the kit without the rest, and the benchmark library `nnapi.bench`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nnapi.cli.commands import COMMANDS

#: The modules of the commands (and the libraries only they need) that a command must not import.
HEAVY = sorted({c.module for c in COMMANDS} | {"nnapi.bench"})


def _imported_after(code: str) -> set[str]:
    """The modules of HEAVY a fresh interpreter holds after running `code`."""
    script = (f"import sys\n{code}\nimport json\n"
              f"print(json.dumps(sorted(m for m in sys.modules if m in {HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_table_holds_every_command_serve_and_vts_included():
    names = [c.name for c in COMMANDS]
    assert names == ["devices", "cts", "run", "bench", "cache", "vts", "serve", "fleet", "batch"]
    modules = {c.name: c.module for c in COMMANDS}
    assert modules["serve"] == "nnapi.service.cli" and modules["vts"] == "nnapi.cli.vts"
    assert all(modules[n] == f"nnapi.cli.{n}" for n in names if n not in ("serve", "vts"))


def test_help_lists_every_command_and_imports_none(capsys):
    from nnapi.cli import main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command.name in out and command.help.split()[0] in out
    assert _imported_after("from nnapi.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass") \
        == set()


def test_devices_imports_only_its_own_module():
    assert _imported_after("from nnapi.cli import main\nmain(['devices', '--json'])") == {"nnapi.cli.devices"}


def test_console_and_checks_import_no_command():
    assert _imported_after("import nnapi.cli.console, nnapi.cli.checks") == set()


def test_moved_public_names_are_still_found_in_nnapi_cli():
    import nnapi.bench
    import nnapi.cli
    import nnapi.cli.console
    assert nnapi.cli.plot_bench is nnapi.bench.plot_bench and nnapi.cli.bench_model is nnapi.bench.bench_model
    assert nnapi.cli.random_inputs is nnapi.bench.random_inputs
    assert nnapi.cli.stdout_console is nnapi.cli.console.stdout_console
    with pytest.raises(AttributeError):
        nnapi.cli.no_such_name  # noqa: B018


def test_the_bench_library_times_a_model_as_nnapi_bench_does(tmp_path):
    from nnapi.bench import bench_model, device_list, random_inputs
    from test_tflite_import import B, add_options, f32, write_model
    model = write_model(tmp_path / "add.tflite", [f32("x", (1, 8)), f32("w", (1, 8), list(range(8))),
                                                 f32("y", (1, 8))],
                        [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])
    timeline: list[dict] = []
    result = bench_model(str(model), "reference", runs=3, warmup=1, timeline=timeline)
    assert result["device"] == "reference" and result["runs"] == 3 and result["execute_p50_ms"] > 0
    assert [e["phase"] for e in timeline] == ["first", "warm-up", "timed", "timed", "timed"]
    assert device_list("xla, reference") == ["xla", "reference"] and device_list("") is None
    from nnapi.importers import TensorInfo
    (values,) = random_inputs([TensorInfo("x", (2, 3), "float32")])
    assert values.shape == (2, 3) and values.dtype == "float32" and (abs(values) <= 1).all()
