"""Quality of service for drivers (Q1-Q8): the scheduler every driver runs its work through,
duration estimates (a calibrated cost model, then past runs) and peak-memory estimates.

A driver keeps one `Scheduler`, submits each preparation and execution as a `Ticket` (admission:
deadline and queue checks that answer at once), runs it with `ticket.run(fn)`, and calls
`checkpoint()` between units of work so the scheduler can preempt it or abort it at its deadline.
Native calls that reach no checkpoint run LOW work at the OS's lowest priority (`background`).
"""
from typing import TYPE_CHECKING

from ..lazy import exports

#: Imported on first use: the runtime's device list needs only `qos.threads`, not the scheduler.
__getattr__ = exports(__name__, {
    **{name: ".estimate" for name in ("Calibration", "DurationStats", "calibrate", "model_cost_ns")},
    "estimate_peak_bytes": ".memory",
    **{name: ".scheduler" for name in ("Scheduler", "Ticket", "checkpoint", "current", "normalize_deadline")}})

if TYPE_CHECKING:
    from .estimate import Calibration, DurationStats, calibrate, model_cost_ns
    from .memory import estimate_peak_bytes
    from .scheduler import Scheduler, Ticket, checkpoint, current, normalize_deadline

__all__ = ["Scheduler", "Ticket", "checkpoint", "current", "normalize_deadline", "Calibration", "DurationStats",
           "calibrate", "model_cost_ns", "estimate_peak_bytes"]
