"""The `.tflite` importer on small models built here with the `tflite` schema bindings, and the
`nnapi run` / `nnapi bench` commands on them (the shared real models are in test_models.py)."""
from __future__ import annotations

import json
import math
import os
import re
import struct
import warnings

import flatbuffers
import numpy as np
import pytest
import tflite

import nnapi
from nnapi import OperandType as T, OperationType as Op
from nnapi.cli import main as cli_main
from nnapi.hal import OperandLifeTime
from nnapi.importers import UnsupportedOperatorsError, load_tflite
from nnapi.importers.tflite import INTERNAL_ERROR
from nnapi.importers.tflite.densify import densify
from nnapi.importers.tflite.schema import SparseLevel, Sparsity, load_flat_model
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


def write_model(path, tensors, operators, inputs, outputs, subgraphs=()):
    """tensors: dicts(name, shape, type, data=bytes|None, quant=(scales, zero_points, axis), sparse=..., variable);
    operators: dicts(code, inputs, outputs, options=callable(builder) -> (options type, offset), custom,
    custom_options=bytes, intermediates=[tensor indexes]); `subgraphs`: more (tensors, operators, inputs,
    outputs) after the main one."""
    b = flatbuffers.Builder(4096)
    graphs = [(tensors, operators, inputs, outputs), *subgraphs]
    buffers = [None] + [t.get("data") for g in graphs for t in g[0]]
    buffer_offsets = []
    for data in buffers:
        vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        buffer_offsets.append(tflite.BufferEnd(b))
    codes = []
    for g in graphs:
        for op in g[1]:
            key = (op["code"], op.get("custom"))
            if key not in codes:
                codes.append(key)
    subgraph_offsets = []
    first_buffer = 1
    for s, (g_tensors, g_operators, g_inputs, g_outputs) in enumerate(graphs):
        tensors_vec = _offsets(b, [_tensor(b, t, first_buffer + k) for k, t in enumerate(g_tensors)])
        first_buffer += len(g_tensors)
        ops_vec = _offsets(b, [_operator(b, op, codes) for op in g_operators])
        ins = b.CreateNumpyVector(np.asarray(g_inputs, np.int32))
        outs = b.CreateNumpyVector(np.asarray(g_outputs, np.int32))
        name = b.CreateString("main" if s == 0 else f"subgraph{s}")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensors_vec)
        tflite.SubGraphAddOperators(b, ops_vec)
        tflite.SubGraphAddInputs(b, ins)
        tflite.SubGraphAddOutputs(b, outs)
        tflite.SubGraphAddName(b, name)
        subgraph_offsets.append(tflite.SubGraphEnd(b))
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
    subgraphs_vec = _offsets(b, subgraph_offsets)
    buffers_vec = _offsets(b, buffer_offsets)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs_vec)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return path


def _tensor(b, t, buffer):
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
    if t.get("variable"):
        tflite.TensorAddIsVariable(b, True)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, getattr(tflite.TensorType, t["type"]))
    tflite.TensorAddBuffer(b, buffer if t.get("data") else 0)
    tflite.TensorAddName(b, name)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    if sparsity is not None:
        tflite.TensorAddSparsity(b, sparsity)
    return tflite.TensorEnd(b)


def _operator(b, op, codes):
    ins = b.CreateNumpyVector(np.asarray(op["inputs"], np.int32))
    outs = b.CreateNumpyVector(np.asarray(op["outputs"], np.int32))
    options = op["options"](b) if "options" in op else None
    intermediates = b.CreateNumpyVector(np.asarray(op["intermediates"], np.int32)) if "intermediates" in op else None
    custom_options = b.CreateNumpyVector(np.frombuffer(op["custom_options"], np.uint8)) \
        if "custom_options" in op else None
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, codes.index((op["code"], op.get("custom"))))
    tflite.OperatorAddInputs(b, ins)
    tflite.OperatorAddOutputs(b, outs)
    if options is not None:
        tflite.OperatorAddBuiltinOptionsType(b, options[0])
        tflite.OperatorAddBuiltinOptions(b, options[1])
    if intermediates is not None:
        tflite.OperatorAddIntermediates(b, intermediates)
    if custom_options is not None:
        tflite.OperatorAddCustomOptions(b, custom_options)
    return tflite.OperatorEnd(b)


def add_options(act):
    def build(b):
        tflite.AddOptionsStart(b)
        tflite.AddOptionsAddFusedActivationFunction(b, act)
        return O.AddOptions, tflite.AddOptionsEnd(b)
    return build


def mul_options(act):
    def build(b):
        tflite.MulOptionsStart(b)
        tflite.MulOptionsAddFusedActivationFunction(b, act)
        return O.MulOptions, tflite.MulOptionsEnd(b)
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
                       [{"code": B.MUL, "inputs": [0, 1], "outputs": [2], "options": mul_options(4)}], [0], [2])
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


# --- bad files: one BAD_DATA error naming the file, tensor, operator or field at fault ------------------
def bad_data(path, **kwargs) -> str:
    """The message of the BAD_DATA error importing `path` raises (never the importer's last guard)."""
    with pytest.raises(nnapi.NnError) as info:
        load_tflite(path, **kwargs)
    assert info.value.code == nnapi.ResultCode.BAD_DATA, info.value
    assert INTERNAL_ERROR not in info.value.message
    return info.value.message


def test_not_a_tflite_file(tmp_path):
    path = tmp_path / "x.tflite"
    path.write_bytes(b"\0" * 64)
    assert "x.tflite is not a TFLite model (no TFL3 file identifier)" in bad_data(path)
    path.write_bytes(b"")
    assert "x.tflite is not a TFLite model (0 bytes)" in bad_data(path)


def test_a_missing_file_a_directory_and_a_fifo(tmp_path):
    missing = tmp_path / "missing.tflite"
    assert bad_data(missing) == f"cannot open {missing}: No such file or directory"
    assert bad_data(tmp_path) == f"cannot read {tmp_path}: it is a directory, not a .tflite file"
    fifo = tmp_path / "pipe.tflite"
    os.mkfifo(fifo)
    assert bad_data(fifo) == f"cannot read {fifo}: not a regular file"     # without waiting for a writer


def test_a_file_the_caller_cannot_read(tmp_path):
    """Another user (fork, drop to nobody) gets "Permission denied" as one BAD_DATA error."""
    path = write_model(tmp_path / "private.tflite", [f32("x", (4,)), f32("y", (4,))],
                       [{"code": B.RELU, "inputs": [0], "outputs": [1]}], [0], [1])
    path.chmod(0o600)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # the child only opens the file and exits: no thread of JAX's is needed
        warnings.simplefilter("ignore", RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # the child: drop privileges, try, report the outcome through the pipe
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                load_tflite(path)
                outcome = "imported"
            except nnapi.NnError as e:
                outcome = f"{e.code.name}|{e.message}"
            os.write(write_end, outcome.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    outcome = os.read(read_end, 4096).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert outcome == f"BAD_DATA|cannot open {path}: Permission denied"


def test_a_truncated_file_names_what_lies_past_its_end(tmp_path):
    path = write_model(tmp_path / "add.tflite",
                       [f32("x", (64,)), f32("w", (64,), np.arange(64)), f32("y", (64,))],
                       [{"code": B.ADD, "inputs": [0, 1], "outputs": [2], "options": add_options(0)}], [0], [2])
    data = path.read_bytes()
    for cut in range(8, len(data)):
        path.write_bytes(data[:cut])
        message = bad_data(path)
        assert re.fullmatch(r"add\.tflite: model: (the table|field '\w+(\[\d+\])?') .*"
                            r"(outside the file|past the end of the file) \(\d+ bytes\)", message), message
    path.write_bytes(data[:8])
    assert bad_data(path) == "add.tflite: model: the table offset 24 is outside the file (8 bytes)"
    path.write_bytes(data[:37])
    assert bad_data(path) == ("add.tflite: model: the table at offset 24 (20 bytes) runs past the end of the file "
                              "(37 bytes)")
    path.write_bytes(data[:-4])
    assert re.fullmatch(r"add\.tflite: model: field 'buffers\[0\]' points to offset \d+, past the end of the file "
                        r"\(\d+ bytes\)", bad_data(path))


def test_a_bad_tensor_index_names_the_operator_and_field(tmp_path):
    path = write_model(tmp_path / "idx.tflite", [f32("x", (4,)), f32("w", (4,)), f32("y", (4,))],
                       [{"code": B.ADD, "inputs": [0, 7], "outputs": [2], "options": add_options(0)}], [0], [2])
    assert bad_data(path) == "idx.tflite: operator 0 ADD: inputs[1] is tensor 7, outside the subgraph's 3 tensors"
    path = write_model(tmp_path / "idx.tflite", [f32("x", (4,)), f32("w", (4,)), f32("y", (4,))],
                       [{"code": B.ADD, "inputs": [0, -1], "outputs": [2], "options": add_options(0)}], [0], [2])
    assert bad_data(path) == "idx.tflite: operator 0 ADD: a required tensor is omitted (index -1)"
    path = write_model(tmp_path / "idx.tflite", [f32("x", (4,)), f32("y", (4,))],
                       [{"code": B.RELU, "inputs": [0], "outputs": [1]}], [0], [5])
    assert bad_data(path) == "idx.tflite: subgraph 0: outputs[0] is tensor 5, outside the subgraph's 2 tensors"


def test_options_enums_and_shapes_are_checked_before_use(tmp_path):
    def model(options, shape=(4,)):
        return write_model(tmp_path / "m.tflite", [f32("x", shape), f32("w", (4,)), f32("y", (4,))],
                           [{"code": B.MUL, "inputs": [0, 1], "outputs": [2], "options": options}], [0, 1], [2])
    assert bad_data(model(add_options(0))) == \
        "m.tflite: operator 0 MUL: builtin options are AddOptions, the operator takes MulOptions"
    assert bad_data(model(mul_options(9))) == \
        "m.tflite: operator 0 MUL: fused activation 9 is not a TFLite ActivationFunctionType"
    # 2^31-1 x 2^31-1 floats: refused from the shape, before anything is allocated
    assert bad_data(model(mul_options(0), (2**31 - 1, 2**31 - 1))) == \
        "m.tflite: tensor 0 'x': shape [2147483647, 2147483647] needs 4611686014132420609 elements, more than " \
        "NNAPI can address"


def test_a_while_body_that_calls_itself_is_refused(tmp_path):
    def while_options(cond, body):
        def build(b):
            tflite.WhileOptionsStart(b)
            tflite.WhileOptionsAddCondSubgraphIndex(b, cond)
            tflite.WhileOptionsAddBodySubgraphIndex(b, body)
            return O.WhileOptions, tflite.WhileOptionsEnd(b)
        return build
    loop = {"code": B.WHILE, "inputs": [0], "outputs": [1], "options": while_options(1, 2)}
    cond = ([f32("x", (1,)), f32("limit", (1,), [5.0]), {"name": "go", "shape": [1], "type": "BOOL"}],
            [{"code": B.LESS, "inputs": [0, 1], "outputs": [2]}], [0], [2])
    body = ([f32("x", (1,)), f32("y", (1,))], [loop], [0], [1])
    path = write_model(tmp_path / "loop.tflite", [f32("x", (1,)), f32("y", (1,))], [loop], [0], [1],
                       subgraphs=[cond, body])
    assert bad_data(path) == ("loop.tflite: subgraph 2 operator 0 WHILE: subgraph 2 calls itself "
                              "(through subgraphs [0, 2])")


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
    dense_t = tflite.DimensionType.DENSE
    sparsity = Sparsity([0, 1, 2, 3], [0, 1], [SparseLevel(dense_t, 2) for _ in range(4)])
    values = np.arange(16, dtype=np.float32)
    got = densify(values, (4, 4), sparsity)
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
                       [{"code": B.CUSTOM, "custom": "MaxPoolingWithArgmax2D", "inputs": [0], "outputs": [1]}],
                       [0], [1])
    assert cli_main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "operator 0 CUSTOM:MaxPoolingWithArgmax2D" in err and "Traceback" not in err


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


# --- MediaPipe's Convolution2DTransposeBias ------------------------------------------------------------
def mediapipe_transpose_conv_bias(x, w, bias, padding, stride_w, stride_h):
    """The custom operator as MediaPipe's kernel computes it (transpose_conv_bias.cc): the output shape of
    its Prepare, the bias, then every input pixel scattered through every filter tap (float64)."""
    n, in_h, in_w, _ = x.shape
    out_c, k_h, k_w, _ = w.shape
    pad_h = max(0, k_h - (in_h - 1) % stride_h - 1) if padding == 1 else 0
    pad_w = max(0, k_w - (in_w - 1) % stride_w - 1) if padding == 1 else 0
    out_h, out_w = stride_h * (in_h - 1) + k_h - pad_h, stride_w * (in_w - 1) + k_w - pad_w
    out = np.tile(bias.astype(np.float64), (n, out_h, out_w, 1))
    for b in range(n):
        for iy in range(in_h):
            for ix in range(in_w):
                for fy in range(k_h):
                    for fx in range(k_w):
                        oy, ox = iy * stride_h - pad_h // 2 + fy, ix * stride_w - pad_w // 2 + fx
                        if 0 <= oy < out_h and 0 <= ox < out_w:
                            out[b, oy, ox] += w[:, fy, fx, :].astype(np.float64) @ x[b, iy, ix].astype(np.float64)
    return out


def transpose_conv_bias_model(path, x_shape, w, bias, padding, stride_w, stride_h, options=None):
    out_shape = list(mediapipe_transpose_conv_bias(np.zeros(x_shape), w, bias, padding, stride_w, stride_h).shape)
    custom = options if options is not None else struct.pack("<iii", padding, stride_w, stride_h)
    return write_model(path, [f32("x", x_shape), f32("w", w.shape, w), f32("b", bias.shape, bias), f32("y", out_shape)],
                       [{"code": B.CUSTOM, "custom": "Convolution2DTransposeBias", "inputs": [0, 1, 2],
                         "outputs": [3], "custom_options": custom}], [0], [3])


@pytest.mark.parametrize("padding,stride,kernel,size", [
    (1, (2, 2), (3, 3), (5, 4)),     # SAME, overlapping taps: padding 1 total, 0 before
    (1, (2, 3), (4, 2), (3, 4)),     # SAME with unequal strides and kernel
    (2, (2, 2), (3, 3), (5, 4)),     # VALID
    (1, (2, 2), (2, 2), (4, 4)),     # selfie_segmentation's form: kernel = stride, no overlap
])
def test_mediapipe_transpose_conv_bias(tmp_path, padding, stride, kernel, size):
    rng = np.random.default_rng(7)
    w = rng.normal(size=(3, *kernel, 2)).astype(np.float32)
    bias = rng.normal(size=3).astype(np.float32)
    x = rng.normal(size=(2, *size, 2)).astype(np.float32)
    imported = load_tflite(transpose_conv_bias_model(tmp_path / "tc.tflite", x.shape, w, bias, padding, *stride))
    assert imported.operations == {"TRANSPOSE_CONV_2D": 1}
    (y,) = run(imported, x)
    want = mediapipe_transpose_conv_bias(x, w, bias, padding, *stride)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_mediapipe_transpose_conv_bias_options_are_checked(tmp_path):
    w, bias = np.ones((1, 2, 2, 1), np.float32), np.zeros(1, np.float32)
    path = transpose_conv_bias_model(tmp_path / "tc.tflite", (1, 3, 3, 1), w, bias, 1, 2, 2,
                                     options=struct.pack("<iii", 0, 2, 2))
    assert bad_data(path) == ("tc.tflite: operator 0 CUSTOM:Convolution2DTransposeBias: custom options: padding 0 is "
                              "neither SAME (1) nor VALID (2)")
    path = transpose_conv_bias_model(tmp_path / "tc.tflite", (1, 3, 3, 1), w, bias, 1, 2, 2,
                                     options=struct.pack("<ii", 1, 2))
    assert bad_data(path) == ("tc.tflite: operator 0 CUSTOM:Convolution2DTransposeBias: custom options must hold "
                              "padding, stride_w and stride_h (12 bytes)")


# --- the full-integer sequence LSTM -------------------------------------------------------------------------
def int8_lstm_model(path, time_major=False, biases=True, layer_norm=False, cifg=False, peephole=False,
                    projection=False, cell_clip=0.0, batch=2, steps=3, n_in=5, units=4, seed=0):
    """A TFLite full-integer UNIDIRECTIONAL_SEQUENCE_LSTM (by default as Keras' LSTM converts: no CIFG,
    peephole, projection or layer norm): int8 input, weights and state, int16 cell state, int32 gate
    biases, and the five intermediate tensors (gate scales with layer norm, hidden-state quantization)."""
    rng = np.random.default_rng(seed)
    n_out = 3 if projection else units
    x_shape = [steps, batch, n_in] if time_major else [batch, steps, n_in]
    y_shape = [steps, batch, n_out] if time_major else [batch, steps, n_out]
    x_q, h_q = ([0.02], [-3], 0), ([1 / 128], [2], 0)
    tensors, ins = [], [-1] * 24

    def add(tensor):
        tensors.append(tensor)
        return len(tensors) - 1

    def weights(name, shape, scale, kind="INT8", limit=127):
        values = rng.integers(-limit, limit + 1, shape).astype(np.int8 if kind == "INT8" else np.int16)
        return add({"name": name, "shape": list(shape), "type": kind, "quant": ([scale], [0], 0),
                    "data": values.tobytes()})
    gates = [g for g in range(4) if not (cifg and g == 0)]
    ins[0] = add({"name": "x", "shape": x_shape, "type": "INT8", "quant": x_q})
    for g in gates:
        ins[1 + g] = weights(f"input_to_gate_{g}", (units, n_in), 0.003 + 0.0005 * g)
        ins[5 + g] = weights(f"recurrent_to_gate_{g}", (units, n_out), 0.005 + 0.0005 * g)
    if peephole:
        for k, g in ((9, 0), (10, 1), (11, 3)):
            if g in gates:
                ins[k] = weights(f"cell_to_gate_{g}", (units,), 0.0001, "INT16", 3000)
    for g in gates:
        values = rng.integers(-40000, 40000, units) if biases else np.zeros(units, int)
        ins[12 + g] = add({"name": f"bias_{g}", "shape": [units], "type": "INT32", "quant": ([0.02 * 0.003], [0], 0),
                           "data": values.astype(np.int32).tobytes()})
    if projection:
        ins[16] = weights("projection", (n_out, units), 0.004)
        ins[17] = add({"name": "projection_bias", "shape": [n_out], "type": "INT32", "quant": ([0.004 / 100], [0], 0),
                       "data": rng.integers(-300, 300, n_out).astype(np.int32).tobytes()})
    ins[18] = add({"name": "output_state", "shape": [batch, n_out], "type": "INT8", "quant": h_q, "variable": True})
    ins[19] = add({"name": "cell_state", "shape": [batch, units], "type": "INT16", "quant": ([2.0 ** -11], [0], 0),
                   "variable": True})
    if layer_norm:
        for g in gates:
            ins[20 + g] = weights(f"layer_norm_{g}", (units,), 0.0001, "INT16", 20000)
    intermediates = [add({"name": f"gate_{g}_intermediate", "shape": [0], "type": "INT16",
                          "quant": ([0.001 * (g + 1)], [0], 0)} if layer_norm else
                         {"name": f"gate_{g}_intermediate", "shape": [0], "type": "FLOAT32"}) for g in range(4)]
    intermediates.append(add({"name": "hidden_intermediate", "shape": [0], "type": "INT8",
                              "quant": ([1 / 100], [-5], 0) if projection else h_q}))
    y = add({"name": "y", "shape": y_shape, "type": "INT8", "quant": h_q})

    def options(b):
        tflite.UnidirectionalSequenceLSTMOptionsStart(b)
        tflite.UnidirectionalSequenceLSTMOptionsAddFusedActivationFunction(b, tflite.ActivationFunctionType.TANH)
        tflite.UnidirectionalSequenceLSTMOptionsAddTimeMajor(b, time_major)
        tflite.UnidirectionalSequenceLSTMOptionsAddCellClip(b, cell_clip)
        return O.UnidirectionalSequenceLSTMOptions, tflite.UnidirectionalSequenceLSTMOptionsEnd(b)
    return write_model(path, tensors, [{"code": B.UNIDIRECTIONAL_SEQUENCE_LSTM, "inputs": ins, "outputs": [y],
                                        "options": options, "intermediates": intermediates}], [ins[0]], [y])


def litert_output(path, x):
    """What LiteRT computes for the model at `path` on input `x` (LiteRT comes with `make`'s .[test,bench])."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (the bench extra) is not installed")
    interpreter = litert.Interpreter(str(path))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


@pytest.mark.parametrize("variant", [
    {}, {"time_major": True}, {"biases": False}, {"layer_norm": True}, {"cifg": True}, {"peephole": True},
    {"projection": True}, {"projection": True, "layer_norm": True},
    {"cifg": True, "peephole": True, "layer_norm": True},
    {"cell_clip": 0.5}, {"time_major": True, "layer_norm": True, "batch": 1, "steps": 1},
], ids=lambda v: ",".join(f"{k}={v[k]}" for k in v) or "keras")
def test_int8_sequence_lstm_matches_litert_exactly(tmp_path, variant):
    """Unrolled into QUANTIZED_LSTM steps (gate biases folded into extra input columns), the output is
    LiteRT's integer kernel's, value for value."""
    path = int8_lstm_model(tmp_path / "lstm.tflite", **variant)
    imported = load_tflite(path)
    x_shape = imported.inputs[0].shape
    x = np.random.default_rng(1).integers(-128, 128, x_shape).astype(np.int8)
    want = litert_output(path, x)
    assert len(np.unique(want)) >= min(want.size, 5)     # not saturated: the test can tell kernels apart
    steps = x_shape[0] if variant.get("time_major") else x_shape[1]
    assert imported.operations["QUANTIZED_LSTM"] == steps and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in imported.operations
    (got,) = run(imported, x)
    np.testing.assert_array_equal(got, want)


def test_int8_sequence_lstm_peephole_with_projection_is_refused(tmp_path):
    """LiteRT's integer kernel applies peephole weights over output_size values: with a projection to
    another size no NNAPI operation computes that, so the importer says so rather than differ."""
    with pytest.raises(UnsupportedOperatorsError, match="peephole weights with a projection to another size"):
        load_tflite(int8_lstm_model(tmp_path / "lstm.tflite", peephole=True, projection=True))
