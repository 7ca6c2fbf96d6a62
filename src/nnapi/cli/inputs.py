"""The model arguments of `nnapi run` and `nnapi bench`: `--inputs` read from .npy / .npz files (never
unpickled) and matched to the model's inputs, random data where absent; and the check of those
commands' files before any work (`check_model_args`).
"""
from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, BinaryIO, Sequence

from .checks import (PREFERENCE_HELP, CommandError, cache_folder, device_names, distinct_outputs, input_file,
                     output_file, plot_file, preference_arg, priority_arg)
from .console import error_text

if TYPE_CHECKING:
    import numpy as np


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments `nnapi run` and `nnapi bench` share: the model, where and how it is compiled."""
    parser.add_argument("model", help="a .tflite file")
    parser.add_argument("--device", help="run on this device only, or partitioned over a comma-separated list of "
                                         "them (default: all devices, partitioned)")
    parser.add_argument("--priority", type=priority_arg, default=100, help="low, medium (default) or high")
    parser.add_argument("--relaxed", action="store_true", help="float32 may be computed in float16 "
                                                               "(relax_computation_float32_to_float16)")
    parser.add_argument("--preference", type=preference_arg, default=1, help=PREFERENCE_HELP)


def check_model_args(args: argparse.Namespace) -> None:
    """`nnapi run` / `nnapi bench` arguments, before any work."""
    input_file(args.model, "model")
    if input_file(getattr(args, "inputs", None), "--inputs"):
        read_inputs(args.inputs)
    json_file = getattr(args, "json", None)
    outputs = {"--save-outputs": getattr(args, "save_outputs", None), "--trace": getattr(args, "trace", None),
               "--json": json_file if isinstance(json_file, str) else None}
    for option, path in outputs.items():
        output_file(path, option)
    plot_file(getattr(args, "plot", None))
    distinct_outputs(outputs | {"--plot": getattr(args, "plot", None)})
    args.cache_dir = cache_folder(args.cache_dir)
    device_names([args.device])


def read_inputs(path: str, option: str = "--inputs") -> np.ndarray | dict[str, np.ndarray]:
    """The array of an .npy file or the {key: array} of an .npz, read without ever unpickling (numpy's
    own errors advise `allow_pickle`): CommandError naming the file and what is wrong with it."""
    import zipfile
    with open(path, "rb") as f:
        head = f.read(6)
        if head == b"\x93NUMPY":
            f.seek(0)
            return npy_array(f, f"{option} {path}")
    if head[:1] == b"\x80":
        raise CommandError(f"{option} {path}: a Python pickle, not an .npy or .npz file (nnapi never unpickles)")
    if head[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise CommandError(f"{option} {path}: not an .npy or .npz file (numpy.save / numpy.savez write them)")
    arrays = {}
    try:
        with zipfile.ZipFile(path) as z:
            for member in z.namelist():
                key = member[:-4] if member.endswith(".npy") else member
                with z.open(member) as f:
                    arrays[key] = npy_array(f, f"{option} {path}: array {key!r}")
    except (zipfile.BadZipFile, NotImplementedError, EOFError, OSError) as e:
        raise CommandError(f"{option} {path}: not a readable .npz file ({e})") from None
    return arrays


def npy_array(f: BinaryIO, what: str) -> np.ndarray:
    """One .npy array from the open file `f`; an array of Python objects (a pickle) is refused."""
    import numpy as np
    from numpy.lib import format as npy
    try:
        version = npy.read_magic(f)
        _, _, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(f)
        if dtype.hasobject:
            raise CommandError(f"{what}: holds Python objects (dtype {dtype}), which only unpickling could read; "
                               f"nnapi reads numeric arrays only")
        f.seek(0)
        return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise CommandError(f"{what}: not a valid .npy array ({error_text(str(e))})") from None


def load_inputs(path: str | None, infos: Sequence[Any],
                names: list[str] | None = None) -> tuple[list, list[str], list[str]]:
    """Inputs from an .npy (the model's one input) or an .npz (keys: input names, signature names or
    input_0, input_1, ...), random where absent. Returns the values in input order (as stored:
    `nnapi.load`'s checks convert them), per input where it came from, and the keys no input took.
    `infos` give the random data's shapes and the signature names, `names` the input names."""
    from ..bench import random_inputs
    arrays = random_inputs(infos)
    sources = ["random"] * len(infos)
    if path is None:
        return arrays, sources, []
    names = names or [info.name for info in infos]
    stored = read_inputs(path)
    if not isinstance(stored, dict):
        if len(names) != 1:
            raise CommandError(f"--inputs {path}: an .npy file holds one array and the model has {len(names)} "
                               f"inputs ({', '.join(names)}): give an .npz with one array per input")
        return [stored], [path], []
    keys = input_keys(stored, names, path, [getattr(info, "signature_name", None) for info in infos])
    for k, key in keys.items():
        arrays[k] = stored[key]
        sources[k] = f"{path}:{key}"
    return arrays, sources, [key for key in stored if key not in keys.values()]


def input_keys(stored: dict, names: list[str], path: str,
                signature_names: list[str | None] | None = None) -> dict[int, str]:
    """{input position: its .npz key}: input k is named `names[k]`, `signature_names[k]` (the name the
    model's signature gives it, where it has one) or `input_k`. A key that would give two inputs (one's
    name, another's signature name or position) or two keys for one input is an error naming them."""
    keys: dict[int, str] = {}
    signature_names = list(signature_names or [])
    for key in stored:
        named = names.index(key) if key in names else None
        signed = signature_names.index(key) if key in signature_names else None
        if named is not None and signed is not None and named != signed:
            raise CommandError(f"--inputs {path}: key {key!r} is the name of input {named} and the signature name "
                               f"of input {signed}: use the tensor names as keys ({', '.join(names)})")
        named = named if named is not None else signed
        placed = int(key[6:]) if re.fullmatch(r"input_(0|[1-9][0-9]*)", key) and int(key[6:]) < len(names) else None
        if named is not None and placed is not None and named != placed:
            raise CommandError(f"--inputs {path}: key {key!r} is the name of input {named} and the position of "
                               f"input {placed}: use the input names as keys ({', '.join(names)})")
        k = named if named is not None else placed
        if k is not None:
            if k in keys:
                raise CommandError(f"--inputs {path}: keys {keys[k]!r} and {key!r} both give input {k} "
                                   f"({names[k]})")
            keys[k] = key
    return keys
