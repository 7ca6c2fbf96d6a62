"""The XLA device's calibration (see `drivers.base.calibration`) and its backend.

The steady state it measures is the optimised executable at once, without the caching engine.
`NNAPI_XLA_PERFORMANCE=<ratio>` overrides the measurement.
"""
from __future__ import annotations

import os

from ...hal import Capabilities
from ..base import calibration


def backend() -> str:
    """"gpu" when JAX will find a CUDA/ROCm plugin (or JAX_PLATFORMS names one), else "cpu".

    Decided without importing JAX, so device discovery stays cheap in processes that never compile.
    """
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        first = platforms.split(",")[0]
        return "gpu" if first in ("cuda", "rocm", "gpu") else first
    try:
        import importlib
        import pkgutil
        plugins = importlib.import_module("jax_plugins")
        names = [m.name for m in pkgutil.iter_modules(plugins.__path__)]
    except ImportError:
        return "cpu"
    return "gpu" if any("cuda" in n or "rocm" in n for n in names) else "cpu"


def capabilities(device) -> Capabilities:
    steady = type(device)(optimize_after=0, engine=False, scheduler=device.scheduler)
    return calibration.capabilities(device, steady, variant=backend())
