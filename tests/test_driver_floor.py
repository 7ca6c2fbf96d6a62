"""The driver floor (issue 33, item 1): one lowering table and claim loop, one bounded native run, one
registry of verified content, identity and calibration hooks, multi-stage compilation, one thread
helper: each piece checked on its own, and the compiling drivers checked to use them."""
from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.base import (ClaimMemo, Claims, CompileJob, DriverDevice, LoweringTable, NativeCall, Option, Stages,
                                VerifiedContent, import_with_env, interface_model, io_of, once, raise_failed_check,
                                run_native)
from nnapi.hal import ErrorStatus, NnError
from nnapi.qos import threads
from nnapi.validation import ConstantReader, infer_model_shapes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def relu_then_add() -> nnapi.Model:
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (2,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    r = m.add_operand(T.TENSOR_FLOAT32, (2,))
    y = m.add_operand(T.TENSOR_FLOAT32, (2,))
    m.add_operation(Op.RELU, [x], [r])
    m.add_operation(Op.ADD, [r, r, act], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def table() -> LoweringTable:
    return LoweringTable("test", rules="nnapi.drivers.base", tensor_types=[T.TENSOR_FLOAT32],
                         scalar_types=[T.INT32], default_types=[T.TENSOR_FLOAT32])


# --- the lowering table and its claim loop -----------------------------------------------------------
def test_a_rule_registers_once_and_the_table_says_what_it_holds():
    t = table()
    rule = t.register(Op.RELU)(lambda ctx, xs: xs)
    assert Op.RELU in t and t[Op.RELU].fn is rule and t[Op.RELU].types == (T.TENSOR_FLOAT32,)
    with pytest.raises(RuntimeError, match="RELU lowered twice"):
        t.register(Op.RELU)(lambda ctx, xs: xs)
    hal = relu_then_add().to_hal()
    ops = hal.main.operands
    assert t.holds(ops[0], (2,)) and not t.holds(ops[0], (0,)) and not t.holds(ops[0], ())


def test_the_claim_loop_admits_what_has_a_rule_and_asks_the_backend_to_prove_it():
    t = table()
    t.register(Op.RELU)(lambda ctx, xs: xs)
    hal = relu_then_add().to_hal()
    dims, reader = infer_model_shapes(hal), ConstantReader(hal)
    assert t.admit(hal, hal.main, hal.main.operations[1], dims, reader) == "no lowering rule"
    entry, ctx = t.admit(hal, hal.main, hal.main.operations[0], dims, reader)
    assert entry is t[Op.RELU] and ctx.op == Op.RELU
    proved = []
    _, _, results = t.claim_graph(hal, None, lambda m, op, k, entry, ctx, dims: (proved.append(k) or k, None))
    assert results == [0, None] and proved == [0]


# --- the bounded native run --------------------------------------------------------------------------
class _Binding:
    """What `run_native` uses of a `Binding`, without a scheduler."""

    def __init__(self, deadline: int | None) -> None:
        self.deadline = deadline

    @staticmethod
    def native(workers=()):
        import contextlib
        return contextlib.nullcontext()

    preemptible = staticmethod(lambda stop: __import__("contextlib").nullcontext())
    checkpoint = staticmethod(lambda where="": None)


@pytest.mark.timing
def test_a_native_call_that_can_be_waited_for_is_cancelled_at_the_deadline():
    done, cancelled = threading.Event(), []
    call = NativeCall(lambda: None, start=lambda: None, wait=lambda ms: done.wait(ms / 1000),
                      cancel=lambda: (cancelled.append(True), done.set()), what="a test call")
    start = time.monotonic()
    with pytest.raises(NnError) as err:
        run_native(_Binding(time.monotonic_ns() + 200_000_000), call)
    assert err.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "a test call" in err.value.message
    assert cancelled and time.monotonic() - start < 2.0


def test_a_native_call_without_a_deadline_runs_to_its_end():
    assert run_native(_Binding(None), NativeCall(lambda: 42)) == 42


def test_a_failed_run_time_check_names_its_message():
    raise_failed_check(["a", "b"], np.array([False, False]))
    with pytest.raises(NnError) as err:
        raise_failed_check(["a", "b"], np.array([False, True]))
    assert err.value.status == ErrorStatus.INVALID_ARGUMENT and err.value.message == "b"


# --- the registry of verified content --------------------------------------------------------------
def test_verified_content_is_kept_by_digest_and_held_only_while_alive_within_the_app():
    content = VerifiedContent(capacity=2)
    content.keep(b"d1", "decoded")
    assert content.decoded(b"d1") == "decoded" and content.decoded(b"d1", "other") is None
    content.keep(None, "ignored")
    assert content.decoded(None) is None

    class Held:
        pass

    held = Held()
    assert content.hold(b"d1", 7, held) is held and content.hold(b"d1", 7, Held()) is held
    assert content.held(b"d1", 7) is held and content.held(b"d1", 8) is None
    del held
    gc.collect()
    assert content.held(b"d1", 7) is None


# --- threads, stages -------------------------------------------------------------------------------------
def test_run_all_gives_results_in_order_and_the_first_error():
    assert threads.run_all([lambda k=k: k * k for k in range(5)], name="t", workers=2).results() == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError, match="two"):
        threads.run_all([lambda: 1, lambda: (_ for _ in ()).throw(ValueError("two"))], name="t").results()


@pytest.mark.timing
def test_submitted_work_reuses_an_idle_thread_in_a_fresh_context_by_its_name():
    import contextvars
    var: contextvars.ContextVar[str] = contextvars.ContextVar("floor_var", default="unset")
    seen: list[tuple[int, str, str]] = []
    done = threading.Event()

    def work(tag: str) -> None:
        seen.append((threading.get_ident(), threading.current_thread().name, var.get()))
        var.set(tag)  # (must not reach the next work on the same thread)
        done.set()

    for k in range(3):
        done.clear()
        threads.submit(work, f"tag{k}", name=f"floor-work-{k}")
        assert done.wait(10)
        worker = next(t for t in threading.enumerate() if t.ident == seen[-1][0])
        end = time.monotonic() + 10
        while worker.name != threads.IDLE_NAME and time.monotonic() < end:  # (back in the pool)
            time.sleep(0.005)
        time.sleep(0.02)
    assert len({ident for ident, _, _ in seen}) == 1  # one thread did all three
    assert [name for _, name, _ in seen] == ["floor-work-0", "floor-work-1", "floor-work-2"]
    assert [value for _, _, value in seen] == ["unset"] * 3
    assert not any(t.name.startswith("floor-work-") for t in threading.enumerate())  # idle: renamed


@pytest.mark.timing
def test_submitted_work_is_let_go_of_once_done_while_its_thread_waits_for_more():
    import weakref

    class Held:
        pass
    held = Held()
    ref = weakref.ref(held)
    done = threading.Event()
    threads.submit(lambda h: done.set(), held, name="floor-hold")
    del held
    assert done.wait(10)
    end = time.monotonic() + threads.IDLE_S / 2  # (the thread waits in the pool meanwhile)
    while ref() is not None and time.monotonic() < end:
        time.sleep(0.01)
    assert ref() is None


def test_submitted_work_side_by_side_gets_a_thread_each():
    both = threading.Barrier(2, timeout=10)
    results: list[int] = []
    finished = threading.Semaphore(0)

    def work() -> None:
        both.wait()  # (only passes when the two run at once)
        results.append(threading.get_ident())
        finished.release()

    threads.submit(work, name="floor-pair")
    threads.submit(work, name="floor-pair")
    assert finished.acquire(timeout=10) and finished.acquire(timeout=10)
    assert len(set(results)) == 2


def test_the_optimised_stage_starts_after_its_runs_and_rewrites_the_cache_once():
    written = []

    class Model(Stages):
        def __init__(self) -> None:
            self.init_stages("quick", 2, written.append, "test-optimize")
            self.value = "quick"

        def optimized_stage(self, checkpoint):
            checkpoint("compiling")  # (not exiting: it returns)
            return lambda: setattr(self, "value", "optimized")

    m = Model()
    m.count_run()
    assert m.stage == "quick" and not m.wait_optimized(0)
    m.count_run()
    assert m.wait_optimized(10) and m.value == "optimized" and written == [m]
    m.optimize_now()
    assert written == [m]


# --- identity, calibration, imports ----------------------------------------------------------------------
def test_the_default_version_is_made_of_the_identity_hooks():
    class Device(DriverDevice):
        NAME = "floor-test"
        VERSION_SOURCES = ("drivers/base",)
        VERSION_PACKAGES = {"np": "numpy"}
        CPU_SPECIFIC = True

    version = Device().version
    parts = version.split("+")
    assert parts[0] == nnapi.__version__ and parts[1] == "np" + np.__version__.split("-")[0]
    assert parts[2].startswith("cpu") and parts[3].startswith("src") and len(parts) == 4


@pytest.mark.timing
def test_the_compiling_drivers_keep_their_version_forms_and_calibrate_against_the_reference():
    from nnapi.drivers.openvino.device import OpenVinoDevice
    from nnapi.drivers.xla import XlaDevice
    assert XlaDevice().version.split("+")[1].startswith("jaxlib")
    assert [p[:3] for p in OpenVinoDevice().version.split("+")[1:]] == ["ov2", "cpu", "src"]
    baseline = XlaDevice().calibration_baseline()
    assert baseline.NAME == "reference" and baseline.option("jit") is False


def test_the_base_imports_no_driver():
    for path in (ROOT / "src" / "nnapi" / "drivers" / "base").glob("*.py"):
        text = path.read_text()
        for driver in ("reference", "xla", "openvino"):
            assert f"from ..{driver}" not in text and f"drivers.{driver}" not in text, (path.name, driver)


def test_drivers_start_threads_only_through_qos_threads():
    for path in (ROOT / "src" / "nnapi" / "drivers").rglob("*.py"):
        text = path.read_text()
        assert "threading.Thread(" not in text and "ThreadPoolExecutor" not in text, path


def test_the_plumbing_count_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plumbing.py"), "--json"], capture_output=True,
                         text=True, timeout=120, check=True)
    import json
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(counts) == {"reference", "xla", "openvino"}
    assert all(set(c) == {"plumbing", "rules", "compile", "cache"} for c in counts.values())


# --- declared options, claims handed to compile, wrapped compile errors, interfaces ---------------------------
class OptionDevice(DriverDevice):
    """A device with two declared options, its capabilities written, no caching."""

    NAME = "floor-options"
    CACHE_FILES = (0, 0)
    OPTIONS = {"threads": Option("NNAPI_FLOOR_OPTIONS_THREADS"), "fast": Option("NNAPI_FLOOR_OPTIONS_FAST", bool, True)}
    CALIBRATION_OPTIONS = {"fast": False}


def test_an_option_is_the_keyword_else_the_environment_else_the_default(monkeypatch):
    monkeypatch.delenv("NNAPI_FLOOR_OPTIONS_THREADS", raising=False)
    assert OptionDevice().option("threads") is None and OptionDevice().option("fast") is True
    monkeypatch.setenv("NNAPI_FLOOR_OPTIONS_THREADS", "3")
    monkeypatch.setenv("NNAPI_FLOOR_OPTIONS_FAST", "0")
    device = OptionDevice()
    assert device.option("threads") == 3 and device.option("fast") is False  # read when used
    assert OptionDevice(threads=5).option("threads") == 5
    twin = OptionDevice(threads=5).calibration_twin()
    assert twin.option("threads") == 5 and twin.option("fast") is False and twin.engine is None
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['thread'\].*'threads'"):
        OptionDevice(thread=2)


def test_once_makes_a_value_once_per_object_even_from_many_threads():
    made = []

    class Holder:
        @once
        def core(self) -> object:
            made.append(self)
            time.sleep(0.01)
            return object()

    a, b = Holder(), Holder()
    seen = threads.run_all([lambda: a.core for _ in range(8)], name="floor-once", workers=8).results()
    assert all(v is seen[0] for v in seen) and made == [a]
    assert b.core is not a.core and made == [a, b]


def test_import_with_env_sets_the_environment_for_the_import_only(tmp_path, monkeypatch):
    (tmp_path / "floor_env_probe.py").write_text("import os\nSEEN = os.environ.get('FLOOR_PROBE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLOOR_PROBE", "before")
    import_with_env("floor_env_probe", FLOOR_PROBE="during")
    assert sys.modules["floor_env_probe"].SEEN == "during" and os.environ["FLOOR_PROBE"] == "before"


class AnalysingDevice(DriverDevice):
    """Claims everything, leaving an analysis for compile; its compile fails with a plain exception when asked."""

    NAME = "floor-analysis"
    CACHE_FILES = (0, 0)
    CALIBRATED = False

    def __init__(self) -> None:
        super().__init__()
        self.analyses: list[object] = []
        self.fail = False

    def capabilities(self):
        from nnapi.drivers.reference import ReferenceDevice
        return ReferenceDevice().capabilities()

    def supported(self, model):
        return Claims([True] * len(model.main.operations), ("analysis of", len(model.main.operations)))

    def compile(self, job: CompileJob):
        self.analyses.append(job.analysis)
        if self.fail:
            raise KeyError("a bug in the compiler")
        from nnapi.drivers.reference.prepared_model import ReferencePreparedModel
        return ReferencePreparedModel(job.model, job.preference, job.priority)


def relu_only() -> nnapi.Model:
    m = nnapi.Model()
    x, y = m.add_operand(T.TENSOR_FLOAT32, (2,)), m.add_operand(T.TENSOR_FLOAT32, (2,))
    m.add_operation(Op.RELU, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def test_the_claim_analysis_reaches_the_compile_of_the_same_model_once():
    device = AnalysingDevice()
    model, other = relu_then_add().to_hal(), relu_only().to_hal()
    assert device.get_supported_operations(model) == [True, True]
    device.prepare_model(model)  # the analysis its claim left
    device.prepare_model(model)  # claims remembered, the analysis taken already: none
    device.get_supported_operations(other)
    device.prepare_model(model)  # the analysis left is another model's: none (and it is dropped)
    device.prepare_model(other)
    assert device.analyses == [("analysis of", 2), None, None, None]


def test_the_claim_memo_keeps_about_its_most_recent_rows_per_driver_version(tmp_path, monkeypatch):
    import sqlite3
    from nnapi.drivers.base import shared
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path))
    memo = ClaimMemo("memo-test", "1", max_rows=10)
    other = ClaimMemo("memo-test", "2", max_rows=10)
    other.put(b"other version", [True])
    for k in range(200):
        memo.put(b"model %d" % k, [k % 2 == 0, True])
        time.sleep(0.0005)  # (distinct last_used times)
    rows = sqlite3.connect(tmp_path / "claims.sqlite3").execute(
        "SELECT COUNT(*) FROM claims WHERE driver = 'memo-test' AND version = '1'").fetchone()[0]
    assert 10 <= rows < 10 + shared.PRUNE_EVERY
    assert memo.get(b"model 199") == [False, True] and memo.get(b"model 198") == [True, True]
    assert memo.get(b"model 0") is None and memo.get(b"model 100") is None
    assert other.get(b"other version") == [True]  # another version's rows are its own


def test_a_plain_exception_in_compile_reaches_the_caller_as_general_failure():
    device = AnalysingDevice()
    device.fail = True
    with pytest.raises(NnError) as err:
        device.prepare_model(relu_then_add().to_hal())
    assert err.value.status == ErrorStatus.GENERAL_FAILURE
    assert "floor-analysis compilation failed: KeyError" in err.value.message


def test_a_plug_in_package_can_be_a_version_source(tmp_path, monkeypatch):
    pkg = tmp_path / "floor_plugin_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from nnapi.drivers.base.shared import forget_source_fingerprints, source_fingerprint
    first = source_fingerprint("floor_plugin_pkg")
    (pkg / "__init__.py").write_text("X = 2\n")
    forget_source_fingerprints()
    assert source_fingerprint("floor_plugin_pkg") != first and "floor_plugin_pkg" not in sys.modules
    with pytest.raises(LookupError, match="no_such_floor_pkg"):
        source_fingerprint("no_such_floor_pkg")


def test_a_source_folder_read_once_is_remembered_until_a_file_of_it_changes(tmp_path, monkeypatch):
    """The state directory remembers a settled folder's digest by a stamp of its files: a later process
    reads none of them, and a rewrite that keeps the size and puts the times back is still seen."""
    pkg = tmp_path / "floor_stamp_pkg"
    pkg.mkdir()
    source = pkg / "__init__.py"
    source.write_text("X = 1\n")
    old = 1_600_000_000_000_000_000
    os.utime(source, ns=(old, old))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path / "state"))
    import pathlib
    from nnapi.drivers.base import shared
    monkeypatch.setattr(shared, "SETTLED_S", -1.0)  # (the file was written just now: take it as settled)
    shared.forget_source_fingerprints()
    first = shared.source_fingerprint("floor_stamp_pkg")
    assert any(k.startswith("floor_stamp_pkg=") for k in json.loads((tmp_path / "state" / shared.SOURCE_DIGESTS)
                                                                        .read_text()))
    reads = []
    real = pathlib.Path.read_bytes
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: reads.append(self) or real(self))
    shared.forget_source_fingerprints()
    assert shared.source_fingerprint("floor_stamp_pkg") == first and reads == []  # (remembered: nothing read)
    source.write_text("X = 2\n")  # the same size, the old times put back: the change time still moved
    os.utime(source, ns=(old, old))
    shared.forget_source_fingerprints()
    assert shared.source_fingerprint("floor_stamp_pkg") != first and reads == [source]


def test_an_interface_round_trips_through_plain_data():
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 4), scale=0.5, zero_point=3)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, (1, 4), scale=0.5, zero_point=3)
    m.add_operation(Op.RELU, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    ins, outs = io_of(m.to_hal())
    assert ins == [(int(T.TENSOR_QUANT8_ASYMM), (1, 4), 0.5, 3)] and outs == ins
    back = interface_model(*json.loads(json.dumps([ins, outs])))
    assert io_of(back) == (ins, outs) and back.main.operations == []


def test_read_only_views_are_reused_only_for_the_very_array_and_never_mix_up_slices():
    from nnapi.drivers.base.binding import read_only
    x = np.arange(8, dtype=np.float32)
    first = read_only(x)
    assert read_only(x) is first and not first.flags.writeable and np.shares_memory(first, x)
    with pytest.raises(ValueError):
        first[0] = 1.0  # a driver's write to the app's memory is refused
    whole = np.arange(16, dtype=np.float32)
    seen = []
    for start in (0, 4, 8):  # slices of one array, made and dropped in turn (their ids may repeat)
        part = whole[start:start + 4]
        seen.append(read_only(part).tolist())
        del part
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
