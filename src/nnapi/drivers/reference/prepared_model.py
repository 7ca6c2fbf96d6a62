"""The reference driver's prepared model: the interpreter's plan run over the base's request binding."""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ...hal import ExecutionPreference, Model, Priority
from ...memory import MappedPool, map_pool
from ..base import Binding, DriverPreparedModel
from .interpreter import ModelExecutor, SubgraphPlan


class ReferencePreparedModel(DriverPreparedModel):
    """A validated model with its constants mapped and its main subgraph planned (at preparation, or
    at the first execution with `lazy`, calling `on_planned` then: just-in-time caching)."""

    def __init__(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                 priority: Priority = Priority.MEDIUM, *, lazy: bool = False,
                 on_planned: Callable[["ReferencePreparedModel"], None] | None = None) -> None:
        super().__init__(model, preference, priority)
        self._plan_lock = threading.Lock()
        self._on_planned = on_planned
        self._planned = False
        if not lazy:
            self._plan()

    def _plan(self) -> None:
        """Map the constants and plan every subgraph (at preparation, or at the first run in JIT mode)."""
        with self._plan_lock:
            if self._planned:
                return
            self._pools: list[MappedPool] = [map_pool(p) for p in self.model.pools]
            self.main = SubgraphPlan(self.model, self.model.main, self._pools)
            self.referenced = [SubgraphPlan(self.model, sub, self._pools) for sub in self.model.referenced]
            self._planned = True
        if self._on_planned is not None:
            callback, self._on_planned = self._on_planned, None
            callback(self)

    @property
    def planned(self) -> bool:
        return self._planned

    def run(self, binding: Binding) -> list[np.ndarray]:
        if not self._planned:
            self._plan()
        main = self.model.main
        values: dict[int, np.ndarray | None] = {index: binding.input(k) for k, index in enumerate(main.input_indexes)}
        executor = ModelExecutor(self.referenced, None, binding.loop_timeout_ns, binding.check_allocation)
        with np.errstate(all="ignore"):  # IEEE arithmetic, as the C++ kernels: overflow gives inf, silently
            self.main.run(values, None, executor)
        return [values[i] for i in main.output_indexes]
