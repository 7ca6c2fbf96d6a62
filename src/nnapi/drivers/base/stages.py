"""Multi-stage compilation (C11) for any prepared model on the base: compiled quick first, the optimised
stage is compiled in the background after `optimize_after` executions (on a `qos.threads` thread: at
exit it is told to stop between its steps and waited for), swapped in between two executions, and the
cache (when the model was prepared with one) rewritten through the writer kept for it.

A prepared model inherits `Stages` and writes `optimized_stage(checkpoint)`: compile the optimised stage,
calling `checkpoint(where)` between its steps (it stops the work once the process is exiting), and return
what swaps it in. It calls `count_run()` after each execution.
"""
from __future__ import annotations

import threading
from typing import Callable

from ...qos import threads


class Stages:
    """The stage of a prepared model ("quick" or "optimized") and its background optimised compile."""

    stage: str = "optimized"
    #: Why the optimised compile failed (the quick stage keeps serving), or None.
    optimize_error: str | None = None

    def init_stages(self, stage: str, optimize_after: int | None, on_optimized: Callable[[object], None] | None,
                    name: str) -> None:
        """Start at `stage`; a quick one compiles the optimised stage after `optimize_after` executions
        (None: only when asked) and then calls `on_optimized(self)` (the cache writer)."""
        self.stage = stage
        self._optimize_after = optimize_after if stage == "quick" else None
        self._on_optimized = on_optimized
        self._stage_name = name
        self._stage_lock = threading.Lock()
        self._optimizer: threading.Thread | None = None
        self._runs = 0

    def optimized_stage(self, checkpoint: Callable[[str], None]) -> Callable[[], None] | None:
        """Compile the optimised stage, with `checkpoint(where)` between its steps; what swaps it in
        (called under the stage lock), or None to keep the quick stage."""
        raise NotImplementedError

    def count_run(self) -> None:
        """After an execution: the optimised compile starts once `optimize_after` executions ran."""
        if self._optimize_after is None or self._optimizer is not None:
            return  # single stage, or the optimised compile already started
        with self._stage_lock:
            self._runs += 1
            if self._runs >= self._optimize_after and self._optimizer is None:
                self._optimizer = threads.start(self._optimize, name=self._stage_name)

    @staticmethod
    def _checkpoint(where: str) -> None:
        """Between the optimised compile's steps: nothing more is started once the process is exiting."""
        if threads.exiting():
            raise threads.ProcessExiting(f"optimised compile: the process is exiting (before {where})")

    def _optimize(self) -> None:
        try:
            swap = self.optimized_stage(self._checkpoint)
            if swap is None or threads.exiting():
                return
            with self._stage_lock:
                swap()
                self.stage = "optimized"
            callback, self._on_optimized = self._on_optimized, None
            if callback is not None:
                callback(self)
        except threads.ProcessExiting:
            return
        except Exception as e:  # the quick stage keeps serving
            self.optimize_error = f"{type(e).__name__}: {e}"

    def optimize_now(self) -> None:
        """Start the optimised compile at once (if it has not started) and wait for it."""
        with self._stage_lock:
            if self._optimizer is None and self.stage == "quick":
                self._optimizer = threads.start(self._optimize, name=self._stage_name)
            thread = self._optimizer
        if thread is not None:
            thread.join()

    def wait_optimized(self, timeout: float | None = None) -> bool:
        """Wait for the optimised compile under way (at most `timeout` s); whether the stage is optimised."""
        thread = self._optimizer
        if thread is not None:
            thread.join(timeout)
        return self.stage == "optimized"


__all__ = ["Stages"]
