"""The service wire: framing (with descriptors), the msgpack codec of HAL values, and fuzzing of both."""
from __future__ import annotations

import os
import socket

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nnapi.hal import (BufferDesc, BufferRole, CacheHandles, ErrorStatus, MemoryHandle, MemoryPool, NnError,
                       OutputShape, Request, RequestArgument, DataLocation, Timing)
from nnapi.memory import allocate_ashmem, close_handle
from nnapi.service import codec
from nnapi.service.wire import (HEADER, MAGIC, MAX_BODY, MAX_FDS, FrameDecoder, ProtocolError, frame, recv_chunk,
                                send_frame)

from conftest import add_relu_model

pytestmark = pytest.mark.timing


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- framing ---------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=6), cuts=st.lists(st.integers(0, 2000),
                                                                                         max_size=8))
def test_frames_survive_any_split(bodies, cuts):
    """Frames cut at arbitrary points come out whole, in order."""
    stream = b"".join(frame(b) + b for b in bodies)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    out = []
    for a, b in zip(points, points[1:]):
        out.extend(decoder.feed(stream[a:b]))
    assert [body for body, _ in out] == bodies
    assert all(fds == [] for _, fds in out)
    assert decoder.pending_bytes == 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(st.binary(max_size=64), max_size=12), valid_prefix=st.booleans())
def test_frame_decoder_fuzz(chunks, valid_prefix):
    """Random bytes (optionally after a valid header) give frames or a ProtocolError, nothing else,
    and never buffer more than one frame's worth."""
    decoder = FrameDecoder(max_body=1 << 12)
    if valid_prefix:
        chunks = [HEADER.pack(MAGIC, 0, 0, 17)] + chunks
    try:
        for chunk in chunks:
            for body, fds in decoder.feed(chunk):
                assert len(body) <= 1 << 12 and fds == []
            assert decoder.pending_bytes <= (1 << 12) + HEADER.size + 64
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512), n_fds=st.integers(0, 3))
def test_message_decoder_fuzz(data, n_fds):
    """Any body decodes to a message or INVALID_ARGUMENT, never another exception."""
    try:
        codec.unpack(data, n_fds)
    except NnError as e:
        assert e.status == ErrorStatus.INVALID_ARGUMENT


@settings(max_examples=200, deadline=None)
@given(message=st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=8)
                            | st.binary(max_size=8) | st.floats(allow_nan=False),
                            lambda children: st.lists(children, max_size=4), max_leaves=20))
def test_server_decoders_reject_wrong_shapes(message):
    """Every HAL decoder answers INVALID_ARGUMENT (or a value) for any well-formed msgpack value."""
    dec = codec.Decoder([])
    for decode in (dec.request, dec.model, dec.cache, codec.decode_capabilities, codec.decode_info,
                   codec.decode_desc, codec.decode_timing, codec.decode_shapes):
        try:
            decode(message)
        except NnError as e:
            assert e.status == ErrorStatus.INVALID_ARGUMENT


def test_oversized_length_prefix_is_refused_at_once():
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="over the limit"):
        decoder.feed(HEADER.pack(MAGIC, 0, 0, 2**40))
    with pytest.raises(ProtocolError, match="bad frame magic"):
        FrameDecoder().feed(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(ProtocolError, match="descriptors"):
        FrameDecoder().feed(HEADER.pack(MAGIC, 0, MAX_FDS + 1, 0))
    with pytest.raises(ValueError):
        frame(b"x" * (MAX_BODY + 1))


def test_descriptors_travel_with_their_frame_and_mismatches_are_caught():
    base = _open_fds()
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        send_frame(a, b"one")
        send_frame(a, b"two", [r, w])
        decoder = FrameDecoder()
        got = []
        while len(got) < 2:
            data, fds = recv_chunk(b)
            got.extend(decoder.feed(data, fds))
        assert got[0] == (b"one", [])
        body, fds = got[1]
        assert body == b"two" and len(fds) == 2
        os.write(fds[1], b"z")  # the received write end reaches our pipe
        assert os.read(r, 1) == b"z"
        for fd in fds:
            os.close(fd)
        # A frame declaring descriptors that never came.
        with pytest.raises(ProtocolError, match="declares 1 descriptors but 0"):
            FrameDecoder().feed(HEADER.pack(MAGIC, 0, 1, 1) + b"x")
        # Descriptors with no frame to carry them are refused and closed by `close`.
        decoder = FrameDecoder()
        extra = os.dup(r)
        with pytest.raises(ProtocolError, match="without a frame"):
            decoder.feed(frame(b"y") + b"y", [extra])
        decoder.close()
    finally:
        os.close(r)
        os.close(w)
        a.close()
        b.close()
    assert _open_fds() == base


# --- codec ------------------------------------------------------------------------------------------------------
def _roundtrip(build, decode):
    enc = codec.Encoder()
    body = codec.pack([codec.CALL, 1, "m", 0, [build(enc)]])
    dups = [os.dup(fd) for fd in enc.fds]  # what the kernel would hand over
    enc.close()
    message = codec.unpack(body, len(dups))
    dec = codec.Decoder(dups)
    value = decode(dec, message[4][0])
    return value, dec


def test_request_roundtrip_with_descriptors():
    h = allocate_ashmem(64)
    request = Request([RequestArgument(False, DataLocation(0, 8, 16), (2, 2)), RequestArgument(True)],
                      [RequestArgument(False, DataLocation(1, 0, 4), ())],
                      [MemoryPool(handle=h), MemoryPool(token=7)])
    value, dec = _roundtrip(lambda enc: enc.request(request), lambda dec, v: dec.request(v))
    try:
        assert value.inputs == request.inputs and value.outputs == request.outputs
        assert value.pools[1] == MemoryPool(token=7)
        got = value.pools[0].handle
        assert (got.name, got.ints, got.size) == ("ashmem", (), 64)
        assert os.fstat(got.fds[0]).st_ino == os.fstat(h.fds[0]).st_ino  # the same memory
    finally:
        dec.close()
        close_handle(h)


def test_model_roundtrip_inline_and_in_a_memfd():
    for n in (4, 40_000):  # 40k floats: the serialized model goes in a sealed memfd
        model = add_relu_model(n, large_constant=True).to_hal()
        value, dec = _roundtrip(lambda enc: enc.model(model), lambda dec, v: dec.model(v))
        try:
            assert value.main == model.main and value.operand_values == model.operand_values
            assert len(value.pools) == len(model.pools)
        finally:
            dec.close()


def test_bad_descriptors_become_minus_one_and_references_must_match():
    request = Request([], [], [MemoryPool(handle=MemoryHandle("ashmem", (987654,), (), 8))])
    value, dec = _roundtrip(lambda enc: enc.request(request), lambda dec, v: dec.request(v))
    assert value.pools[0].handle.fds == (-1,)  # the driver reports the bad handle itself
    enc = codec.Encoder()
    body = codec.pack([codec.CALL, 1, "m", 0, [enc.fd(0)]])
    with pytest.raises(NnError, match="carries 2 descriptors but the message refers to 1"):
        codec.unpack(body, 2)


def test_small_values_roundtrip():
    shapes = [OutputShape((1, 2), True), OutputShape((3,), False)]
    assert codec.decode_shapes(codec.encode_shapes(shapes)) == shapes
    assert codec.decode_timing(codec.encode_timing(Timing(5, 7))) == Timing(5, 7)
    assert codec.decode_desc(codec.encode_desc(BufferDesc((2, np.int64(3))))) == BufferDesc((2, 3))
    assert codec.decode_role(codec.encode_role(BufferRole(0, 1, 0.5)), "r") == BufferRole(0, 1, 0.5)
    from nnapi.drivers.reference import ReferenceDevice
    caps = ReferenceDevice().get_capabilities()
    assert codec.decode_capabilities(codec.encode_capabilities(caps)) == caps
    error = codec.decode_error(*codec.error_message(3, NnError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "out 0",
                                                                output_shapes=shapes))[2:])
    assert error.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and error.output_shapes == shapes
    with pytest.raises(NnError, match="cache model file: expected a file descriptor"):
        codec.Decoder([]).cache([[1], []])
    with pytest.raises(NnError, match="request input 0 dimension: expected an integer"):
        codec.Decoder([]).request([[[False, 0, 0, 4, ["x"]]], [], []])
    assert codec.Decoder([]).cache(None) is None
    assert CacheHandles() == codec.Decoder([]).cache([[], []])


@pytest.mark.parametrize("arrives_ms, due_ms", [(1, 20), (20, 20), (40, 20), (5, 0)])
def test_receive_gets_the_answer_early_on_time_or_late(arrives_ms, due_ms):
    """Polling around the time an answer is due never loses or delays one that comes at another time."""
    import threading
    import time
    from nnapi.service.wire import receive
    a, b = socket.socketpair()
    try:
        timer = threading.Timer(arrives_ms / 1000, lambda: b.send(b"answer"))
        start = time.monotonic_ns()
        timer.start()
        data, fds = receive(a, 1_000_000, start + due_ms * 1_000_000 if due_ms else 0)
        waited_ms = (time.monotonic_ns() - start) / 1e6
        assert data == b"answer" and fds == []
        assert waited_ms >= arrives_ms - 0.5
        timer.join()
    finally:
        a.close()
        b.close()
