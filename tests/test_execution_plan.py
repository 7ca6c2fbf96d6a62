"""One execution plan per compilation (issue 34, item 2): made at finish, the one path of every run."""
from __future__ import annotations

import ast
import importlib
import os
import pathlib
import select
import threading
import weakref

import numpy as np
import pytest

import nnapi
from nnapi.runtime import ExecutionPlan
from nnapi.runtime.events import FencedExecutor
from nnapi.runtime.plan import PREPARED

from conftest import add_relu_model

RUNTIME = pathlib.Path(nnapi.__file__).parent / "runtime"


def _bound(c: nnapi.Compilation) -> nnapi.Execution:
    e = nnapi.Execution(c)
    e.set_input(0, np.array([1, -5, 2, 0.5], np.float32))
    e.set_input(1, np.ones(4, np.float32))
    e.set_output(0, np.zeros(4, np.float32))
    return e


def test_finish_builds_one_plan_with_the_compilations_facts():
    c = nnapi.Compilation(add_relu_model(), devices=["reference"])
    assert c.plan is None and c.steps == []
    c.finish()
    plan = c.plan
    assert isinstance(plan, ExecutionPlan) and plan.steps is c.steps and len(plan.steps) == 1
    assert [io.dims for io in plan.inputs] == [(4,), (4,)] and [io.nbytes for io in plan.outputs] == [16]
    assert plan.boundary == [] and plan.direct is not None
    assert c.cache_outcomes == [c.steps[0].cache]


def test_sync_async_burst_and_fenced_runs_all_go_through_plan_run(monkeypatch):
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    seen = []
    real = ExecutionPlan.run

    def recording(self, arguments, executor=PREPARED):
        seen.append(executor)
        return real(self, arguments, executor)

    monkeypatch.setattr(ExecutionPlan, "run", recording)
    _bound(c).compute()
    _bound(c).start_compute().wait(30)
    with c.create_burst() as burst:
        _bound(c).burst_compute(burst)
    _bound(c).start_compute_with_dependencies([]).wait(30)
    assert seen[:2] == [PREPARED, PREPARED] and seen[2] is burst and isinstance(seen[3], FencedExecutor)


def test_the_runtime_keeps_no_module_level_memo_of_compilations():
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    c.execute([np.ones(4, np.float32), np.ones(4, np.float32)])
    _bound(c).compute()
    for path in RUNTIME.glob("*.py"):
        module = importlib.import_module(f"nnapi.runtime.{path.stem}" if path.stem != "__init__" else "nnapi.runtime")
        for name, value in vars(module).items():
            assert not isinstance(value, (weakref.WeakKeyDictionary, weakref.WeakValueDictionary)), (path.name, name)


def test_runtime_modules_import_no_circle():
    """Every import between runtime modules counts (top-level, in a function, for type checking)."""
    graph: dict[str, set[str]] = {}
    for path in RUNTIME.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[path.stem] = deps - {path.stem}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for d in graph.get(start, ()):
            if d == goal or (d not in seen and (seen.add(d) or reaches(d, goal, seen))):
                return True
        return False

    assert [m for m in graph if reaches(m, m, set())] == []


def test_an_events_sync_fence_is_signalled_when_it_finishes_without_a_waiting_thread():
    c = nnapi.Compilation(add_relu_model(), devices=["reference"]).finish()
    raw = os.eventfd(0)
    gate = nnapi.Event.create_from_sync_fence_fd(raw)
    os.close(raw)
    event = _bound(c).start_compute_with_dependencies([gate])
    fd = event.get_sync_fence_fd()
    assert not any(t.name == "nnapi-event-fence" for t in threading.enumerate())
    os.eventfd_write(gate.get_sync_fence_fd(), 1)
    event.wait(30)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(5000)
    late = _bound(c)
    done = late.start_compute()
    done.wait(30)
    poller = select.poll()
    poller.register(done.get_sync_fence_fd(), select.POLLIN)  # asked for after it finished: signalled already
    assert poller.poll(0)


def test_device_memory_has_a_constructor_of_its_own():
    with pytest.raises(nnapi.NnError) as err:
        nnapi.Memory(buffer=object())  # a driver buffer needs its token
    assert err.value.code == nnapi.ResultCode.BAD_DATA
    with pytest.raises(nnapi.NnError) as err:
        nnapi.Memory.from_desc(object())
    assert err.value.code == nnapi.ResultCode.BAD_DATA and "expected a MemoryDesc" in err.value.message
    assert nnapi.Memory.ashmem(8).validator is None
