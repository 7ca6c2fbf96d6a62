"""The OpenVINO driver: lowers partitions to OpenVINO graphs (float and quantized, int8 kernels through
OpenVINO's low-precision pipeline), compiles them for the CPU, caches exported compiled models.

OpenVINO is imported when the driver first compiles, loads a cache or works out a claim, never when
the device is created or listed (`nnapi.devices()` stays cheap: the version comes from the package's
metadata, the capabilities from the state directory). Every module of the driver that uses OpenVINO
takes it from `backend`, which imports it.

OpenVINO's telemetry stays off: `import openvino` loads its conversion tools, which send an "import"
event unless the process runs in CI. `backend` imports it with CI=true for the duration of that import
only (`base.import_with_env`), so the telemetry singleton is created declined and nothing is ever sent;
no user file is touched.
"""


def create_device():
    """Entry point of the `nnapi.drivers` group."""
    from .device import OpenVinoDevice
    return OpenVinoDevice()


__all__ = ["create_device"]
