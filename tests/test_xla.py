"""The XLA compiling driver: lowering against the reference driver, executable caching (hits that
neither trace nor compile, tampered executables rejected), multi-stage compilation, capabilities
and partitioning across xla + reference."""
from __future__ import annotations

import numpy as np
import pytest

import jax

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.drivers.xla import XlaDevice
from nnapi.drivers.xla.program import Counters
from nnapi.hal import OperandType
from nnapi.runtime.devices import _make

RELU, RELU6, NONE = 1, 3, 0
SAME, VALID = 1, 2


def conv_model(size: int = 16, channels: int = 8, seed: int = 0) -> nnapi.Model:
    """CONV_2D 3x3 + RELU6 -> DEPTHWISE 3x3 stride 2 -> MAX_POOL 2x2 -> CONV 1x1 -> ADD -> SOFTMAX."""
    rng = np.random.default_rng(seed)
    m = nnapi.Model()

    def scalar(v: int) -> int:
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        return i

    def const(shape, scale=0.2) -> int:
        i = m.add_operand(T.TENSOR_FLOAT32, shape)
        m.set_operand_value(i, (rng.standard_normal(shape) * scale).astype(np.float32))
        return i

    def tensor(shape) -> int:
        return m.add_operand(T.TENSOR_FLOAT32, shape)

    half = size // 2
    x = tensor((1, size, size, 3))
    h1 = tensor((1, size, size, channels))
    m.add_operation(Op.CONV_2D, [x, const((channels, 3, 3, 3)), const((channels,)), scalar(SAME), scalar(1),
                                 scalar(1), scalar(RELU6)], [h1])
    h2 = tensor((1, half, half, channels))
    m.add_operation(Op.DEPTHWISE_CONV_2D, [h1, const((1, 3, 3, channels)), const((channels,)), scalar(SAME),
                                           scalar(2), scalar(2), scalar(1), scalar(RELU)], [h2])
    h3 = tensor((1, half // 2, half // 2, channels))
    m.add_operation(Op.MAX_POOL_2D, [h2, scalar(VALID), scalar(2), scalar(2), scalar(2), scalar(2), scalar(NONE)],
                    [h3])
    h4 = tensor((1, half // 2, half // 2, channels))
    m.add_operation(Op.CONV_2D, [h3, const((channels, 1, 1, channels)), const((channels,)), scalar(SAME),
                                 scalar(1), scalar(1), scalar(NONE)], [h4])
    h5 = tensor((1, half // 2, half // 2, channels))
    m.add_operation(Op.ADD, [h3, h4, scalar(NONE)], [h5])
    beta = m.add_operand(T.FLOAT32)
    m.set_operand_value(beta, 1.0)
    out = tensor((1, half // 2, half // 2, channels))
    m.add_operation(Op.SOFTMAX, [h5, beta], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m


@pytest.fixture(scope="module")
def conv() -> nnapi.Model:
    return conv_model()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 16, 16, 3)).astype(np.float32)


def xla_device(**options) -> nnapi.Device:
    return _make(XlaDevice(**options))


def test_xla_is_discovered_with_measured_capabilities():
    devices = {d.name: d for d in nnapi.devices()}
    assert "xla" in devices and list(devices)[-1] == "reference"
    caps = devices["xla"].capabilities
    assert 0 < caps.performance(OperandType.TENSOR_FLOAT32).exec_time
    assert caps.performance(OperandType.TENSOR_QUANT8_ASYMM).exec_time > 1e30   # quantized stays on reference


def test_conv_model_matches_the_reference_driver(conv, image):
    c = nnapi.Compilation(conv, devices=["xla"]).finish()
    assert [s.device.name for s in c.steps] == ["xla"]
    (y,) = c.execute([image])
    (expected,) = nnapi.Compilation(conv, devices=["reference"]).finish().execute([image])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route", ["jaxlib", "public"])
def test_constants_are_placed_in_place_and_read_as_they_are(route, monkeypatch, conv, image):
    """Constants go to the device through jaxlib's own call (a fifth of make_array_from_callback's
    time) or, where jaxlib lacks it, the public one: either way aligned host memory is aliased, not
    copied, and the model computes what the reference driver does."""
    from nnapi.drivers.xla import program
    if route == "public":
        monkeypatch.setattr(program, "_batched_device_put", None)
    blob = np.zeros(4096 + 64, np.uint8)
    start = (-blob.ctypes.data) % 64
    host = [blob[start:start + 1024].view(np.float32).reshape(16, 16), blob[start + 1024:start + 1088].view(np.int32),
            blob[start + 1088:start + 1092].view(np.bool_)]
    host[0][...] = np.arange(256, dtype=np.float32).reshape(16, 16)
    placed = program.place_on_device(host)
    assert [p.unsafe_buffer_pointer() for p in placed[:2]] == [h.ctypes.data for h in host[:2]]
    assert all(np.array_equal(np.asarray(p), h) and p.dtype == h.dtype and p.shape == h.shape
               for p, h in zip(placed, host))
    expected = nnapi.Compilation(conv, devices=["reference"]).finish().execute([image])[0]
    got = nnapi.Compilation(conv, devices=["xla"]).finish().execute([image])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_shared_memory_inputs_and_outputs(conv, image):
    c = nnapi.Compilation(conv, devices=["xla"]).finish()
    mem_in = nnapi.Memory.ashmem(image.nbytes)
    mem_in.array(np.float32, image.shape)[...] = image
    out_bytes = 4 * 4 * 4 * 8
    mem_out = nnapi.Memory.ashmem(out_bytes + 64)
    e = nnapi.Execution(c)
    e.set_input_from_memory(0, mem_in, 0, image.nbytes)
    e.set_output_from_memory(0, mem_out, 64, out_bytes)
    e.compute()
    (expected,) = c.execute([image])
    np.testing.assert_array_equal(mem_out.array(np.float32, (1, 4, 4, 8), offset=64), expected)


def test_claims_only_what_it_lowers():
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, (4,))
    q = m.add_operand(T.TENSOR_QUANT8_ASYMM, (4,), 0.5, 0)
    m.add_operation(Op.QUANTIZE, [a], [q])
    unknown_in = m.add_operand(T.TENSOR_FLOAT32, (0,))
    unknown_out = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.RELU, [unknown_in], [unknown_out])
    b = m.add_operand(T.TENSOR_FLOAT32, (4,))
    m.add_operation(Op.RELU, [a], [b])
    m.identify_inputs_and_outputs([a, unknown_in], [q, unknown_out, b])
    m.finish()
    xla = next(d for d in nnapi.devices() if d.name == "xla")
    assert xla.supported_operations(m) == [False, False, True]   # quantized, dynamic shape, float RELU


def _backend_compiles() -> list[str]:
    events: list[str] = []

    def listener(event: str, duration: float, **_) -> None:
        if event.startswith("/jax/core/compile/"):
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    return events


def test_cache_hit_neither_traces_nor_compiles(tmp_path, conv, image):
    token = bytes(range(32))
    first = nnapi.Compilation(conv, devices=["xla"], cache_dir=tmp_path, token=token).finish()
    assert [o.outcome for o in first.cache_outcomes] == ["miss"]
    before = (Counters.traces, Counters.compiles)
    events = _backend_compiles()
    second = nnapi.Compilation(conv, devices=["xla"], cache_dir=tmp_path, token=token).finish()
    assert [o.outcome for o in second.cache_outcomes] == ["hit"]
    (y,) = second.execute([image])
    assert (Counters.traces, Counters.compiles) == before
    assert events == []   # no jaxpr trace, no MLIR lowering, no backend compile
    np.testing.assert_array_equal(y, first.execute([image])[0])


def test_prepare_from_cache_in_a_fresh_driver_neither_traces_nor_compiles(tmp_path, conv, image):
    """Driver level, as after a restart: a new XlaDevice loads the executable the old one saved."""
    from nnapi.runtime.cache_files import cache_paths, close_cache_files, open_cache_files
    token = bytes([3] * 32)
    hal_model = conv.to_hal()
    paths = cache_paths(str(tmp_path), token, (1, 1))
    handles = open_cache_files(paths, create=True)
    try:
        XlaDevice().prepare_model(hal_model, cache_handles=handles, token=token)
    finally:
        close_cache_files(handles)
    before = (Counters.traces, Counters.compiles)
    events = _backend_compiles()
    handles = open_cache_files(paths, create=False)
    try:
        prepared = XlaDevice().prepare_model_from_cache(None, handles, token)
    finally:
        close_cache_files(handles)
    assert (Counters.traces, Counters.compiles) == before and events == []
    assert prepared.stage == "quick" and prepared.signature.inputs[0].dims == (1, 16, 16, 3)


def _prepare_as(device: XlaDevice, model: nnapi.Model, paths, token: bytes, uid: int, from_cache: bool):
    """Driver level, for app `uid`: compile into the cache files `paths`, or prepare from them."""
    from nnapi.hal import ClientId
    from nnapi.runtime.cache_files import close_cache_files, open_cache_files
    handles = open_cache_files(paths, create=not from_cache)
    try:
        if from_cache:
            return device.prepare_model_from_cache(None, handles, token, client=ClientId(uid))
        return device.prepare_model(model.to_hal(), cache_handles=handles, token=token, client=ClientId(uid))
    finally:
        close_cache_files(handles)


def _also_written_by(device: XlaDevice, token: bytes, writer: int, uid: int) -> None:
    """Record for app `uid` what app `writer` recorded for `token`: as if `uid` had written the same bytes
    (one app's record never vouches for another's files)."""
    for digest in device.registry.lookup(token, writer):
        device.registry.record(token, digest, uid)


def _run_driver(prepared, image: np.ndarray) -> np.ndarray:
    """The prepared model's one output for `image`, run at driver level."""
    from nnapi.hal import DataLocation, MeasureTiming, MemoryPool, Request, RequestArgument
    out = np.zeros(prepared.static_output_shapes[0], np.float32)
    request = Request([RequestArgument(False, DataLocation(0, 0, image.nbytes))],
                      [RequestArgument(False, DataLocation(1, 0, out.nbytes))],
                      [MemoryPool(pointer=image), MemoryPool(pointer=out)])
    prepared.execute_synchronously(request, MeasureTiming.NO, None, None)
    return out


def test_loads_of_one_cache_share_device_constants_within_an_app_never_across_apps(tmp_path, conv, image):
    """A second hit on the same verified content for the same app reuses the constants already on the
    device (and the compile that wrote the cache offers its own); another app's load places its own."""
    from nnapi.runtime.cache_files import cache_paths
    token = bytes([5] * 32)
    paths = cache_paths(str(tmp_path), token, (1, 1))
    device = XlaDevice()

    def prepare(uid: int, from_cache: bool = True):
        return _prepare_as(device, conv, paths, token, uid, from_cache)

    def run(prepared) -> np.ndarray:
        return _run_driver(prepared, image)

    compiled = prepare(1001, from_cache=False)
    first, second = prepare(1001, from_cache=True), prepare(1001, from_cache=True)
    _also_written_by(device, token, 1001, 1002)
    other = prepare(1002, from_cache=True)
    assert first.constants is compiled.constants and second.constants is compiled.constants
    assert other.constants is not compiled.constants
    assert compiled.constants.keys() == other.constants.keys()
    expected = run(compiled)
    for prepared in (first, second, other):
        np.testing.assert_array_equal(run(prepared), expected)
    import gc
    import weakref
    held = weakref.ref(compiled.constants)
    del compiled, first, second  # shared only while a prepared model holds them: then freed
    gc.collect()
    assert held() is None
    again = prepare(1001, from_cache=True)
    np.testing.assert_array_equal(run(again), expected)


def _flip_last_byte(path) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))


def test_a_hit_while_the_app_holds_that_content_reads_no_data_cache(tmp_path, conv, image):
    """While a preparation of an app holds the constants of a verified content, the app's next hit on
    it uses them and does not read the data cache (a changed byte there goes unnoticed, and unused);
    another app, or the same app once nothing holds them, reads it and refuses the changed file."""
    import gc

    from nnapi.hal import NnError
    from nnapi.runtime.cache_files import cache_paths
    token = bytes([6] * 32)
    _, (data_path,) = paths = cache_paths(str(tmp_path), token, (1, 1))
    device = XlaDevice()

    def prepare(uid: int, from_cache: bool = True):
        return _prepare_as(device, conv, paths, token, uid, from_cache)

    compiled = prepare(2001, from_cache=False)
    _also_written_by(device, token, 2001, 2002)
    expected = nnapi.Compilation(conv, devices=["reference"]).finish().execute([image])[0]
    _flip_last_byte(data_path)
    held = prepare(2001)
    assert held.constants is compiled.constants
    np.testing.assert_allclose(_run_driver(held, image), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(NnError, match="data cache 0 does not match"):
        prepare(2002)
    del compiled, held
    gc.collect()
    with pytest.raises(NnError, match="data cache 0 does not match"):
        prepare(2001)
    _flip_last_byte(data_path)  # back as written: read, checked and placed again
    again = prepare(2001)
    np.testing.assert_allclose(_run_driver(again, image), expected, rtol=1e-5, atol=1e-5)


def test_a_verified_model_cache_is_decoded_once_per_process_and_a_changed_one_never(tmp_path, conv, image,
                                                                                     monkeypatch):
    """Once this process decoded a verified content, later loads of it (any app, none alive) decode no
    structure again; a model cache changed since is refused before anything decoded is looked up."""
    import gc

    from nnapi.drivers.xla import cache
    from nnapi.hal import NnError
    from nnapi.runtime.cache_files import cache_paths
    token = bytes([7] * 32)
    (model_path,), _ = paths = cache_paths(str(tmp_path), token, (1, 1))
    device = XlaDevice()

    def prepare(uid: int, from_cache: bool = True):
        return _prepare_as(device, conv, paths, token, uid, from_cache)

    prepare(3001, from_cache=False)
    _also_written_by(device, token, 3001, 3002)
    first = prepare(3001)
    expected = first.constants.structure
    del first
    gc.collect()
    decoded = []
    original = cache.model_from_bytes
    monkeypatch.setattr(cache, "model_from_bytes", lambda data: decoded.append(1) or original(data))
    second, other = prepare(3001), prepare(3002)
    assert decoded == [] and second.constants.structure is expected and other.constants is not second.constants
    _flip_last_byte(model_path)
    with pytest.raises(NnError, match="integrity check"):
        prepare(3001)
    assert decoded == []


def test_gather_fails_on_an_index_out_of_range_as_the_reference_driver_does(tmp_path):
    """XLA clamps an index out of range (10 reads row 9, -1 row 0); NNAPI fails the execution. The
    program checks its indices as it runs, also once loaded from the cache (the check's message is
    in the cached signature), and fails with the reference driver's status."""
    m = nnapi.Model()
    table = m.add_operand(T.TENSOR_FLOAT32, (10, 3))
    m.set_operand_value(table, np.arange(30, dtype=np.float32).reshape(10, 3))
    axis = m.add_operand(T.INT32)
    m.set_operand_value(axis, 0)
    idx, y = m.add_operand(T.TENSOR_INT32, (4,)), m.add_operand(T.TENSOR_FLOAT32, (4, 3))
    m.add_operation(Op.GATHER, [table, axis, idx], [y])
    m.identify_inputs_and_outputs([idx], [y])
    m.finish()
    good = np.array([0, 9, 3, 3], np.int32)
    want = np.arange(30, dtype=np.float32).reshape(10, 3)[good]
    with pytest.raises(nnapi.NnError) as expected:
        nnapi.Compilation(m, devices=["reference"]).finish().execute([np.array([0, 10, 3, 3], np.int32)])
    outcomes = []
    for _ in range(2):  # a miss that writes the cache, then a hit that loads the executable
        c = nnapi.Compilation(m, devices=["xla"], cache_dir=str(tmp_path), token=bytes([9] * 32)).finish()
        outcomes.append(c.cache_outcomes[0].outcome)
        np.testing.assert_array_equal(c.execute([good])[0], want)
        for bad in ([0, 10, 3, 3], [-1, 0, 0, 0]):
            with pytest.raises(nnapi.NnError, match=r"GATHER: input 2 \(indices\) holds a value out of range "
                                                     r"\[0, 10\) for axis 0") as e:
                c.execute([np.array(bad, np.int32)])
            assert e.value.code == expected.value.code
        np.testing.assert_array_equal(c.execute([good])[0], want)  # the prepared model keeps serving
    assert outcomes == ["miss", "hit"]


def test_tampered_executable_is_rejected_then_rewritten(tmp_path, conv, image):
    token = bytes(32)
    nnapi.Compilation(conv, devices=["xla"], cache_dir=tmp_path, token=token).finish()
    (model_cache,) = [p for p in tmp_path.iterdir() if p.name.endswith("10")]
    data = bytearray(model_cache.read_bytes())
    data[len(data) // 2] ^= 0x40          # inside the serialized executable
    model_cache.write_bytes(bytes(data))
    before = Counters.compiles
    again = nnapi.Compilation(conv, devices=["xla"], cache_dir=tmp_path, token=token).finish()
    assert again.cache_outcomes[0].outcome == "rejected"
    assert "integrity" in again.cache_outcomes[0].reason
    assert Counters.compiles == before + 1          # recompiled, and the cache rewritten
    hit = nnapi.Compilation(conv, devices=["xla"], cache_dir=tmp_path, token=token).finish()
    assert hit.cache_outcomes[0].outcome == "hit"
    np.testing.assert_array_equal(hit.execute([image])[0], again.execute([image])[0])


@pytest.mark.timing
def test_multi_stage_swaps_in_the_optimised_executable_and_rewrites_the_cache(tmp_path, conv, image):
    device = xla_device(optimize_after=3)
    token = bytes([7] * 32)
    c = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    prepared = c.steps[0].prepared
    assert prepared.stage == "quick"
    quick = [c.execute([image])[0] for _ in range(3)]   # the third execution starts the optimised compile
    assert prepared.wait_optimized(timeout=60)
    optimised = c.execute([image])[0]
    for y in quick:
        np.testing.assert_array_equal(y, quick[0])
    # Same HLO; only LLVM's code generation differs (O0 vs O2: FMA contraction, vectorised exp), so
    # the two stages agree to a few units in the last place.
    np.testing.assert_array_max_ulp(optimised, quick[0], maxulp=8)
    hit = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    assert hit.cache_outcomes[0].outcome == "hit"
    assert hit.steps[0].prepared.stage == "optimized"    # the rewritten cache holds the optimised stage
    np.testing.assert_array_equal(hit.execute([image])[0], optimised)


@pytest.mark.timing
def test_partitioning_puts_float_work_on_xla_and_the_rest_on_reference(monkeypatch, android_partitioning):
    """FULLY_CONNECTED (xla) -> TOPK_V2 (not lowered: reference) -> RELU (xla); the float ratio is
    pinned so the plan does not depend on how busy the machine was during the calibration."""
    monkeypatch.setenv("NNAPI_XLA_PERFORMANCE", "0.1")
    m = nnapi.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, (4, 8))
    w = m.add_operand(T.TENSOR_FLOAT32, (8, 8))
    m.set_operand_value(w, np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32))
    b = m.add_operand(T.TENSOR_FLOAT32, (8,))
    m.set_operand_value(b, np.zeros(8, np.float32))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    h = m.add_operand(T.TENSOR_FLOAT32, (4, 8))
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, act], [h])
    k = m.add_operand(T.INT32)
    m.set_operand_value(k, 3)
    values = m.add_operand(T.TENSOR_FLOAT32, (4, 3))
    indices = m.add_operand(T.TENSOR_INT32, (4, 3))
    m.add_operation(Op.TOPK_V2, [h, k], [values, indices])
    out = m.add_operand(T.TENSOR_FLOAT32, (4, 3))
    m.add_operation(Op.RELU, [values], [out])
    m.identify_inputs_and_outputs([x], [out, indices])
    m.finish()
    devices = [xla_device(), next(d for d in nnapi.devices() if d.name == "reference")]
    c = nnapi.Compilation(m, devices=devices).finish()
    assert [s.device.name for s in c.steps] == ["xla", "reference", "xla"]
    requests = []

    def recording(real):   # see what each driver is handed
        def call(request, *args, **kwargs):
            requests.append(request)
            return real(request, *args, **kwargs)
        return call

    for step in c.steps:
        step.prepared.execute_synchronously = recording(step.prepared.execute_synchronously)
    xv = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    y, idx = c.execute([xv])
    # Values crossing partitions travel in shared memory (ashmem), as in Android's runtime.
    crossing = [(r.pools[a.location.pool_index].handle or None) for r in requests[1:] for a in r.inputs]
    crossing += [(requests[0].pools[a.location.pool_index].handle or None) for a in requests[0].outputs]
    assert crossing and all(h is not None and h.name == "ashmem" for h in crossing), crossing
    ry, ridx = nnapi.Compilation(m, devices=["reference"]).finish().execute([xv])
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(idx, ridx)


def test_bad_requests_are_errors_not_crashes(conv, image):
    c = nnapi.Compilation(conv, devices=["xla"]).finish()
    with pytest.raises(nnapi.NnError):
        nnapi.Execution(c).set_input(0, np.zeros((1, 8, 8, 3), np.float32))
    m = nnapi.Model()                                  # output declared with an unknown size
    a = m.add_operand(T.TENSOR_FLOAT32, (5,))
    out = m.add_operand(T.TENSOR_FLOAT32, (0,))
    m.add_operation(Op.RELU, [a], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    c = nnapi.Compilation(m, devices=["xla"]).finish()
    e = nnapi.Execution(c)
    e.set_input(0, np.array([-1, 2, -3, 4, 5], np.float32))
    e.set_output(0, np.zeros(3, np.float32))
    with pytest.raises(nnapi.NnError) as err:
        e.compute()
    assert err.value.code == nnapi.ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert e.get_output_shape(0) == (5,)
    (y,) = c.execute([np.array([-1, 2, -3, 4, 5], np.float32)])
    np.testing.assert_array_equal(y, [0, 2, 0, 4, 5])


def test_sub_models_checkpoint_between_them_and_cache_as_a_set(tmp_path, conv, image, monkeypatch):
    import nnapi.drivers.base.binding as binding
    seen: list[str] = []
    real = binding.checkpoint
    monkeypatch.setattr(binding, "checkpoint", lambda where="": (seen.append(where), real(where)))
    device = xla_device(segments=3)
    token = bytes([9] * 32)
    c = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    prepared = c.steps[0].prepared
    assert len(prepared.segments) == 3
    (y,) = c.execute([image])
    assert seen == ["sub-model 1 of 3", "sub-model 2 of 3"]
    (whole,) = nnapi.Compilation(conv, devices=["xla"]).finish().execute([image])
    np.testing.assert_allclose(y, whole, rtol=1e-6, atol=1e-7)
    hit = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    assert hit.cache_outcomes[0].outcome == "hit" and len(hit.steps[0].prepared.segments) == 3
    np.testing.assert_array_equal(hit.execute([image])[0], y)


def test_a_passed_deadline_is_refused(conv, image):
    import time

    from nnapi.hal import DataLocation, ErrorStatus, MeasureTiming, MemoryPool, Request, RequestArgument
    prepared = XlaDevice().prepare_model(conv.to_hal())
    out = np.zeros((1, 4, 4, 8), np.float32)
    request = Request([RequestArgument(location=DataLocation(0, 0, image.nbytes))],
                      [RequestArgument(location=DataLocation(1, 0, out.nbytes))],
                      [MemoryPool(pointer=image.copy()), MemoryPool(pointer=out)])
    with pytest.raises(nnapi.NnError) as e:
        prepared.execute_synchronously(request, MeasureTiming.NO, time.monotonic_ns() - 1, None)
    assert e.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    shapes, timing = prepared.execute_synchronously(request, MeasureTiming.YES, None, None)
    assert shapes[0].dimensions == (1, 4, 4, 8) and timing.time_on_device <= timing.time_in_driver
    np.testing.assert_allclose(out, nnapi.Compilation(conv, devices=["xla"]).finish().execute([image])[0])


def test_memory_domain_state_stays_a_device_array_between_executions():
    """A recurrent state in two XLA memory-domain buffers (ping-pong): each execution's output is
    kept as the executable's device array and fed to the next one without a host copy; the loop
    matches plain arrays, and the state is read back only at the end."""
    from nnapi import Memory, MemoryDesc
    from nnapi.drivers.xla import XlaDevice
    DOMAIN = XlaDevice.shared_domain()
    n = 8
    rng = np.random.default_rng(5)
    m = nnapi.Model()
    x, h = m.add_operand(T.TENSOR_FLOAT32, (1, n)), m.add_operand(T.TENSOR_FLOAT32, (1, n))
    w = m.add_operand(T.TENSOR_FLOAT32, (n, n))
    m.set_operand_value(w, rng.normal(0, 0.5, (n, n)).astype(np.float32))
    b = m.add_operand(T.TENSOR_FLOAT32, (n,))
    m.set_operand_value(b, np.zeros(n, np.float32))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    fh, s, h2 = (m.add_operand(T.TENSOR_FLOAT32, (1, n)) for _ in range(3))
    m.add_operation(Op.FULLY_CONNECTED, [h, w, b, act], [fh])
    m.add_operation(Op.ADD, [fh, x, act], [s])
    m.add_operation(Op.TANH, [s], [h2])
    m.identify_inputs_and_outputs([x, h], [h2])
    m.finish()
    c = nnapi.Compilation(m, devices=["xla"]).finish()
    xs = rng.normal(size=(20, 1, n)).astype(np.float32)
    h0 = rng.normal(size=(1, n)).astype(np.float32)
    expected = h0
    for xv in xs:
        (expected,) = c.execute([xv, expected])
    desc = MemoryDesc()
    desc.add_input_role(c, 1)
    desc.add_output_role(c, 0)
    desc.finish()
    a, bmem = Memory.from_desc(desc), Memory.from_desc(desc)
    start = Memory.ashmem(4 * n)
    start.array(np.float32, (1, n))[...] = h0
    Memory.copy(start, a)
    for xv in xs:
        e = nnapi.Execution(c)
        e.set_input(0, xv)
        e.set_input_from_memory(1, a, 0, 0)
        e.set_output_from_memory(0, bmem, 0, 0)
        e.compute()
        held = DOMAIN.tracker.get(bmem.pool.token)
        assert isinstance(held.device, jax.Array) and held.data is None   # no host copy was made
        a, bmem = bmem, a
    final = Memory.ashmem(4 * n)
    Memory.copy(a, final)
    np.testing.assert_allclose(final.array(np.float32, (1, n)), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.timing
def test_a_reader_during_the_optimised_rewrite_waits_and_loads_the_new_cache(tmp_path, conv, image, monkeypatch):
    """C11: the background rewrite holds the exclusive lock over the registry record and both files;
    a compilation from the cache that starts while the rewrite is half-way through a file waits
    for it and hits the optimised stage (never a torn file, never a spurious rejection)."""
    import os
    import threading
    import time

    import nnapi.caching.artifacts as artifacts
    device = xla_device(optimize_after=1)
    token = bytes([11] * 32)
    c = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    prepared = c.steps[0].prepared
    middle, writes_done = threading.Event(), []
    real_write = artifacts.write_file

    def slow_write(fd, data):  # truncate, write half, stall, write the rest
        view = memoryview(data)
        os.ftruncate(fd, 0)
        os.pwrite(fd, view[:len(view) // 2], 0)
        middle.set()
        time.sleep(0.3)
        real_write(fd, data)
        writes_done.append(time.monotonic())

    monkeypatch.setattr(artifacts, "write_file", slow_write)
    c.execute([image])                         # starts the optimised compile, then the rewrite
    assert middle.wait(timeout=60), prepared.optimize_error
    started = time.monotonic()
    reader = nnapi.Compilation(conv, devices=[device], cache_dir=tmp_path, token=token).finish()
    loaded = time.monotonic()
    assert reader.cache_outcomes[0].outcome == "hit", reader.cache_outcomes[0].reason
    assert reader.steps[0].prepared.stage == "optimized"
    assert len(writes_done) == 2 and started < writes_done[-1] <= loaded   # it waited for the writer
    assert prepared.wait_optimized(timeout=60)
    np.testing.assert_array_equal(reader.execute([image])[0], c.execute([image])[0])


def test_caching_engine_serves_compilations_without_app_caching_info(conv, image, tmp_path, monkeypatch):
    """C12: with its engine on, the driver keeps what it compiles in its state directory; another
    driver instance (as after a restart) loads the executable for the same partition without tracing
    or compiling, and the multi-stage rewrite replaces the entry with the optimised stage."""
    from nnapi.runtime.cache_admin import list_cache
    monkeypatch.setenv("NNAPI_STATE_DIR", str(tmp_path))
    first = XlaDevice(engine=True, optimize_after=1)
    c = nnapi.Compilation(conv, devices=[_make(first)]).finish()
    assert first.engine.stats["puts"] == 1 and c.cache_outcomes[0].outcome == "disabled"
    (y,) = c.execute([image])                   # the first execution starts the optimised compile
    assert c.steps[0].prepared.wait_optimized(timeout=60)
    assert first.engine.stats["puts"] == 2       # the entry now holds the optimised stage
    before = (Counters.traces, Counters.compiles)
    events = _backend_compiles()
    again = XlaDevice(engine=True)
    hit = nnapi.Compilation(conv, devices=[_make(again)]).finish()
    assert (Counters.traces, Counters.compiles) == before and events == []
    assert again.engine.stats["hits"] == 1 and hit.steps[0].prepared.stage == "optimized"
    np.testing.assert_array_max_ulp(hit.execute([image])[0], y, maxulp=8)
    entries = list_cache(engine="xla", devices=[_make(again)])
    assert len(entries) == 1 and entries[0]["kind"] == "engine" and entries[0]["driver"] == "xla"
    other = XlaDevice(engine=True)              # another preference is another entry: a miss
    nnapi.Compilation(conv, devices=[_make(other)], preference=nnapi.ExecutionPreference.SUSTAINED_SPEED).finish()
    assert other.engine.stats["misses"] == 1 and other.engine.stats["puts"] == 1


# --- the lowering table and its rules -------------------------------------------------------------
#: Lowered operations with nothing to resolve: every other rule reads `ops.resolve(ctx)`.
NO_PARAMETERS = {Op.ABS, Op.NEG, Op.EXP, Op.FLOOR, Op.LOG, Op.RSQRT, Op.SIN, Op.SQRT, Op.LOGISTIC, Op.TANH,
                 Op.CAST, Op.LOGICAL_NOT, Op.SELECT, Op.RANK, Op.IF, Op.WHILE}


def _imports(path) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from X import names` in a source file, made absolute."""
    import ast
    out = []
    package = "nnapi.drivers.xla" + (".rules" if path.parent.name == "rules" else "")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - max(0, node.level - 1)] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.append((module, [a.name for a in node.names]))
    return out


def test_rules_register_themselves_and_read_ops_only_through_public_names():
    import pathlib
    from nnapi.drivers.xla import lowering
    from nnapi.drivers.xla.analysis import LOWERINGS  # the table's reader loads the rules
    root = pathlib.Path(lowering.__file__).parent
    # The table imports no rule back; the rules register themselves.
    assert not any("rules" in module or "control_flow" in module for module, _ in _imports(root / "lowering.py"))
    for path in [*sorted((root / "rules").glob("*.py")), root / "lowering.py", root / "control_flow.py",
                 root / "analysis.py"]:
        for module, names in _imports(path):
            if module.startswith("nnapi.ops"):
                private = [p for p in module.split(".") + names if p.startswith("_")]
                assert not private, f"{path.name} imports private names of ops: {module} {names}"
    lowered = set(LOWERINGS)
    assert len(lowered) >= 85  # every operation the one-module table lowered before the split
    unresolved = {op for op in lowered if nnapi.ops.find_operation(op).params is None}
    assert unresolved == NO_PARAMETERS
