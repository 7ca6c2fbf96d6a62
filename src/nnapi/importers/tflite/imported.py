"""What an import gives: the imported model with its tensors as the app sees them, or the problems
(operators that cannot be mapped) that stop it."""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..._version import __version__
from ...hal import NnError, ResultCode
from ...runtime import Memory, Model

if TYPE_CHECKING:
    from .schema import FlatModel

#: Bumped when the mapping changes, so cache tokens derived from a file change too.
IMPORTER_VERSION = "2"
#: Marks an error no validation foresaw (the importer's last guard; the fuzz tests fail on it).
INTERNAL_ERROR = "an importer defect, please report it"


class Unsupported(Exception):
    """One operator (or tensor) that cannot be mapped; caught per operator and collected as a `Problem`."""


@dataclass(frozen=True)
class Problem:
    """An operator the importer cannot map."""

    subgraph: int
    index: int
    operator: str
    inputs: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        where = f"operator {self.index}" if self.subgraph == 0 else f"subgraph {self.subgraph} operator {self.index}"
        inputs = "; ".join(self.inputs) if self.inputs else "none"
        return f"{where} {self.operator}: {self.reason} (inputs: {inputs})"


class UnsupportedOperatorsError(NnError):
    """The model has operators that cannot be mapped to NNAPI; `problems` lists every one."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        names = sorted({p.operator for p in problems})
        lines = [f"{os.path.basename(path)}: {len(problems)} operator{'s' if len(problems) != 1 else ''} cannot be "
                 f"mapped to NNAPI ({', '.join(names)}):"]
        lines += [f"  {p}" for p in problems]
        super().__init__(ResultCode.BAD_DATA, "\n".join(lines))
        self.problems = problems


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as the app sees it: `name` is the TFLite tensor name, `signature_name`
    the name the model's signature gives it (LiteRT's key, e.g. "image"), None without one."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float = 0.0
    zero_point: int = 0
    signature_name: str | None = None

    @property
    def label(self) -> str:
        """The name for messages, with the signature name where there is one: "x:0 (signature: image)"."""
        return f"{self.name} (signature: {self.signature_name})" if self.signature_name else self.name

    def __str__(self) -> str:
        q = f" q({self.scale:g}, {self.zero_point})" if self.scale else ""
        return f"{self.label} {self.dtype}{list(self.shape)}{q}"


@dataclass
class ImportedModel:
    """A finished `nnapi.Model` imported from a `.tflite` file, with what an app needs to feed it."""

    model: Model
    path: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    #: The read-only mapping of the file that the weights reference (kept alive with the model).
    memory: Memory
    #: Bytes of weights referenced in the file mapping, and bytes the importer copied or computed.
    referenced_bytes: int = 0
    copied_bytes: int = 0
    #: TFLite operators of every subgraph, and the NNAPI operations they became.
    operators: Counter = field(default_factory=Counter)
    operations: Counter = field(default_factory=Counter)
    _flat: FlatModel | None = None
    _token: bytes | None = None
    #: The key of the signature the names come from ("serving_default"), None when the file has none
    #: for the main subgraph.
    signature_key: str | None = None
    #: True when this import was the import memo's (`remembered`), not a read of the file's flatbuffers.
    remembered: bool = False

    @property
    def input_names(self) -> list[str]:
        """Each input's name, in input order: the name the file's signature gives it where it has a
        signature for the main subgraph (LiteRT's `get_signature_runner` keys, e.g. "image"; of
        "serving_default" when several), else its tensor name (`inputs[k].name`). `nnapi.load`'s `run`
        takes these, the tensor names and `input_0`, `input_1`, ... alike."""
        return [i.signature_name or i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Each output's name, in output order: its signature name (e.g. "output_0", "probs") where the
        file has a signature for the main subgraph, else its tensor name (see `input_names`)."""
        return [o.signature_name or o.name for o in self.outputs]

    def token(self) -> bytes:
        """A 32-byte cache token: SHA-256 of the file (read through the mapping), nnapi and importer versions."""
        if self._token is None:
            h = hashlib.sha256(b"nnapi-tflite")
            h.update(f"{__version__}/{IMPORTER_VERSION}".encode())
            if self._flat is not None:
                h.update(self._flat.mapping)
            self._token = h.digest()
        return self._token
