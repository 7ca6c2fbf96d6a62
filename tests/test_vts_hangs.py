"""A driver that hangs costs the kit one full `--timeout` and then little: the waits share one budget
(`core.Hangs`), so later checks of the kind that hung fail fast, each naming the first hang."""
from __future__ import annotations

import time

import pytest

from nnapi.conformance import vts
from nnapi.conformance.vts.core import Hangs

from broken_drivers import NeverCallsBack, PrepareHangs
from conftest import CTS

pytestmark = pytest.mark.timing


def test_callbacks_that_never_come_cost_one_timeout_and_then_fail_fast_naming_the_first_hang():
    timeout = 3.0
    start = time.monotonic()
    results = vts.run_kit(NeverCallsBack(), ["memory", "qos", "execution"], quick=True, timeout=timeout, vectors=CTS)
    elapsed = time.monotonic() - start
    hung = [r for r in results if "never came" in r.message]
    assert len(hung) > 100, len(hung)
    first, later = hung[0], hung[1:]
    assert f"never came (waited {timeout:g} s)" in first.message and "not waited for longer" not in first.message
    assert all(f"already hung in {first.id} (waited {timeout:g} s there)" in r.message for r in later), \
        [r.describe() for r in later if first.id not in r.message][:3]
    # one full wait, the grace the kit allows after it, and a few milliseconds per later check
    waited = sum(r.seconds for r in hung)
    assert waited < timeout + Hangs.GRACE_TOTAL_S + Hangs.GRACE_S + len(later) * 0.2, waited
    assert elapsed < 120, elapsed


def test_a_prepare_model_that_hangs_fails_every_suite_within_minutes():
    start = time.monotonic()
    results = vts.run_kit(PrepareHangs(), quick=True, timeout=3, vectors=CTS)
    elapsed = time.monotonic() - start
    failed = [r for r in results if r.status == "failed"]
    assert len(failed) > 0.9 * len(results) > 700
    assert sum("did not return within" in r.message for r in failed) > 0.8 * len(failed)
    assert "prepare_model with cache handles did not return within 3 s" in failed[0].message
    assert elapsed < 150, elapsed


def test_the_budget_gives_the_first_hang_the_full_limit_and_other_kinds_what_is_left():
    hangs = Hangs(60.0)
    assert hangs.limit("a") == (60.0, "")
    hangs.hung("a", "prepare_model", "caching/x", 60.0)
    limit, note = hangs.limit("a")
    assert limit == Hangs.GRACE_S and "prepare_model already hung in caching/x (waited 60 s there)" in note
    assert hangs.limit("b")[0] == 15.0                        # another kind: a quarter of the limit, shared
    hangs.hung("b", "execute", "memory/y", 15.0)
    assert hangs.limit("c")[0] == Hangs.FLOOR_S               # ... and at least FLOOR_S once that is spent
    for _ in range(10):
        hangs.hung("a", "prepare_model", "caching/z", 1.0)
    assert hangs.limit("a")[0] == Hangs.FAST_S                # the kit's grace spent: fail fast
    assert [h["check"] for h in hangs.summary()] == ["caching/x", "memory/y"]
