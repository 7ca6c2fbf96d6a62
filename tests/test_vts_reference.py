"""The certification kit's HAL suites on the reference driver: every check must pass (the reference driver
claims caching, memory domains and every operation, so nothing may be skipped either).

Each kit check is one test here. The corpus-wide parts (validation, execution and vectors over the test
vectors) run as `nnapi vts --quick` in `make test` and in full in `make test-all`; here only their
checks on the kit's own models run.
"""
from __future__ import annotations

import pytest

from nnapi.conformance import vts
from nnapi.conformance.vts.core import Kit, Options, run_checks
from nnapi.drivers.reference import ReferenceDevice

from conftest import CTS

SUITES = ["caching", "memory", "domains", "qos", "validation", "execution"]


def _kit() -> Kit:
    return Kit(vts.device_for(ReferenceDevice()), Options(quick=False, timeout=60, vectors=None))


def _checks() -> list[vts.Check]:
    """The checks that need no vector corpus (collection only: nothing runs)."""
    kit = _kit()
    try:
        return [c for c in vts.collect(kit, SUITES) if c.id not in ("validation/corpus", "execution/corpus")]
    finally:
        kit.close()


CHECKS = _checks()


@pytest.fixture(scope="module")
def kit():
    from pathlib import Path
    k = _kit()
    k.options.vectors = Path(CTS)   # the QoS deadline and loop checks use a few named vectors
    yield k
    k.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_reference_driver_passes(kit, check):
    (result,) = run_checks(kit, [check])
    assert result.status == "passed", result.describe()


def test_every_suite_is_represented():
    assert {c.suite for c in CHECKS} == set(SUITES)
    assert len(CHECKS) > 400
