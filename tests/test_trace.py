"""`nnapi.trace(path)`: Chrome / Perfetto trace events of compilations, queueing and executions."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.reference import ReferenceDevice

pytestmark = pytest.mark.timing


def chain(n: int, size: int = 4) -> nnapi.Model:
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (size,))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for _ in range(n):
        y = m.add_operand(T.TENSOR_FLOAT32, (size,))
        m.add_operation(Op.ADD, [cur, cur, act], [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


def _events(path) -> list[dict]:
    data = json.loads(path.read_text())
    assert set(data) >= {"traceEvents"}
    events = data["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "i", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert e["ts"] >= 0 and isinstance(e["name"], str) and isinstance(e["cat"], str)
        if e["ph"] == "X":
            assert e["dur"] >= 0
    return events


def _track_names(events) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


def _inside(inner: dict, outer: dict) -> bool:
    return outer["ts"] <= inner["ts"] + 1e-3 and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


@pytest.mark.parametrize("device", ["reference", "xla"])
def test_a_trace_holds_partition_prepare_execute_and_work_slices(tmp_path, device):
    path = tmp_path / "trace.json"
    model = chain(3)
    nnapi.Compilation(chain(1), devices=[device]).finish()  # calibrations happen once per process: before
    with nnapi.trace(path):
        c = nnapi.Compilation(model, devices=[device], cache_dir=tmp_path, token=bytes(32)).finish()
        c.execute([np.ones(4, np.float32)])
    events = _events(path)
    names = _track_names(events)
    slices = [e for e in events if e["ph"] == "X"]
    prepare = [e for e in slices if e["name"] == "prepare"]
    assert len(prepare) == 1 and names[(prepare[0]["pid"], prepare[0]["tid"])] == device
    assert prepare[0]["args"]["outcome"] == "miss"
    assert any(e["name"] == "partition" and names[(e["pid"], e["tid"])] == "runtime" for e in slices)
    (execute,) = [e for e in slices if e["name"] == "execute"]
    (run,) = [e for e in slices if e["cat"] == "driver"]
    assert _inside(run, execute)                      # the driver's run nests in the runtime's execution
    work = [e for e in slices if e["cat"] == "operation"]
    if device == "reference":
        assert [e["name"] for e in work] == ["0 ADD", "1 ADD", "2 ADD"]
    else:
        assert [e["name"] for e in work] == ["sub-model 0"]
    assert all(_inside(e, run) for e in work)
    assert {e["pid"] for e in events} == {prepare[0]["pid"]}  # one app: this process's uid


def test_no_events_are_recorded_outside_a_trace(tmp_path):
    from nnapi import tracing
    assert not tracing.active()
    c = nnapi.Compilation(chain(1), devices=["reference"]).finish()
    c.execute([np.ones(4, np.float32)])
    with nnapi.trace() as recorder:
        pass
    assert recorder.events == []
    with nnapi.trace():
        with pytest.raises(RuntimeError):
            with nnapi.trace():
                pass


def test_queue_waits_and_preemptions_are_traced(tmp_path, monkeypatch):
    """A low-priority run holds the one slot at a gated operation; a high-priority run of the same app
    arrives, the low one is preempted at its next checkpoint: the trace shows both."""
    from nnapi.ops import registry
    gate, entered = threading.Event(), threading.Event()
    real = registry.find_operation(Op.ABS)

    def held(ctx):
        entered.set()
        gate.wait(30)
        return real.execute(ctx)

    import dataclasses
    monkeypatch.setitem(registry._REGISTRY, Op.ABS, dataclasses.replace(real, execute=held))
    device = nnapi.register_device(ReferenceDevice(workers=1))
    try:
        m = nnapi.Model()
        x = m.add_operand(T.TENSOR_FLOAT32, (4,))
        a = m.add_operand(T.TENSOR_FLOAT32, (4,))
        m.add_operation(Op.ABS, [x], [a])
        y = m.add_operand(T.TENSOR_FLOAT32, (4,))
        m.add_operation(Op.RELU, [a], [y])
        m.identify_inputs_and_outputs([x], [y])
        m.finish()
        low = nnapi.Compilation(m, devices=[device], priority=nnapi.Priority.LOW).finish()
        high = nnapi.Compilation(chain(2), devices=[device], priority=nnapi.Priority.HIGH).finish()
        path = tmp_path / "qos.json"
        with nnapi.trace(path):
            event = nnapi.Execution(low)
            event.set_input(0, np.ones(4, np.float32))
            event.set_output(0, np.empty(4, np.float32))
            done = event.start_compute()
            assert entered.wait(30)
            runner = threading.Thread(target=lambda: high.execute([np.ones(4, np.float32)]))
            runner.start()
            import time
            time.sleep(0.2)
            gate.set()
            runner.join(30)
            done.wait(30)
    finally:
        nnapi.register_device(ReferenceDevice())
    events = _events(path)
    preempted = [e for e in events if e["name"] == "preempted"]
    assert preempted and preempted[0]["ph"] == "i" and "RELU" in preempted[0]["args"]["where"]
    assert any(e["name"] == "paused" and e["ph"] == "X" for e in events)
