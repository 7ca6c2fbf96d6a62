"""The XLA driver: lowers partitions to XLA with JAX, compiles them ahead of time, caches executables."""
from .device import XlaDevice


def create_device() -> XlaDevice:
    """Entry point of the `nnapi.drivers` group."""
    return XlaDevice()


__all__ = ["XlaDevice", "create_device"]
