"""Regressions of the adversarial audit (issue 17): each test failed before its fix.

Planted symlinks in a cache directory, timeouts beyond any clock, tensors known only at run time
that exceed the memory limit, a sampling ratio of 2^31 - 1, an unusable state directory, one token
cached in two directories, a cache another process has not finished writing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice
from nnapi.drivers.xla import XlaDevice
from nnapi.runtime.cache_files import base_name, content_fingerprint, device_token

TOKEN = bytes(range(32))
DEVICES = ["reference", "xla"]


def add_model(size: int = 64) -> nnapi.Model:
    """y = x + c with a constant of `size` floats (so the data cache has content)."""
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (size,))
    c = m.add_operand(T.TENSOR_FLOAT32, (size,))
    m.set_operand_value(c, np.arange(size, dtype=np.float32))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    y = m.add_operand(T.TENSOR_FLOAT32, (size,))
    m.add_operation(Op.ADD, [x, c, act], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def _device(name: str):
    return next(d for d in nnapi.devices() if d.name == name)


def _paths(tmp_path, model: nnapi.Model, device_name: str) -> tuple[str, str]:
    """The model-cache and data-cache file of the model's one partition on `device_name`."""
    d = _device(device_name)
    token = device_token(TOKEN, None, d.name, d.version, nnapi.ExecutionPreference.FAST_SINGLE_ANSWER,
                         nnapi.Priority.MEDIUM, content_fingerprint(model.to_hal()))
    base = os.path.join(tmp_path, base_name(token))
    return base + "10", base + "20"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["model", "data"])
@pytest.mark.parametrize("when", ["before the first compile", "after a save"])
def test_a_planted_symlink_is_never_followed(tmp_path, device, which, when):
    model = add_model()
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "passwd-copy"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    target = _paths(cache, model, device)[0 if which == "model" else 1]
    if when == "after a save":
        nnapi.Compilation(model, devices=[device], cache_dir=cache, token=TOKEN).finish()
        os.unlink(target)
    os.symlink(victim, target)
    x = np.ones(64, np.float32)
    c = nnapi.Compilation(model, devices=[device], cache_dir=cache, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "miss", c.cache_outcomes
    np.testing.assert_array_equal(c.execute([x])[0], x + np.arange(64))
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"      # untouched
    assert not os.path.islink(target) and os.path.isfile(target)            # our entry, replaced
    again = nnapi.Compilation(model, devices=[device], cache_dir=cache, token=TOKEN).finish()
    assert again.cache_outcomes[0].outcome == "hit"
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"


def test_a_hard_link_to_another_file_is_not_written(tmp_path):
    model = add_model()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    cache = tmp_path / "cache"
    cache.mkdir()
    os.link(victim, _paths(cache, model, "reference")[0])
    c = nnapi.Compilation(model, devices=["reference"], cache_dir=cache, token=TOKEN).finish()
    assert c.cache_outcomes[0].outcome == "miss"
    assert victim.read_bytes() == b"keep me"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("timeout", [1e300, float("inf"), 10**400, 1e10])
def test_timeouts_beyond_any_clock_mean_no_deadline(device, timeout):
    model = add_model(4)
    c = nnapi.Compilation(model, devices=[device], timeout=timeout).finish()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(c.execute([x], timeout=timeout)[0], x + np.arange(4))
    e = nnapi.Execution(c)
    e.set_loop_timeout(timeout)
    e.set_input(0, x)
    e.set_output(0, np.empty(4, np.float32))
    e.compute(timeout=timeout)


@pytest.mark.parametrize("timeout", [-1, float("nan"), "1", True])
def test_invalid_timeouts_are_bad_data(timeout):
    with pytest.raises(nnapi.NnError) as err:
        nnapi.Compilation(add_model(4), timeout=timeout)
    assert err.value.code == nnapi.ResultCode.BAD_DATA


def tile_model() -> nnapi.Model:
    """TILE of a [4] float tensor by multiples given at run time: the output size is known only then."""
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (4,))
    multiples = m.add_operand(T.TENSOR_INT32, (1,))
    y = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.TILE, [x, multiples], [y])
    m.identify_inputs_and_outputs([x, multiples], [y])
    m.finish()
    return m


def test_a_tensor_known_only_at_run_time_is_held_to_the_memory_limit():
    limit = 64 << 20
    device = nnapi.register_device(ReferenceDevice(memory_limit_bytes=limit))
    try:
        c = nnapi.Compilation(tile_model(), devices=[device]).finish()
        ok = c.execute([np.ones(4, np.float32), np.array([1000], np.int32)])[0]   # 16 KB: fine
        assert ok.shape == (4000,)
        with pytest.raises(nnapi.NnError) as err:                                  # 512 MiB > 64 MiB
            c.execute([np.ones(4, np.float32), np.array([(512 << 20) // 16], np.int32)])
        assert err.value.status == nnapi.ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
        assert "TILE" in err.value.message and str(limit) in err.value.message
    finally:
        nnapi.register_device(ReferenceDevice())


def test_a_tensor_larger_than_the_machine_allows_is_refused_before_allocating():
    """2^32 elements (16 GiB) without a configured limit: refused, never a MemoryError or an OOM kill."""
    c = nnapi.Compilation(tile_model()).finish()
    with pytest.raises(nnapi.NnError) as err:
        c.execute([np.ones(4, np.float32), np.array([2**30], np.int32)])
    assert err.value.status == nnapi.ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT


def roi_align_model(width_ratio: int) -> nnapi.Model:
    """ROI_ALIGN of one 2x2 roi over a 1x4x4x1 image into 2x2 bins, with this width sampling ratio."""
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (1, 4, 4, 1))
    rois = m.add_operand(T.TENSOR_FLOAT32, (1, 4))
    m.set_operand_value(rois, np.array([[0, 0, 2, 2]], np.float32))
    batches = m.add_operand(T.TENSOR_INT32, (1,))
    m.set_operand_value(batches, np.array([0], np.int32))
    params = []
    for t, v in ((T.INT32, 2), (T.INT32, 2), (T.FLOAT32, 1.0), (T.FLOAT32, 1.0), (T.INT32, 2),
                 (T.INT32, width_ratio), (T.BOOL, False)):
        params.append(m.add_operand(t))
        m.set_operand_value(params[-1], v)
    y = m.add_operand(T.TENSOR_FLOAT32, (1, 2, 2, 1))
    m.add_operation(Op.ROI_ALIGN, [x, rois, batches, *params], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.timing
def test_a_sampling_ratio_of_2_31_takes_no_memory_and_stops_at_the_deadline():
    """ROI_ALIGN's sampling ratio is any INT32: 2^31 - 1 once built (out, ratio) arrays of 16 GiB and
    more (found by `make fuzz`: the process was killed for memory); now the samples are taken one at
    a time and the work stops at its deadline."""
    import resource
    import time
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    small = nnapi.Compilation(roi_align_model(2), devices=["reference"]).finish().execute([image])[0]
    assert small.shape == (1, 2, 2, 1) and np.isfinite(small).all()
    c = nnapi.Compilation(roi_align_model(2**31 - 1), devices=["reference"]).finish()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    with pytest.raises(nnapi.NnError) as err:
        c.execute([image], timeout=0.5)
    assert err.value.status == nnapi.ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert time.monotonic() - start < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10  # (KiB: under 256 MiB)


@pytest.mark.timing
@pytest.mark.parametrize("device", ["reference", "xla", "openvino"])
def test_an_app_that_exits_with_an_execution_in_flight_exits_cleanly(device):
    """The app starts an execution and exits without waiting: the interpreter waits for it, as for
    Python's own executors. Its thread was a daemon, stopped inside XLA's or OpenVINO's native call at
    shutdown, and the process aborted ("terminate called ... FATAL: exception not rethrown", rc 134)."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import numpy as np, nnapi
        from test_control_flow import _while_model
        c = nnapi.Compilation(_while_model(), devices=[{device!r}]).finish()
        e = nnapi.Execution(c)
        e.set_loop_timeout(1.0)
        e.set_input(0, np.array([0], np.int32))
        e.set_input(1, np.array([2**31 - 1], np.int32))  # runs until its 1 s loop timeout
        e.set_output(0, np.zeros(1, np.int32))
        e.start_compute()
        print("exiting", flush=True)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr[-2000:]
    assert "terminate called" not in done.stderr and "FATAL" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("device", ["reference", "xla", "openvino"])
def test_float_overflow_is_inf_without_a_warning_on_the_apps_stderr(device):
    """IEEE arithmetic, as Android's C++ kernels: 1e30 * 1e30 is inf. The reference driver's numpy
    kernels printed RuntimeWarnings to the app's stderr, and an app that runs with warnings as
    errors (pytest -W error) got GENERAL_FAILURE (found by a scalar-extremes sweep over WHILE)."""
    import warnings
    m = nnapi.Model()
    a, b = m.add_operand(T.TENSOR_FLOAT32, (3,)), m.add_operand(T.TENSOR_FLOAT32, (3,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    prod, total = m.add_operand(T.TENSOR_FLOAT32, (3,)), m.add_operand(T.TENSOR_FLOAT32, (3,))
    m.add_operation(Op.MUL, [a, b, act], [prod])
    m.add_operation(Op.ADD, [prod, prod, act], [total])
    m.identify_inputs_and_outputs([a, b], [total])
    m.finish()
    c = nnapi.Compilation(m, devices=[device]).finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = c.execute([np.array([1e30, -1e30, 2.0], np.float32), np.array([1e30, 1e30, 3.0], np.float32)])
    assert y.tolist() == [np.inf, -np.inf, 12.0]


def test_an_unusable_state_directory_turns_caching_off_not_the_device(tmp_path, monkeypatch, caplog):
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("a regular file where the state directory should be")
    monkeypatch.setenv("NNAPI_STATE_DIR", str(not_a_dir))
    model = add_model(4)
    x = np.ones(4, np.float32)
    for device in (XlaDevice(), ReferenceDevice()):
        assert device.get_supported_operations(model.to_hal()) == [True]
        dev = nnapi.register_device(device)
        try:
            plain = nnapi.Compilation(model, devices=[dev]).finish()
            np.testing.assert_array_equal(plain.execute([x])[0], x + np.arange(4))
            cached = nnapi.Compilation(model, devices=[dev], cache_dir=tmp_path / "cache", token=TOKEN)
            (tmp_path / "cache").mkdir(exist_ok=True)
            cached.finish()
            np.testing.assert_array_equal(cached.execute([x])[0], x + np.arange(4))
            assert cached.cache_outcomes[0].outcome != "hit"
        finally:
            nnapi.register_device(type(device)())
    assert "state directory unusable" in caplog.text


def test_one_token_in_two_directories_keeps_hitting_on_xla(tmp_path):
    """XLA's executables differ byte for byte between compiles: each copy's digest stays verified."""
    model = add_model()
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    for d in dirs:
        assert nnapi.Compilation(model, devices=["xla"], cache_dir=d, token=TOKEN).finish(
        ).cache_outcomes[0].outcome == "miss"
    for _ in range(3):
        for d in dirs:
            assert nnapi.Compilation(model, devices=["xla"], cache_dir=d, token=TOKEN).finish(
            ).cache_outcomes[0].outcome == "hit"


CONCURRENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import numpy as np, nnapi
    from test_hardening import add_model, TOKEN
    model = add_model(4096)
    while time.time() < {start}:
        time.sleep(0.001)
    c = nnapi.Compilation(model, devices=["reference"], cache_dir={cache!r}, token=TOKEN).finish()
    y = c.execute([np.ones(4096, np.float32)])[0]
    ok = np.array_equal(y, 1 + np.arange(4096, dtype=np.float32))
    print(c.cache_outcomes[0].outcome, ok, c.cache_outcomes[0].reason, flush=True)
""")


@pytest.mark.timing
def test_processes_compiling_one_model_at_once_never_report_rejected(tmp_path):
    import time
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path / "state"))
    code = CONCURRENT.format(tests=os.path.dirname(__file__), start=time.time() + 3.0, cache=str(cache))
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
                for _ in range(8)]
    lines = [child.communicate(timeout=120)[0].strip() for child in children]
    assert all(child.returncode == 0 for child in children), lines
    outcomes = [line.split()[0] for line in lines]
    assert all(line.split()[1] == "True" for line in lines), lines
    assert "rejected" not in outcomes, lines
    assert set(outcomes) <= {"miss", "hit"}


def test_the_registry_keeps_a_few_digests_per_token_and_prunes_old_versions(tmp_path):
    from nnapi.caching import IntegrityRegistry
    from nnapi.caching.registry import MAX_DIGESTS_PER_TOKEN
    path = tmp_path / "integrity.sqlite3"
    registry = IntegrityRegistry("reference", "2.0", path)
    digests = [bytes([k]) * 32 for k in range(MAX_DIGESTS_PER_TOKEN + 3)]
    for d in digests:
        registry.record(TOKEN, d)
    kept = registry.lookup(TOKEN)
    assert kept == set(digests[-MAX_DIGESTS_PER_TOKEN:])             # the least recently used went first
    registry.touch(TOKEN, digests[-MAX_DIGESTS_PER_TOKEN])           # a hit keeps the oldest alive
    registry.record(TOKEN, b"n" * 32)
    assert digests[-MAX_DIGESTS_PER_TOKEN] in registry.lookup(TOKEN)
    older = IntegrityRegistry("reference", "1.0", path)
    for k in range(5):
        older.record(bytes([k]) * 32, b"o" * 32)
    report = registry.prune()
    assert (report.other_versions, report.kept) == (5, MAX_DIGESTS_PER_TOKEN)
    assert older.lookup(bytes(32)) == set()


def test_nnapi_cache_prune_reports_the_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path / "state"))
    cache = tmp_path / "cache"
    cache.mkdir()
    nnapi.Compilation(add_model(), devices=["reference"], cache_dir=cache, token=TOKEN).finish()
    out = subprocess.run([sys.executable, "-m", "nnapi.cli", "cache", "prune", str(cache)], capture_output=True,
                         text=True, env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "reference integrity registry: 1 rows kept" in out.stdout


def test_the_caching_engine_never_follows_a_link(tmp_path):
    from nnapi.caching import CachingEngine
    engine = CachingEngine("reference", "test", root=tmp_path / "engine")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    key = CachingEngine.key_for(b"model")
    engine.put(key, [b"m" * 10], [b"d" * 10])
    path = engine.root / f"{key}.entry"
    path.unlink()
    path.symlink_to(victim)
    assert engine.get(key) is None                     # not read through the link: a miss
    engine.put(key, [b"m" * 10], [b"d" * 10])          # replaces the link, not its target
    assert victim.read_bytes() == b"precious" and not path.is_symlink()
    assert engine.get(key) is not None


# --- the operation registry under concurrent first use -----------------------------------------------
_FIRST_USE = textwrap.dedent("""
    import json, sys, threading
    from nnapi.hal import OperationType
    from nnapi.hal.serialize import model_from_bytes
    from nnapi.ops import registry
    from nnapi.drivers.reference import ReferenceDevice
    model = model_from_bytes(bytes.fromhex(sys.stdin.read()))  # (no validation yet: nothing looked up)
    device = ReferenceDevice(engine=False)
    barrier = threading.Barrier(6)
    seen, claims = [], []
    def lookups():
        barrier.wait()
        seen.append(sorted(t.name for t in OperationType if registry.find_operation(t) is None))
    def claim():
        barrier.wait()
        claims.append(all(device.get_supported_operations(model)))
    threads = [threading.Thread(target=lookups) for _ in range(4)] + [threading.Thread(target=claim) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    final = sorted(t.name for t in OperationType if registry.find_operation(t) is None)
    print(json.dumps({"seen": seen, "final": final, "claims": claims}))
""")


def test_threads_that_look_up_operations_while_the_registry_loads_see_all_of_it(tmp_path):
    """The first lookups of a process, from several threads at once (a service's first concurrent
    preparations): each sees the whole registry. Before the fix, every thread but the loading one saw
    it half filled, so a driver claimed nothing for a plain ADD/MUL model and remembered that claim."""
    from nnapi.conformance.vts.models import alternating_chain
    from nnapi.hal.serialize import model_to_bytes
    env = dict(os.environ, NNAPI_STATE_DIR=str(tmp_path))
    model = model_to_bytes(alternating_chain(64, 4, 1).to_hal()).hex()
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _FIRST_USE], input=model, capture_output=True, text=True,
                             env=env, timeout=300, check=True)
        result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
        assert result["claims"] == [True, True]
        assert all(seen == result["final"] for seen in result["seen"]), result


@pytest.mark.parametrize("device", ["reference", "xla", "openvino"])
def test_a_timeout_of_thirty_days_runs_as_no_timeout(device):
    """A timeout too large for a backend's clock means none (openvino failed any over 2^31 ms, 24.9 days,
    with a TypeError from InferRequest.wait_for)."""
    month = 30 * 86400.0
    c = nnapi.Compilation(add_model(4), devices=[device], timeout=month).finish()
    x = np.arange(4, dtype=np.float32)
    assert c.execute([x], timeout=month)[0].tolist() == (2 * x).tolist()  # (the constant is arange too)
    e = nnapi.Execution(c)
    e.set_timeout(month)
    y = np.zeros(4, np.float32)
    e.set_input(0, x)
    e.set_output(0, y)
    e.compute()
    assert y.tolist() == (2 * x).tolist()
