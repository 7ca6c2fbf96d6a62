"""The quick kit's sample of the corpus (`conformance.vts.corpus.stratified`): two models per operation
type of other operand types, and for a driver none of whose picks it claims, the first model of the
operation it does claim, so a driver of a few operand types still meets corpus vectors of its own."""
from __future__ import annotations

from nnapi.conformance import vts
from nnapi.conformance.vectors import load_vectors
from nnapi.conformance.vts.corpus import stratified
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import OperandType, OperationType

from conftest import CTS


def _ops(test) -> set[str]:
    return {o["type"] for o in test.spec["main"]["operations"]}


def _float32_add_or_relu(test) -> bool:
    main = test.spec["main"]
    return _ops(test) <= {"ADD", "RELU"} and all(
        main["operands"][op["inputs"][0]]["type"] == "TENSOR_FLOAT32" for op in main["operations"])


def test_a_driver_of_one_operand_type_gets_a_model_it_claims_for_each_of_its_operations():
    tests = list(load_vectors([CTS]))
    plain = stratified(tests)
    asked: list[str] = []

    def claimed(test) -> bool:
        asked.append(test.name)
        return _float32_add_or_relu(test)

    sample = stratified(tests, claimed=claimed)
    assert {t.name for t in plain} <= {t.name for t in sample}  # (the device-independent sample is kept)
    for op in ("ADD", "RELU"):
        if not any(_float32_add_or_relu(t) for t in plain if op in _ops(t)):
            assert any(_float32_add_or_relu(t) for t in sample if op in _ops(t)), op
    assert len(sample) - len(plain) <= 2  # (at most one model more per operation it claims)
    assert len(asked) < len(tests) / 4   # (one candidate per operand type, not the whole corpus)
    assert [t.name for t in stratified(tests, claimed=_float32_add_or_relu)] == [t.name for t in sample]


class Float32AddOnly(ReferenceDevice):
    """Claims ADD of float32 tensors and nothing else."""

    NAME = "float32-add-only"

    def supported(self, model):
        return [op.type == OperationType.ADD and model.main.operands[op.inputs[0]].type == OperandType.TENSOR_FLOAT32
                for op in model.main.operations]


def test_the_quick_kit_runs_corpus_vectors_of_what_a_narrow_driver_claims():
    results = vts.run_kit(Float32AddOnly(), ["execution"], quick=True, timeout=30, vectors=CTS, in_process=True)
    corpus = [r for r in results if r.id.startswith("execution/add")]
    assert any(r.status == "passed" for r in corpus), [(r.id, r.status, r.message[:80]) for r in corpus]
    assert not [r for r in results if r.status == "failed"], [r.describe() for r in results if r.status == "failed"]
