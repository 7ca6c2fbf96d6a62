"""`nnapi run MODEL [--device D] [--inputs FILE] [--save-outputs FILE] [--json] ...`: import a `.tflite`
model, compile it and run it once, saying where each partition ran and what came out."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any, Iterator

from .checks import milliseconds
from .console import Progress, tracing
from .inputs import add_model_arguments, load_inputs
from .inputs import check_model_args as check  # noqa: F401  (the table runs it before `run`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi run`."""
    add_model_arguments(parser)
    parser.add_argument("--cache-dir", help="compilation cache directory (a second run hits the cache)")
    parser.add_argument("--timeout-ms", type=milliseconds, help="execution deadline in milliseconds (0: no "
                                                                "timeout, the default)")
    parser.add_argument("--inputs", help=".npy with the model's one input, or .npz with the inputs (keys: input "
                                         "tensor names, signature names or input_0, input_1, ...); random data "
                                         "where absent")
    parser.add_argument("--save-outputs", help="write the outputs to this .npz (output_0, output_1, ... in the "
                                               "order printed, where their names are, and their signature names)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (inputs, partitions, times, outputs)")
    parser.add_argument("--trace", metavar="FILE.json", help="write a Chrome / Perfetto trace of the run to this file")


@contextlib.contextmanager
def compiling(devices: list[str] | None) -> Iterator[None]:
    """A spinner (terminal) or plain lines every few seconds while a compilation runs."""
    with Progress(f"prepare ({', '.join(devices) if devices else 'all devices'})") as progress:
        progress.update(note="compiling")
        yield


def run(args: argparse.Namespace) -> int:
    """Import, compile and run the model once; print what happened (or one JSON object)."""
    import numpy as np

    from ..bench import device_list, import_model, partitions
    from ..runtime import devices as all_devices
    from ..session import check_inputs, describe, load
    report: dict[str, Any] = {"model": args.model}
    say = (lambda *_: None) if args.json else print
    with tracing(args.trace):
        start = time.perf_counter()
        imported = import_model(args.model, getattr(args, "relaxed", False))
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
        with compiling(devices):
            compiled = load(imported, devices, cache_dir=args.cache_dir, priority=args.priority,
                            preference=args.preference)
        prepare_s = time.perf_counter() - start
        say(f"prepare {prepare_s * 1000:.1f} ms")
        rows = partitions(compiled.compilation)
        for row in rows:
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
            np.savez(f, **saved_outputs(out_infos, list(outputs.values())))
        say(f"outputs saved to {args.save_outputs}")
    if args.json:
        report.update(
            inputs=[{"name": i.name, **_signature_field(i), "shape": list(a.shape), "dtype": str(a.dtype),
                     "source": src, "converted": converted.get(i.name)} for i, a, src in zip(infos, inputs, sources)],
            unused_input_keys=unused, devices=[d.name for d in found],
            partitions=[{k: row[k] for k in ("device", "operations", "kinds", "cache", "reason")} for row in rows],
            import_ms=round(import_s * 1000, 3), prepare_ms=round(prepare_s * 1000, 3),
            execute_ms=round(execute_s * 1000, 3), timeout_ms=args.timeout_ms or None,
            outputs=[output_report(value, info) for info, value in zip(out_infos, outputs.values())],
            saved_outputs=args.save_outputs, trace=args.trace)
        print(json.dumps(report))
    return 0


def _real(array: Any, info: Any) -> Any:
    """An output's values as float64, dequantized with its scale and zero point."""
    import numpy as np
    real = np.asarray(array).reshape(-1).astype(np.float64)
    return (real - info.zero_point) * info.scale if info.scale else real


def _summary(array: Any, info: Any, top: int = 5) -> str:
    """An output in a line: dtype and shape, min / max / mean and the top values (dequantized)."""
    import numpy as np
    real = _real(array, info)
    if not real.size:
        return f"{info.label} {np.asarray(array).dtype}{list(np.shape(array))}: empty"
    order = np.argsort(-real, kind="stable")[:top]
    tops = ", ".join(f"[{int(i)}] {real[i]:.4g}" for i in order)
    return (f"{info.label} {np.asarray(array).dtype}{list(np.shape(array))}: min {real.min():.4g} "
            f"max {real.max():.4g} mean {real.mean():.4g}; top {min(top, real.size)}: {tops}")


def _signature_field(info: Any) -> dict:
    """`signature_name` for --json, where the model's signature names the input or output."""
    signature = getattr(info, "signature_name", None)
    return {"signature_name": signature} if signature else {}


def saved_outputs(infos: Any, values: list) -> dict:
    """The `--save-outputs` arrays: `output_0`, `output_1`, ... in output order, and each output's
    signature name too where the model has one that no other key already is."""
    saved = {f"output_{k}": value for k, value in enumerate(values)}
    for info, value in zip(infos, values):
        signature = getattr(info, "signature_name", None)
        if signature and signature not in saved:
            saved[signature] = value
    return saved


def output_report(array: Any, info: Any, top: int = 5) -> dict:
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
