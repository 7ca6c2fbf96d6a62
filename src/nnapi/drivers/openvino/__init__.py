"""The OpenVINO driver: lowers partitions to OpenVINO graphs (float and quantized, int8 kernels through
OpenVINO's low-precision pipeline), compiles them for the CPU, caches exported compiled models.

OpenVINO is imported when the driver first compiles, loads a cache or works out a claim, never when
the device is created or listed (`nnapi.devices()` stays cheap: the version comes from the package's
metadata, the capabilities from the state directory). `import_openvino` does it, and every module of
the driver that uses OpenVINO is imported through it.

OpenVINO's telemetry stays off: `import openvino` loads its conversion tools, which send an "import"
event unless the process runs in CI. `import_openvino` imports it with CI=true for the duration of that
import only, so the telemetry singleton is created declined and nothing is ever sent; no user file is
touched.
"""
from __future__ import annotations

import os
import sys


def import_openvino() -> None:
    """Import OpenVINO (once) with its telemetry declined (see the module doc)."""
    if "openvino" in sys.modules:
        return
    saved = os.environ.get("CI")
    os.environ["CI"] = "true"
    try:
        import openvino  # noqa: F401
    finally:
        if saved is None:
            os.environ.pop("CI", None)
        else:
            os.environ["CI"] = saved


def create_device():
    """Entry point of the `nnapi.drivers` group."""
    from .device import OpenVinoDevice
    return OpenVinoDevice()


__all__ = ["create_device", "import_openvino"]
