"""A stratified sample of the conformance vectors on the OpenVINO driver (the full run is
`nnapi cts ../shared/cts --device openvino`): every vector the driver claims must pass in every
variation (sync, async, shared memory, memory domains), float and quantized alike."""
from __future__ import annotations

import os
from collections import defaultdict

import pytest

from nnapi.conformance import load_vectors, run_vectors

from conftest import CTS

SAMPLE = 400
#: Operation families whose quantized vectors the driver must claim (issue 16).
QUANTIZED_FAMILIES = ("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D", "ADD", "MUL", "SUB",
                      "FULLY_CONNECTED")


def _quantized(test) -> bool:
    graphs = [test.spec["main"], *test.spec["referenced"]]
    return any("QUANT8" in o["type"] for g in graphs for o in g["operands"])


def stratified_sample(n: int = SAMPLE) -> list:
    """Vectors spread over (operation set, quantized or not): round-robin over the groups, evenly
    spaced inside each."""
    groups: dict[tuple, list] = defaultdict(list)
    for test in load_vectors([CTS]):
        groups[(tuple(test.operations), _quantized(test))].append(test)
    queues = [members[::max(1, len(members) // 4)] for _, members in sorted(groups.items())]
    picked, depth = [], 0
    while len(picked) < n and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(picked) < n:
                picked.append(q[depth])
        depth += 1
    return picked


@pytest.mark.skipif(not os.path.isdir(CTS), reason="shared/cts is not present")
def test_stratified_cts_sample_passes_on_openvino():
    tests = stratified_sample()
    results = run_vectors(tests, "openvino")
    failed = [f"{r.name}: {r.reason}" for r in results if r.status == "failed"]
    passed = [r for r in results if r.status == "passed"]
    assert not failed, "\n".join(failed[:20])
    assert len(passed) >= len(tests) // 2, f"only {len(passed)} of {len(tests)} sampled vectors were claimed"
    assert len({op for r in passed for op in r.operations}) >= 40  # spread over operations


@pytest.mark.skipif(not os.path.isdir(CTS), reason="shared/cts is not present")
@pytest.mark.parametrize("family", QUANTIZED_FAMILIES)
def test_quantized_vectors_of_the_main_families_are_claimed_and_pass(family):
    """Every quantized vector made of one of these operations (with the generator's ADD of an
    internal input) that uses constant weights is claimed, and passes."""
    tests = [t for t in load_vectors([CTS]) if _quantized(t) and not t.expect_failure
             and set(t.operations) <= {family, "ADD"} and family in t.operations
             and "all_tensors_as_inputs" not in t.name and "weights_as_inputs" not in t.name]
    tests = tests[::max(1, len(tests) // 40)]
    results = run_vectors(tests, "openvino")
    bad = [f"{r.name}: {r.status} {r.reason}" for r in results if r.status != "passed"]
    assert tests and not bad, "\n".join(bad[:20])
