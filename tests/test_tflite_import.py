"""The `.tflite` importer on small models built here with the `tflite` schema bindings, and the
`nnapi run` / `nnapi bench` commands on them (the shared real models are in test_models.py)."""
from __future__ import annotations

import json
import math

import flatbuffers
import numpy as np
import pytest
import tflite

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.cli import main as cli_main
from nnapi.hal import OperandLifeTime
from nnapi.importers import UnsupportedOperatorsError, load_tflite
from nnapi.importers._densify import densify
from nnapi.importers._tflite_schema import load_flat_model
from nnapi.memory import map_pool

B = tflite.BuiltinOperator
O = tflite.BuiltinOptions


# --- a small TFLite model writer (flatbuffers builder of the tflite schema package) ----------------------
def _sparsity(b, sparse):
    """A 2-D tensor stored as DENSE rows x SPARSE_CSR columns."""
    segments, indices = sparse
    seg = b.CreateNumpyVector(np.asarray(segments, np.int32))
    tflite.Int32VectorStart(b)
    tflite.Int32VectorAddValues(b, seg)
    seg_vec = tflite.Int32VectorEnd(b)
    idx = b.CreateNumpyVector(np.asarray(indices, np.int32))
    tflite.Int32VectorStart(b)
    tflite.Int32VectorAddValues(b, idx)
    idx_vec = tflite.Int32VectorEnd(b)
    dense_rows = len(segments) - 1
    metas = []
    tflite.DimensionMetadataStart(b)
    tflite.DimensionMetadataAddFormat(b, tflite.DimensionType.DENSE)
    tflite.DimensionMetadataAddDenseSize(b, dense_rows)
    metas.append(tflite.DimensionMetadataEnd(b))
    tflite.DimensionMetadataStart(b)
    tflite.DimensionMetadataAddFormat(b, tflite.DimensionType.SPARSE_CSR)
    tflite.DimensionMetadataAddArraySegmentsType(b, tflite.SparseIndexVector.Int32Vector)
    tflite.DimensionMetadataAddArraySegments(b, seg_vec)
    tflite.DimensionMetadataAddArrayIndicesType(b, tflite.SparseIndexVector.Int32Vector)
    tflite.DimensionMetadataAddArrayIndices(b, idx_vec)
    metas.append(tflite.DimensionMetadataEnd(b))
    order = b.CreateNumpyVector(np.asarray([0, 1], np.int32))
    b.StartVector(4, len(metas), 4)
    for m in reversed(metas):
        b.PrependUOffsetTRelative(m)
    meta_vec = b.EndVector()
    tflite.SparsityParametersStart(b)
    tflite.SparsityParametersAddTraversalOrder(b, order)
    tflite.SparsityParametersAddDimMetadata(b, meta_vec)
    return tflite.SparsityParametersEnd(b)


def _offsets(b, items):
    b.StartVector(4, len(items), 4)
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return b.EndVector()


def write_model(path, tensors, operators, inputs, outputs):
    """tensors: dicts(name, shape, type, data=bytes|None, quant=(scales, zero_points, axis), sparse=...);
    operators: dicts(code, inputs, outputs, options=callable(builder) -> (options type, offset), custom)."""
    b = flatbuffers.Builder(4096)
    buffers = [None] + [t.get("data") for t in tensors]
    buffer_offsets = []
    for data in buffers:
        vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        buffer_offsets.append(tflite.BufferEnd(b))
    tensor_offsets = []
    for k, t in enumerate(tensors):
        name = b.CreateString(t["name"])
        shape = b.CreateNumpyVector(np.asarray(t["shape"], np.int32))
        quant = None
        if "quant" in t:
            scales, zps, axis = t["quant"]
            s = b.CreateNumpyVector(np.asarray(scales, np.float32))
            z = b.CreateNumpyVector(np.asarray(zps, np.int64))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, s)
            tflite.QuantizationParametersAddZeroPoint(b, z)
            tflite.QuantizationParametersAddQuantizedDimension(b, axis)
            quant = tflite.QuantizationParametersEnd(b)
        sparsity = _sparsity(b, t["sparse"]) if "sparse" in t else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, getattr(tflite.TensorType, t["type"]))
        tflite.TensorAddBuffer(b, k + 1 if t.get("data") else 0)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        tensor_offsets.append(tflite.TensorEnd(b))
    codes = []
    for op in operators:
        key = (op["code"], op.get("custom"))
        if key not in codes:
            codes.append(key)
    op_offsets = []
    for op in operators:
        ins = b.CreateNumpyVector(np.asarray(op["inputs"], np.int32))
        outs = b.CreateNumpyVector(np.asarray(op["outputs"], np.int32))
        options = op["options"](b) if "options" in op else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, codes.index((op["code"], op.get("custom"))))
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, options[0])
            tflite.OperatorAddBuiltinOptions(b, options[1])
        op_offsets.append(tflite.OperatorEnd(b))
    tensors_vec = _offsets(b, tensor_offsets)
    ops_vec = _offsets(b, op_offsets)
    ins = b.CreateNumpyVector(np.asarray(inputs, np.int32))
    outs = b.CreateNumpyVector(np.asarray(outputs, np.int32))
    name = b.CreateString("main")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors_vec)
    tflite.SubGraphAddOperators(b, ops_vec)
    tflite.SubGraphAddInputs(b, ins)
    tflite.SubGraphAddOutputs(b, outs)
    tflite.SubGraphAddName(b, name)
    subgraph = tflite.SubGraphEnd(b)
    code_offsets = []
    for code, custom in codes:
        custom_name = b.CreateString(custom) if custom else None
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddBuiltinCode(b, code)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tflite.OperatorCodeAddVersion(b, 1)
        if custom_name is not None:
            tflite.OperatorCodeAddCustomCode(b, custom_name)
        code_offsets.append(tflite.OperatorCodeEnd(b))
    codes_vec = _offsets(b, code_offsets)
    subgraphs_vec = _offsets(b, [subgraph])
    buffers_vec = _offsets(b, buffer_offsets)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs_vec)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return path


def add_options(act):
    def build(b):
        tflite.AddOptionsStart(b)
        tflite.AddOptionsAddFusedActivationFunction(b, act)
        return O.AddOptions, tflite.AddOptionsEnd(b)
    return build


def f32(name, shape, data=None):
    t = {"name": name, "shape": list(shape), "type": "FLOAT32"}
    if data is not None:
        t["data"] = np.asarray(data, np.float32).tobytes()
    return t


def run(imported, *inputs, device="reference"):
    compilation = nnapi.Compilation(imported.model, devices=[device]).finish()
    return compilation.execute(list(inputs))


# --- importing ------------------------------------------------------------------------------------
def test_add_with_fused_relu_and_weights_referenced_in_the_file(tmp_path):
    weights = np.linspace(-2, 2, 64, dtype=np.float32)          # 256 bytes: referenced, not copied
    path = write_model(tmp_path / "add.tflite",
                       [f32("x", (64,)), f32("w", (64,), weights), f32("y", (64,))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(1)}], [0], [2])
    imported = load_tflite(path)
    assert [i.name for i in imported.inputs] == ["x"] and imported.outputs[0].shape == (64,)
    assert imported.referenced_bytes == 256 and imported.copied_bytes == 0
    hal = imported.model.to_hal()
    refs = [o for o in hal.main.operands if o.lifetime == OperandLifeTime.CONSTANT_REFERENCE]
    assert len(refs) == 1
    pool = hal.pools[refs[0].location.pool_index]
    assert pool.handle.name == "mmap_fd"                        # the .tflite file itself, mapped
    raw = path.read_bytes()
    offset = refs[0].location.offset
    assert raw[offset:offset + 256] == weights.tobytes()
    assert bytes(map_pool(pool).view(offset, 256)) == weights.tobytes()
    x = np.linspace(1, -1, 64, dtype=np.float32)
    (y,) = run(imported, x)
    np.testing.assert_allclose(y, np.maximum(x + weights, 0), rtol=1e-6)
    assert imported.operations == {"ADD": 1}


def test_rank0_constant_and_tanh_activation(tmp_path):
    path = write_model(tmp_path / "mul.tflite",
                       [f32("x", (2, 3)), f32("c", (), [0.5]), f32("y", (2, 3))],
                       [{"code": B.MUL, "inputs": [0, 1], "outputs": [2], "options": add_options(4)}], [0], [2])
    imported = load_tflite(path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    (y,) = run(imported, x)
    np.testing.assert_allclose(y, np.tanh(x * 0.5), rtol=1e-6)
    assert imported.operations == {"MUL": 1, "TANH": 1}


def test_unsupported_operators_are_listed_in_one_error(tmp_path):
    path = write_model(tmp_path / "bad.tflite",
                       [f32("x", (4,)), f32("a", (4,)), f32("b", (4,)), f32("c", (4,))],
                       [{"code": B.CUSTOM, "custom": "MyFancyOp", "inputs": [0], "outputs": [1]},
                        {"code": B.ADD, "inputs": [1, 0], "outputs": [2], "options": add_options(0)},
                        {"code": B.CUMSUM, "inputs": [2], "outputs": [3]}], [0], [3])
    with pytest.raises(UnsupportedOperatorsError) as info:
        load_tflite(path)
    err = info.value
    assert err.code == nnapi.ResultCode.BAD_DATA
    assert [(p.index, p.operator) for p in err.problems] == [(0, "CUSTOM:MyFancyOp"), (2, "CUMSUM")]
    assert "2 operators cannot be mapped" in err.message
    assert "operator 0 CUSTOM:MyFancyOp: custom operator" in err.message
    assert "operator 2 CUMSUM" in err.message and "inputs: 2 'b' FLOAT32[4]" in err.message


def test_not_a_tflite_file(tmp_path):
    path = tmp_path / "x.tflite"
    path.write_bytes(b"\0" * 64)
    with pytest.raises(nnapi.NnError, match="not a TFLite model"):
        load_tflite(path)
    with pytest.raises(nnapi.NnError, match="cannot open"):
        load_tflite(tmp_path / "missing.tflite")


def test_fp16_weights_are_folded_and_sparse_weights_densified(tmp_path):
    dense = np.array([[0, 1.5, 0, 0], [0, 0, 0, 0], [-2, 0, 0, 3]], np.float16)
    values = dense[dense != 0]
    segments, indices = [0, 1, 1, 3], [1, 0, 3]
    path = write_model(tmp_path / "fc.tflite", [
        f32("x", (2, 4)),
        {"name": "w16", "shape": [3, 4], "type": "FLOAT16", "data": values.tobytes(), "sparse": (segments, indices)},
        {"name": "w16_dense", "shape": [3, 4], "type": "FLOAT16"},
        f32("w", (3, 4)),
        f32("y", (2, 3)),
    ], [{"code": B.DENSIFY, "inputs": [1], "outputs": [2]},
        {"code": B.DEQUANTIZE, "inputs": [2], "outputs": [3]},
        {"code": B.FULLY_CONNECTED, "inputs": [0, 3, -1], "outputs": [4]}], [0], [4])
    imported = load_tflite(path)
    assert imported.operations == {"FULLY_CONNECTED": 1}
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = run(imported, x)
    np.testing.assert_allclose(y, x @ dense.astype(np.float32).T, rtol=1e-6)


def test_densify_blocked_layout():
    """A 4x4 tensor in 2x2 blocks (TFLite's block_map), checked against the format's definition."""
    class Meta:
        def __init__(self, fmt, size=0, seg=None, idx=None):
            self.fmt, self.size, self.seg, self.idx = fmt, size, seg, idx

        def Format(self):
            return self.fmt

        def DenseSize(self):
            return self.size

    class Sparsity:
        def __init__(self, metas):
            self.metas = metas

        def TraversalOrderLength(self):
            return 4

        def TraversalOrderAsNumpy(self):
            return np.array([0, 1, 2, 3])

        def BlockMapLength(self):
            return 2

        def BlockMapAsNumpy(self):
            return np.array([0, 1])

        def DimMetadataLength(self):
            return 4

        def DimMetadata(self, i):
            return self.metas[i]

    dense_t = tflite.DimensionType.DENSE
    metas = [Meta(dense_t, 2), Meta(dense_t, 2), Meta(dense_t, 2), Meta(dense_t, 2)]
    values = np.arange(16, dtype=np.float32)
    got = densify(values, (4, 4), Sparsity(metas))
    # block (i, j) holds values 4 * (2 i + j) ... in row-major order within the block
    want = values.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(4, 4)
    np.testing.assert_array_equal(got, want)


def test_squared_difference_and_gelu_decompositions(tmp_path):
    def gelu_options(approximate):
        def build(b):
            tflite.GeluOptionsStart(b)
            tflite.GeluOptionsAddApproximate(b, approximate)
            return O.GeluOptions, tflite.GeluOptionsEnd(b)
        return build
    path = write_model(tmp_path / "dec.tflite",
                       [f32("a", (64,)), f32("b", (64,)), f32("d", (64,)), f32("g", (64,)), f32("h", (64,))],
                       [{"code": B.SQUARED_DIFFERENCE, "inputs": [0, 1], "outputs": [2]},
                        {"code": B.GELU, "inputs": [0], "outputs": [3], "options": gelu_options(False)},
                        {"code": B.GELU, "inputs": [0], "outputs": [4], "options": gelu_options(True)}],
                       [0, 1], [2, 3, 4])
    imported = load_tflite(path)
    assert "SQUARED_DIFFERENCE" not in imported.operations and "GELU" not in imported.operations
    a = np.linspace(-6, 6, 64, dtype=np.float32)
    b = np.linspace(2, -1, 64, dtype=np.float32)
    d, g, h = run(imported, a, b)
    np.testing.assert_allclose(d, (a - b) ** 2, rtol=1e-6)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in a.astype(np.float64)])
    np.testing.assert_allclose(g, exact, atol=2e-6)
    tanh_form = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    np.testing.assert_allclose(h, tanh_form, atol=2e-6)


def test_int8_fully_connected_with_per_channel_weights_runs_as_conv(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (3, 8)).astype(np.int8)
    w_scales = [0.01, 0.02, 0.005]
    path = write_model(tmp_path / "fc8.tflite", [
        {"name": "x", "shape": [2, 8], "type": "INT8", "quant": ([0.05], [3], 0)},
        {"name": "w", "shape": [3, 8], "type": "INT8", "data": w.tobytes(), "quant": (w_scales, [0, 0, 0], 0)},
        {"name": "y", "shape": [2, 3], "type": "INT8", "quant": ([0.1], [-2], 0)},
    ], [{"code": B.FULLY_CONNECTED, "inputs": [0, 1, -1], "outputs": [2]}], [0], [2])
    imported = load_tflite(path)
    assert imported.operations["CONV_2D"] == 1 and "FULLY_CONNECTED" not in imported.operations
    x = rng.integers(-128, 128, (2, 8)).astype(np.int8)
    (y,) = run(imported, x)
    real = ((x.astype(np.float64) - 3) * 0.05) @ (w.astype(np.float64) * np.array(w_scales)[:, None]).T
    want = np.clip(np.round(real / 0.1) - 2, -128, 127)
    assert np.abs(y.astype(int) - want).max() <= 1


def test_batch_matmul(tmp_path):
    def options(b):
        tflite.BatchMatMulOptionsStart(b)
        tflite.BatchMatMulOptionsAddAdjY(b, True)
        return O.BatchMatMulOptions, tflite.BatchMatMulOptionsEnd(b)
    path = write_model(tmp_path / "bmm.tflite", [f32("a", (2, 3, 4)), f32("b", (2, 5, 4)), f32("y", (2, 3, 5))],
                       [{"code": B.BATCH_MATMUL, "inputs": [0, 1], "outputs": [2], "options": options}], [0, 1], [2])
    imported = load_tflite(path)
    assert imported.operations == {"BATCH_MATMUL": 1}
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 4)).astype(np.float32), rng.normal(size=(2, 5, 4)).astype(np.float32)
    (y,) = run(imported, a, b)
    np.testing.assert_allclose(y, a @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


def test_batch_matmul_operation_int8():
    """The new HAL operation directly: quantized, with the output quantization differing from the inputs'."""
    m = nnapi.Model()
    a = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 2, 3), 0.5, 1)
    b = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 3, 2), 0.25, -2)
    adj = m.add_operand(T.BOOL)
    m.set_operand_value(adj, False)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 2, 2), 0.3, 3)
    m.add_operation(Op.BATCH_MATMUL, [a, b, adj, adj], [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    assert Op.BATCH_MATMUL.hal_version.name == "AIDL"
    av = np.array([[[1, 3, -5], [7, 0, 2]]], np.int8)
    bv = np.array([[[0, 4], [-6, 2], [10, -2]]], np.int8)
    (got,) = nnapi.Compilation(m, devices=["reference"]).finish().execute([av, bv])
    real = ((av.astype(float) - 1) * 0.5) @ ((bv.astype(float) + 2) * 0.25) / 0.3
    # TFLite's fixed-point requantization rounds twice (high multiply, then shift): within 1 unit.
    assert np.abs(got.astype(int) - (np.round(real) + 3)).max() <= 1
    from nnapi.ops._quant import requantize
    acc = (av.astype(np.int64) - 1) @ (bv.astype(np.int64) + 2)
    np.testing.assert_array_equal(got, requantize(acc, float(np.float32(0.5) * np.float32(0.25)) /
                                                  float(np.float32(0.3)), 3))


def test_strided_slice_shrink_takes_begin(tmp_path):
    def options(b):
        tflite.StridedSliceOptionsStart(b)
        tflite.StridedSliceOptionsAddShrinkAxisMask(b, 1)
        return O.StridedSliceOptions, tflite.StridedSliceOptionsEnd(b)
    ints = lambda name, v: {"name": name, "shape": [len(v)], "type": "INT32", "data": np.asarray(v, np.int32).tobytes()}
    path = write_model(tmp_path / "ss.tflite",
                       [f32("x", (3, 4)), ints("begin", [-1, 0]), ints("end", [0, 4]), ints("strides", [1, 1]),
                        f32("y", (4,))],
                       [{"code": B.STRIDED_SLICE, "inputs": [0, 1, 2, 3], "outputs": [4], "options": options}],
                       [0], [4])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = run(load_tflite(path), x)
    np.testing.assert_array_equal(y, x[-1])


def test_outputs_can_be_intermediate_tensors(tmp_path):
    path = write_model(tmp_path / "two.tflite", [f32("x", (4,)), f32("y", (4,)), f32("z", (4,))],
                       [{"code": B.ADD, "inputs": [0, 0], "outputs": [1], "options": add_options(0)},
                        {"code": B.ADD, "inputs": [1, 0], "outputs": [2], "options": add_options(0)}], [0], [2])
    imported = load_tflite(path, outputs=["y", 2])
    x = np.arange(4, dtype=np.float32)
    y, z = run(imported, x)
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, 3 * x)
    flat = load_flat_model(path)
    assert [op.label for op in flat.subgraphs[0].operators] == ["ADD", "ADD"]
    flat.close_fd()


# --- nnapi run / nnapi bench ----------------------------------------------------------------------
@pytest.fixture
def small_model(tmp_path):
    return write_model(tmp_path / "add.tflite",
                       [f32("x", (1, 8)), f32("w", (1, 8), np.arange(8)), f32("y", (1, 8))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])


def test_cli_run_with_inputs_cache_and_saved_outputs(small_model, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 8), np.float32))
    out = tmp_path / "out.npz"
    args = [str(small_model), "--device", "reference", "--cache-dir", str(tmp_path / "cache"), "--inputs",
            str(inputs), "--save-outputs", str(out), "--priority", "high", "--timeout-ms", "5000"]
    assert cli_main(["run", *args]) == 0
    first = capsys.readouterr().out
    assert "partition 0 on reference: 1 operations (ADDx1); cache miss" in first
    assert "input  x float32[1, 8]  <- " in first and "top 5: [7] 8" in first
    np.testing.assert_array_equal(np.load(out)["output_0"], np.arange(1, 9, dtype=np.float32)[None])
    assert cli_main(["run", *args]) == 0
    assert "cache hit" in capsys.readouterr().out


def test_cli_run_reports_unsupported_model(tmp_path, capsys):
    path = write_model(tmp_path / "custom.tflite", [f32("x", (4,)), f32("y", (4,))],
                       [{"code": B.CUSTOM, "custom": "Convolution2DTransposeBias", "inputs": [0], "outputs": [1]}],
                       [0], [1])
    assert cli_main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "operator 0 CUSTOM:Convolution2DTransposeBias" in err and "Traceback" not in err


def test_cli_bench_json(small_model, tmp_path, capsys):
    report = tmp_path / "bench.json"
    assert cli_main(["bench", str(small_model), "--device", "reference", "--runs", "3", "--json", str(report)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures == json.loads(report.read_text())
    for key in ("prepare_cold_s", "prepare_cached_s", "first_execute_ms", "execute_p50_ms", "execute_p90_ms",
                "device", "model"):
        assert key in figures
    assert figures["device"] == "reference" and figures["model"] == "add.tflite"
    assert figures["cache"] == {"cold": ["miss"], "cached": ["hit"]}


def test_cli_bench_sustained_speed_on_xla(small_model, tmp_path, capsys, monkeypatch):
    """--preference sustained-speed: the XLA driver compiles its optimised executable at once, and
    the cached prepare loads that stage."""
    import nnapi.drivers.xla.device as xla_device
    stages: list[str] = []
    real = xla_device.XlaDevice.prepare_model_from_cache

    def spy(self, *args, **kwargs):
        prepared = real(self, *args, **kwargs)
        stages.append(prepared.stage)
        return prepared

    monkeypatch.setattr(xla_device.XlaDevice, "prepare_model_from_cache", spy)
    assert cli_main(["bench", str(small_model), "--device", "xla", "--runs", "3",
                     "--preference", "sustained-speed"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["device"] == "xla" and figures["preference"] == "sustained-speed"
    assert figures["cache"] == {"cold": ["miss"], "cached": ["hit"]} and stages == ["optimized"]
    with pytest.raises(SystemExit):
        cli_main(["bench", str(small_model), "--preference", "fastest"])
    assert "preference must be one of" in capsys.readouterr().err
