"""The XLA driver's memory domain: the driver base's domain of `XlaDevice` (one per process)."""
from __future__ import annotations

from .device import XlaDevice

DOMAIN = XlaDevice.shared_domain()
