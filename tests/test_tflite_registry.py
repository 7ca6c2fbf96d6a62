"""The `.tflite` importer's operator table: one mapping per TFLite operator, registered by its family
module, complete once `nnapi.importers.tflite` is imported, and a clear refusal for the rest."""
from __future__ import annotations

import subprocess
import sys

import pytest

from nnapi.importers import tflite
from nnapi.importers.tflite.imported import Unsupported
from nnapi.importers.tflite.registry import UnmappedOperator, mapping_of, register, register_custom
from nnapi.importers.tflite.schema import FlatOperator


def operator(name: str, custom_code: str | None = None) -> FlatOperator:
    return FlatOperator(index=0, name=name, custom_code=custom_code, version=1, inputs=(0,), outputs=(1,))


def test_importing_the_package_completes_the_table():
    """A fresh process that imports only `nnapi.importers.tflite` sees every family's operators."""
    code = ("import nnapi.importers.tflite as t; names = t.registered_operators(); "
            "print(len(names), all(n in names for n in ('CONV_2D', 'ADD', 'WHILE', 'DENSIFY', 'MEAN', "
            "'UNIDIRECTIONAL_SEQUENCE_LSTM', 'RESHAPE', 'CUSTOM Convolution2DTransposeBias')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "True" and int(out[0]) == len(tflite.registered_operators()) >= 80


def test_each_registered_operator_has_its_mapping():
    for name in tflite.registered_operators():
        if name.startswith("CUSTOM "):
            assert callable(mapping_of(operator("CUSTOM", name.split(" ", 1)[1])))
        else:
            assert callable(mapping_of(operator(name)))
    # A family maps several operators with one function: the table shares it.
    assert mapping_of(operator("ADD")) is mapping_of(operator("SUB"))
    assert mapping_of(operator("SELECT")) is mapping_of(operator("SELECT_V2"))


@pytest.mark.parametrize("op, label, reason", [
    (operator("CUMSUM"), "CUMSUM", "no NNAPI mapping for this builtin operator"),
    (operator("CUSTOM", "MyFancyOp"), "CUSTOM:MyFancyOp", "custom operator; NNAPI has no equivalent"),
    (operator("CUSTOM", None), "CUSTOM:None", "custom operator; NNAPI has no equivalent"),
    (operator("CUSTOM", "not an identifier"), "CUSTOM:not an identifier", "custom operator; NNAPI has no equivalent"),
])
def test_an_operator_without_a_mapping_is_named(op, label, reason):
    """The lookup's refusal is an `Unsupported` (recorded as the operator's Problem, with the reason
    the importer always gave) that names the operator."""
    with pytest.raises(UnmappedOperator) as info:
        mapping_of(op)
    assert isinstance(info.value, Unsupported)
    assert info.value.operator == label and str(info.value) == reason


def test_a_second_registration_is_refused():
    with pytest.raises(RuntimeError, match="TFLite builtin operator ADD registered twice"):
        register("ADD")(lambda graph, op: None)
    with pytest.raises(RuntimeError, match="TFLite custom operator Convolution2DTransposeBias registered twice"):
        register_custom("Convolution2DTransposeBias")(lambda graph, op: None)
    with pytest.raises(TypeError):
        register()


def test_the_old_module_paths_still_import():
    """`nnapi.importers._tflite_schema`, `._densify` and `._flatbuffer` are the package's modules
    under their former names."""
    from nnapi.importers import _densify, _flatbuffer, _tflite_schema
    from nnapi.importers.tflite import densify, flatbuffer, schema
    assert _tflite_schema.load_flat_model is schema.load_flat_model
    assert _tflite_schema.Sparsity is schema.Sparsity and _tflite_schema.SparseLevel is schema.SparseLevel
    assert _densify.densify is densify.densify
    assert _flatbuffer.BadModel is flatbuffer.BadModel
