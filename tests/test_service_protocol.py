"""The service's interface definition (`service.protocol`): each call declared once, from which the
client's encoding and the server's checks both follow."""
import os

import pytest

from nnapi.hal import (DataLocation, ErrorStatus, IBuffer, IDevice, IFencedExecutionCallback, IPreparedModel,
                       MeasureTiming, MemoryHandle, MemoryPool, NnError, Priority, Request, RequestArgument, Timing)
from nnapi.service import codec, protocol


def test_every_call_is_declared_once_and_generic_ones_name_a_hal_method():
    names = [m.name for m in protocol.METHODS.values()]
    assert len(names) == len(set(names)) == 19
    interfaces = {None: IDevice, protocol.PREPARED: IPreparedModel, protocol.BUFFER: IBuffer,
                  protocol.FENCED: IFencedExecutionCallback}
    for name in ("get_supported_operations", "prepare_model_from_cache", "execute_synchronously", "copy_to",
                 "copy_from", "get_execution_info"):
        spec = protocol.METHODS[name]
        assert hasattr(interfaces[spec.target], name), name
    assert protocol.METHODS["execute_fenced"].fds == ("request", "wait_for")
    assert protocol.METHODS["status"].inline and not protocol.METHODS["execute"].inline
    with pytest.raises(ValueError, match="unknown kind"):
        protocol.Field("x", "no such kind", "x")


def test_a_call_crosses_by_its_declaration_and_a_bad_field_is_named():
    spec = protocol.EXECUTE_SYNCHRONOUSLY
    fd = os.memfd_create("pool", 0)
    os.ftruncate(fd, 64)
    try:
        request = Request([RequestArgument(False, DataLocation(0, 0, 16), (4,))], [],
                          [MemoryPool(handle=MemoryHandle("ashmem", (fd,), (), 64))])
        enc = codec.Encoder()
        args = spec.encode(enc, [request, MeasureTiming.YES, None, 10])
        assert args[1:] == [1, None, 10] and len(enc.fds) == 1
        message = codec.unpack(codec.pack([codec.CALL, 1, spec.name, 1, args]), 1)
        dec = codec.Decoder([os.dup(fd)])
        try:
            decoded, measure, deadline, loop = spec.decode(dec, message[4])
            assert measure is MeasureTiming.YES and deadline is None and loop == 10
            assert decoded.inputs == request.inputs and decoded.pools[0].handle.size == 64
            with pytest.raises(NnError, match="loop timeout") as err:
                spec.decode(dec, [message[4][0], 1, None, "ten"])
            assert err.value.status == ErrorStatus.INVALID_ARGUMENT
            with pytest.raises(NnError, match="execute_synchronously arguments: expected 4 items"):
                spec.decode(dec, message[4][:3])
        finally:
            dec.close()
    finally:
        os.close(fd)
    # An enum value that names no member reaches the driver as it is (the driver reports it).
    assert protocol.decode_field(protocol.PREPARE_MODEL.fields[2], codec.Decoder([]), 99) == 99
    assert protocol.decode_field(protocol.PREPARE_MODEL.fields[2], codec.Decoder([]), 1) is Priority.MEDIUM


def test_results_decode_as_declared():
    timing = Timing(5, 7)
    raw = protocol.EXECUTE_SYNCHRONOUSLY.encode_result(([], timing))
    assert protocol.EXECUTE_SYNCHRONOUSLY.decode_result(raw) == ([], timing)
    info = protocol.GET_EXECUTION_INFO.decode_result([0, [1, 2], [3, 4]])
    assert info == (ErrorStatus.NONE, Timing(1, 2), Timing(3, 4))
    assert protocol.PREPARE_MODEL.decode_result(7) == (7, None)
    assert protocol.PREPARE_MODEL.decode_result([7, "fleet"]) == (7, "fleet")
    with pytest.raises(NnError, match="object id"):
        protocol.PREPARE_MODEL_FROM_CACHE.decode_result("seven")
