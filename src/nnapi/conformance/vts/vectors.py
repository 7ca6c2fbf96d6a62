"""Suite `vectors`: the `nnapi cts` corpus run on the device through the public API (CTS GeneratedTests,
VTS-BEHAVIOURS 6.4): each vector compiled for this device alone and run synchronously, asynchronously,
from shared memory and from device memory, outputs compared with AOSP's tolerances; a model expected to
fail must fail. `--quick`: the stratified sample."""
from __future__ import annotations

from typing import Any, Iterator

from ..runner import run_one
from .core import Check, Fail, Kit, Skip, make, skipped
from .corpus import case, selection

SUITE = "vectors"


def vector(kit: Kit, test: Any) -> None:
    result = kit.call(f"running {test.name} through the runtime", run_one, test, [kit.device],
                      kind="running a vector through the runtime")
    if result.status == "failed":
        raise Fail(result.reason)
    if result.status == "skipped":
        _claim_holds(kit, test, result.reason)
        raise Skip(result.reason)


def _claim_holds(kit: Kit, test: Any, reason: str) -> None:
    """Before a vector is skipped as unsupported: the driver's own claim on it must have worked (the runtime
    takes a claim that fails, with an error, a crash or a hang, for "supports nothing")."""
    try:
        c = case(test)
    except Fail:
        return
    try:
        kit.supports(c.model, test.name)
    except Skip:
        return
    except Fail as e:
        raise Fail(f"{e} (the runtime skipped the vector: {reason})") from None


def checks(kit: Kit) -> Iterator[Check]:
    try:
        tests = selection(kit)
    except Skip as e:
        yield skipped(SUITE, "corpus", "§6.4 CTS GeneratedTests", str(e))
        return
    for test in tests:
        yield make(SUITE, test.name, "§6.4 CTS GeneratedTests (sync, async, shared memory, device memory)", vector,
                   test)
