"""The XLA device's backend, which its calibration is stored for (`DriverDevice.calibration_variant`).

The calibration itself is the base's (`drivers.base.calibration`); its steady state is the optimised
executable at once, without the caching engine. `NNAPI_XLA_PERFORMANCE=<ratio>` overrides it.
"""
from __future__ import annotations

import os


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
