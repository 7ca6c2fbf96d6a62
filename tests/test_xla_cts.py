"""A stratified sample of the conformance vectors on the XLA driver (the full run is
`nnapi cts ../shared/cts --device xla`): every vector the driver claims must pass in every variation."""
from __future__ import annotations

import copy
import os
from collections import defaultdict

import pytest

from nnapi.conformance import load_vectors, run_vectors
from nnapi.conformance.vectors import TestModel as Vector

from conftest import CTS

SAMPLE = 300


def _float_only(test) -> bool:
    """No quantized operand in any subgraph (IF / WHILE bodies included)."""
    graphs = [test.spec["main"], *test.spec["referenced"]]
    return not any("QUANT" in o["type"] for g in graphs for o in g["operands"])


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


def weights_as_constants(test: Vector) -> Vector:
    """The vector with every main input but the first turned into a constant (an omitted one into
    NO_VALUE), as in a real model, where recurrent weights and states are constants: the XLA
    driver does not claim optional operands the request could omit."""
    spec = copy.deepcopy(test.spec)
    main = spec["main"]
    for i in main["inputs"][1:]:
        operand = main["operands"][i]
        operand["lifetime"] = "CONSTANT_REFERENCE" if operand["data"] is not None else "NO_VALUE"
    main["inputs"] = main["inputs"][:1]
    return Vector(test.name + "_weights_as_constants", test.source, spec)


RECURRENT = ("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "RNN",
             "UNIDIRECTIONAL_SEQUENCE_RNN")


@pytest.mark.skipif(not os.path.isdir(CTS), reason="shared/cts is not present")
def test_recurrent_cells_with_constant_weights_pass_on_xla():
    """The recurrent lowerings (the shared `_lstm_cell` / `_rnn` kernels traced with jax.numpy,
    under lax.scan for sequences) against Android's expected values."""
    tests = [weights_as_constants(t) for t in load_vectors([CTS]) if _float_only(t) and not t.expect_failure
             and set(t.operations) & set(RECURRENT) and not t.name.endswith("all_inputs_as_internal")]
    results = run_vectors(tests, "xla")
    failed = [f"{r.name}: {r.reason}" for r in results if r.status == "failed"]
    assert not failed, "\n".join(failed[:20])
    claimed = {op for r in results if r.status == "passed" for op in r.operations}
    assert claimed >= set(RECURRENT), f"not claimed: {set(RECURRENT) - claimed}"


def test_optional_inputs_the_request_may_omit_are_not_claimed():
    """An LSTM whose optional weights are model inputs: the app may omit them per execution, which
    a compiled program cannot follow, so the XLA driver leaves the operation to the reference."""
    import nnapi
    from nnapi.conformance.vectors import build
    test = next(t for t in load_vectors([CTS], "lstm") if t.spec["main"]["operations"][0]["type"] == "LSTM"
                and _float_only(t))
    xla = next(d for d in nnapi.devices() if d.name == "xla")
    assert xla.supported_operations(build(test).model) == [False]
    assert xla.supported_operations(build(weights_as_constants(test)).model) == [True]
