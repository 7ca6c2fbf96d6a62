"""`nnapi devices [--json] [--calibrate]`: the devices the runtime finds, with their capabilities, and
the installed drivers left out (and why)."""
from __future__ import annotations

import argparse
import json

from .console import log, stdout_console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `nnapi devices`."""
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure every device's performance again (the figures placement starts from)")


def run(args: argparse.Namespace) -> int:
    """List the devices: a table, or JSON with `--json`."""
    from rich.table import Table

    from ..runtime import devices
    from ..runtime.devices import dropped_devices
    if args.calibrate:
        from ..drivers.base import calibration
        from ..runtime import device_records
        calibration.forget()
        device_records.forget()  # (a record holds the capabilities the old calibration gave)
        log.info("stored calibrations and device records dropped: every device measures again")
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
    from ..hal import OperandType
    for d in devs:
        table.add_row(d.name, d.version, d.type.name, str(d.feature_level), str(d.cache_files),
                      f"{d.capabilities.performance(OperandType.TENSOR_FLOAT32).exec_time:g}", d.where)
    console = stdout_console()
    console.print(table)
    for name, why in sorted(dropped_devices().items()):  # (installed, but not a device: why)
        console.print(f"left out: {name}: {why}", markup=False)
    return 0
