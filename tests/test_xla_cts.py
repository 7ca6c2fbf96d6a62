"""A stratified sample of the conformance vectors on the XLA driver (the full run is
`nnapi cts ../shared/cts --device xla`): every vector the driver claims must pass in every variation."""
from __future__ import annotations

import os
from collections import defaultdict

import pytest

from nnapi.conformance import load_vectors, run_vectors

from conftest import CTS

SAMPLE = 300


def _float_only(test) -> bool:
    graphs = [test.spec["main"], *test.spec["referenced"]]
    return not test.spec["referenced"] and not any("QUANT" in o["type"] for g in graphs for o in g["operands"])


def stratified_sample(n: int = SAMPLE) -> list:
    """Float vectors spread over operation sets: round-robin over the groups, evenly spaced inside each."""
    groups: dict[tuple[str, ...], list] = defaultdict(list)
    for test in load_vectors([CTS]):
        if _float_only(test):
            groups[tuple(test.operations)].append(test)
    queues = []
    for key in sorted(groups):
        members = groups[key]
        step = max(1, len(members) // 4)
        queues.append(members[::step])
    picked = []
    depth = 0
    while len(picked) < n and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(picked) < n:
                picked.append(q[depth])
        depth += 1
    return picked


@pytest.mark.skipif(not os.path.isdir(CTS), reason="shared/cts is not present")
def test_stratified_cts_sample_passes_on_xla():
    tests = stratified_sample()
    results = run_vectors(tests, "xla")
    failed = [f"{r.name}: {r.reason}" for r in results if r.status == "failed"]
    passed = [r for r in results if r.status == "passed"]
    assert not failed, "\n".join(failed[:20])
    assert len(passed) >= 150, f"only {len(passed)} of {len(tests)} sampled vectors were claimed by xla"
    assert len({op for r in passed for op in r.operations}) >= 40   # spread over operations
