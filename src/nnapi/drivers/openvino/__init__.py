"""The OpenVINO driver: lowers partitions to OpenVINO graphs (float and quantized, int8 kernels through
OpenVINO's low-precision pipeline), compiles them for the CPU, caches exported compiled models.

OpenVINO's telemetry stays off: `import openvino` loads its conversion tools, which send an "import"
event unless the process runs in CI. This package imports OpenVINO first (every module of the driver
imports it after this one), with CI=true for the duration of that import only, so the telemetry
singleton is created declined and nothing is ever sent; no user file is touched.
"""
from __future__ import annotations

import os
import sys


def _import_openvino_quietly() -> None:
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


_import_openvino_quietly()


def create_device():
    """Entry point of the `nnapi.drivers` group."""
    from .device import OpenVinoDevice
    return OpenVinoDevice()


__all__ = ["create_device"]
