"""Suite `vectors`: the `nnapi cts` corpus run on the device through the public API (CTS GeneratedTests,
VTS-BEHAVIOURS 6.4): each vector compiled for this device alone and run synchronously, asynchronously,
from shared memory and from device memory, outputs compared with AOSP's tolerances; a model expected to
fail must fail. `--quick`: the stratified sample."""
from __future__ import annotations

from typing import Any, Iterator

from ..runner import run_one
from .core import Check, Fail, Kit, Skip, make, skipped
from .corpus import selection

SUITE = "vectors"


def vector(kit: Kit, test: Any) -> None:
    result = kit.call(f"running {test.name} through the runtime", run_one, test, [kit.device])
    if result.status == "failed":
        raise Fail(result.reason)
    if result.status == "skipped":
        raise Skip(result.reason)


def checks(kit: Kit) -> Iterator[Check]:
    try:
        tests = selection(kit)
    except Skip as e:
        yield skipped(SUITE, "corpus", "§6.4 CTS GeneratedTests", str(e))
        return
    for test in tests:
        yield make(SUITE, test.name, "§6.4 CTS GeneratedTests (sync, async, shared memory, device memory)", vector,
                   test)
