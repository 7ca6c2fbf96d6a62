"""Client proxies: `IDevice`, `IPreparedModel`, `IBuffer`, `IBurst` and `IFencedExecutionCallback`
over one connection to a service, so the runtime uses a served driver exactly as an in-process one.

One connection per service (`connection`, over `transport`): calls are multiplexed by request id;
if the service goes away every pending and later call is DEVICE_UNAVAILABLE (Android's DEAD_OBJECT)
and the device's death callbacks run (the runtime marks it dead). Each proxy method is one call
declared in `protocol`.

A socket is connected only if nobody but root or the app itself could have put it there
(`discovery.untrusted`) and its process runs as root or as the app's uid (SO_PEERCRED): a fake service
would get the app's cache files opened read-write. Anything else is DEVICE_UNAVAILABLE, with a warning.

Tensor bytes never cross the socket: shared-memory pools travel as descriptors, and in-process
pointer pools (numpy arguments) are staged in shared memory for the call (`staging`). A burst has a
channel of its own and keeps its staging region and the app's pools in the service under slots
(`burst`).
"""
from __future__ import annotations

from .burst import ServiceBurst
from .connection import CONNECT_TIMEOUT, LINGER, Connection
from .discovery import is_socket
from .proxies import ServiceBuffer, ServiceDevice, ServiceFencedCallback, ServicePreparedModel, connect

__all__ = ["CONNECT_TIMEOUT", "Connection", "LINGER", "ServiceBuffer", "ServiceBurst", "ServiceDevice",
           "ServiceFencedCallback", "ServicePreparedModel", "connect", "is_socket"]
