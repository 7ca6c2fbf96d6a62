"""The driver service: any installed driver behind a real process boundary.

- `nnapi serve --driver NAME` (`cli`) hosts a driver in its own process on a Unix socket (`server`);
- apps find services in `NNAPI_SERVICE_DIR` (`discovery`; the runtime's `devices()` does it) and
  reach them through client proxies of the HAL interfaces (`client`);
- the wire (`wire`, `codec`, `values`): length-prefixed frames, msgpack messages, descriptors by
  SCM_RIGHTS, a version handshake; the caller's identity comes from SO_PEERCRED (`peer`);
- every call is declared once in `protocol`, from which the client's encoding and the server's checks
  both follow (as AIDL generates both ends of a HAL).
"""
from ..lazy import exports

from .discovery import ENV, default_socket, service_dir, sockets

#: Imported on first use (PEP 562): the client, the codec and the wire are not needed to find out that
#: there is no service directory, which is what `nnapi.devices()` asks first.
_LAZY = {"Credentials": "peer", "peer_credentials": "peer", "Connection": "client", "ServiceBuffer": "client", "ServiceBurst": "client", "ServiceDevice": "client",
         "ServicePreparedModel": "client", "connect": "client", "PROTOCOL_VERSION": "codec"}


__getattr__ = exports(__name__, {name: f".{module}" for name, module in _LAZY.items()})


__all__ = ["Connection", "Credentials", "ENV", "PROTOCOL_VERSION", "ServiceBuffer", "ServiceBurst", "ServiceDevice",
           "ServicePreparedModel", "connect", "default_socket", "peer_credentials", "service_dir", "sockets"]
