"""Every code block of README.md runs as written.

Python blocks run one by one, each in a fresh namespace in a temporary working folder. Shell blocks
(```sh, or no language) may hold only `nnapi ...` commands, which run from the repository root,
unless the line before the block is `<!-- readme-test: skip: REASON -->`; a Python block is never
skipped. ```text blocks are output samples, not code.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

import pytest

from nnapi.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(\S.*?)\s*-->")
SHELL = ("", "sh", "shell", "bash", "console")


@dataclass
class Block:
    language: str
    line: int           # of the opening fence, 1-based
    code: str
    skip: str | None    # the reason given by a skip marker

    def __str__(self) -> str:
        return f"{self.language or 'plain'}-line{self.line}"


def blocks(text: str) -> list[Block]:
    found, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        fence = re.match(r"^```\s*(\w*)\s*$", lines[k])
        if not fence:
            k += 1
            continue
        end = next((j for j in range(k + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"README.md line {k + 1}: a code block is never closed"
        before = next((lines[j] for j in range(k - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(before)
        found.append(Block(fence.group(1).lower(), k + 1, "\n".join(lines[k + 1:end]),
                           marker.group(1) if marker else None))
        k = end + 1
    return found


BLOCKS = blocks(open(README, encoding="utf-8").read())
PYTHON = [b for b in BLOCKS if b.language == "python"]
COMMANDS = [(b, line.strip()) for b in BLOCKS if b.language in SHELL and b.skip is None
            for line in b.code.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_readme_has_runnable_blocks_and_skips_only_shell_with_a_reason():
    assert len(PYTHON) >= 5 and len(COMMANDS) >= 3
    assert {b.language for b in BLOCKS} <= {"python", "text", *SHELL}, [str(b) for b in BLOCKS]
    assert not [str(b) for b in PYTHON if b.skip], "a Python block of the README may not be skipped"
    assert [b for b in BLOCKS if b.skip], "the skip marker is honoured (at least the install block uses it)"
    for block, command in COMMANDS:
        assert command.startswith("nnapi "), f"README.md line {block.line}: {command!r} is not an `nnapi` command; " \
                                             f"run it here or mark the block with <!-- readme-test: skip: why -->"


@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_python_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = compile(block.code, f"README.md (block at line {block.line})", "exec")
    exec(code, {"__name__": "__readme__"})


@pytest.mark.parametrize("block, command", COMMANDS, ids=[f"line{b.line}-{c.split()[1]}" for b, c in COMMANDS])
def test_nnapi_command_runs(block, command, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)[1:]
    try:
        code = main(argv)
    except SystemExit as e:  # --version, --help
        code = e.code
    err = capsys.readouterr().err
    assert code == 0, f"README.md line {block.line}: `{command}` exited {code}: {err}"
    assert "Traceback" not in err
