"""The reference driver: a numpy interpreter over the ops registry (every operation, CPU)."""
from .device import ReferenceDevice


def create_device() -> ReferenceDevice:
    """Entry point of the `nnapi.drivers` group."""
    return ReferenceDevice()


__all__ = ["ReferenceDevice", "create_device"]
