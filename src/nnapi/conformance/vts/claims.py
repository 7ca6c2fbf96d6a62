"""What the driver claims of the kit's own models, asked once before the checks run: the header of
`nnapi vts` lists it, so a driver whose claims make whole suites skip is seen at the first line (and
an exception behind a claim, which the driver base would turn into "nothing supported", is named)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...hal import NnError
from .core import Fail, Kit, model_operations, status_name
from .models import (CACHING_MODELS, DOMAIN_TYPES, add_model, add_relu_model, alternating_chain_subject, conv_model,
                     dynamic_relu_model, op_chain)


@dataclass
class Claim:
    """One kit model: where the kit uses it, its operations, and the driver's answer."""

    model: str
    suites: str
    operations: str
    supported: bool = False
    problem: str = ""        # an error, a crash or a hang instead of flags

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "suites": self.suites, "operations": self.operations,
                "supported": self.supported, **({"problem": self.problem} if self.problem else {})}


def _kit_models() -> list[tuple[str, str, Callable[[], Any]]]:
    """(label, suites, builder of a finished runtime `Model`) for each model the kit's own checks run."""
    from ...hal import OperationType as Op
    models: list[tuple[str, str, Callable[[], Any]]] = [
        ("ADD + RELU float32", "memory, execution", add_relu_model),
        ("RELU of unknown dimensions", "memory, execution", dynamic_relu_model),
        ("ADD / MUL chain float32", "qos, execution", lambda: alternating_chain_subject(10).model),
    ]
    for name, build in CACHING_MODELS.items():
        models.append((f"caching model {name}", "caching", lambda build=build: build().model))
    for quant in (False, True):
        models.append((f"MUL chain {'quant8' if quant else 'float32'}", "caching",
                       lambda quant=quant: op_chain(Op.MUL, quant).model))
    for t in DOMAIN_TYPES:
        models.append((f"CONV_2D {t.name}", "domains", lambda t=t: conv_model(t)))
        models.append((f"ADD {t.name}", "domains", lambda t=t: add_model(t)))
    return models


def claims(kit: Kit) -> list[Claim]:
    """The driver's answer to get_supported_operations for each of the kit's models (never raises)."""
    found = []
    for label, suites, build in _kit_models():
        owner = build()            # (the runtime model owns the memory of the constants)
        model = owner.to_hal()
        claim = Claim(label, suites, model_operations(model))
        try:
            flags = kit.call("get_supported_operations", kit.driver.get_supported_operations, model)
            claim.supported = isinstance(flags, (list, tuple)) and len(flags) == len(model.main.operations) \
                and all(flags)
            if not isinstance(flags, (list, tuple)) or len(flags) != len(model.main.operations):
                claim.problem = f"returned {flags!r}, not one flag per operation"
        except NnError as e:
            claim.problem = f"{status_name(e.status)}: {e.message}"
        except Fail as e:   # a crash or a hang
            claim.problem = str(e).removeprefix("get_supported_operations: ").removeprefix("get_supported_operations ")
        found.append(claim)
    return found


def describe(found: list[Claim]) -> str:
    """One line for the header: how many of the kit's models are supported, which not, which failed."""
    ok = sum(c.supported for c in found)
    text = f"claims: {ok} of {len(found)} of the kit's models fully supported"
    missing = [f"{c.model} ({c.suites})" for c in found if not c.supported and not c.problem]
    if missing:
        text += "; not supported: " + ", ".join(missing)
    broken = [f"{c.model}: {c.problem.split(' (')[0]}" for c in found if c.problem]
    if broken:
        text += "; get_supported_operations failed on " + "; ".join(broken)
    return text
