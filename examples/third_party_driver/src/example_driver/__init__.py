"""An example NNAPI driver installed as a plug-in (entry point group `nnapi.drivers`, name `example`)."""
from .device import ExampleDevice


def create_device() -> ExampleDevice:
    """The entry point: the runtime calls it once per process."""
    return ExampleDevice()


__all__ = ["ExampleDevice", "create_device"]
