"""The operator families, one module each; every module registers its mappings in `registry` with
`@register(...)` when imported, and importing this package imports them all (`common` holds what
they share)."""
from . import conv, control_flow, elementwise, quantization, recurrent, reduce, shapes

__all__ = ["conv", "control_flow", "elementwise", "quantization", "recurrent", "reduce", "shapes"]
