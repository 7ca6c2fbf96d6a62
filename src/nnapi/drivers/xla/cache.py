"""The XLA driver's cache artifacts (C6, C9, C10).

Model cache (one file): a header with the program's signature, compile stage, preference and
priority; the partition's structure (`hal.serialize`, constants relocated to the data blob), kept
so the optimised stage can be compiled later without the app's model; and the serialized XLA
executable (native code). It is only ever deserialized after `caching.load_artifacts` has checked
it against the integrity registry, from the very bytes that were checked.

Data cache (one file): every CONSTANT_REFERENCE value, 64-byte aligned, in the order and layout
the executable takes them as arguments; the loaded program reads it in place.

Within a process, loads of the same verified content (the SHA-256 the registry vouched for) reuse
what it decoded to and its executables (the device's `content`, `base.verified`); the preparations of one app
also share its device constants while one holds them: such a hit reads and verifies the model cache
and not the 14 MB data cache (`XlaDevice.holds`), and places no weights again.
"""
from __future__ import annotations

import dataclasses

import jax

from ...hal import ErrorStatus, ExecutionPreference, MemoryPool, Model, NnError, Priority
from ...hal.serialize import model_from_bytes, model_to_bytes
from ...qos import threads
from ..base.verified import VerifiedContent
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


@dataclasses.dataclass(frozen=True)
class Decoded:
    """What a verified model cache decodes to: its header, structure and loaded executables (kept by
    the device's `content`, keyed by the verified digest)."""

    sig: prog.Signature
    seg_sigs: list[prog.Signature]
    stage: str
    preference: ExecutionPreference
    priority: Priority
    structure: Model
    executables: list


def decoded_of(prepared) -> Decoded:
    """What the cache written from `prepared` decodes to (a later load of it in this process decodes nothing)."""
    segments = prepared.segments
    return Decoded(prepared.signature, [s for s, _ in segments], prepared.stage, prepared.preference,
                   prepared.priority, prepared.constants.structure, [exe for _, exe in segments])


def _decode(model_blob: memoryview, data_blob: memoryview | None) -> tuple[Decoded, list[memoryview]]:
    """The model cache's header and structure, and its executables' bytes (not loaded yet);
    GENERAL_FAILURE naming what is wrong."""
    meta, structure, payload = prog.unpack_model_cache(model_blob)
    try:
        if meta.get("backend") != jax.default_backend():
            raise ValueError(f"compiled for backend {meta.get('backend')!r}, this one is {jax.default_backend()!r}")
        sig = prog.Signature.from_json(meta["signature"])
        seg_sigs = [prog.Signature.from_json(v) for v in meta["segments"]]
        stage = str(meta["stage"])
        preference, priority = ExecutionPreference(meta["preference"]), Priority(meta["priority"])
        model = model_from_bytes(bytes(structure))
    except (NnError, ValueError, KeyError, TypeError) as e:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache cannot be decoded: {e}") from None
    end = max((s.offset + s.nbytes for seg in seg_sigs for s in seg.constants), default=0)
    if data_blob is not None and end > len(data_blob):
        raise NnError(ErrorStatus.GENERAL_FAILURE, "xla data cache is shorter than its constants")
    payloads = prog.split_payloads(payload)
    if len(payloads) != len(seg_sigs) or not seg_sigs:
        raise NnError(ErrorStatus.GENERAL_FAILURE, f"xla model cache has {len(payloads)} executables for "
                                                   f"{len(seg_sigs)} sub-models")
    return Decoded(sig, seg_sigs, stage, preference, priority, model, []), payloads


def from_artifacts(model_blob: memoryview, data_blob: memoryview | None, verified: bytes | None = None,
                   uid: int = 0, held: prog.Constants | None = None, content: VerifiedContent | None = None):
    """(model, signature, segments, stage, preference, priority, device constants) from verified
    artifacts; no tracing, no compilation. `verified`: the SHA-256 the registry vouched for, which
    names the content: what this process decoded of it before (`content`) is reused, as are the
    constants an earlier load by app `uid` placed while they are alive (`held`: found so already,
    `data_blob` None).

    XLA loads (links) executables with the GIL released, so they load on worker threads
    (`qos.threads`) while this thread places the constants on the device.
    """
    content = content if content is not None else VerifiedContent()
    decoded = content.decoded(verified)
    if decoded is None:
        decoded, payloads = _decode(model_blob, data_blob)
        loading = threads.run_all([lambda k=k: prog.deserialize(payloads[k], decoded.seg_sigs[k].n_args,
                                                                decoded.seg_sigs[k].n_results)
                                   for k in range(len(payloads))], name="nnapi-xla-load")
    else:
        loading = None
    constants = held if held is not None else content.held(verified, uid)
    if constants is None:
        if data_blob is None:
            raise NnError(ErrorStatus.GENERAL_FAILURE, "xla data cache was not read")
        constants = content.hold(verified, uid,
                                 prog.device_constants(data_blob, decoded.seg_sigs, decoded.structure))
    if loading is not None:
        try:
            decoded = dataclasses.replace(decoded, executables=loading.results())
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"xla executable cannot be loaded: {type(e).__name__}: {e}") from None
        content.keep(verified, decoded)
    pools = [MemoryPool(pointer=constants.data)] if constants.data.nbytes else []
    model = dataclasses.replace(constants.structure, pools=pools)
    return (model, decoded.sig, list(zip(decoded.seg_sigs, decoded.executables)), decoded.stage,
            decoded.preference, decoded.priority, constants)
