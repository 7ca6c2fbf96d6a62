"""Issue 33: faults no single check owned are caught wherever they show. A driver that writes into the app's
inputs fails every check that executes (and is named for it); the driver base hands drivers read-only inputs;
an exception behind a driver's claims fails the check instead of turning into skips; a driver that asks for
cache files but caches nothing fails the caching checks instead of skipping them."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.conformance import vts
from nnapi.conformance.vts.claims import claims, describe
from nnapi.drivers.base.binding import Binding
from nnapi.drivers.reference import ReferenceDevice
from nnapi.hal import DataLocation, MemoryPool, Request, RequestArgument
from nnapi.memory import map_pool
from nnapi.memory.domains import RequestBuffers

from broken_drivers import CachesNothing, Delegating, RaisingClaims, WritesInputs
from conftest import CTS, add_relu_model


def _failed(results):
    return [r for r in results if r.status == "failed"]


# --- 1: every execution checks that its inputs are unchanged ---------------------------------------------------
@pytest.mark.parametrize("suite, k", [("execution", "timing-no]"), ("memory", "io-pool["), ("qos", "deadline-execute[add][unlimited]"),
                                      ("caching", "save-and-retrieve[float32]"), ("domains", "execution-round-trip[TENSOR_FLOAT32]")])
def test_a_driver_that_writes_its_inputs_fails_every_check_that_executes_naming_the_input(suite, k):
    results = vts.run_kit(WritesInputs(), [suite], k=k, timeout=10, vectors=CTS)
    executing = [r for r in results if r.status != "skipped"]
    assert executing and _failed(executing) == executing, [r.describe() for r in executing]
    assert all("input 0 was written" in r.message and "a constant" not in r.message for r in executing), \
        [r.describe() for r in executing]
    assert vts.run_kit(Delegating(), [suite], k=k, timeout=10, vectors=CTS)[0].status == "passed"


def test_each_executor_is_named_when_it_wrote_the_input():
    results = vts.run_kit(WritesInputs(), ["execution"], k="timing-no]", timeout=10, vectors=CTS)
    assert [r.message.split(":")[0] for r in results] == ["sync execution", "async execution", "fenced execution",
                                                          "burst execution", "reusable execution"]


# --- 2: the base's inputs are read-only views -------------------------------------------------------------------
def test_the_bases_inputs_are_read_only_views_of_the_request_memory_so_numpy_refuses_a_write():
    model = add_relu_model().to_hal()
    a, b, out = np.arange(4, dtype=np.float32), np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(1, 16, 16))],
                      [RequestArgument(False, DataLocation(2, 0, 16))],
                      [MemoryPool(pointer=a), MemoryPool(pointer=b), MemoryPool(pointer=out)])
    binding = Binding(model, request, [map_pool(p) for p in request.pools], RequestBuffers(), None, None, None)
    for k, app, want in ((0, a, [0, 1, 2, 3]), (1, b, [4, 5, 6, 7])):
        x = binding.input(k)
        assert not x.flags.writeable and np.shares_memory(x, app) and x.tolist() == want   # a view, no copy
        with pytest.raises(ValueError, match="read-only"):
            x[0] = 42
        assert app.flags.writeable and app.tolist()[:1] != [42]   # the app's own array is left as it was
    assert binding.input(0) is binding.input(0)   # a whole app array: the same view each time (drivers keep
    #                                              a tensor set up over an input and compare identity)


def test_the_reference_driver_still_runs_on_read_only_inputs():
    results = vts.run_kit(ReferenceDevice(), ["memory"], k="io-pool[", timeout=30, vectors=CTS)
    assert results and not _failed(results), [r.describe() for r in _failed(results)]


# --- 3: claims --------------------------------------------------------------------------------------------------
def test_an_exception_in_supported_fails_the_check_naming_the_operations_not_a_skip():
    results = vts.run_kit(RaisingClaims(), ["memory", "execution"], k="[sync]", timeout=10, vectors=CTS)
    relu = [r for r in results if r.id in ("memory/io-pool[ashmem][sync]", "execution/dynamic-output-shape[sync]")]
    assert len(relu) == 2 and all(r.status == "failed" for r in relu), [r.describe() for r in relu]
    assert "the driver's supported() raised KeyError: 'no claim rule for RELU' on a model of ADD, RELU" in \
        relu[0].message
    assert "on a model of RELU" in relu[1].message
    assert not [r for r in results if r.status == "skipped"]


def test_the_header_lists_what_the_driver_claims_of_the_kits_models():
    for driver, want in ((ReferenceDevice(), "claims: 15 of 15 of the kit's models fully supported"),
                         (RaisingClaims(), "claims: 13 of 15")):
        kit = vts.Kit(vts.device_for(driver))
        try:
            found = claims(kit)
        finally:
            kit.close()
        assert len(found) == 15 and describe(found).startswith(want), describe(found)
    broken = [c for c in found if c.problem]
    assert [c.model for c in broken] == ["ADD + RELU float32", "RELU of unknown dimensions"]
    assert all("supported() raised KeyError" in c.problem for c in broken)


# --- 4: caching claimed but never done --------------------------------------------------------------------------
def test_a_driver_that_asks_for_cache_files_but_caches_nothing_fails_the_caching_checks():
    results = vts.run_kit(CachesNothing(), ["caching"], k="[float32]", timeout=10, vectors=CTS)
    results += vts.run_kit(CachesNothing(), ["qos"], k="deadline-prepare-from-cache", timeout=10, vectors=CTS)
    needing = [r for r in results if "empty-vectors" not in r.id and "compile-twice" not in r.id]
    assert needing and all(r.status == "failed" for r in needing), [r.describe() for r in needing]
    assert all("cached none of the kit's models" in r.message for r in needing)
    assert "a driver that caches nothing reports (0, 0)" in needing[0].message
