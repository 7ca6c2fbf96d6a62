"""Count each driver's plumbing (issue 33, item 1): its non-blank lines of code (comments and docstrings
left out) that are neither its lowering rules, nor its compile step, nor its cache format.

What counts as which, per driver (a file's default, then the functions or classes named otherwise):
- rules: the lowering rules and the helpers they share (`rules/`, `lowering.py`, xla `control_flow.py`, and
  openvino's lowerings of patterns of operations: `gru.py`, `norms.py`, `sequences.py`);
- compile: the compile step: building the backend's program from the model (xla `program.py` and the
  lowered operations its compile takes from `analysis`: `static_analysis`, `_prove`, `lower_graph`;
  openvino `graph.py` and `unroll.py`, the run-time tensor helpers of the compiled graph (`tensors.py`:
  writable aliases of read-only memory, the run-time checks' output) and the compile properties; reference `interpreter.py`), the
  driver's `compile` hook, and the calls into the compiled program with its inputs and outputs (the
  prepared model's `run` and what it calls: xla's `_Steady`, a kept binding's run, and openvino's
  `infer_call`, the inference itself); for a multi-stage driver, its optimised stage's compile and
  warm-up run (xla `optimized_stage`, `_warm_up`: when it runs, on which thread, the swap and the cache
  rewrite are the base's `stages`);
- cache: the cache format (`cache.py`) and the driver's `save` / `load` hooks;
- plumbing: everything else (device settings, identity, calibration, claim proofs, thread starts,
  deadline and preemption, loop budgets, run-time checks, memos, multi-stage bookkeeping, imports).
The goal is at most 100 lines of plumbing per compiling driver.

usage: python benchmarks/plumbing.py [--json] [--detail DRIVER]
(one line per driver and category, or one JSON object; --detail: a driver's plumbing lines per file and name)
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import tokenize
from pathlib import Path

DRIVERS = Path(__file__).resolve().parents[1] / "src" / "nnapi" / "drivers"

#: Per driver: {file (relative to the driver's folder, a trailing "/" for a folder): default category}.
FILES: dict[str, dict[str, str]] = {
    "reference": {"interpreter.py": "compile", "cache.py": "cache"},
    "xla": {"rules/": "rules", "lowering.py": "rules", "control_flow.py": "rules", "program.py": "compile",
            "cache.py": "cache"},
    "openvino": {"rules/": "rules", "lowering.py": "rules", "gru.py": "rules", "norms.py": "rules",
                 "sequences.py": "rules", "graph.py": "compile", "unroll.py": "compile", "tensors.py": "compile",
                 "cache.py": "cache"},
}
#: Per driver: {"file:qualified name": category} for the functions and classes of other files that are not
#: plumbing (methods as Class.method).
NAMED: dict[str, dict[str, str]] = {
    "reference": {"device.py:ReferenceDevice.compile": "compile", "device.py:ReferenceDevice.save": "cache",
                  "device.py:ReferenceDevice.load": "cache",
                  "prepared_model.py:ReferencePreparedModel.run": "compile"},
    "xla": {"device.py:XlaDevice.compile": "compile", "device.py:XlaDevice.save": "cache",
            "analysis.py:_prove": "compile", "analysis.py:lower_graph": "compile",
            "analysis.py:static_analysis": "compile",
            "device.py:XlaDevice.load": "cache", "prepared_model.py:XlaPreparedModel.run": "compile",
            "prepared_model.py:XlaPreparedModel.call": "compile", "prepared_model.py:_Steady": "compile",
            "prepared_model.py:XlaPreparedModel._segment": "compile",
            "prepared_model.py:_ready": "compile",
            "prepared_model.py:XlaPreparedModel.optimized_stage": "compile",
            "prepared_model.py:XlaPreparedModel._warm_up": "compile"},
    "openvino": {"device.py:OpenVinoDevice.compile": "compile", "device.py:OpenVinoDevice.config": "compile",
                 "device.py:_compile_error": "compile", "device.py:float16_safe": "compile",
                 "device.py:native_float16": "compile",
                 "device.py:native_int8": "compile", "device.py:model_work": "compile",
                 "device.py:OpenVinoDevice.save": "cache", "device.py:_variant": "cache",
                 "device.py:OpenVinoDevice.load": "cache", "prepared_model.py:_Request": "compile",
                 "prepared_model.py:_key": "compile", "prepared_model.py:OpenVinoPreparedModel.run": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._run": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._take": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._give": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._let_go": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._own_input": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._own_output": "compile",
                 "prepared_model.py:OpenVinoPreparedModel._copy_in": "compile",
                 "prepared_model.py:OpenVinoPreparedModel.call": "compile", "backend.py:infer_call": "compile"},
}
CATEGORIES = ("plumbing", "rules", "compile", "cache")


def code_lines(source: str) -> set[int]:
    """Line numbers that hold code: not blank, not only a comment, not a docstring."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines - docstrings


def named_spans(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every top-level function and class and every method."""
    spans = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((node.name, start, node.end_lineno))
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        first = min([item.lineno, *(d.lineno for d in item.decorator_list)])
                        spans.append((f"{node.name}.{item.name}", first, item.end_lineno))
    return spans


def count(driver: str, detail: dict[str, int] | None = None) -> dict[str, int]:
    """Lines per category of one driver (see the module doc); `detail` gets the plumbing lines per file
    and top-level name."""
    root = DRIVERS / driver
    totals = dict.fromkeys(CATEGORIES, 0)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        default = next((c for f, c in FILES[driver].items() if rel == f or (f.endswith("/") and rel.startswith(f))),
                       "plumbing")
        source = path.read_text()
        lines = code_lines(source)
        spans = [(n, a, b) for n, a, b in named_spans(ast.parse(source)) if f"{rel}:{n}" in NAMED[driver]]
        for line in lines:
            # the innermost named span that holds the line decides (a method's entry over its class's)
            hits = [(b - a, NAMED[driver][f"{rel}:{n}"]) for n, a, b in spans if a <= line <= b]
            category = min(hits)[1] if hits else default
            totals[category] += 1
            if detail is not None and category == "plumbing":
                where = next((n for n, a, b in named_spans(ast.parse(source)) if a <= line <= b and "." not in n),
                             "(module)")
                detail[f"{rel}:{where}"] = detail.get(f"{rel}:{where}", 0) + 1
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--detail", metavar="DRIVER", help="print that driver's plumbing lines per file and name")
    args = parser.parse_args()
    if args.detail:
        detail: dict[str, int] = {}
        count(args.detail, detail)
        for where, n in sorted(detail.items(), key=lambda kv: -kv[1]):
            print(f"{n:5d}  {where}")
        return
    result = {driver: count(driver) for driver in FILES}
    if args.json:
        print(json.dumps(result))
        return
    for driver, totals in result.items():
        print(f"{driver:10s} " + "  ".join(f"{c} {totals[c]:5d}" for c in CATEGORIES))


if __name__ == "__main__":
    main()
