"""OpenVINO itself, imported once with its telemetry declined (see the package doc): every module of the
driver that uses OpenVINO takes `ov` and `ops` (opset16) from here, and nothing imports this module
before the driver first claims, compiles or loads."""
from ..base import import_with_env

import_with_env("openvino", CI="true")  # (the telemetry singleton is created declined; nothing is sent)
import openvino as ov  # noqa: E402
import openvino.opset16 as ops  # noqa: E402

__all__ = ["ov", "ops"]
