"""OpenVINO itself, imported once with its telemetry declined (see the package doc): every module of the
driver that uses OpenVINO takes `ov` and `ops` (opset16) from here, and nothing imports this module
before the driver first claims, compiles or loads.

`import openvino` also imports its model conversion tool (`openvino.tools.ovc`, for `ov.convert_model`)
and the tool's telemetry: 0.07 to 0.1 s of its 0.1 to 0.14 s on a 2-core AMD EPYC, for a tool the
driver never uses (it builds `ov.Model`s itself). The driver imports OpenVINO without it, and
`ov.convert_model` stays there for an app that uses it: the tool is imported at its first use."""
import sys
from typing import Callable

from ..base import import_with_env


def _import() -> None:
    """Import OpenVINO, its conversion tool left for first use (when this process has not imported it)."""
    if "openvino" in sys.modules:
        return
    blocked = "openvino.tools.ovc" not in sys.modules
    if blocked:
        sys.modules["openvino.tools.ovc"] = None  # type: ignore[assignment]  (openvino skips it on ImportError)
    try:
        import_with_env("openvino", CI="true")  # (the telemetry singleton is created declined; nothing is sent)
    finally:
        if blocked:
            del sys.modules["openvino.tools.ovc"]
    package = sys.modules["openvino"]
    if blocked and not hasattr(package, "convert_model") and not hasattr(package, "__getattr__"):
        package.__getattr__ = _convert_model_on_first_use  # type: ignore[attr-defined]  (PEP 562)


def _convert_model_on_first_use(name: str) -> object:
    """`openvino.convert_model`, imported from its tool the first time an app asks for it."""
    if name != "convert_model":
        raise AttributeError(f"module 'openvino' has no attribute {name!r}")
    import_with_env("openvino.tools.ovc", CI="true")
    from openvino.tools.ovc import convert_model
    sys.modules["openvino"].convert_model = convert_model  # type: ignore[attr-defined]
    return convert_model


_import()
import openvino as ov  # noqa: E402
import openvino.opset16 as ops  # noqa: E402



def infer_call(request: "ov.InferRequest") -> Callable[[], object]:
    """`request.infer(share_outputs=True)` over the tensors set on it, as one call of the compiled class it
    wraps: without the Python wrapper's input dispatch and result dictionary (about 1 us of the 5 a tiny
    model's inference takes); the public call where the wrapper is not built that way."""
    base = type(request).__bases__[0]
    raw = getattr(base, "infer", None) if base.__module__.startswith("openvino") else None
    if raw is None:
        return lambda: request.infer(share_outputs=True)
    inputs: dict = {}
    return lambda: raw(request, inputs, True, False)


__all__ = ["infer_call", "ov", "ops"]
