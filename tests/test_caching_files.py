"""Cache-file reads (`caching.files.read_file`): whole content, 64-byte aligned, writable, at every
size, below and above the one from which the buffer's pages are faulted in beforehand."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from nnapi.caching.files import ALIGN, PREFAULTED_BYTES, aligned_buffer, read_file
from nnapi.hal import ErrorStatus, NnError


@pytest.mark.parametrize("size", [0, 1, 4095, PREFAULTED_BYTES - 1, PREFAULTED_BYTES, 3 * PREFAULTED_BYTES + 17])
def test_read_file_gives_the_whole_content_aligned_and_writable(size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        view = read_file(f.fileno(), size + 1)
    assert bytes(view) == data
    assert not view.readonly
    if size:
        arr = np.frombuffer(view, np.uint8)
        assert arr.ctypes.data % ALIGN == 0
        arr[-1] ^= 0xFF  # the reader's own copy: writing it leaves the file alone
        assert bytes(view[:-1]) == data[:-1]


def test_a_large_buffer_outlives_the_views_that_made_it() -> None:
    arr = np.frombuffer(aligned_buffer(2 * PREFAULTED_BYTES), np.float32)  # (no other reference to the buffer)
    arr[:] = 1.5
    assert float(arr.sum()) == 1.5 * arr.size


def test_a_file_beyond_the_limit_is_refused() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 100)
        f.flush()
        with pytest.raises(NnError) as e:
            read_file(f.fileno(), 99)
    assert e.value.status == ErrorStatus.GENERAL_FAILURE and "exceeds the limit" in e.value.message


def test_a_large_buffer_has_its_pages_before_it_is_written() -> None:
    """Fresh or reused from the heap, a large buffer comes with every page in memory: filling it (as a
    cache read does) takes no page fault."""
    import resource

    for _ in range(3):  # (the first is fresh memory; later ones may come back from the heap)
        arr = np.frombuffer(aligned_buffer(8 * PREFAULTED_BYTES), np.uint8)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        arr[:] = 7
        assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16
        del arr
