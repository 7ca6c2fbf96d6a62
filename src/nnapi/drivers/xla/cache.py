"""The XLA driver's cache artifacts (C6, C9, C10).

Model cache (one file): a header with the program's signature, compile stage, preference and
priority; the partition's structure (`hal.serialize`, constants relocated to the data blob), kept
so the optimised stage can be compiled later without the app's model; and the serialized XLA
executable (native code). It is only ever deserialized after `caching.load_artifacts` has checked
it against the integrity registry, from the very bytes that were checked.

Data cache (one file): every CONSTANT_REFERENCE value, 64-byte aligned, in the order and layout
the executable takes them as arguments; the loaded program reads it in place.

Within a process, the preparations of one app that load the same verified content (the SHA-256 the
registry vouched for) share its decoded structure and device constants, as they share executables
(`program.LOADED`): a second hit costs reading and verifying, not placing 14 MB of weights again.
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import jax

from ...hal import ErrorStatus, ExecutionPreference, MemoryPool, Model, NnError, Priority
from ...hal.serialize import model_from_bytes, model_to_bytes
from . import program as prog


def to_artifacts(model: Model, data: bytes, sig: prog.Signature, segments, stage: str,
                 preference: ExecutionPreference, priority: Priority) -> tuple[bytes, bytes]:
    """(model blob, data blob) of a prepared partition; `segments` are its (signature, executable)
    sub-models."""
    meta = {"stage": stage, "preference": int(preference), "priority": int(priority),
            "signature": sig.to_json(), "segments": [s.to_json() for s, _ in segments],
            "backend": jax.default_backend()}
    structure = model_to_bytes(dataclasses.replace(model, pools=[]))
    payloads = prog.join_payloads([prog.serialize(exe) for _, exe in segments])
    return prog.pack_model_cache(meta, structure, payloads), bytes(data)


def from_artifacts(model_blob: memoryview, data_blob: memoryview, shared_as: tuple[int, bytes] | None = None):
    """(model, signature, segments, stage, preference, priority, device constants) from verified
    artifacts; no tracing, no compilation. `shared_as` (app uid, verified digest) names the content:
    what an earlier load of it decoded for the same app is reused while alive.

    XLA loads (links) executables with the GIL released, so they load on worker threads while
    this thread decodes the structure and places the constants on the device.
    """
    meta, structure, payload = prog.unpack_model_cache(model_blob)
    try:
        if meta.get("backend") != jax.default_backend():
            raise ValueError(f"compiled for backend {meta.get('backend')!r}, this one is {jax.default_backend()!r}")
        sig = prog.Signature.from_json(meta["signature"])
        seg_sigs = [prog.Signature.from_json(v) for v in meta["segments"]]
        stage = str(meta["stage"])
        preference, priority = ExecutionPreference(meta["preference"]), Priority(meta["priority"])
    except (NnError, ValueError, KeyError, TypeError) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache cannot be decoded: {e}") from None
    end = max((s.offset + s.nbytes for seg in seg_sigs for s in seg.constants), default=0)
    if end > len(data_blob):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "xla data cache is shorter than its constants")
    payloads = prog.split_payloads(payload)
    if len(payloads) != len(seg_sigs) or not seg_sigs:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache has {len(payloads)} executables for "
                                                   f"{len(seg_sigs)} sub-models")
    with ThreadPoolExecutor(min(len(payloads), os.cpu_count() or 1)) as pool:
        loading = [pool.submit(prog.deserialize, p, s.n_args, s.n_results) for s, p in zip(seg_sigs, payloads)]
        constants = prog.shared_constants(shared_as) if shared_as is not None else None
        if constants is None:
            try:
                model = model_from_bytes(bytes(structure))
            except (NnError, ValueError, KeyError, TypeError) as e:
                raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache cannot be decoded: {e}") from None
            constants = prog.device_constants(data_blob, seg_sigs, model)
            if shared_as is not None:
                constants = prog.share_constants(shared_as, constants)
        pools = [MemoryPool(pointer=data_blob)] if len(data_blob) else []
        model = dataclasses.replace(constants.structure, pools=pools)
        try:
            segments = [(s, f.result()) for s, f in zip(seg_sigs, loading)]
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"xla executable cannot be loaded: {type(e).__name__}: {e}") from None
    return model, sig, segments, stage, preference, priority, constants
