"""The certification kit against deliberately broken drivers (tests/broken_drivers): each breaks exactly one
behaviour, and the kit must fail it in the check that owns that behaviour, with a message that names what
it broke; a driver that only delegates to the reference driver passes."""
from __future__ import annotations

import pytest

from nnapi.conformance import vts

from broken_drivers import BROKEN, Broken, Delegating
from conftest import CTS


def _failures(results):
    return [r for r in results if r.status == "failed"]


@pytest.mark.parametrize("broken", BROKEN, ids=lambda b: b.driver.NAME)
def test_the_kit_fails_each_broken_driver_where_it_broke(broken: Broken):
    """In the kit's process (a driver object), or hosted in a process of its own when it would end or fork
    the kit's."""
    driver = f"broken_drivers:{broken.driver.__name__}" if broken.hosted else broken.driver()
    results = vts.run_kit(driver, [broken.suite], k=broken.k, timeout=broken.timeout, vectors=CTS)
    assert results, f"no check of {broken.suite} matches {broken.k!r}"
    failures = _failures(results)
    assert failures, f"{broken.driver.__name__} passed {[r.id for r in results]}"
    assert any(broken.fragment in r.message for r in failures), [r.describe() for r in failures]
    for r in failures:   # every failure names the behaviour it mirrors
        assert r.behaviour.startswith("§") and r.describe().startswith(f"FAILED {r.id} [{r.behaviour}]: ")


@pytest.mark.parametrize("broken", BROKEN, ids=lambda b: b.driver.NAME)
def test_the_same_checks_pass_the_delegating_driver(broken: Broken):
    """What fails each broken driver passes a driver that only delegates: the failure is the broken thing."""
    results = vts.run_kit(Delegating(), [broken.suite], k=broken.k, timeout=30, vectors=CTS)
    assert results and not _failures(results), [r.describe() for r in _failures(results)]
    assert any(r.status == "passed" for r in results)


def test_the_whole_quick_kit_passes_the_delegating_driver():
    results = vts.run_kit(Delegating(), quick=True, timeout=60, vectors=CTS)
    assert not _failures(results), [r.describe() for r in _failures(results)][:10]
    counts = vts.summarize(results)
    assert counts["passed"] > 500 and set(vts.per_suite(results)) == set(vts.SUITES)


def test_a_driver_that_crashes_is_a_failure_of_the_driver_not_of_the_kit():
    """Every suite keeps going after a driver raises plain exceptions everywhere."""
    class Crashing(Delegating):
        NAME = "broken-crashing"

        def get_supported_operations(self, model):
            raise ZeroDivisionError("boom")

    results = vts.run_kit(Crashing(), ["memory"], k="io-pool[ashmem]", timeout=10, vectors=CTS)
    assert results and all(r.status == "failed" for r in results)
    assert all("get_supported_operations raised ZeroDivisionError: boom" in r.message for r in results)
