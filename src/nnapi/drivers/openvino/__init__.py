"""The OpenVINO driver: lowers partitions to OpenVINO graphs (float and quantized, int8 kernels through
OpenVINO's low-precision pipeline), compiles them for the CPU, caches exported compiled models.

OpenVINO is imported when the driver first compiles, loads a cache or works out a claim, never when
the device is created or listed (`nnapi.devices()` stays cheap: the version comes from the package's
metadata, the capabilities from the state directory). Every module of the driver that uses OpenVINO
takes it from `backend`, which imports it.

OpenVINO's telemetry stays off: `import openvino` loads its model conversion tool, whose telemetry
sends an "import" event unless the process runs in CI. `backend` imports OpenVINO without that tool
(the driver builds its graphs itself), so the telemetry is not even imported; an app's first use of
`openvino.convert_model` imports the tool then, with CI=true for that import only
(`base.import_with_env`), so its telemetry singleton is created declined and nothing is ever sent;
no user file is touched.
"""


def create_device():
    """Entry point of the `nnapi.drivers` group."""
    from .device import OpenVinoDevice
    return OpenVinoDevice()


__all__ = ["create_device"]
