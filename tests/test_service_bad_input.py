"""Bad input on the service socket: garbage, truncated and oversized frames, wrong types, unknown methods,
missing and extra descriptors, calls before the handshake, a thousand connections at once. The service
answers INVALID_ARGUMENT or drops that connection; it never dies, never leaks descriptors, and a
well-behaved client connected all along is not disturbed."""
from __future__ import annotations

import os
import random
import shutil
import socket
import tempfile
import time

import msgpack
import numpy as np
import pytest

from nnapi.hal import ErrorStatus, ExecutionPreference, MeasureTiming, Priority
from nnapi.service import codec, connect, default_socket
from nnapi.service.cli import start
from nnapi.service.wire import HEADER, MAGIC, FrameDecoder, frame, recv_chunk, send_frame

from conftest import add_relu_model

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def service():
    directory = tempfile.mkdtemp(prefix="nnapi-test-bad-input-")
    os.chmod(directory, 0o755)
    served = start("reference", default_socket("reference", directory), os.path.join(directory, "state"))
    yield served
    assert served.process.poll() is None, "the service died"
    assert served.stop() == 0
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def witness(service):
    """A well-behaved client connected through every test: it must keep working."""
    device = connect(service.socket)
    model = add_relu_model()
    prepared = device.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                    None, None)
    yield device, prepared, model
    device.close()


def _check_witness(witness) -> None:
    from nnapi.hal import DataLocation, MemoryPool, Request, RequestArgument
    _, prepared, _ = witness
    x, out = np.array([1, -2, 3, -4], np.float32), np.zeros(4, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(0, 0, 16))],
                      [RequestArgument(False, DataLocation(1, 0, 16))], [MemoryPool(pointer=x), MemoryPool(pointer=out)])
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    np.testing.assert_array_equal(out, np.maximum(2 * x, 0))


def _fds(service, witness, expected: int | None = None) -> int:
    """The service's open descriptors once every connection but the witness's is gone (and, given
    `expected`, once the count settles there: a dropped connection's socket closes just after)."""
    for _ in range(200):
        count = len(os.listdir(f"/proc/{service.pid}/fd"))
        if witness[0].status()["connections"] == 1 and expected in (None, count):
            break
        time.sleep(0.02)
    return count


def _raw(service) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(service.socket)
    return sock


def _call(sock, message, fds=()) -> None:
    send_frame(sock, msgpack.packb(message, use_bin_type=True), fds)


def _answer(sock, decoder: FrameDecoder | None = None):
    """The next message from the service, or None when it closed the connection."""
    decoder = decoder or FrameDecoder()
    while True:
        data, fds = recv_chunk(sock)
        if not data:
            return None
        frames = decoder.feed(data, fds)
        if frames:
            body, fds = frames[0]
            return codec.unpack(body, len(fds))


def _greeted(service) -> socket.socket:
    sock = _raw(service)
    _call(sock, [codec.CALL, 1, "hello", 0, [codec.PROTOCOL_VERSION]])
    reply = _answer(sock)
    assert reply[0] == codec.REPLY and reply[2]["uid"] == os.getuid()
    return sock


def _closed_by_service(sock) -> bool:
    try:
        while True:
            data, fds = recv_chunk(sock)
            if not data:
                return True
    except (ConnectionResetError, socket.timeout):
        return False
    finally:
        sock.close()


def test_garbage_truncated_and_oversized_frames_drop_only_that_connection(service, witness):
    base = _fds(service, witness)
    rng = random.Random(0)
    for k in range(40):
        sock = _raw(service)
        sock.sendall(bytes(rng.randrange(256) for _ in range(rng.randint(16, 400))))
        assert _closed_by_service(sock), k
    sock = _raw(service)  # a length prefix of 2^40: refused before anything is allocated
    sock.sendall(HEADER.pack(MAGIC, 0, 0, 2**40))
    assert _closed_by_service(sock)
    for cut in (3, 16, 40):  # truncated, then the client goes away
        sock = _greeted(service)
        data = frame(b"\x95" + b"\x00" * 60) + b"\x95" + b"\x00" * 60
        sock.sendall(data[:cut])
        sock.close()
    sock = _raw(service)  # a frame declaring a descriptor that never comes
    sock.sendall(HEADER.pack(MAGIC, 0, 1, 1) + b"\xc0")
    assert _closed_by_service(sock)
    _check_witness(witness)
    assert _fds(service, witness, base) == base


def test_malformed_calls_are_invalid_argument(service, witness):
    base = _fds(service, witness)
    sock = _raw(service)  # anything before the handshake: refused, then dropped
    _call(sock, [codec.CALL, 1, "get_supported_operations", 0, []])
    reply = _answer(sock)
    assert reply[0] == codec.ERROR and reply[2] == ErrorStatus.INVALID_ARGUMENT and "hello" in reply[3]
    assert _closed_by_service(sock)
    sock = _raw(service)  # a protocol version the service does not speak
    _call(sock, [codec.CALL, 1, "hello", 0, [99]])
    reply = _answer(sock)
    assert reply[2] == ErrorStatus.INVALID_ARGUMENT and "version 99" in reply[3]
    assert _closed_by_service(sock)

    sock = _greeted(service)
    decoder = FrameDecoder()
    cases = [
        ([codec.CALL, 2, "no_such_method", 0, []], "unknown method"),
        ([codec.CALL, 3, "prepare_model", 0, "not a list"], "expected a list"),
        ([codec.CALL, 4, "prepare_model", 0, [1, 2, 3, 4, 5, 6]], "model: expected a list"),
        ([codec.CALL, 5, "prepare_model", 0, [[b"junk-but-long", 13, []], 1, 1, None, None, None]], "bad magic"),
        ([codec.CALL, 6, "execute_synchronously", 77, [[[], [], []], 0, None, None]], "not a live prepared model"),
        ([codec.CALL, 7, "get_supported_operations", 0, [[b"", "x", []]]], "expected an integer"),
        (["call", 8, "hello", 0, []], "a call must be"),
        ([codec.CALL, -1, "hello", 0, []], "request id"),
        ([codec.CALL, 9, 42, 0, []], "method: expected a string"),
    ]
    for message, expected in cases:
        _call(sock, message)
        reply = _answer(sock, decoder)
        assert reply[0] == codec.ERROR and reply[2] == ErrorStatus.INVALID_ARGUMENT, (message, reply)
        assert expected in reply[3], (message, reply[3])
    send_frame(sock, b"\xc1\xc1 not msgpack")  # unreadable body: answered with request id 0
    reply = _answer(sock, decoder)
    assert reply[:3] == [codec.ERROR, 0, ErrorStatus.INVALID_ARGUMENT]

    # Descriptors: a reference to one that was not sent, and ones sent but not referred to.
    ref = msgpack.ExtType(codec.EXT_FD, (0).to_bytes(4, "little"))
    _call(sock, [codec.CALL, 10, "copy_to", 1, [["ashmem", [ref], [], 8]]])
    reply = _answer(sock, decoder)
    assert reply[2] == ErrorStatus.INVALID_ARGUMENT and "refers to 1" in reply[3]
    r, w = os.pipe()
    _call(sock, [codec.CALL, 11, "get_supported_operations", 0, [[b"", 0, []]]], [r, w, r])
    reply = _answer(sock, decoder)
    assert reply[2] == ErrorStatus.INVALID_ARGUMENT and "carries 3 descriptors" in reply[3]
    os.close(r)
    os.close(w)
    sock.close()
    _check_witness(witness)
    assert _fds(service, witness, base) == base


def test_a_thousand_connections_at_once(service, witness):
    base = _fds(service, witness)
    socks = []
    try:
        for k in range(1000):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(30)
            sock.connect(service.socket)
            _call(sock, [codec.CALL, k + 1, "hello", 0, [codec.PROTOCOL_VERSION]])
            socks.append(sock)
        for k, sock in enumerate(socks):
            reply = _answer(sock)
            assert reply[:2] == [codec.REPLY, k + 1]
        _check_witness(witness)
        status = witness[0].status()
        assert status["connections"] >= 1001
    finally:
        for sock in socks:
            sock.close()
    assert _fds(service, witness, base) == base
    assert witness[0].status()["connections"] == 1


def _shrinkable(kind: str, directory: str, size: int):
    """A handle of `size` bytes the app can shrink under the service: a memfd that allows sealing
    (not sealed), one that does not, a regular file (read-only mapping or writable)."""
    from nnapi.hal import MemoryHandle
    from nnapi.memory import mmap_fd_handle
    if kind.startswith("memfd"):
        fd = os.memfd_create("nnapi-shrink", os.MFD_ALLOW_SEALING if kind == "memfd-sealable" else 0)
        os.ftruncate(fd, size)
        return MemoryHandle("ashmem", (fd,), (), size), fd
    path = os.path.join(directory, f"shrink-{kind}.bin")
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    fd = os.open(path, os.O_RDWR)
    import mmap as _mmap
    handle = mmap_fd_handle(fd, 0, size, _mmap.PROT_READ | (_mmap.PROT_WRITE if kind == "file-rw" else 0))
    os.close(fd)
    return handle, handle.fds[0]


@pytest.mark.parametrize("kind", ["memfd-sealable", "memfd-unsealable", "file-ro", "file-rw"])
def test_an_app_that_shrinks_its_memory_under_the_service_cannot_crash_it(service, witness, kind, tmp_path):
    """A mapping faults (SIGBUS, which kills the process) where its file has shrunk below it. An app that
    shrinks and grows its pool's file while the service runs on it gets its answers (or INVALID_ARGUMENT
    for a file too short when the call comes): a memfd is sealed against shrinking, other files copied."""
    import threading
    from nnapi.hal import DataLocation, MemoryPool, NnError, Request, RequestArgument
    from nnapi.memory import close_handle
    n = 1 << 20  # 4 MB
    device = connect(service.socket)
    model = add_relu_model(n)
    prepared = device.prepare_model(model.to_hal(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                    None, None)
    handle, fd = _shrinkable(kind, str(tmp_path), 4 * n)
    out = np.zeros(n, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 4 * n)),
                       RequestArgument(False, DataLocation(0, 0, 4 * n))],
                      [RequestArgument(False, DataLocation(1, 0, 4 * n))], [MemoryPool(handle=handle),
                                                                           MemoryPool(pointer=out)])
    stop = threading.Event()
    refused_shrink = []

    def shrink_and_grow() -> None:
        while not stop.is_set():
            try:
                os.ftruncate(fd, 0)
                time.sleep(0.0003)
                os.ftruncate(fd, 4 * n)
            except OSError:  # sealed by the service: the app cannot shrink it any more
                refused_shrink.append(True)
                stop.wait(0.01)
            time.sleep(0.001)

    shrinker = threading.Thread(target=shrink_and_grow)
    shrinker.start()
    answers = {"ok": 0, "refused": 0}
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            try:
                prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
                answers["ok"] += 1
            except NnError as e:
                assert e.status == ErrorStatus.INVALID_ARGUMENT, e
                answers["refused"] += 1
    finally:
        stop.set()
        shrinker.join()
        close_handle(handle)
        device.close()
    assert service.process.poll() is None, f"the service died ({kind})"
    assert answers["ok"] + answers["refused"] > 5
    assert bool(refused_shrink) == (kind == "memfd-sealable")
    _check_witness(witness)


def test_a_file_too_large_to_copy_is_refused_before_anything_is_copied(tmp_path, monkeypatch):
    """A file the service cannot seal is copied; one larger than a tensor may be (or a message whose
    copies together are) is refused with RESOURCE_EXHAUSTED_PERSISTENT, without copying a byte: an app
    cannot make the service take gigabytes by naming a large (even sparse) file."""
    import mmap as _mmap
    from nnapi.hal import NnError
    from nnapi.memory import close_handle, mmap_fd_handle, stable_handle
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse: nothing on disk
    fd = os.open(path, os.O_RDONLY)
    big = mmap_fd_handle(fd, 0, 1 << 30, _mmap.PROT_READ)
    small = mmap_fd_handle(fd, 0, 1 << 20, _mmap.PROT_READ)
    os.close(fd)
    try:
        with pytest.raises(NnError) as err:
            stable_handle(big, max_copy_bytes=64 << 20)
        assert err.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
        assert "Memory.ashmem" in err.value.message
        copied, copy = stable_handle(small, max_copy_bytes=64 << 20)
        assert copy is not None and copy.end - copy.first == 1 << 20
        close_handle(copied)
        # One message's copies share the budget: the third 1 MiB copy is over a 2.5 MiB one.
        monkeypatch.setattr(codec, "max_tensor_bytes", lambda: 5 << 19)
        enc = codec.Encoder()
        message = codec.unpack(codec.pack([enc.handle(small) for _ in range(3)]), len(enc.fds))
        dec = codec.Decoder([os.dup(f) for f in enc.fds], stable=True)  # (the decoder closes its own)
        dec.handle(message[0], "pool 0")
        dec.handle(message[1], "pool 1")
        with pytest.raises(NnError) as err:
            dec.handle(message[2], "pool 2")
        assert err.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT and "pool 2" in err.value.message
        dec.close()
    finally:
        close_handle(big)
        close_handle(small)
