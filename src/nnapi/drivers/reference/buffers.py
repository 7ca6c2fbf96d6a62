"""The reference driver's memory domain: the driver base's domain of `ReferenceDevice`, one per
process, so tokens are unique among the live buffers of every ReferenceDevice here."""
from __future__ import annotations

from .device import ReferenceDevice

DOMAIN = ReferenceDevice.shared_domain()
