"""Fuzzing the `.tflite` reader: mutated real models give a model or an `NnError`, never another exception.

Mutations (bit flips, bytes and 32-bit words overwritten with interesting values, truncations,
extensions, duplicated chunks) are applied to the real models of ../shared/models and the result is
imported (parsing and mapping, no execution). Whatever the bytes, `load_tflite` returns an imported
model or raises `NnError` (`UnsupportedOperatorsError` included), within bounded time and memory.

- `test_mutated_models_give_a_model_or_nnerror`: hypothesis-generated mutation lists;
  NNAPI_FUZZ_EXAMPLES (default 200) scales the number of examples for a longer run, e.g.
  `NNAPI_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_tflite_fuzz.py`.
- `test_random_flatbuffers_give_nnerror`: arbitrary bytes behind a TFLite header (no shared
  models needed), the same promise.
- `test_regression_corpus`: replays tests/corpus/tflite_mutations.json, one entry per class of
  failing input found while hardening the reader (the model file relative to the shared models
  folder and the mutation list), and checks each now gives the BAD_DATA message it records.
Mutated files are written to a temporary directory, never kept. A watchdog (SIGALRM, 60 s per
import, far above the ~0.1 s an import takes) turns a hang into a failure instead of a stuck run.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import signal
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nnapi.hal import NnError, ResultCode
from nnapi.importers import load_tflite
from nnapi.importers.tflite import INTERNAL_ERROR
from nnapi.importers.tflite.schema import load_flat_model

SHARED = pathlib.Path(os.environ.get("NNAPI_SHARED_MODELS",
                                     pathlib.Path(__file__).resolve().parents[2] / "shared" / "models"))
CORPUS = pathlib.Path(__file__).resolve().parent / "corpus" / "tflite_mutations.json"
EXAMPLES = int(os.environ.get("NNAPI_FUZZ_EXAMPLES", "200"))
#: Small models first: the hypothesis run imports each example, so small files keep it fast.
FUZZ_MODELS = ["keras/lstm_text_int8.tflite", "keras/tiny_transformer_int8.tflite",
               "mediapipe/face_detection_short_range.tflite", "mediapipe/selfie_segmentation.tflite",
               "keras/gru_text_f32.tflite", "keras/tiny_transformer_f32.tflite",
               "keras/resnet_mini_int8.tflite", "keras/lstm_text_f32.tflite",
               "mediapipe/pose_detection.tflite"]

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
INTERESTING_WORDS = (0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF,
                     0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x40000000)
KINDS = ("bitflip", "byte", "int32", "int16", "truncate", "extend", "duplicate", "zero")


def apply_mutations(data: bytes, mutations: list[dict]) -> bytes:
    """`data` with each mutation applied in order. A mutation is a dict: kind, offset and value
    (bit index, byte, word, length or destination offset as the kind needs)."""
    buf = bytearray(data)
    for m in mutations:
        kind, offset, value = m["kind"], int(m["offset"]), int(m.get("value", 0))
        if not buf and kind not in ("extend",):
            continue
        offset %= max(len(buf), 1)
        if kind == "bitflip":
            buf[offset] ^= 1 << (value % 8)
        elif kind == "byte":
            buf[offset] = value & 0xFF
        elif kind == "int32":
            end = min(offset + 4, len(buf))
            buf[offset:end] = struct.pack("<I", value & 0xFFFFFFFF)[:end - offset]
        elif kind == "int16":
            end = min(offset + 2, len(buf))
            buf[offset:end] = struct.pack("<H", value & 0xFFFF)[:end - offset]
        elif kind == "truncate":
            del buf[offset:]
        elif kind == "extend":
            buf += bytes([value & 0xFF]) * (offset % 4096 + 1)
        elif kind == "duplicate":  # copy 16..271 bytes from `offset` over `value`
            length = 16 + (value >> 24 & 0xFF)
            chunk = bytes(buf[offset:offset + length])
            dest = (value & 0xFFFFFF) % len(buf)
            buf[dest:dest + len(chunk)] = chunk
        elif kind == "zero":
            length = 1 + value % 64
            buf[offset:offset + length] = bytes(min(length, len(buf) - offset))
        else:
            raise ValueError(f"unknown mutation kind {kind!r}")
    return bytes(buf)


class Hang(Exception):
    """An import ran past the watchdog."""


@contextlib.contextmanager
def watchdog(seconds: int = 60):
    def expired(*_):
        raise Hang(f"the import ran more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_import(path: pathlib.Path) -> NnError | None:
    """Import `path`: None when it imports, the NnError when refused (checked to be a BAD_DATA error
    with a message, not the importer's last guard); any other exception propagates and fails."""
    try:
        with watchdog():
            load_tflite(path)
    except NnError as e:
        assert e.message, "an NnError without a message"
        assert INTERNAL_ERROR not in e.message, e.message
        assert e.code == ResultCode.BAD_DATA, e
        return e
    return None


# --- hypothesis: mutated real models ------------------------------------------------------------------
_models: dict[str, tuple[bytes, list[tuple[int, int]]]] = {}


def model_bytes(name: str) -> tuple[bytes, list[tuple[int, int]]]:
    """The model's bytes and the byte ranges outside its constant buffers (where the flatbuffer's
    tables, vtables and vectors lie: most mutations are aimed there)."""
    if name not in _models:
        path = SHARED / name
        flat = load_flat_model(path)
        regions = sorted({t.region for sub in flat.subgraphs for t in sub.tensors if t.region})
        flat.close_fd()
        data = path.read_bytes()
        free, pos = [], 0
        for offset, length in regions:
            if offset > pos:
                free.append((pos, offset))
            pos = max(pos, offset + length)
        if pos < len(data):
            free.append((pos, len(data)))
        _models[name] = (data, free)
    return _models[name]


@st.composite
def mutation_st(draw, data: bytes, structure: list[tuple[int, int]]) -> dict:
    kind = draw(st.sampled_from(KINDS))
    if draw(st.integers(0, 3)) and structure:   # 3 in 4 aimed at the flatbuffer structure
        start, end = draw(st.sampled_from(structure))
        offset = draw(st.integers(start, end - 1))
    else:
        offset = draw(st.integers(0, len(data) - 1))
    if kind == "bitflip":
        value = draw(st.integers(0, 7))
    elif kind in ("byte", "extend"):
        value = draw(st.sampled_from(INTERESTING_BYTES) | st.integers(0, 255))
    elif kind in ("int32", "int16"):
        value = draw(st.sampled_from(INTERESTING_WORDS) | st.integers(0, 2**32 - 1)
                     | st.integers(-64, 64).map(lambda v: v & 0xFFFFFFFF))
    elif kind == "duplicate":
        value = draw(st.integers(0, 255)) << 24 | draw(st.integers(0, len(data) - 1)) & 0xFFFFFF
    else:
        value = draw(st.integers(0, 63))
    return {"kind": kind, "offset": offset, "value": value}


@st.composite
def mutated_model_st(draw) -> tuple[str, list[dict]]:
    name = draw(st.sampled_from([m for m in FUZZ_MODELS if (SHARED / m).exists()]))
    data, structure = model_bytes(name)
    return name, draw(st.lists(mutation_st(data, structure), min_size=1, max_size=5))


FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                              HealthCheck.data_too_large])
needs_models = pytest.mark.skipif(not (SHARED / "models.json").exists(), reason=f"no shared models at {SHARED}")


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="nnapi-tflite-fuzz-") as path:
        yield pathlib.Path(path)


@needs_models
@FUZZ
@given(case=mutated_model_st())
def test_mutated_models_give_a_model_or_nnerror(scratch, case):
    name, mutations = case
    path = scratch / "mutated.tflite"
    path.write_bytes(apply_mutations(model_bytes(name)[0], mutations))
    check_import(path)


@FUZZ
@given(body=st.binary(min_size=0, max_size=512), root=st.integers(0, 600))
def test_random_flatbuffers_give_nnerror(scratch, body, root):
    """Arbitrary bytes after a TFLite header (root offset, "TFL3"): never anything but BAD_DATA."""
    path = scratch / "random.tflite"
    path.write_bytes(struct.pack("<I", root) + b"TFL3" + body)
    assert check_import(path) is not None


# --- the regression corpus -----------------------------------------------------------------------------
def _corpus() -> list[dict]:
    return json.loads(CORPUS.read_text())["cases"]


@needs_models
@pytest.mark.parametrize("case", _corpus(), ids=lambda c: f"{pathlib.Path(c['model']).stem}:{c['was'].split(' ')[0]}")
def test_regression_corpus(scratch, case):
    """Each recorded failing input now gives the BAD_DATA error it records, naming the field at fault."""
    data = (SHARED / case["model"]).read_bytes()
    if hashlib.sha256(data).hexdigest() != case["sha256"]:
        pytest.skip(f"{case['model']} is not the file the corpus was recorded on")
    path = scratch / "corpus.tflite"
    path.write_bytes(apply_mutations(data, case["mutations"]))
    error = check_import(path)
    assert error is not None, f"imports without error; before the fix: {case['was']}"
    assert case["expect"] in error.message, f"{error.message!r} does not contain {case['expect']!r}"
