"""Issue 33: faults no single check owned are caught wherever they show. The driver base hands drivers
read-only inputs."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi.drivers.base.binding import Binding
from nnapi.hal import DataLocation, MemoryPool, Request, RequestArgument
from nnapi.memory import map_pool
from nnapi.memory.domains import RequestBuffers

from conftest import add_relu_model


# --- 2: the base's inputs are read-only views -------------------------------------------------------------------
def test_the_bases_inputs_are_read_only_views_of_the_request_memory_so_numpy_refuses_a_write():
    model = add_relu_model().to_hal()
    a, b, out = np.arange(4, dtype=np.float32), np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, 16)), RequestArgument(False, DataLocation(1, 16, 16))],
                      [RequestArgument(False, DataLocation(2, 0, 16))],
                      [MemoryPool(pointer=a), MemoryPool(pointer=b), MemoryPool(pointer=out)])
    binding = Binding(model, request, [map_pool(p) for p in request.pools], RequestBuffers(), None, None, None)
    for k, app, want in ((0, a, [0, 1, 2, 3]), (1, b, [4, 5, 6, 7])):
        x = binding.input(k)
        assert not x.flags.writeable and np.shares_memory(x, app) and x.tolist() == want   # a view, no copy
        with pytest.raises(ValueError, match="read-only"):
            x[0] = 42
        assert app.flags.writeable and app.tolist()[:1] != [42]   # the app's own array is left as it was
    assert binding.input(0) is binding.input(0)   # a whole app array: the same view each time (drivers keep
    #                                              a tensor set up over an input and compare identity)
